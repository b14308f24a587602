"""Bundled Tatoeba subset: split disjoint by English sentence, deterministic, attributed."""

import gzip
import hashlib
from importlib import resources

import pytest

from attnkit.data.tatoeba import load_tatoeba, read_tatoeba_pairs, split_of
from attnkit.data.tokenize import tokenize


@pytest.fixture(scope="module")
def pairs():
    return read_tatoeba_pairs()


@pytest.fixture(scope="module")
def splits():
    return load_tatoeba()


def test_bundled_file_matches_its_description(pairs):
    raw = resources.files("attnkit.data").joinpath("tatoeba_en_fr.tsv.gz").read_bytes()
    assert len(raw) < 1_500_000
    assert len(pairs) == 83_398  # as stated in TATOEBA_LICENSE.md
    assert pairs[0] == ("Go.", "Va !")
    assert len(gzip.decompress(raw).splitlines()) == len(pairs)


def test_attribution_shipped_in_package():
    text = resources.files("attnkit.data").joinpath("TATOEBA_LICENSE.md").read_text("utf-8")
    assert "www.manythings.org/anki and tatoeba.org" in text
    assert "CC-BY 2.0" in text or "Attribution 2.0 France" in text
    assert "2546838ae46e0eac4c02ab7032ea0a02a006074a5340077a36a9444f41e02888" in text


def test_split_is_by_english_sentence(pairs, splits):
    assert sum(len(v) for v in splits.values()) == len(pairs)
    english_by_split = {
        name: {" ".join(e.source) for e in examples} for name, examples in splits.items()
    }
    assert not english_by_split["train"] & english_by_split["valid"]
    assert not english_by_split["train"] & english_by_split["test"]
    assert not english_by_split["valid"] & english_by_split["test"]
    # ~96 / 2 / 2 %
    assert 0.94 < len(splits["train"]) / len(pairs) < 0.98
    assert 0.01 < len(splits["valid"]) / len(pairs) < 0.03
    assert 0.01 < len(splits["test"]) / len(pairs) < 0.03


def test_split_rule_is_the_documented_hash():
    for english in ("I love you.", "Go.", "Tom is here."):
        bucket = int(hashlib.sha256(english.lower().encode()).hexdigest()[:16], 16) % 100
        expected = "train" if bucket < 96 else "valid" if bucket < 98 else "test"
        assert split_of(english) == expected
    assert split_of("I love you.") == "train"  # the demo sentence is a training sentence


def test_examples_are_tokenized_pairs(pairs, splits):
    love = [e.target for e in splits["train"] if e.source == ("i", "love", "you", ".")]
    assert sorted(love) == [("je", "t'", "adore", "."), ("je", "t'", "aime", "!")]
    tokenized = {name: {(e.source, e.target) for e in v} for name, v in splits.items()}
    for english, french in pairs[::5000]:  # each raw pair appears tokenised in its split
        pair = (tuple(tokenize(english, "en")), tuple(tokenize(french, "fr")))
        assert pair in tokenized[split_of(english)]


def test_max_length_and_max_pairs(splits):
    short = load_tatoeba(max_length=4, max_pairs=1000)
    assert len(short["train"]) == 1000
    for examples in short.values():
        assert all(len(e.source) <= 4 and len(e.target) <= 4 for e in examples)
    expected = [e for e in splits["train"] if len(e.source) <= 4 and len(e.target) <= 4][:1000]
    assert short["train"] == expected
    assert short["valid"] == [e for e in splits["valid"] if max(len(e.source), len(e.target)) <= 4]
    with pytest.raises(ValueError, match="max_pairs must be None or an int >= 1, got 0"):
        load_tatoeba(max_pairs=0)
