"""Canadian Hansards English–French: training text and the NAACL-2003 word-alignment gold.

The gold (Mihalcea & Pedersen 2003; links by Och & Ney) is tokenised with the EGYPT tools:
punctuation and hyphens split (``peut - être``, ``deep - rooted``), English ``'s`` split off,
abbreviations keep their stop (``Mr.``, ``M.``, ``hon.``), and French elisions/contractions
expanded (``l'`` → ``le``, ``d'`` → ``de``, ``qu'`` → ``que``, ``du`` → ``de le``, ``des`` →
``de les``, ``au`` → ``à le``, ``aux`` → ``à les``; ``aujourd'hui`` stays ``aujourd' hui`` and
``au - dessus`` keeps ``au``, so contractions inside hyphenated compounds such as
``Rivière-du-Loup`` are kept too). The training text (``train-csc401-subset``) is raw: original case,
punctuation attached, French accents stripped to ASCII, nothing expanded.

So both are brought to one form:

- training text, :func:`normalize_training` — :func:`attnkit.data.tokenize.tokenize`, then for
  French expand ``du/des/au/aux`` and the elisions as the gold does, then split hyphens, then
  strip accents (both languages, since the training French has none);
- gold text, :func:`normalize_gold_token` — token by token, lowercase and strip accents only,
  so the number of tokens (hence every link position) is unchanged.

Share of gold test tokens (7,020 EN / 7,761 FR) found in the vocabulary of the 100,970-pair
training text (all of it; its lines have at most 16 words, and none has an empty side, so
``load_hansards`` keeps all 100,970 pairs unless asked otherwise), measured on this data:

============================  ===========  ===========  ===========  ===========
                              EN min 1     EN min 2     FR min 1     FR min 2
============================  ===========  ===========  ===========  ===========
raw: whitespace split as is   97.3 %       95.6 %       82.5 %       81.6 %
tokenize + lowercase only     98.3 %       97.5 %       84.7 %       84.3 %
this normalisation            98.5 %       97.7 %       98.1 %       97.4 %
============================  ===========  ===========  ===========  ===========

(``raw`` compares the gold's tokens with the training lines split on spaces; ``tokenize +
lowercase only`` uses :func:`tokenize` for the training text and lowercases the gold, with
accents.) Splits: ``"train"`` = the training text, ``"valid"`` = gold sentences 1–100,
``"test"`` = gold sentences 101–447, both with ``sure``/``possible`` links from
``gold/test.pharaoh`` (``i`` = English = source position, ``j`` = French = target position).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from attnkit.data.corpus import Example
from attnkit.data.pharaoh import parse_pharaoh
from attnkit.data.tokenize import tokenize

VALID_SENTENCES = 100  # gold lines 1–100 are "valid", 101–447 "test"
# what a hansards-en-fr directory must hold, relative to it
TRAINING_FILES = ("train-csc401-subset/train.e", "train-csc401-subset/train.f")
GOLD_FILES = ("gold/test.e", "gold/test.f", "gold/test.pharaoh")


def missing_files(root: str | Path) -> list[str]:
    """The files of the Hansards release (:data:`TRAINING_FILES`, :data:`GOLD_FILES`) that
    ``root`` lacks, relative to it; empty for a complete ``hansards-en-fr`` directory."""
    root = Path(root)
    return [name for name in (*TRAINING_FILES, *GOLD_FILES) if not (root / name).is_file()]


# French contractions of a preposition and an article, as the gold expands them.
_CONTRACTIONS = {"du": ("de", "le"), "des": ("de", "les"), "au": ("à", "le"), "aux": ("à", "les")}
# Elided words, as the gold writes them in full ("l'" is always "le" there: "le opposition").
_ELISIONS = {
    "l'": "le", "d'": "de", "j'": "je", "n'": "ne", "qu'": "que", "c'": "ce", "s'": "se",
    "m'": "me", "t'": "te", "jusqu'": "jusque", "lorsqu'": "lorsque", "puisqu'": "puisque",
    "quelqu'": "quelque", "presqu'": "presque", "quoiqu'": "quoique",
}  # fmt: skip
_LIGATURES = str.maketrans({"œ": "oe", "æ": "ae"})


def strip_accents(text: str) -> str:
    """``text`` without diacritics (NFD, drop combining marks): ``"réunion"`` → ``"reunion"``."""
    decomposed = unicodedata.normalize("NFD", text.translate(_LIGATURES))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def normalize_gold_token(token: str) -> str:
    """A gold token in the shared form: lowercase, no accents (one token in, one token out)."""
    return strip_accents(token.lower())


def _split_hyphens(token: str) -> list[str]:
    if "-" not in token or token == "-" or not any(c.isalpha() for c in token):
        return [token]  # a dash or a number range stays whole
    parts = token.split("-")
    out = [parts[0]] if parts[0] else []
    for part in parts[1:]:
        out.append("-")
        if part:
            out.append(part)
    return out


def normalize_training(text: str, lang: str) -> list[str]:
    """Tokens of a raw training line in the gold's tokenisation (lowercased, accents stripped).

    Example: ``"C'est l'avis du député."`` → ``["ce", "est", "le", "avis", "de", "le",
    "depute", "."]``.
    """
    tokens: list[str] = []
    for token in tokenize(text, lang):
        if lang == "fr":
            if token in _CONTRACTIONS:
                tokens.extend(_CONTRACTIONS[token])
                continue
            # After the hyphen split, so "main-d'oeuvre" also gives "main - de oeuvre".
            tokens.extend(_ELISIONS.get(part, part) for part in _split_hyphens(token))
            continue
        tokens.extend(_split_hyphens(token))
    return [strip_accents(token) for token in tokens]


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"Hansards file not found: {path}")
    data = path.read_bytes()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ValueError(
            f"{path}: line {line} is not UTF-8 text (byte 0x{data[error.start]:02x} at byte "
            f"{column} of the line); the Hansards files are UTF-8"
        ) from None


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")


def load_hansards_gold(root: str | Path) -> list[Example]:
    """The 447 gold test pairs (English source, French target) with sure/possible links."""
    root = Path(root)
    english = _read_lines(root / "gold" / "test.e")
    french = _read_lines(root / "gold" / "test.f")
    links = _read_lines(root / "gold" / "test.pharaoh")
    if not len(english) == len(french) == len(links):
        raise ValueError(
            f"gold files of {root} differ in length: test.e {len(english)}, test.f {len(french)}, "
            f"test.pharaoh {len(links)} lines"
        )
    examples = []
    pharaoh = root / "gold" / "test.pharaoh"
    for number, (e_line, f_line, a_line) in enumerate(zip(english, french, links, strict=True), 1):
        source = tuple(normalize_gold_token(t) for t in e_line.split())
        target = tuple(normalize_gold_token(t) for t in f_line.split())
        try:
            sure, possible = parse_pharaoh(a_line)
        except ValueError as error:
            raise ValueError(f"{pharaoh}: line {number}: {error}") from None
        outside = sorted((i, j) for i, j in possible if i >= len(source) or j >= len(target))
        if outside:
            i, j = outside[0]
            raise ValueError(
                f"{pharaoh}: line {number}: the link {i}-{j} is outside the sentence pair "
                f"({len(source)} English, {len(target)} French tokens; positions are 0-based, "
                "English first)"
            )
        examples.append(Example(source, target, sure=frozenset(sure), possible=frozenset(possible)))
    return examples


def load_hansards(
    root: str | Path, max_length: int | None = None, max_pairs: int | None = None
) -> dict[str, list[Example]]:
    """Hansards English → French: normalised training pairs and the gold valid/test pairs.

    Args:
        root: the ``hansards-en-fr`` directory (``gold/`` and ``train-csc401-subset/``).
        max_length: keep training pairs whose sides both have at most this many tokens (the
            gold splits are never filtered: they are the evaluation set).
        max_pairs: keep the first ``max_pairs`` training pairs (file order) after filtering.

    Returns:
        ``{"train", "valid", "test"}`` lists of :class:`Example`; training pairs with an empty
        side are dropped; ``valid``/``test`` carry ``sure`` and ``possible`` (``links`` None).
    """
    _check_count("max_length", max_length)
    _check_count("max_pairs", max_pairs)
    root = Path(root)
    english = _read_lines(root / "train-csc401-subset" / "train.e")
    french = _read_lines(root / "train-csc401-subset" / "train.f")
    if len(english) != len(french):
        raise ValueError(
            f"training files of {root} differ in length: train.e {len(english)}, "
            f"train.f {len(french)} lines"
        )
    train: list[Example] = []
    for e_line, f_line in zip(english, french, strict=True):
        if max_pairs is not None and len(train) >= max_pairs:
            break
        source, target = normalize_training(e_line, "en"), normalize_training(f_line, "fr")
        if not source or not target:
            continue
        if max_length is not None and max(len(source), len(target)) > max_length:
            continue
        train.append(Example(tuple(source), tuple(target)))
    gold = load_hansards_gold(root)
    return {"train": train, "valid": gold[:VALID_SENTENCES], "test": gold[VALID_SENTENCES:]}
