"""TREC question classification and MR movie-review polarity, the sentence-classification sets of
Kim (2014), "Convolutional Neural Networks for Sentence Classification", as preprocessed in his
companion code (``harvardnlp/sent-conv-torch``: ``TREC.train.all``, ``TREC.test.all``,
``rt-polarity.all``).

Format: one example a line, ``LABEL<SPACE>text``, the text already tokenised (space-separated).
Encoding: Windows-1252 (measured: MR holds bytes such as ``0xe9`` é, ``0x85`` … and ``0x97`` —,
which are not UTF-8; TREC's training file has one ``0xf0``, ð). Lines end with ``\\n`` only: the
byte ``0x85`` is an ellipsis here, not a line break.

* **TREC** (Li & Roth 2002): 5,452 training and 500 test questions, 6 coarse classes. The files
  number the classes 0–5; matching the per-class counts with Li & Roth's (ABBR 86, DESC 1,162,
  ENTY 1,250, HUM 1,223, LOC 835, NUM 896 training questions) gives :data:`TREC_LABELS`. The
  text keeps its case (Kim's preprocessing lower-cases MR but not TREC); ``lowercase=True``
  lower-cases it.
* **MR** (Pang & Lee 2005, ``rt-polarity``): 5,331 negative (0) then 5,331 positive (1) review
  sentences, lower-cased. There is no standard split: results are the mean over 10-fold
  cross-validation. :func:`cross_validation_folds` shuffles each class with
  ``random.Random(f"mr/{seed}/{label}")`` and deals the sentences round-robin into 10 folds —
  fold ``k`` is the test part of round ``k`` — so every fold is 50/50 up to one sentence. The
  file carries no fold assignment of Kim's, so his folds cannot be reproduced.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ENCODING = "cp1252"
TREC_FILES = {"train": "TREC.train.all", "test": "TREC.test.all"}
MR_FILE = "rt-polarity.all"
TREC_LABELS = ("DESC", "ENTY", "ABBR", "HUM", "LOC", "NUM")  # index = the files' label
MR_LABELS = ("negative", "positive")
FOLDS = 10


@dataclass(frozen=True)
class SentenceExample:
    """A tokenised sentence and its class index.

    Attributes:
        tokens: the sentence's tokens.
        label: the class index (``TREC_LABELS``, ``MR_LABELS`` or a sentiment scale).
    """

    tokens: tuple[str, ...]
    label: int


def read_labelled_lines(
    path: str | Path, num_classes: int, lowercase: bool = False
) -> list[SentenceExample]:
    """Every ``LABEL text`` line of ``path`` (Windows-1252) as a :class:`SentenceExample`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: one line naming the file, the line number and what was expected (a label
            ``0 … num_classes − 1`` followed by at least one token).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sentence-classification file not found: {path}")
    data = path.read_bytes()
    try:
        text = data.decode(ENCODING)
    except UnicodeDecodeError as error:
        number = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path}: line {number}: expected Windows-1252 text, got the byte "
            f"{data[error.start : error.start + 1]!r}"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    examples = []
    for number, line in enumerate(lines, start=1):
        label, _, text = line.rstrip("\r").partition(" ")
        tokens = tuple((text.lower() if lowercase else text).split())
        if not (label.isdigit() and int(label) < num_classes) or not tokens:
            raise ValueError(
                f"{path}: line {number}: expected a label 0-{num_classes - 1}, a space and the "
                f"tokens, got {line!r:.80}"
            )
        examples.append(SentenceExample(tokens, int(label)))
    return examples


def load_trec(root: str | Path, lowercase: bool = False) -> dict[str, list[SentenceExample]]:
    """TREC's ``{"train": 5,452, "test": 500}`` questions, labels indexing :data:`TREC_LABELS`.

    Args:
        root: the ``sentence-classification`` directory.
        lowercase: lower-case the tokens (the files keep the questions' case).
    """
    root = Path(root)
    return {
        split: read_labelled_lines(root / name, len(TREC_LABELS), lowercase)
        for split, name in TREC_FILES.items()
    }


def load_movie_review_polarity(root: str | Path) -> list[SentenceExample]:
    """MR's 10,662 sentences in file order (label 0 negative, 1 positive; already lower-cased).

    Args:
        root: the ``sentence-classification`` directory.
    """
    return read_labelled_lines(Path(root) / MR_FILE, len(MR_LABELS))


def cross_validation_folds(
    examples: Sequence[SentenceExample], seed: int = 0, folds: int = FOLDS
) -> list[list[int]]:
    """Indices of ``examples`` dealt into ``folds`` stratified folds.

    Each class's indices are shuffled with ``random.Random(f"mr/{seed}/{label}")`` and dealt
    round-robin, continuing where the previous class stopped, so fold sizes differ by at most one
    and each fold holds each class in proportion. Every index is in exactly one fold; each fold is
    sorted.

    Returns:
        ``folds`` lists of indices.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= len(examples):
        raise ValueError(f"folds must be an int in [2, {len(examples)}], got {folds!r}")
    out: list[list[int]] = [[] for _ in range(folds)]
    dealt = 0
    for label in sorted({example.label for example in examples}):
        indices = [i for i, example in enumerate(examples) if example.label == label]
        random.Random(f"mr/{seed}/{label}").shuffle(indices)
        for index in indices:
            out[dealt % folds].append(index)
            dealt += 1
    return [sorted(fold) for fold in out]


def cross_validation_split(
    examples: Sequence[SentenceExample], fold: int, seed: int = 0, folds: int = FOLDS
) -> dict[str, list[SentenceExample]]:
    """Round ``fold`` of the cross-validation: ``{"train": the other folds, "test": fold}``,
    each in file order (see :func:`cross_validation_folds`)."""
    if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold < folds:
        raise ValueError(f"fold must be an int in [0, {folds}), got {fold!r}")
    parts = cross_validation_folds(examples, seed, folds)
    held_out = set(parts[fold])
    return {
        "train": [e for i, e in enumerate(examples) if i not in held_out],
        "test": [examples[i] for i in parts[fold]],
    }


__all__ = [
    "MR_LABELS",
    "TREC_LABELS",
    "SentenceExample",
    "cross_validation_folds",
    "cross_validation_split",
    "load_movie_review_polarity",
    "load_trec",
    "read_labelled_lines",
]
