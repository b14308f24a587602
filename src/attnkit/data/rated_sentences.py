"""Rotten Tomatoes review sentences with human sentiment ratings (Hutto & Gilbert 2014), bundled.

Source: ``additional_resources/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt`` of the
vaderSentiment 3.3.2 source distribution (MIT licence): 10,605 tab-separated rows ``id, mean
rating, sentence``. Hutto & Gilbert had each snippet rated by at least 20 screened human raters
on a scale from -4 (extremely negative) to +4 (extremely positive); the file gives the mean. The
snippets are the rottentomatoes.com review sentences of Pang & Lee's *sentence polarity dataset
v1.0* (Pang & Lee 2005; e.g. the first, "The Rock is destined to be the 21st Century's new
''Conan'' ...", is that dataset's first positive sentence). VADER's README describes them as
derived from Pang & Lee (2004)'s 2,000 reviews.

Labels: **derived, not original** — the sign of the mean human rating: ``positive`` if > 0,
``negative`` if < 0. The 37 snippets whose mean is exactly 0 are dropped, leaving 10,568
(5,242 positive, 5,326 negative). Pang & Lee's own positive/negative labels are not in this file.

The bundled ``rated_sentences.tsv.gz`` is the source file re-encoded by :func:`write_bundle`
(``id<TAB>rating<TAB>sentence`` per line, LF line ends instead of CRLF, same rows and order).
Provenance and licence: ``RATED_SENTENCES_LICENSE.md`` next to it.

Tokens: :func:`attnkit.data.tokenize.tokenize` (``"en"``, lowercased).

Split: by a stable hash of the lowercased sentence (two snippets occur twice; each pair stays in
one split): bucket = first 8 bytes of sha256 (big-endian) mod 10; buckets 0–7 train, 8 valid,
9 test (about 80/10/10 %). Within a split, sentences are ordered by the same hash, so any prefix
mixes the classes.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from attnkit.data.tokenize import tokenize

DATA_FILE = "rated_sentences.tsv.gz"
LICENSE_FILE = "RATED_SENTENCES_LICENSE.md"
SPLITS = ("train", "valid", "test")
LABELS = ("negative", "positive")  # index = class


@dataclass(frozen=True)
class RatedSentence:
    """One snippet: its tokens, the mean human rating in [-4, 4] and the label its sign gives
    (0 negative, 1 positive)."""

    tokens: tuple[str, ...]
    rating: float
    label: int
    id: int

    @property
    def polarity(self) -> str:
        return LABELS[self.label]


def _hash(sentence: str) -> int:
    return int.from_bytes(
        hashlib.sha256(sentence.strip().lower().encode("utf-8")).digest()[:8], "big"
    )


def split_of(sentence: str) -> str:
    """``"train"``, ``"valid"`` or ``"test"``: the split of a snippet, from its text."""
    bucket = _hash(sentence) % 10
    return "train" if bucket < 8 else "valid" if bucket < 9 else "test"


def _parse(text: str, source: str) -> list[tuple[int, float, str]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(
                f"{source}: line {number}: expected 3 tab-separated fields (id, rating, "
                f"sentence), got {len(fields)}"
            )
        rows.append((int(fields[0]), float(fields[1]), fields[2].strip()))
    return rows


def write_bundle(source: str | Path, destination: str | Path) -> int:
    """Write the bundled file from VADER's ``movieReviewSnippets_GroundTruth.txt``; returns the
    number of rows. The ratings are copied as text (no float round trip); gzip's timestamp is 0."""
    text = Path(source).read_text(encoding="utf-8")
    _parse(text, str(source))  # validate before writing
    lines = [line.rstrip("\r") for line in text.splitlines()]
    with (
        open(destination, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as handle,
    ):
        handle.write(("\n".join(lines) + "\n").encode("utf-8"))
    return len(lines)


@functools.cache
def _rows() -> tuple[tuple[int, float, str], ...]:
    raw = resources.files("attnkit.data").joinpath(DATA_FILE).read_bytes()
    return tuple(_parse(gzip.decompress(raw).decode("utf-8"), DATA_FILE))


@functools.cache
def _sentences() -> tuple[tuple[str, RatedSentence], ...]:
    """Every labelled snippet tokenised, with its split (computed once per process)."""
    out: list[tuple[int, str, RatedSentence]] = []
    for identifier, rating, sentence in _rows():
        if rating == 0:  # no sign, no label
            continue
        tokens = tuple(tokenize(sentence, "en"))
        labelled = RatedSentence(tokens, rating, int(rating > 0), identifier)
        out.append((_hash(sentence), split_of(sentence), labelled))
    # The source lists the positive sentences first: order by the hash instead, so that any
    # prefix of a split (max_examples, the trainer's max_eval_examples) holds both classes.
    return tuple((split, item) for _, split, item in sorted(out, key=lambda entry: entry[0]))


def zero_rated() -> int:
    """How many snippets have a mean rating of exactly 0 (dropped: their sign is no label)."""
    return sum(rating == 0 for _, rating, _ in _rows())


def load_rated_sentences(
    max_examples: int | None = None, max_length: int | None = None
) -> dict[str, list[RatedSentence]]:
    """The bundled snippets by split (train about 8,450, valid and test about 1,060 each).

    Args:
        max_examples: keep the first this many training snippets (valid and test are whole).
        max_length: keep each snippet's first this many tokens (all splits; the longest has 51
            tokens, 99 % have at most 41).

    Returns:
        ``{"train": [...], "valid": [...], "test": [...]}`` of :class:`RatedSentence`, each split
        in the order of the hash (the source lists the positive sentences first).
    """
    for name, value in (("max_examples", max_examples), ("max_length", max_length)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be None or an int, got {type(value).__name__}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be None or >= 1, got {value}")
    splits: dict[str, list[RatedSentence]] = {name: [] for name in SPLITS}
    for split, sentence in _sentences():
        if max_length is not None and len(sentence.tokens) > max_length:
            sentence = RatedSentence(
                sentence.tokens[:max_length], sentence.rating, sentence.label, sentence.id
            )
        splits[split].append(sentence)
    if max_examples is not None:
        splits["train"] = splits["train"][:max_examples]
    return splits
