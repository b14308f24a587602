"""Derived target-dependent sentiment (attnkit.data.target_sentiment).

Reference: the bundled ``rated_sentences.tsv.gz`` read here line by line (id, mean human rating,
sentence), independently of the loader.
"""

from __future__ import annotations

import functools
import gzip
import random
from importlib import resources

import pytest

from attnkit.data.rated_sentences import RatedSentence
from attnkit.data.target_sentiment import load_target_sentiment, make_pair_examples
from attnkit.data.tokenize import tokenize


@functools.cache
def raw() -> dict[int, tuple[float, tuple[str, ...]]]:
    text = gzip.decompress(
        resources.files("attnkit.data").joinpath("rated_sentences.tsv.gz").read_bytes()
    ).decode("utf-8")
    rows = {}
    for line in text.splitlines():
        identifier, rating, sentence = line.split("\t")
        rows[int(identifier)] = (float(rating), tuple(tokenize(sentence, "en")))
    return rows


@functools.cache
def small() -> dict:
    return load_target_sentiment(max_length=12, max_examples=100, seed=0)


def test_balanced_alternating_and_capped() -> None:
    data = small()
    assert len(data["train"]) == 100
    for split, examples in data.items():
        assert len(examples) > 50, split
        labels = [ex.label for ex in examples]
        assert labels == [1, 0] * (len(labels) // 2), split


def test_deterministic_and_seeded() -> None:
    assert load_target_sentiment(max_length=12, max_examples=100, seed=0) == small()
    assert (
        load_target_sentiment(max_length=12, max_examples=100, seed=3)["train"] != small()["train"]
    )


def test_labels_are_the_sign_of_the_target_sentence_rating() -> None:
    rows = raw()
    for examples in small().values():
        for ex in examples:
            rating, _ = rows[ex.sentence_id]
            other, _ = rows[ex.other_id]
            assert ex.rating == rating
            assert ex.label == int(rating > 0)
            assert abs(rating) >= 0.5 and abs(other) >= 0.5
            assert (rating > 0) != (other > 0)  # the context holds both signs


def test_spans_lie_in_their_own_sentence() -> None:
    rows = raw()
    for examples in small().values():
        for ex in examples:
            own, other = rows[ex.sentence_id][1], rows[ex.other_id][1]
            assert len(own) <= 12 and len(other) <= 12
            first, second = (own, other) if ex.target_in_first else (other, own)
            assert ex.left + ex.target + ex.right == first + second
            start = len(ex.left) - (0 if ex.target_in_first else len(first))
            assert 0 <= start and start + len(ex.target) <= len(own)
            assert own[start : start + len(ex.target)] == ex.target
            assert 1 <= len(ex.target) <= 3
            assert any(ch.isalnum() for ch in ex.target[0])


def test_the_pair_shares_its_context_and_splits_are_disjoint() -> None:
    ids = {}
    for split, examples in small().items():
        for a, b in zip(examples[0::2], examples[1::2], strict=True):
            assert a.left + a.target + a.right == b.left + b.target + b.right
            assert (a.sentence_id, a.other_id) == (b.other_id, b.sentence_id)
        ids[split] = {ex.sentence_id for ex in examples}
    assert not ids["train"] & ids["valid"]
    assert not ids["train"] & ids["test"]
    assert not ids["valid"] & ids["test"]


def test_bad_input() -> None:
    pos = RatedSentence(("good",), 1.5, 1, 1)
    neg = RatedSentence(("bad",), -2.0, 0, 2)
    with pytest.raises(ValueError, match="positively and a negatively"):
        make_pair_examples(neg, pos, random.Random(0))
    with pytest.raises(ValueError, match="min_strength"):
        load_target_sentiment(min_strength=0.0)
    with pytest.raises(TypeError, match="max_length"):
        load_target_sentiment(max_length="12")  # type: ignore[arg-type]
