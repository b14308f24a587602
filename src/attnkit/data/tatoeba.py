"""Tatoeba English–French sentence pairs, bundled with the package (CC-BY 2.0 France).

The bundled ``tatoeba_en_fr.tsv.gz`` holds the 83,398 pairs of the manythings.org 2017-09-29
``fra-eng`` release whose English and French both have at most 8 tokens (:func:`tokenize`), as
the original text in the release's order (shortest English first). Attribution, licence and
provenance: ``TATOEBA_LICENSE.md`` next to it; it is rebuilt by
``benchmarks/make_tatoeba_subset.py``.

Split: by a stable hash of the lowercased English sentence, so all translations of one English
sentence land in the same split: bucket = first 8 bytes of sha256 (big-endian) mod 100; buckets
0–95 train, 96–97 valid, 98–99 test (about 96/2/2 %). ``"I love you."`` (bucket 37, two
translations "Je t'aime !" and "Je t'adore.") is in train.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from importlib import resources

from attnkit.data.corpus import Example
from attnkit.data.tokenize import tokenize

DATA_FILE = "tatoeba_en_fr.tsv.gz"
LICENSE_FILE = "TATOEBA_LICENSE.md"
SPLITS = ("train", "valid", "test")


def split_of(english: str) -> str:
    """``"train"``, ``"valid"`` or ``"test"``: the split of a pair, from its English sentence."""
    digest = hashlib.sha256(english.strip().lower().encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % 100
    return "train" if bucket < 96 else "valid" if bucket < 98 else "test"


@functools.cache
def _tokenized() -> tuple[tuple[str, Example], ...]:
    """Every bundled pair tokenised, with its split: computed once per process (~3 s), since
    examples are immutable."""
    return tuple(
        (split_of(english), Example(tuple(tokenize(english, "en")), tuple(tokenize(french, "fr"))))
        for english, french in read_tatoeba_pairs()
    )


def read_tatoeba_pairs() -> list[tuple[str, str]]:
    """The bundled ``(english, french)`` pairs as raw text, in file order."""
    data = resources.files("attnkit.data").joinpath(DATA_FILE).read_bytes()
    lines = gzip.decompress(data).decode("utf-8").splitlines()
    pairs = []
    for number, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(
                f"{DATA_FILE} line {number}: expected 2 tab-separated fields, got {line!r}"
            )
        pairs.append((fields[0], fields[1]))
    return pairs


def load_tatoeba(
    max_length: int | None = None, max_pairs: int | None = None
) -> dict[str, list[Example]]:
    """The bundled Tatoeba pairs, tokenised, English source → French target.

    Args:
        max_length: keep pairs whose source and target both have at most this many tokens
            (applied to every split).
        max_pairs: keep the first ``max_pairs`` training pairs in file order (the release is
            sorted by English length, so these are the shortest sentences; valid and test are
            not truncated).

    Returns:
        ``{"train": [...], "valid": [...], "test": [...]}`` of :class:`Example` (no links).
    """
    for name, value in (("max_length", max_length), ("max_pairs", max_pairs)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
    splits: dict[str, list[Example]] = {name: [] for name in SPLITS}
    for split, example in _tokenized():
        if max_length is not None and max(len(example.source), len(example.target)) > max_length:
            continue
        splits[split].append(example)
    if max_pairs is not None:
        splits["train"] = splits["train"][:max_pairs]
    return splits
