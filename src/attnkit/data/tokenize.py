"""Word tokenisation for the English–French translation corpora (Tatoeba, Hansards).

A small rule-based tokeniser in the spirit of the Moses / Penn-Treebank tokenisers, written for the
two languages the translation demos use. Rules, applied in order:

1. Unicode NFC; the typographic spaces French puts before ``! ? : ;`` (U+202F narrow no-break
   space, U+00A0 no-break space, U+2009 thin space) become plain spaces; curly apostrophes
   ``’ ‘`` become ``'`` and curly double quotes ``“ ” „`` become ``"``.
2. Lowercase.
3. Tokens: numbers keep their inner ``. , : /`` (``6.42``, ``98,355``, ``10:30``); words keep
   inner hyphens and apostrophes (``peut-être``, ``o'reilly``); a few abbreviations keep their
   full stop when more text follows (``mr.``, ``m.``, ``p.m.``); every other punctuation
   character is a token of its own (``...`` stays one token).
4. French elision: a word with an inner apostrophe is split *after* the apostrophe, which stays
   on the first part: ``t'aime`` → ``t'`` ``aime``, ``qu'il`` → ``qu'`` ``il``,
   ``aujourd'hui`` → ``aujourd'`` ``hui`` (as the Hansards gold does).
5. English contractions (Penn-Treebank rule): the clitic is split off *with* its apostrophe:
   ``don't`` → ``do`` ``n't``, ``can't`` → ``ca`` ``n't``, ``i'm`` → ``i`` ``'m``,
   ``john's`` → ``john`` ``'s`` (also ``'re 've 'll 'd``). Other inner apostrophes stay
   (``o'reilly``); a trailing apostrophe (``members'``) is its own token ``'``.

Example::

    >>> tokenize("Je t\u2019aime\u202f!", "fr")
    ['je', "t'", 'aime', '!']
    >>> tokenize("I love you.", "en")
    ['i', 'love', 'you', '.']
"""

from __future__ import annotations

import re
import unicodedata

LANGUAGES = ("en", "fr")

_SPACES = {"\u202f": " ", "\u00a0": " ", "\u2009": " ", "\u2007": " ", "\t": " "}
_QUOTES = {"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"'}
_TRANSLATION = str.maketrans({**_SPACES, **_QUOTES})

# Abbreviations whose full stop belongs to the word (kept only when more text follows, so a
# sentence-final "etc." still yields the "." a decoder needs to learn to end sentences).
_ABBREVIATIONS = {
    "en": ("mr", "mrs", "ms", "messrs", "dr", "st", "hon", "jr", "sr", "prof", "vs", "etc"),
    "fr": ("m", "mm", "mme", "mmes", "mlle", "dr", "st", "hon", "etc", "av", "prof"),
}
_ENGLISH_CLITICS = ("n't", "'s", "'m", "'re", "'ve", "'ll", "'d")


def _token_pattern(lang: str) -> re.Pattern[str]:
    abbreviations = "|".join(_ABBREVIATIONS[lang])
    return re.compile(
        rf"(?:(?<![\w.])(?:{abbreviations})\.(?=\s+\S))"  # mr. smith (not a final "etc.")
        r"|(?:[a-z]\.){2,}(?=\s+\S)"  # p.m. then more text
        r"|\d+(?:[.,:/]\d+)*"  # 6.42, 98,355, 10:30
        r"|\w+(?:['-]\w+)*"  # peut-être, t'aime, don't (split further below)
        r"|\.\.\.+|[^\w\s]",  # "..." or any single punctuation character
    )


_PATTERNS = {lang: _token_pattern(lang) for lang in LANGUAGES}


def _check_language(lang: str) -> None:
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")


def normalize_text(text: str) -> str:
    """Rules 1–2: NFC, typographic spaces and quotes to ASCII, lowercase."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return unicodedata.normalize("NFC", text).translate(_TRANSLATION).lower()


def _split_french_elision(word: str) -> list[str]:
    # Split after every inner apostrophe: "jusqu'aujourd'hui" -> "jusqu'", "aujourd'", "hui".
    parts = word.split("'")
    out = [part + "'" for part in parts[:-1] if part]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _split_english_clitic(word: str) -> list[str]:
    for clitic in _ENGLISH_CLITICS:
        if word.endswith(clitic) and len(word) > len(clitic):
            stem = word[: -len(clitic)]
            if not stem.endswith("'"):  # "o'reilly's" -> "o'reilly" "'s"
                return [stem, clitic]
    return [word]


def tokenize(text: str, lang: str) -> list[str]:
    """Lowercased word tokens of ``text`` in language ``lang`` (``"en"`` or ``"fr"``).

    Args:
        text: one sentence.
        lang: ``"en"`` or ``"fr"``; selects the abbreviation list and the apostrophe rule
            (French elision vs English clitic, see the module docstring).

    Returns:
        The tokens, e.g. ``"Je t'aime."`` → ``["je", "t'", "aime", "."]``.
    """
    _check_language(lang)
    tokens: list[str] = []
    for match in _PATTERNS[lang].finditer(normalize_text(text)):
        word = match.group()
        if "'" in word and word[0] != "'":
            tokens.extend(
                _split_french_elision(word) if lang == "fr" else _split_english_clitic(word)
            )
        else:
            tokens.append(word)
    return tokens


_NO_SPACE_BEFORE = {",", ".", ")", "]", "}", "%", "...", "'"}
_NO_SPACE_AFTER = {"(", "[", "{", "¿", "¡"}
# French typography puts a space before these (Tatoeba writes "Va !"); English does not.
_HIGH_PUNCTUATION = {"!", "?", ":", ";"}


def detokenize(tokens: list[str], lang: str) -> str:
    """Join tokens back into a readable sentence (the inverse of :func:`tokenize` up to case).

    Rejoins punctuation (French keeps a plain space before ``! ? : ;`` and inside ``« »``),
    English clitics (``do n't`` → ``don't``) and French elisions (``t' aime`` → ``t'aime``),
    capitalises the first letter and, in English, the pronoun ``i``.

    Args:
        tokens: a token list as produced by :func:`tokenize` or decoded by a model.
        lang: ``"en"`` or ``"fr"``.

    Returns:
        The sentence, e.g. ``["je", "t'", "aime", "."]`` → ``"Je t'aime."``.
    """
    _check_language(lang)
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of str, got a str (call tokenize first)")
    out = ""
    open_double_quote = False
    glue_next = True  # no space before the first token
    for token in tokens:
        if lang == "en" and token == "i":
            token = "I"
        glue = glue_next
        glue_next = False
        if token in _NO_SPACE_BEFORE or (lang == "en" and token in _HIGH_PUNCTUATION):
            glue = True
        elif lang == "en" and token in _ENGLISH_CLITICS:
            glue = True
        elif token == '"':
            glue = open_double_quote  # a closing quote hugs the word before it
            glue_next = not open_double_quote  # an opening quote hugs the word after it
            open_double_quote = not open_double_quote
        elif token == "»" and lang != "fr":
            glue = True
        if token in _NO_SPACE_AFTER or (lang == "en" and token in {"«", "$"}):
            glue_next = True
        if lang == "fr" and token.endswith("'") and len(token) > 1:
            glue_next = True  # elision: "t'" + "aime"
        out += token if glue else " " + token
    for i, char in enumerate(out):
        if char.isalpha():
            return out[:i] + char.upper() + out[i + 1 :]
    return out
