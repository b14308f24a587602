"""Vocabulary: ids follow (frequency desc, token), specials fixed, JSON round trip."""

import json

import pytest

from attnkit.data import BOS, EOS, PAD, UNK, Vocabulary


def test_specials_and_order():
    sentences = [["b", "a", "c"], ["a", "b", "d"], ["a"]]  # a: 3, b: 2, c: 1, d: 1
    vocab = Vocabulary.build(sentences)
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert vocab.itos == ["<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c", "d"]
    assert len(vocab) == 8
    # Independent of the order sentences come in.
    assert Vocabulary.build(reversed(sentences)).itos == vocab.itos


def test_min_freq_and_max_size():
    sentences = [["b", "a", "c"], ["a", "b", "d"], ["a"]]
    assert Vocabulary.build(sentences, min_freq=2).itos[4:] == ["a", "b"]
    assert Vocabulary.build(sentences, max_size=3).itos[4:] == ["a", "b", "c"]


def test_encode_decode():
    vocab = Vocabulary.build([["a", "b", "a"]])
    assert vocab.encode(["a", "b", "zzz"]) == [4, 5, UNK]
    assert vocab.decode([BOS, 4, PAD, 5, EOS, 4]) == ["a", "b"]
    assert vocab.decode([4, UNK]) == ["a", "<unk>"]


def test_json_round_trip():
    vocab = Vocabulary.build([["x", "y", "y", "é"]])
    restored = Vocabulary.from_dict(json.loads(json.dumps(vocab.to_dict())))
    assert restored == vocab
    assert restored.encode(["y", "é"]) == vocab.encode(["y", "é"])


def test_errors_name_what_was_given():
    with pytest.raises(ValueError, match="min_freq must be an int >= 1, got 0"):
        Vocabulary.build([["a"]], min_freq=0)
    with pytest.raises(ValueError, match="max_size must be None or an int >= 0, got -1"):
        Vocabulary.build([["a"]], max_size=-1)
    with pytest.raises(TypeError, match="got a str"):
        Vocabulary.build(["not tokenized"])
    with pytest.raises(ValueError, match=r"first tokens must be .* got \['a'\]"):
        Vocabulary(["a"])
    with pytest.raises(ValueError, match="duplicates"):
        Vocabulary(["<pad>", "<unk>", "<bos>", "<eos>", "a", "a"])
    with pytest.raises(ValueError, match="expected a dict with a 'tokens' list"):
        Vocabulary.from_dict({"itos": []})
    with pytest.raises(ValueError, match=r"token id must be in \[0, 5\), got 9"):
        Vocabulary.build([["a"]]).decode([9])
