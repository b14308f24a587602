"""Translation / not-translation pairs from Tatoeba (attnkit.data.translation_match).

References: every pair of the bundled release (indexed here by ``load_tatoeba``), and hand-made
pairs for the negative draw.
"""

from __future__ import annotations

import functools
import random
from collections import defaultdict

import pytest

from attnkit.data.corpus import Example
from attnkit.data.tatoeba import load_tatoeba
from attnkit.data.translation_match import draw_negatives, load_translation_match, references


@functools.cache
def raw_release() -> tuple[dict, dict]:
    """Every French sentence of the release per English sentence, and the French of each split
    (from the Tatoeba loader, tested on its own against the raw file)."""
    refs: dict[tuple, set] = defaultdict(set)
    split_french: dict[str, set] = defaultdict(set)
    for split, pairs in load_tatoeba().items():
        for pair in pairs:
            refs[pair.source].add(pair.target)
            split_french[split].add(pair.target)
    return refs, split_french


@functools.cache
def small() -> dict:
    return load_translation_match(max_length=5, max_pairs=300, seed=0)


def test_balanced_and_alternating() -> None:
    data = small()
    assert len(data["train"]) == 600
    for split, examples in data.items():
        labels = [ex.label for ex in examples]
        assert labels[0::2] == [1] * (len(labels) // 2), split
        assert labels[1::2] == [0] * (len(labels) // 2), split
        # the two examples of a pair share their English sentence
        assert all(
            a.english == b.english for a, b in zip(examples[0::2], examples[1::2], strict=True)
        )


def test_deterministic_and_seeded() -> None:
    again = load_translation_match(max_length=5, max_pairs=300, seed=0)
    assert again == small()
    other = load_translation_match(max_length=5, max_pairs=300, seed=1)
    assert other["train"] != small()["train"]


def test_positives_are_release_pairs_and_negatives_are_not() -> None:
    refs, split_french = raw_release()
    for split, examples in small().items():
        for ex in examples:
            assert len(ex.english) <= 5 and len(ex.french) <= 5
            if ex.label == 1:
                assert ex.french in refs[ex.english]
            else:
                assert ex.french not in refs[ex.english], (ex.english, ex.french)
                # drawn from a pair of the same split
                assert ex.french in split_french[split]


def test_splits_are_disjoint_by_english_sentence() -> None:
    english = {split: {ex.english for ex in examples} for split, examples in small().items()}
    assert not english["train"] & english["valid"]
    assert not english["train"] & english["test"]
    assert not english["valid"] & english["test"]


def test_draw_negatives_skips_every_reference() -> None:
    a, b = ("a",), ("b",)
    x, y, z = ("x",), ("y",), ("z",)
    pairs = [Example(a, x), Example(a, y), Example(b, z)]
    refs = references(pairs)
    assert refs == {a: frozenset({x, y}), b: frozenset({z})}
    for seed in range(20):
        negatives = draw_negatives(pairs, refs, random.Random(seed))
        assert negatives[0] == z and negatives[1] == z  # a's only non-reference
        assert negatives[2] in (x, y)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="every French sentence"):
        pairs = [Example(("a",), ("x",)), Example(("a",), ("y",))]
        draw_negatives(pairs, references(pairs), random.Random(0))
    with pytest.raises(TypeError, match="seed must be an int"):
        load_translation_match(seed="0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_pairs"):
        load_translation_match(max_length=3, max_pairs=0)
