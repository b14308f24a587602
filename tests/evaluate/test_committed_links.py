"""The predicted links committed in ``docs/results/``, scored against the
Hansards gold's test part (sentences 101–447) twice: by attnkit's AER and by Och & Ney's formula
written out here on the raw files; both must give the AER docs/results.md states. Skipped when
the Hansards data is absent (a clean clone)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnkit.data.pharaoh import parse_pharaoh
from attnkit.evaluate import corpus_alignment_error_rate

ROOT = Path(__file__).resolve().parents[2]
GOLD = Path("/work/shared/data/hansards-en-fr/gold")
# config → its test AER as docs/results.md reports it (3 decimals)
STATED = {"hansards-transformer-alignment-head": 0.181}
FIRST, LAST = 101, 447  # the test part, 1-based gold line numbers
LINK = re.compile(r"^(\d+)-(\d+)$")

real_data = pytest.mark.skipif(not GOLD.is_dir(), reason=f"Hansards gold not present at {GOLD}")


def test_every_committed_file_is_listed():
    committed = {
        p.name.removesuffix(".test.pharaoh") for p in (ROOT / "docs/results").glob("*.test.pharaoh")
    }
    assert committed == set(STATED)


@real_data
@pytest.mark.parametrize("config", sorted(STATED))
def test_committed_links_score_the_stated_aer(config):
    lines = (ROOT / "docs/results" / f"{config}.test.pharaoh").read_text().split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == LAST - FIRST + 1  # 347 lines, newline-ended
    lines = lines[:-1]
    english = (GOLD / "test.e").read_text(encoding="utf-8").splitlines()[FIRST - 1 : LAST]
    french = (GOLD / "test.f").read_text(encoding="utf-8").splitlines()[FIRST - 1 : LAST]
    gold = (GOLD / "test.pharaoh").read_text(encoding="utf-8").splitlines()[FIRST - 1 : LAST]
    a_and_s = a_and_p = a_size = s_size = 0
    predicted_all, sure_all, possible_all = [], [], []
    for line, e, f, g in zip(lines, english, french, gold, strict=True):
        predicted = set()
        for token in line.split():
            match = LINK.match(token)
            assert match, f"not an i-j link: {token!r}"
            i, j = int(match[1]), int(match[2])
            assert i < len(e.split()) and j < len(f.split())  # English first, French second
            predicted.add((i, j))
        sure, possible = set(), set()
        for token in g.split():
            sep = "-" if "-" in token else "?"
            i, j = (int(x) for x in token.split(sep))
            possible.add((i, j))
            if sep == "-":
                sure.add((i, j))
        a_and_s += len(predicted & sure)
        a_and_p += len(predicted & possible)
        a_size += len(predicted)
        s_size += len(sure)
        predicted_all.append(predicted)
        sure_all.append(sure)
        possible_all.append(possible)
    by_formula = 1.0 - (a_and_s + a_and_p) / (a_size + s_size)
    by_attnkit = corpus_alignment_error_rate(predicted_all, sure_all, possible_all)
    assert by_attnkit == pytest.approx(by_formula, abs=1e-12)
    assert round(by_formula, 3) == STATED[config]
    # attnkit's own reading of the gold file agrees with the one above
    assert [parse_pharaoh(g)[0] for g in gold] == sure_all
