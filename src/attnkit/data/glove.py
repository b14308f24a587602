"""Pretrained GloVe word vectors (Pennington, Socher & Manning 2014) and embedding matrices built
from them for a :class:`~attnkit.data.vocabulary.Vocabulary`.

File format (GloVe's own): one word a line, ``word v1 … vD``, separated by single spaces, plain
or gzip-compressed. The shared ``glove-6b-50d`` directory holds ``glove.6B.50d.subset.txt.gz``:
the 28,443 words of the 6B-token, 50-dimensional, uncased vectors that occur in the benchmark
sets (SST, TREC/MR, ABSA, bAbI), in GloVe's frequency order.

:func:`embedding_matrix` gives the initial weight of an ``nn.Embedding``: a vocabulary word with
a vector gets it (looked up as written, then lower-cased, since GloVe 6B is uncased); any other
row is drawn from ``N(0, σ²)`` with σ the standard deviation of all the vectors' entries (0.650
for the 50d subset), from ``torch.Generator().manual_seed(seed)``; the ``<pad>`` row is zero.
The draws do not depend on which words were found (a full ``[V, D]`` draw is overwritten), so a
seed gives the same random rows for any vector file.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnkit.data.vocabulary import PAD, SPECIALS, Vocabulary

SUBSET_FILE = "glove.6B.50d.subset.txt.gz"


@dataclass(frozen=True)
class Coverage:
    """How many vocabulary words (the four specials excluded) have a pretrained vector.

    Attributes:
        found: words given their pretrained vector.
        total: vocabulary words, specials excluded.
        missing: the words without a vector, in vocabulary order (most frequent first).
    """

    found: int
    total: int
    missing: tuple[str, ...]

    @property
    def fraction(self) -> float:
        """``found / total`` (1.0 for an empty vocabulary)."""
        return self.found / self.total if self.total else 1.0

    def __str__(self) -> str:
        return f"{self.found}/{self.total} words ({100 * self.fraction:.1f} %) have a vector"


def _glove_path(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / SUBSET_FILE
    if not path.is_file():
        raise FileNotFoundError(f"GloVe file not found: {path}")
    return path


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":  # gzip's magic number
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as error:
            raise ValueError(f"{path}: expected a complete gzip file ({error})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        number = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {number}: expected UTF-8 text") from None


def load_glove(path: str | Path, dim: int | None = None) -> dict[str, np.ndarray]:
    """Every word of a GloVe text file and its vector.

    Args:
        path: the file (``.txt`` or ``.txt.gz``), or a directory holding :data:`SUBSET_FILE`.
        dim: the expected vector size; ``None`` takes it from the first line.

    Returns:
        ``{word: vector}`` in file order; the vectors are float32 ``[D]`` rows of one array.

    Raises:
        ValueError: one line naming the file, the line number and what was expected (a word
            and D numbers), or a repeated word.
    """
    path = _glove_path(path)
    lines = _read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValueError(f"{path}: expected at least one line 'word v1 ... vD', got an empty file")
    if dim is None:
        dim = len(lines[0].rstrip().split(" ")) - 1
    if dim < 1:
        raise ValueError(f"{path}: line 1: expected a word and its vector, got {lines[0]!r:.60}")
    matrix = np.empty((len(lines), dim), dtype=np.float32)
    rows: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        fields = line.rstrip().split(" ")
        if len(fields) != dim + 1:
            raise ValueError(
                f"{path}: line {number}: expected a word and {dim} numbers, got "
                f"{len(fields) - 1} value(s) after {fields[0]!r:.40}"
            )
        try:
            matrix[number - 1] = np.asarray(fields[1:], dtype=np.float32)
        except ValueError:
            raise ValueError(
                f"{path}: line {number}: expected {dim} numbers after {fields[0]!r:.40}"
            ) from None
        if fields[0] in rows:
            raise ValueError(
                f"{path}: line {number}: expected each word once, got {fields[0]!r} again "
                f"(first on line {rows[fields[0]] + 1})"
            )
        rows[fields[0]] = number - 1
    return {word: matrix[row] for word, row in rows.items()}


def embedding_matrix(
    vocabulary: Vocabulary,
    vectors: Mapping[str, np.ndarray],
    seed: int = 0,
    lowercase_lookup: bool = True,
) -> tuple[Tensor, Coverage]:
    """An embedding weight for ``vocabulary`` from pretrained ``vectors``.

    Args:
        vocabulary: the ids to fill (row ``i`` is ``vocabulary.itos[i]``).
        vectors: ``{word: vector [D]}``, e.g. from :func:`load_glove`.
        seed: seeds the random rows.
        lowercase_lookup: look a word that has no vector up again lower-cased (GloVe 6B is
            uncased).

    Returns:
        ``(weight [V, D] float32, coverage)``: row ``i`` is the vector of ``vocabulary.itos[i]``
        if it has one, zero for ``<pad>``, else ``N(0, σ²)`` with σ the standard deviation of
        the entries of ``vectors``; ``coverage`` counts the words (specials excluded) found.
    """
    if not isinstance(vocabulary, Vocabulary):
        raise TypeError(f"vocabulary must be a Vocabulary, got {type(vocabulary).__name__}")
    if not vectors:
        raise ValueError("vectors must hold at least one word, got none")
    stacked = np.stack(list(vectors.values())).astype(np.float64)
    if stacked.ndim != 2:
        raise ValueError(f"vectors must all be 1-D of one size, got shape {stacked.shape}")
    std = float(stacked.std())
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(len(vocabulary), stacked.shape[1], generator=generator) * std
    weight[PAD] = 0
    found = 0
    missing = []
    for index, token in enumerate(vocabulary.itos):
        if token in SPECIALS:
            continue
        vector = vectors.get(token)
        if vector is None and lowercase_lookup:
            vector = vectors.get(token.lower())
        if vector is None:
            missing.append(token)
            continue
        weight[index] = torch.from_numpy(np.asarray(vector, dtype=np.float32))
        found += 1
    return weight, Coverage(found, len(vocabulary) - len(SPECIALS), tuple(missing))


__all__ = ["SUBSET_FILE", "Coverage", "embedding_matrix", "load_glove"]
