"""Hansards loader: gold tokenisation imitated on the raw training text, gold links kept aligned.

Most tests build tiny files in the real formats in a temporary directory; the tests on the real
data skip when /work/shared/data is absent (e.g. CI on a clean clone).
"""

from pathlib import Path

import pytest

from attnkit.data.hansards import (
    load_hansards,
    load_hansards_gold,
    normalize_gold_token,
    normalize_training,
    strip_accents,
)

REAL = Path("/work/shared/data/hansards-en-fr")


@pytest.mark.parametrize(
    ("text", "lang", "expected"),
    [
        ("C'est l'avis du depute.", "fr", ["ce", "est", "le", "avis", "de", "le", "depute", "."]),
        ("Je n'ai pas d'objection aux propositions des deputes.", "fr",
         ["je", "ne", "ai", "pas", "de", "objection", "a", "les", "propositions", "de", "les",
          "deputes", "."]),
        ("Au nom de M. Caccia, qu'il soit au-dessus de tout.", "fr",
         ["a", "le", "nom", "de", "m.", "caccia", ",", "que", "il", "soit", "au", "-", "dessus",
          "de", "tout", "."]),
        ("La main-d'oeuvre de Riviere-du-Loup", "fr",
         ["la", "main", "-", "de", "oeuvre", "de", "riviere", "-", "du", "-", "loup"]),
        ("Aujourd'hui, peut-etre jusqu'a lundi.", "fr",
         ["aujourd'", "hui", ",", "peut", "-", "etre", "jusque", "a", "lundi", "."]),
        ("Le président d'élection", "fr", ["le", "president", "de", "election"]),
        ("Mr. Speaker, the hon. member's federal-provincial motion.", "en",
         ["mr.", "speaker", ",", "the", "hon.", "member", "'s", "federal", "-", "provincial",
          "motion", "."]),
        ("It costs $6.42 (1997).", "en", ["it", "costs", "$", "6.42", "(", "1997", ")", "."]),
    ],
)  # fmt: skip
def test_normalize_training_imitates_the_gold(text, lang, expected):
    assert normalize_training(text, lang) == expected


def test_gold_tokens_only_lose_case_and_accents():
    assert [normalize_gold_token(t) for t in "Évidemment , le Orateur aujourd' hui".split()] == [
        "evidemment", ",", "le", "orateur", "aujourd'", "hui",
    ]  # fmt: skip
    assert strip_accents("à côté de l'œuvre") == "a cote de l'oeuvre"


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + " \n" for line in lines), encoding="utf-8")


@pytest.fixture
def tiny_root(tmp_path):
    # 103 gold pairs: 100 "valid" + 3 "test"; same formats as the real files.
    english = ["oh , oh !"] * 100 + ["I agree .", "the Minister 's report .", "2 ."]
    french = ["oh , oh !"] * 100 + ["je suis de accord .", "le rapport de le ministre .", "2 ."]
    links = ["0-0 1-1 2-2 3-3"] * 100 + [
        "0-0 1-1 1?2 1?3 2-4",
        "0-0 1?2 1?3 1-4 2?2 3-1 4-5",
        "0-0 1-1",
    ]
    _write(tmp_path / "gold" / "test.e", english)
    _write(tmp_path / "gold" / "test.f", french)
    (tmp_path / "gold" / "test.pharaoh").write_text("\n".join(links) + "\n", encoding="utf-8")
    _write(
        tmp_path / "train-csc401-subset" / "train.e",
        ["EDITED HANSARD * NUMBER 1", "I agree.", "", "One two three four five six."],
    )
    _write(
        tmp_path / "train-csc401-subset" / "train.f",
        ["HANSARD REVISE * NUMERO 1", "Je suis d'accord.", "Vide", "Un deux trois."],
    )
    return tmp_path  # fmt: skip


def test_load_from_files(tiny_root):
    data = load_hansards(tiny_root)
    assert [len(data[s]) for s in ("train", "valid", "test")] == [3, 100, 3]
    assert data["train"][1].source == ("i", "agree", ".")
    assert data["train"][1].target == ("je", "suis", "de", "accord", ".")
    assert data["train"][0].source == ("edited", "hansard", "*", "number", "1")
    test = data["test"][1]
    assert test.source == ("the", "minister", "'s", "report", ".")
    assert test.target == ("le", "rapport", "de", "le", "ministre", ".")
    assert test.sure == {(0, 0), (1, 4), (3, 1), (4, 5)}
    assert test.possible == test.sure | {(1, 2), (1, 3), (2, 2)}
    assert test.links is None
    assert data["valid"][0].sure == {(0, 0), (1, 1), (2, 2), (3, 3)}


