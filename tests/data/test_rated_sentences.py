"""The bundled rated Rotten Tomatoes sentences: labels from the sign, the zero drop, the split."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources

import pytest

from attnkit.data.rated_sentences import (
    DATA_FILE,
    LICENSE_FILE,
    load_rated_sentences,
    write_bundle,
    zero_rated,
)


def bundle_rows() -> list[tuple[int, float, str]]:
    raw = resources.files("attnkit.data").joinpath(DATA_FILE).read_bytes()
    rows = [line.split("\t") for line in gzip.decompress(raw).decode("utf-8").splitlines()]
    return [(int(i), float(r), s) for i, r, s in rows]


def expected_split(sentence: str) -> str:
    digest = hashlib.sha256(sentence.strip().lower().encode()).hexdigest()
    bucket = int(digest[:16], 16) % 10
    return {8: "valid", 9: "test"}.get(bucket, "train")


def test_bundle_rows_labels_and_license() -> None:
    rows = bundle_rows()
    assert len(rows) == 10605 and [r[0] for r in rows] == list(range(1, 10606))
    ratings = [r[1] for r in rows]
    assert (sum(r > 0 for r in ratings), sum(r < 0 for r in ratings)) == (5242, 5326)
    assert zero_rated() == sum(r == 0 for r in ratings) == 37
    assert -4 <= min(ratings) and max(ratings) <= 4
    text = resources.files("attnkit.data").joinpath(LICENSE_FILE).read_text(encoding="utf-8")
    assert "MIT" in text and "Hutto" in text and "Pang" in text


def test_splits_follow_the_sign_and_the_hash_and_are_disjoint() -> None:
    splits = load_rated_sentences()
    assert {k: len(v) for k, v in splits.items()} == {"train": 8466, "valid": 1064, "test": 1038}
    rows = {i: (rating, sentence) for i, rating, sentence in bundle_rows()}
    ids = [s.id for v in splits.values() for s in v]
    assert len(ids) == len(set(ids)) == 10568  # disjoint; every nonzero row once
    for split, sentences in splits.items():
        for s in sentences:
            rating, text = rows[s.id]
            assert s.rating == rating != 0
            assert s.polarity == ("positive" if rating > 0 else "negative")
            assert expected_split(text) == split
        assert {s.label for s in sentences[:20]} == {0, 1}  # the source is sorted by sign
    assert all(rows[i][0] == 0 for i in set(rows) - set(ids))


def test_a_small_slice_and_truncation() -> None:
    full = load_rated_sentences()
    small = load_rated_sentences(max_examples=30, max_length=4)
    assert len(small["train"]) == 30 and len(small["valid"]) == len(full["valid"])
    for cut, whole in zip(small["train"], full["train"][:30], strict=True):
        assert (cut.id, cut.label, cut.tokens) == (whole.id, whole.label, whole.tokens[:4])
    first = full["train"][0]
    assert first.tokens == tuple(first.tokens)  # tokens are lowercased words of the snippet
    assert all(t == t.lower() for t in first.tokens)
    with pytest.raises(ValueError, match="max_length"):
        load_rated_sentences(max_length=0)
    with pytest.raises(TypeError, match="max_examples"):
        load_rated_sentences(max_examples="10")


def test_write_bundle_normalises_line_ends_and_refuses_bad_rows(tmp_path) -> None:
    source = tmp_path / "snippets.txt"
    source.write_bytes(b"1\t2.5\tGood .\r\n2\t-0.25\tMeh, bad.\r\n")
    assert write_bundle(source, tmp_path / "out.tsv.gz") == 2
    out = gzip.decompress((tmp_path / "out.tsv.gz").read_bytes()).decode()
    assert out == "1\t2.5\tGood .\n2\t-0.25\tMeh, bad.\n"
    source.write_text("1\t2.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: expected 3"):
        write_bundle(source, tmp_path / "bad.tsv.gz")
