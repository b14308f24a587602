"""TREC and MR (Kim 2014's files): counts of the README, label names from Li & Roth's class
sizes, the encoding, the cross-validation folds, and one-line errors."""

import collections

import pytest

from attnkit.data.sentence_classification import (
    MR_LABELS,
    TREC_LABELS,
    SentenceExample,
    cross_validation_folds,
    cross_validation_split,
    load_movie_review_polarity,
    load_trec,
    read_labelled_lines,
)

# Li & Roth (2002), the coarse classes of the 5,452 training and 500 test questions
LI_ROTH = {
    "train": {"ABBR": 86, "DESC": 1162, "ENTY": 1250, "HUM": 1223, "LOC": 835, "NUM": 896},
    "test": {"ABBR": 9, "DESC": 138, "ENTY": 94, "HUM": 65, "LOC": 81, "NUM": 113},
}


@pytest.fixture(scope="module")
def root(shared_data):
    path = shared_data / "sentence-classification"
    if not path.is_dir():
        pytest.skip(f"the shared data pack has no sentence-classification folder ({path})")
    return path


@pytest.fixture(scope="module")
def trec(root):
    return load_trec(root)


@pytest.fixture(scope="module")
def mr(root):
    return load_movie_review_polarity(root)


def test_trec_counts_and_class_names(trec):
    assert {split: len(examples) for split, examples in trec.items()} == {
        "train": 5452,
        "test": 500,
    }
    for split, examples in trec.items():
        counts = collections.Counter(TREC_LABELS[e.label] for e in examples)
        assert dict(counts) == LI_ROTH[split]
    first = trec["train"][0]
    assert first == SentenceExample(
        tuple("How did serfdom develop in and then leave Russia ?".split()), 0
    )
    assert TREC_LABELS[first.label] == "DESC"
    abbreviations = [" ".join(e.tokens) for e in trec["train"] if TREC_LABELS[e.label] == "ABBR"]
    assert "What does the abbreviation AIDS stand for ?" in abbreviations


def test_trec_keeps_case_unless_asked(root, trec):
    lowered = load_trec(root, lowercase=True)
    assert any(t != t.lower() for e in trec["test"] for t in e.tokens)
    for plain, low in zip(trec["train"], lowered["train"], strict=True):
        assert low.tokens == tuple(t.lower() for t in plain.tokens) and low.label == plain.label


def test_windows_1252_text(trec, mr):
    words = {t for e in mr for t in e.tokens}
    assert "clichés" in words  # byte 0xe9
    assert any(t.startswith("…") for t in words)  # byte 0x85: an ellipsis, not a line break
    assert "sister\u00f0city" in {t for e in trec["train"] for t in e.tokens}  # the one 0xf0


def test_mr_counts(root, mr):
    assert len(mr) == 10662
    assert collections.Counter(e.label for e in mr) == {0: 5331, 1: 5331}
    assert [e.label for e in mr] == [0] * 5331 + [1] * 5331  # negatives first, as in the file
    assert MR_LABELS[mr[0].label] == "negative"
    assert mr[0].tokens == ("simplistic", ",", "silly", "and", "tedious", ".")
    # independent count: the file's lines
    assert len((root / "rt-polarity.all").read_bytes().rstrip(b"\n").split(b"\n")) == len(mr)


def test_cross_validation_folds_partition_and_stratify(mr):
    folds = cross_validation_folds(mr, seed=0)
    assert len(folds) == 10
    assert sorted(i for fold in folds for i in fold) == list(range(len(mr)))
    assert max(map(len, folds)) - min(map(len, folds)) <= 1
    for fold in folds:
        positives = sum(mr[i].label for i in fold)
        assert abs(positives - len(fold) / 2) <= 1
    assert cross_validation_folds(mr, seed=0) == folds  # deterministic
    assert cross_validation_folds(mr, seed=1) != folds
    split = cross_validation_split(mr, fold=3, seed=0)
    assert len(split["train"]) + len(split["test"]) == len(mr)
    assert split["test"] == [mr[i] for i in folds[3]]
    held_out = set(folds[3])
    assert split["train"] == [e for i, e in enumerate(mr) if i not in held_out]


def test_fold_arguments_are_checked(mr):
    with pytest.raises(ValueError, match=r"fold must be an int in \[0, 10\)"):
        cross_validation_split(mr, fold=10)
    with pytest.raises(ValueError, match="folds must be an int"):
        cross_validation_folds(mr, folds=1)
    with pytest.raises(TypeError, match="seed must be an int"):
        cross_validation_folds(mr, seed="0")


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"0 What is it ?\nWhat is this ?\n", 2),  # no label
        (b"0 What is it ?\n7 What is this ?\n", 2),  # label out of range
        (b"0 What is it ?\n1\n", 2),  # no tokens
        (b"0 What is it ?\n1 \n", 2),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, content, line):
    path = tmp_path / "TREC.train.all"
    path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        read_labelled_lines(path, num_classes=6)
    message = str(error.value)
    assert message.startswith(f"{path}: line {line}: expected a label 0-5, a space and the tokens")
    assert "\n" not in message


def test_undecodable_byte_and_missing_file(tmp_path):
    path = tmp_path / "rt-polarity.all"
    path.write_bytes(b"0 fine .\n1 not \x81 windows-1252 .\n")
    with pytest.raises(ValueError, match=r"rt-polarity\.all: line 2: expected Windows-1252 text"):
        read_labelled_lines(path, num_classes=2)
    with pytest.raises(FileNotFoundError, match=r"TREC\.train\.all"):
        load_trec(tmp_path)
