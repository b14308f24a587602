"""Token ↔ id mapping with the four special symbols a sequence-to-sequence model needs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")


class Vocabulary:
    """Ids for tokens: ``<pad>`` = 0, ``<unk>`` = 1, ``<bos>`` = 2, ``<eos>`` = 3, then the corpus
    tokens by decreasing frequency, ties broken by the token string (so the ids depend only on the
    counts, never on the order the sentences came in).

    Example::

        >>> vocab = Vocabulary.build([["a", "b", "a"]])
        >>> vocab.encode(["a", "b", "zzz"])
        [4, 5, 1]
        >>> vocab.decode([2, 4, 5, 3, 4])
        ['a', 'b']
    """

    PAD, UNK, BOS, EOS = PAD, UNK, BOS, EOS

    def __init__(self, tokens: Iterable[str]) -> None:
        """Args: tokens: every token in id order, starting with the four specials."""
        self.itos: list[str] = list(tokens)
        if tuple(self.itos[:4]) != SPECIALS:
            raise ValueError(
                f"a Vocabulary's first tokens must be {list(SPECIALS)}, got {self.itos[:4]}"
            )
        if not all(isinstance(t, str) for t in self.itos):
            bad = next(t for t in self.itos if not isinstance(t, str))
            raise TypeError(f"vocabulary tokens must be str, got {bad!r}")
        self.stoi: dict[str, int] = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            duplicates = sorted(t for t, n in Counter(self.itos).items() if n > 1)
            raise ValueError(f"vocabulary tokens must be unique, got duplicates {duplicates[:10]}")

    @classmethod
    def build(
        cls, sentences: Iterable[list[str]], min_freq: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Vocabulary of the tokens seen at least ``min_freq`` times.

        Args:
            sentences: token lists.
            min_freq: rarer tokens map to ``<unk>``.
            max_size: keep at most this many corpus tokens (the specials come on top).
        """
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"min_freq must be an int >= 1, got {min_freq!r}")
        if max_size is not None and (
            isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 0
        ):
            raise ValueError(f"max_size must be None or an int >= 0, got {max_size!r}")
        counts: Counter[str] = Counter()
        for sentence in sentences:
            if isinstance(sentence, str):
                raise TypeError(
                    f"sentences must be token lists, got a str {sentence!r:.40} (tokenize it first)"
                )
            counts.update(sentence)
        for special in SPECIALS:
            counts.pop(special, None)  # a literal "<unk>" in the text is the special, not a word
        kept = sorted(
            (t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t)
        )
        if max_size is not None:
            kept = kept[:max_size]
        return cls([*SPECIALS, *kept])

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    __hash__ = None  # type: ignore[assignment]  # mutable-looking container: not hashable

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    def encode(self, tokens: list[str]) -> list[int]:
        """Ids of ``tokens``; tokens not in the vocabulary give ``UNK`` (1)."""
        if isinstance(tokens, str):
            raise TypeError(f"tokens must be a list of str, got a str {tokens!r:.40}")
        return [self.stoi.get(token, UNK) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ``ids`` up to the first ``EOS``, without ``PAD`` and ``BOS``."""
        tokens = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i in (PAD, BOS):
                continue
            if not 0 <= i < len(self.itos):
                raise ValueError(f"token id must be in [0, {len(self.itos)}), got {i}")
            tokens.append(self.itos[i])
        return tokens

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (``{"tokens": [...]}``), inverse of :meth:`from_dict`."""
        return {"tokens": list(self.itos)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Vocabulary:
        """The vocabulary described by :meth:`to_dict`."""
        if not isinstance(d, dict) or not isinstance(d.get("tokens"), list):
            raise ValueError(
                f"expected a dict with a 'tokens' list (from Vocabulary.to_dict), got {d!r:.80}"
            )
        return cls(d["tokens"])
