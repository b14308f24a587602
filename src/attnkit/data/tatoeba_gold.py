"""A small hand-aligned English–French word-alignment gold on Tatoeba test sentences, bundled
with the package (sentences CC-BY 2.0 France; how the links were made: ``TATOEBA_GOLD.md``).

Two files next to this module, one line per sentence pair, in the same order:

- ``tatoeba_gold.tsv``: ``English<TAB>French``, the raw text of 50 pairs of the bundled Tatoeba
  release (:func:`attnkit.data.tatoeba.read_tatoeba_pairs`), all from the held-out *test* split
  (:func:`attnkit.data.tatoeba.split_of`), so a model trained on the bundled train split has not
  seen them;
- ``tatoeba_gold.pharaoh``: the links in Pharaoh's format, ``i-j`` *sure* and ``i?j``
  *possible*-only (Och & Ney 2003), ``i`` the 0-based English (source) position and ``j`` the
  0-based French (target) position, in the tokenisation of :func:`attnkit.data.tokenize`
  (``lang="en"`` / ``"fr"``), which is the translation demo's.

Example::

    >>> gold = load_tatoeba_gold()
    >>> len(gold), gold[2].source, gold[2].target
    (50, ('my', 'husband', 'is', 'lazy', '.'), ('mon', 'mari', 'est', 'paresseux', '.'))
    >>> sorted(gold[2].sure)[:2]
    [(0, 0), (1, 1)]
"""

from __future__ import annotations

import functools
from importlib import resources

from attnkit.data.corpus import Example
from attnkit.data.pharaoh import parse_pharaoh
from attnkit.data.tokenize import tokenize

SENTENCES_FILE = "tatoeba_gold.tsv"
LINKS_FILE = "tatoeba_gold.pharaoh"
DOCUMENTATION_FILE = "TATOEBA_GOLD.md"


@functools.cache
def load_tatoeba_gold() -> tuple[Example, ...]:
    """The 50 hand-aligned Tatoeba test pairs, English source → French target, tokenised.

    Returns:
        50 :class:`Example` s with ``sure`` and ``possible`` links ``(english, french)``
        (``links`` is ``None``), in file order. Score predicted links against them with
        :func:`attnkit.evaluate.corpus_alignment_error_rate`.

    Raises:
        ValueError: the two bundled files disagree in length, a line is malformed, or a link
            lies outside its sentence (the files were damaged).
    """
    package = resources.files("attnkit.data")
    sentences = package.joinpath(SENTENCES_FILE).read_text(encoding="utf-8").splitlines()
    links = package.joinpath(LINKS_FILE).read_text(encoding="utf-8").splitlines()
    if len(sentences) != len(links):
        raise ValueError(
            f"{SENTENCES_FILE} has {len(sentences)} lines but {LINKS_FILE} has {len(links)}"
        )
    gold = []
    for number, (pair, line) in enumerate(zip(sentences, links, strict=True), 1):
        fields = pair.split("\t")
        if len(fields) != 2:
            raise ValueError(
                f"{SENTENCES_FILE} line {number}: expected English<TAB>French, got {pair!r}"
            )
        try:
            sure, possible = parse_pharaoh(line)
            gold.append(
                Example(
                    tuple(tokenize(fields[0], "en")),
                    tuple(tokenize(fields[1], "fr")),
                    sure=frozenset(sure),
                    possible=frozenset(possible),
                )
            )
        except ValueError as error:  # not a Pharaoh line, or a link outside the sentence
            raise ValueError(f"{LINKS_FILE} line {number}: {error}") from None
    return tuple(gold)
