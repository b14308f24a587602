"""The bundled hand-aligned Tatoeba gold: it parses, has 50 held-out pairs in the demo's
tokenisation, and every link lies inside its sentence."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from attnkit.data import load_tatoeba_gold, tokenize
from attnkit.data.tatoeba import read_tatoeba_pairs, split_of

LINK = re.compile(r"^(\d+)([-?])(\d+)$")


def _files() -> tuple[list[str], list[str]]:
    package = resources.files("attnkit.data")
    return (
        package.joinpath("tatoeba_gold.tsv").read_text(encoding="utf-8").splitlines(),
        package.joinpath("tatoeba_gold.pharaoh").read_text(encoding="utf-8").splitlines(),
    )


def test_the_files_have_50_lines_of_pairs_and_pharaoh_links_inside_the_sentences() -> None:
    sentences, links = _files()
    assert len(sentences) == len(links) == 50
    for pair, line in zip(sentences, links, strict=True):
        english, french = pair.split("\t")
        n, m = len(tokenize(english, "en")), len(tokenize(french, "fr"))
        tokens = line.split()
        assert tokens, f"no links for {pair!r}"
        for token in tokens:
            match = LINK.match(token)
            assert match, token
            i, j = int(match[1]), int(match[3])
            assert 0 <= i < n and 0 <= j < m, (pair, token, n, m)
        assert len(set(tokens)) == len(tokens)


def test_the_loader_gives_examples_with_sure_and_possible_links() -> None:
    gold = load_tatoeba_gold()
    sentences, links = _files()
    assert len(gold) == 50
    for example, pair, line in zip(gold, sentences, links, strict=True):
        english, french = pair.split("\t")
        assert example.source == tuple(tokenize(english, "en"))
        assert example.target == tuple(tokenize(french, "fr"))
        sure = {
            (int(a), int(b))
            for a, s, b in (LINK.match(t).groups() for t in line.split())
            if s == "-"
        }
        every = {(int(a), int(b)) for a, _, b in (LINK.match(t).groups() for t in line.split())}
        assert example.sure == sure and example.possible == every
        assert example.sure <= example.possible and example.links is None
    # a hand-checked line: "My husband is lazy." / "Mon mari est paresseux."
    assert gold[2].sure == {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)}
    # and one with possible links: "I got sunburned." / "J'ai pris un coup de soleil."
    assert gold[5].source == ("i", "got", "sunburned", ".")
    assert gold[5].possible - gold[5].sure == {(1, 1), (2, 3), (2, 5)}


def test_the_pairs_are_the_documented_held_out_test_sentences() -> None:
    """Unchanged bundled pairs of the test split, chosen by the documented rule (the first 50
    distinct English sentences by sha256, each with its first French translation)."""
    sentences, _ = _files()
    first: dict[str, str] = {}
    for english, french in read_tatoeba_pairs():
        if split_of(english) == "test":
            first.setdefault(english, french)
    chosen = sorted(first, key=lambda e: hashlib.sha256(e.encode("utf-8")).hexdigest())[:50]
    assert sentences == [f"{e}\t{first[e]}" for e in chosen]
    assert all(split_of(pair.split("\t")[0]) == "test" for pair in sentences)


def test_making_and_licence_are_documented_and_shipped() -> None:
    text = resources.files("attnkit.data").joinpath("TATOEBA_GOLD.md").read_text("utf-8")
    for needle in (
        "CC-BY 2.0 FR",
        "www.manythings.org/anki and tatoeba.org",
        "one annotator",
        "2026-11-24",
        "Och & Ney",
    ):
        assert needle in text
