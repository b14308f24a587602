"""The data of the explanation experiments: SST-2 and bAbI tasks 1-3 as token ids, with GloVe
initial embeddings, and their batches.

A split holds each example's passage (and question, for bAbI) as token ids; a batch pads them
to ``tokens`` long ``[B, L]`` (``PAD`` after each sequence) with bool ``mask [B, L]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.data.babi import load_babi
from attnkit.data.glove import SUBSET_FILE, embedding_matrix, load_glove
from attnkit.data.sst import load_sst
from attnkit.data.vocabulary import PAD, Vocabulary

BABI_TASKS = (1, 2, 3)
#: the last statements of a bAbI story kept in the passage (End-To-End Memory Networks' 50)
BABI_STATEMENTS = 50


@dataclass
class Split:
    """Token ids of one split: ``passages`` (and ``questions`` for QA), ``labels``."""

    passages: list[list[int]]
    labels: list[int]
    questions: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: Sequence[int]) -> Split:
        return Split(
            [self.passages[i] for i in indices],
            [self.labels[i] for i in indices],
            None if self.questions is None else [self.questions[i] for i in indices],
        )


@dataclass
class Corpus:
    """A data set as the experiments use it: ids, the class count and initial embeddings."""

    name: str
    vocabulary: Vocabulary
    classes: int
    train: Split
    valid: Split
    test: Split
    embeddings: Tensor

    @property
    def answers_questions(self) -> bool:
        return self.train.questions is not None


def _glove(root: Path, vocabulary: Vocabulary, seed: int) -> Tensor:
    vectors = load_glove(root / "glove-6b-50d" / SUBSET_FILE)
    weight, _ = embedding_matrix(vocabulary, vectors, seed=seed)
    return weight


def load_sst2(root: Path, seed: int) -> Corpus:
    """Binary SST (neutral sentences removed), lower-cased, GloVe 50d embeddings."""
    splits = load_sst(root / "sst", classes=2, lowercase=True)
    vocabulary = Vocabulary.build([list(e.tokens) for e in splits["train"]])

    def encode(name: str) -> Split:
        examples = splits[name]
        return Split(
            [vocabulary.encode(list(e.tokens)) for e in examples], [e.label for e in examples]
        )

    return Corpus(
        "sst",
        vocabulary,
        2,
        encode("train"),
        encode("valid"),
        encode("test"),
        _glove(root, vocabulary, seed),
    )


def load_babi_task(root: Path, task: int, seed: int) -> Corpus:
    """A bAbI task as QA classification: the passage is the story's last
    :data:`BABI_STATEMENTS` statements, one token sequence; the classes are the training
    answers."""
    splits = load_babi(root / "babi", task, seed=seed)

    def passage(example: Any) -> list[str]:
        return [t for statement in example.story[-BABI_STATEMENTS:] for t in statement]

    vocabulary = Vocabulary.build([passage(e) + list(e.question) for e in splits["train"]])
    answers = sorted({e.answer for e in splits["train"]})
    index = {a: i for i, a in enumerate(answers)}

    def encode(name: str) -> Split:
        examples = [e for e in splits[name] if e.answer in index]
        return Split(
            [vocabulary.encode(passage(e)) for e in examples],
            [index[e.answer] for e in examples],
            [vocabulary.encode(list(e.question)) for e in examples],
        )

    return Corpus(
        f"babi{task}",
        vocabulary,
        len(answers),
        encode("train"),
        encode("valid"),
        encode("test"),
        _glove(root, vocabulary, seed),
    )


def load_corpus(name: str, root: Path, seed: int) -> Corpus:
    """``"sst"`` or ``"babi1"``/``"babi2"``/``"babi3"``."""
    if name == "sst":
        return load_sst2(root, seed)
    if name.startswith("babi") and name[4:].isdigit() and int(name[4:]) in BABI_TASKS:
        return load_babi_task(root, int(name[4:]), seed)
    raise ValueError(f"corpus must be 'sst' or babi1..babi3, got {name!r}")


def pad(sequences: Sequence[Sequence[int]]) -> Tensor:
    """Long ``[B, max length]``, ``PAD`` after each sequence."""
    length = max(1, *(len(s) for s in sequences)) if sequences else 1
    out = torch.full((len(sequences), length), PAD, dtype=torch.long)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


@dataclass
class Batch:
    tokens: Tensor  # [B, L]
    labels: Tensor  # [B]
    question: Tensor | None  # [B, L_q]

    @property
    def mask(self) -> Tensor:
        return self.tokens != PAD


def batch_of(split: Split, indices: Sequence[int]) -> Batch:
    return Batch(
        pad([split.passages[i] for i in indices]),
        torch.tensor([split.labels[i] for i in indices], dtype=torch.long),
        None if split.questions is None else pad([split.questions[i] for i in indices]),
    )


def batches(split: Split, size: int, generator: torch.Generator | None = None) -> Iterator[Batch]:
    """Batches of ``size`` (shuffled with ``generator``, else in order)."""
    order = (
        torch.randperm(len(split), generator=generator).tolist()
        if generator is not None
        else list(range(len(split)))
    )
    for start in range(0, len(order), size):
        yield batch_of(split, order[start : start + size])


def sst2_sentences(
    corpus_root: Path, split: str, limit: int | None = None
) -> tuple[list[list[str]], list[int]]:
    """Binary SST's tokens (lower-cased) and labels of ``split``; the first ``limit`` only."""
    examples = load_sst(corpus_root / "sst", classes=2, lowercase=True)[split]
    if limit is not None:
        examples = examples[:limit]
    return [list(e.tokens) for e in examples], [e.label for e in examples]
