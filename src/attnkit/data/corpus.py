"""One sentence pair of a parallel corpus, with optional word-alignment links, and the pair of
vocabularies (source, target) a translation model is built for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnkit.data.vocabulary import Vocabulary

Links = frozenset[tuple[int, int]]


@dataclass(frozen=True)
class Example:
    """A tokenised translation pair ``source → target`` and its alignments, if any.

    Links are ``(source_position, target_position)`` pairs, 0-based, as in Pharaoh's ``i-j`` and
    :mod:`attnkit.evaluate.alignment` (an attention matrix ``[target, source]`` has the weight of
    link ``(s, t)`` at ``[t, s]``).

    Attributes:
        source: source-language tokens.
        target: target-language tokens (without BOS/EOS).
        sure: gold *sure* links ``S`` (Och & Ney 2003), or ``None`` when there is no gold.
        possible: gold *possible* links ``P ⊇ S``, or ``None``.
        links: the alignment used as the *target* of supervised attention (e.g. gold sure links
            or IBM Model 1 Viterbi links), or ``None``.
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    sure: Links | None = None
    possible: Links | None = None
    links: Links | None = None

    def __post_init__(self) -> None:
        for name in ("source", "target"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(t, str) for t in value):
                raise TypeError(f"Example.{name} must be a tuple of str, got {value!r:.80}")
        for name in ("sure", "possible", "links"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, frozenset):
                raise TypeError(
                    f"Example.{name} must be a frozenset of (source, target) pairs or None, "
                    f"got {type(value).__name__}"
                )
            for link in value:
                s, t = link
                if not (0 <= s < len(self.source) and 0 <= t < len(self.target)):
                    raise ValueError(
                        f"Example.{name} link {link} outside the sentence lengths "
                        f"(source {len(self.source)}, target {len(self.target)})"
                    )
        if self.sure is not None and self.possible is not None and not self.sure <= self.possible:
            raise ValueError(
                f"Example.possible must include every sure link; missing "
                f"{sorted(self.sure - self.possible)}"
            )

    def reversed(self) -> Example:
        """The pair translated the other way: source and target swapped, every link
        ``(s, t)`` as ``(t, s)`` (a French→English model of an English→French corpus).

        Example::

            >>> pair = Example(("I", "love", "you"), ("je", "vous", "aime"), sure=frozenset({(2, 1)}))
            >>> back = pair.reversed()
            >>> back.source, sorted(back.sure)
            (('je', 'vous', 'aime'), [(1, 2)])
        """

        def swap(links: Links | None) -> Links | None:
            return None if links is None else frozenset((t, s) for s, t in links)

        return Example(
            self.target, self.source, swap(self.sure), swap(self.possible), swap(self.links)
        )


@dataclass
class Vocabularies:
    """The source and target vocabularies of a parallel corpus.

    Example::

        >>> vocabularies = Vocabularies.build(examples, min_freq=2)
        >>> Vocabularies.from_dict(vocabularies.to_dict()) == vocabularies
        True
    """

    source: Vocabulary
    target: Vocabulary

    @classmethod
    def build(
        cls, examples: Sequence[Example], min_freq: int = 1, max_vocab: int | None = None
    ) -> Vocabularies:
        """Both vocabularies from the examples' sides (see :meth:`Vocabulary.build`)."""
        return cls(
            Vocabulary.build((list(e.source) for e in examples), min_freq, max_vocab),
            Vocabulary.build((list(e.target) for e in examples), min_freq, max_vocab),
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"source": ..., "target": ...}``, JSON-able."""
        return {"source": self.source.to_dict(), "target": self.target.to_dict()}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> Vocabularies:
        """The inverse of :meth:`to_dict`; ``ValueError`` naming what is missing or wrong."""
        if not isinstance(state, Mapping) or not {"source", "target"} <= set(state):
            given = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"expected the keys ['source', 'target'], got {given}")
        try:
            return cls(Vocabulary.from_dict(state["source"]), Vocabulary.from_dict(state["target"]))
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a vocabulary ({error})") from None