def test_max_length_and_max_pairs(tiny_root):
    data = load_hansards(tiny_root, max_length=5)
    assert [e.source for e in data["train"]] == [
        ("edited", "hansard", "*", "number", "1"), ("i", "agree", "."),
    ]  # fmt: skip
    assert len(data["test"]) == 3  # the gold is never filtered
    assert len(load_hansards(tiny_root, max_pairs=1)["train"]) == 1
    with pytest.raises(ValueError, match="max_length must be None or an int >= 1, got 0"):
        load_hansards(tiny_root, max_length=0)


def test_mismatched_files_are_reported(tiny_root):
    _write(tiny_root / "gold" / "test.f", ["2 ."])
    with pytest.raises(ValueError, match=r"test.e 103, test.f 1, test.pharaoh 103"):
        load_hansards_gold(tiny_root)
    with pytest.raises(FileNotFoundError, match="Hansards file not found"):
        load_hansards(tiny_root / "missing")


real_data = pytest.mark.skipif(not REAL.is_dir(), reason=f"Hansards data not present at {REAL}")


@real_data
def test_real_gold_counts():
    gold = load_hansards_gold(REAL)
    english = (REAL / "gold" / "test.e").read_text(encoding="utf-8").splitlines()
    french = (REAL / "gold" / "test.f").read_text(encoding="utf-8").splitlines()
    assert len(gold) == len(english) == len(french) == 447
    assert [len(e.source) for e in gold] == [len(line.split()) for line in english]
    assert [len(e.target) for e in gold] == [len(line.split()) for line in french]
    assert sum(len(e.source) for e in gold) == 7_020 and sum(len(e.target) for e in gold) == 7_761
    # README: 4,038 sure and 13,400 possible-only links.
    assert sum(len(e.sure) for e in gold) == 4_038
    assert sum(len(e.possible - e.sure) for e in gold) == 13_400
    data = load_hansards(REAL, max_pairs=1)
    assert data["valid"] == gold[:100] and data["test"] == gold[100:]


@real_data
def test_real_training_text_is_in_the_gold_form():
    train = load_hansards(REAL, max_pairs=3000)["train"]
    assert len(train) == 3000
    tokens = {t for e in train for t in e.target}
    assert not tokens & {"l'", "d'", "qu'", "n'", "c'", "j'", "s'"}
    for e in train:  # "du"/"des" survive only inside hyphenated names (Rivière-du-Loup)
        for j, t in enumerate(e.target):
            if t in {"du", "des", "au", "aux"}:
                assert "-" in e.target[max(j - 1, 0) : j + 2], e.target
    assert {"de", "le", "les", "que", "ne", "ce"} <= tokens
    assert all(t == strip_accents(t.lower()) for e in train for t in (*e.source, *e.target))


def test_the_french_to_english_direction(tiny_root):
    """``data.reverse``: the same pairs the other way, gold links transposed (i-j → j-i)."""
    from attnkit.config import ConfigError, validate
    from attnkit.tasks.translation import load_examples

    train = {"steps": 1}
    data = {"corpus": "hansards", "root": str(tiny_root), "reverse": True}
    raw = {"name": "r", "data": data, "model": {"kind": "rnn"}, "train": train}
    data = load_examples(validate(raw))
    forward = load_hansards(tiny_root)
    assert [len(data[s]) for s in ("train", "valid", "test")] == [3, 100, 3]
    test = data["test"][1]
    assert test.source == ("le", "rapport", "de", "le", "ministre", ".")
    assert test.target == ("the", "minister", "'s", "report", ".")
    # English–French gold "0-0 1?2 1?3 1-4 2?2 3-1 4-5", read French–English
    assert test.sure == {(0, 0), (4, 1), (1, 3), (5, 4)}
    assert test.possible == test.sure | {(2, 1), (3, 1), (2, 2)}
    assert data["train"][1].source == forward["train"][1].target
    with pytest.raises(ConfigError, match="reverse: only a translation corpus"):
        validate({**raw, "data": {"corpus": "movie_reviews", "reverse": True}, "model": {"kind": "han"}})
