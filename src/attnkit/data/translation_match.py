"""Does this French sentence translate this English one? Tatoeba pairs with shuffled negatives.

A two-sequence classification task for co-attention (survey §3.1.1), built from the bundled Tatoeba
English–French pairs (:mod:`attnkit.data.tatoeba`, CC-BY 2.0 France, see ``TATOEBA_LICENSE.md``).
No label is annotated by hand: each is a fact about the release.

Derivation, separately in each split of :func:`attnkit.data.tatoeba.load_tatoeba` (so the splits
stay disjoint by English sentence, as Tatoeba's own split is):

1. The split's pairs (after ``max_length``) are put in a seeded random order
   (``random.Random(f"{seed}:{split}")``); ``max_pairs`` keeps the first that many.
2. Every kept pair ``(e_i, f_i)`` gives two examples: a **positive** ``(e_i, f_i)`` — a
   translation in the release — and a **negative** ``(e_i, f_j)`` whose French sentence is that of
   another pair of the same split, drawn by a second seeded permutation ``π`` of the split's pairs
   (:func:`draw_negatives`): ``f_j = f_{π(i)}``, or the next candidate in ``π``'s order when
   ``f_{π(i)}`` is among ``e_i``'s **references** (every French sentence the *whole* release pairs
   with ``e_i``, compared as tokens). So a negative is never a translation the release gives for
   its English sentence. Residual noise that cannot be ruled out this way: a French sentence that
   the release pairs only with a paraphrase of ``e_i`` (``"I'm fine."`` / ``"I am fine."``) may
   still translate ``e_i``.
3. The examples are listed positive, negative, positive, … in the order of step 1, so any prefix
   of even length is exactly balanced (the trainer's ``max_eval_examples`` takes a prefix).

Labels: 1 = ``translation`` (positive), 0 = ``not_translation`` (negative).
"""

from __future__ import annotations

import functools
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from attnkit.data.corpus import Example
from attnkit.data.tatoeba import SPLITS, load_tatoeba

LABELS = ("not_translation", "translation")  # index = class


@dataclass(frozen=True)
class SentencePair:
    """An English sentence, a French sentence, and whether the release pairs them.

    Attributes:
        english, french: token tuples (:func:`attnkit.data.tokenize.tokenize`, lowercased).
        label: 1 if ``french`` translates ``english`` in the release, 0 for a drawn negative.
    """

    english: tuple[str, ...]
    french: tuple[str, ...]
    label: int


def references(pairs: Sequence[Example]) -> dict[tuple[str, ...], frozenset[tuple[str, ...]]]:
    """Every French sentence paired with each English sentence (token tuples)."""
    table: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for pair in pairs:
        table[pair.source].add(pair.target)
    return {english: frozenset(french) for english, french in table.items()}


@functools.cache
def release_references() -> dict[tuple[str, ...], frozenset[tuple[str, ...]]]:
    """:func:`references` of the whole bundled release (every split, no length filter), computed
    once per process: the release is immutable and its ~83,000 pairs take seconds to index."""
    return references([pair for split in load_tatoeba().values() for pair in split])


def draw_negatives(
    pairs: Sequence[Example],
    refs: dict[tuple[str, ...], frozenset[tuple[str, ...]]],
    rng: random.Random,
) -> list[tuple[str, ...]]:
    """For each pair ``i`` a French sentence of another pair that is not among ``e_i``'s references.

    A seeded permutation ``π`` of the pairs is drawn; pair ``i`` takes ``f_{π(i)}``, or, when that
    is a reference of ``e_i``, the French sentence of the next position of ``π`` (cyclically) that
    is not. Raises ValueError if every French sentence of ``pairs`` is a reference of some ``e_i``
    (e.g. a single English sentence).
    """
    n = len(pairs)
    order = list(range(n))
    rng.shuffle(order)
    negatives = []
    for i, pair in enumerate(pairs):
        own = refs.get(pair.source, frozenset()) | {pair.target}
        for step in range(n):
            candidate = pairs[order[(i + step) % n]].target
            if candidate not in own:
                negatives.append(candidate)
                break
        else:
            raise ValueError(
                f"no negative for {' '.join(pair.source)!r}: every French sentence of the "
                f"{n} pairs translates it"
            )
    return negatives


def load_translation_match(
    max_length: int | None = None, max_pairs: int | None = None, seed: int = 0
) -> dict[str, list[SentencePair]]:
    """Balanced translation / not-translation examples of each Tatoeba split (module docstring).

    Args:
        max_length: keep Tatoeba pairs with at most this many tokens on each side.
        max_pairs: keep at most this many pairs of the **training** split (so at most
            ``2 * max_pairs`` training examples); valid and test keep all their pairs.
        seed: seeds the order of the pairs and the draw of the negatives.

    Returns:
        ``{"train", "valid", "test"}`` → :class:`SentencePair` lists, alternating positive,
        negative.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    splits = load_tatoeba(max_length=max_length)
    # references from the whole release (before max_length), so a negative is never a pair of it
    refs = release_references()
    result: dict[str, list[SentencePair]] = {}
    for name in SPLITS:
        pairs = list(splits[name])
        random.Random(f"{seed}:{name}").shuffle(pairs)
        if name == "train" and max_pairs is not None:
            if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1:
                raise ValueError(f"max_pairs must be None or an int >= 1, got {max_pairs!r}")
            pairs = pairs[:max_pairs]
        # negatives are drawn among the kept pairs, so a capped split only holds its own sentences
        negatives = draw_negatives(pairs, refs, random.Random(f"{seed}:{name}:negatives"))
        examples: list[SentencePair] = []
        for pair, negative in zip(pairs, negatives, strict=True):
            examples.append(SentencePair(pair.source, pair.target, 1))
            examples.append(SentencePair(pair.source, negative, 0))
        result[name] = examples
    return result


__all__ = [
    "LABELS",
    "SentencePair",
    "draw_negatives",
    "load_translation_match",
    "references",
    "release_references",
]
