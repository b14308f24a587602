"""Multi30k task 1 (Elliott et al. 2016; French: Elliott et al. 2017): image captions in English,
German and French, line-aligned, the usual benchmark of small attention-based translation models
(the pytorch-seq2seq tutorials translate German → English).

Files of a ``multi30k`` directory: ``{train,val,test_2016_flickr}.{de,en,fr}.gz``, raw
untokenised UTF-8 text, one sentence a line, line ``i`` of each language the same caption:

=================  =======  =============================
split              lines    file stem
=================  =======  =============================
``"train"``        29,000   ``train``
``"valid"``        1,014    ``val``
``"test"``         1,000    ``test_2016_flickr`` ("test2016")
=================  =======  =============================

Tokens: the Moses tokenizer of ``sacremoses`` for the language (``escape=False``: ``&`` and
quotes stay as they are, no ``&amp;``), optionally lower-cased afterwards (the tutorials'
anchors use lower-cased tokens). :func:`detokenize` is Moses' detokenizer, to give sacrebleu
plain text.
"""

from __future__ import annotations

import functools
import gzip
import zlib
from pathlib import Path
from typing import Any

from attnkit.data.corpus import Example

LANGUAGES = ("de", "en", "fr")
FILE_STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
SPLITS = tuple(FILE_STEMS)


def _check_language(lang: str) -> None:
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")


@functools.cache
def _tokenizer(lang: str) -> Any:
    from sacremoses import MosesTokenizer  # imported on use: loading its rules takes time

    return MosesTokenizer(lang=lang)


@functools.cache
def _detokenizer(lang: str) -> Any:
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def tokenize(text: str, lang: str, lowercase: bool = False) -> list[str]:
    """Moses tokens of one sentence: ``"Ein Hund läuft."`` → ``["Ein", "Hund", "läuft", "."]``.

    Args:
        text: one raw sentence.
        lang: ``"de"``, ``"en"`` or ``"fr"``.
        lowercase: lower-case the tokens (after tokenising, so Moses' abbreviation rules still
            see the case).
    """
    _check_language(lang)
    tokens = _tokenizer(lang).tokenize(text, escape=False)
    return [token.lower() for token in tokens] if lowercase else tokens


def detokenize(tokens: list[str], lang: str) -> str:
    """Moses' detokenizer: ``["Ein", "Hund", "läuft", "."]`` → ``"Ein Hund läuft."``."""
    _check_language(lang)
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of str, got a str (tokenize it first)")
    return _detokenizer(lang).detokenize(list(tokens))


def read_sentences(root: str | Path, split: str, lang: str) -> list[str]:
    """The raw sentences of one split and language, in file order.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: one line naming the file (and the line number, for an empty or undecodable
            line) and what was expected.
    """
    if split not in FILE_STEMS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    _check_language(lang)
    path = Path(root) / f"{FILE_STEMS[split]}.{lang}.gz"
    if not path.is_file():
        raise FileNotFoundError(f"Multi30k file not found: {path}")
    try:
        data = gzip.decompress(path.read_bytes())
    except (EOFError, OSError, zlib.error) as error:
        raise ValueError(f"{path}: expected a complete gzip file ({error})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        number = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {number}: expected UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise ValueError(f"{path}: line {number}: expected a sentence, got an empty line")
    return [line.rstrip("\r") for line in lines]


def load_multi30k(
    root: str | Path,
    source: str = "de",
    target: str = "en",
    lowercase: bool = False,
    splits: tuple[str, ...] = SPLITS,
    max_pairs: int | None = None,
) -> dict[str, list[Example]]:
    """Tokenised Multi30k sentence pairs ``source → target``.

    Args:
        root: the ``multi30k`` directory.
        source, target: two different languages of :data:`LANGUAGES`.
        lowercase: lower-case the tokens.
        splits: which of ``"train"``, ``"valid"``, ``"test"`` to load (train takes a few
            seconds per language to tokenise).
        max_pairs: keep the first ``max_pairs`` training pairs (cut before tokenising, so a
            short run does not pay for the whole split); valid and test are never cut.

    Returns:
        ``{split: [Example, ...]}``, line ``i`` of both files as one :class:`Example`.
    """
    _check_language(source)
    _check_language(target)
    if source == target:
        raise ValueError(f"source and target must differ, got {source!r} twice")
    if max_pairs is not None and (
        isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1
    ):
        raise ValueError(f"max_pairs must be None or an int >= 1, got {max_pairs!r}")
    out: dict[str, list[Example]] = {}
    for split in splits:
        sources = read_sentences(root, split, source)
        targets = read_sentences(root, split, target)
        if len(sources) != len(targets):
            stem = FILE_STEMS[split]
            raise ValueError(
                f"{Path(root)}: expected {stem}.{source}.gz and {stem}.{target}.gz to have as "
                f"many lines, got {len(sources)} and {len(targets)}"
            )
        if split == "train" and max_pairs is not None:
            sources, targets = sources[:max_pairs], targets[:max_pairs]
        out[split] = [
            Example(tuple(tokenize(s, source, lowercase)), tuple(tokenize(t, target, lowercase)))
            for s, t in zip(sources, targets, strict=True)
        ]
    return out


__all__ = [
    "LANGUAGES",
    "SPLITS",
    "detokenize",
    "load_multi30k",
    "read_sentences",
    "tokenize",
]
