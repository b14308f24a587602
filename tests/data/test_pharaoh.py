"""Pharaoh alignment lines: read and written in the data layer, re-exported by evaluate."""

from __future__ import annotations

import pytest

from attnkit.data.pharaoh import format_pharaoh, parse_pharaoh


def test_parse_sure_and_possible_links():
    sure, possible = parse_pharaoh("0-0 1?2 3p4 2-1")
    assert sure == {(0, 0), (2, 1)}
    assert possible == {(0, 0), (1, 2), (3, 4), (2, 1)}
    assert parse_pharaoh("") == (set(), set())


def test_format_is_sorted_sure_links_that_parse_back():
    links = {(3, 0), (0, 2), (0, 1), (12, 7)}
    line = format_pharaoh(links)
    assert line == "0-1 0-2 3-0 12-7"
    assert parse_pharaoh(line) == (links, links)
    assert format_pharaoh([]) == ""


@pytest.mark.parametrize("line", ["0-0 1:2", "a-1", "1-", "0"])
def test_bad_links_name_the_token(line):
    with pytest.raises(ValueError, match="not a Pharaoh link"):
        parse_pharaoh(line)


def test_negative_positions_are_refused():
    with pytest.raises(ValueError, match=r"non-negative positions, got \(-1, 2\)"):
        format_pharaoh([(-1, 2)])


def test_evaluate_re_exports_the_same_function():
    import attnkit.evaluate
    import attnkit.evaluate.alignment

    assert attnkit.evaluate.alignment.parse_pharaoh is parse_pharaoh
    assert attnkit.evaluate.parse_pharaoh is parse_pharaoh
