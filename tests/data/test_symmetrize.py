"""Symmetrization of two directions' links against examples worked by hand (Koehn et al. 2003's
definitions, atools' visiting order) and the chain intersection ⊆ gd ⊆ gdfa ⊆ gdf ⊆ union."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data import symmetrize, transpose_links
from attnkit.data.symmetrize import (
    SYMMETRIZATIONS,
    grow_diag,
    grow_diag_final,
    grow_diag_final_and,
    intersection,
    union,
)

# 4 English words (rows e) x 5 French words (columns f), links (e, f).
#   forward  (en→fr model: each French word -> one English word): f0->e0 f1->e1 f2->e2 f3->e3 f4->e0
#   backward (fr→en model: each English word -> one French word): e0->f0 e1->f1 e2->f3 e3->f3
FORWARD = {(0, 0), (1, 1), (2, 2), (3, 3), (0, 4)}
BACKWARD = {(0, 0), (1, 1), (2, 3), (3, 3)}


def test_hand_worked_4x5():
    assert intersection(FORWARD, BACKWARD) == {(0, 0), (1, 1), (3, 3)}
    assert union(FORWARD, BACKWARD) == {(0, 0), (1, 1), (2, 2), (3, 3), (0, 4), (2, 3)}
    # grow-diag visits the union's other points in order (0,4), (2,2), (2,3):
    #  (0,4): no chosen neighbour among its 8 cells -> skipped;
    #  (2,2): e2 unaligned, diagonal neighbour (1,1) chosen -> added;
    #  (2,3): e2 and f3 both aligned now -> skipped. A second sweep adds nothing.
    assert grow_diag(FORWARD, BACKWARD) == {(0, 0), (1, 1), (2, 2), (3, 3)}
    # final(forward): (0,4) has f4 unaligned -> grow-diag-final adds it; final-and needs e0
    # unaligned too -> not added. final(backward): (2,3) has both words aligned -> never added.
    assert grow_diag_final(FORWARD, BACKWARD) == {(0, 0), (1, 1), (2, 2), (3, 3), (0, 4)}
    assert grow_diag_final_and(FORWARD, BACKWARD) == {(0, 0), (1, 1), (2, 2), (3, 3)}


def test_final_and_adds_a_point_with_both_words_unaligned():
    # 3 x 4: (2,3) has no chosen neighbour, so grow-diag leaves it; e2 and f3 are unaligned.
    forward, backward = {(0, 0), (2, 3)}, {(0, 0)}
    assert grow_diag(forward, backward) == {(0, 0)}
    assert grow_diag_final_and(forward, backward) == {(0, 0), (2, 3)}
    assert grow_diag_final(forward, backward) == {(0, 0), (2, 3)}


def test_growth_repeats_sweeps_until_nothing_is_added():
    # Intersection = the corner (3,0); the union adds the anti-diagonal (2,1), (1,2), (0,3).
    # Sweep 1 visits (0,3), (1,2), (2,1) in that order: only (2,1) touches a chosen point.
    # Sweep 2 adds (1,2) (next to (2,1)), sweep 3 adds (0,3).
    forward, backward = {(3, 0), (2, 1), (1, 2), (0, 3)}, {(3, 0)}
    assert grow_diag(forward, backward) == forward
    # Growth stops at a point whose words are both aligned: (1,1) joins (0,0) and (2,2)...
    # ...but (1,2) is then skipped, e1 and f2 being aligned already.
    assert grow_diag({(0, 0), (2, 2), (1, 1), (1, 2)}, {(0, 0), (2, 2)}) == {(0, 0), (1, 1), (2, 2)}


def test_symmetrize_dispatch_and_transpose():
    assert symmetrize(FORWARD, BACKWARD, "grow-diag-final") == grow_diag_final(FORWARD, BACKWARD)
    assert transpose_links({(0, 2), (1, 3)}) == {(2, 0), (3, 1)}
    assert set(SYMMETRIZATIONS) == {
        "intersection",
        "union",
        "grow-diag",
        "grow-diag-final",
        "grow-diag-final-and",
    }


@pytest.mark.parametrize(
    ("links", "error"),
    [("0-0 1-1", TypeError), ([(0, 0, 1)], ValueError), ([(0, -1)], ValueError),
     ([(0.5, 1)], TypeError)],
)  # fmt: skip
def test_bad_links(links, error):
    with pytest.raises(error):
        symmetrize(links, {(0, 0)})


def test_unknown_method():
    with pytest.raises(ValueError, match="grow-diag-final-and"):
        symmetrize(FORWARD, BACKWARD, "grow")


def directional(source_len: int, target_len: int):
    """Links of a directional aligner: each target word to at most one source word."""
    return st.lists(
        st.one_of(st.none(), st.integers(0, source_len - 1)), min_size=target_len,
        max_size=target_len,
    ).map(lambda row: {(s, t) for t, s in enumerate(row) if s is not None})  # fmt: skip


@st.composite
def two_directions(draw):
    e, f = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    forward = draw(directional(e, f))  # (e, f): each French word -> <= 1 English word
    backward = transpose_links(draw(directional(f, e)))  # each English word -> <= 1 French
    return forward, backward


@settings(max_examples=300, deadline=None)
@given(two_directions())
def test_chain_of_inclusions(pair):
    forward, backward = pair
    inter, gd = intersection(forward, backward), grow_diag(forward, backward)
    gdfa, gdf = grow_diag_final_and(forward, backward), grow_diag_final(forward, backward)
    assert inter <= gd <= gdfa <= union(forward, backward)
    assert gd <= gdf <= union(forward, backward)
    # grow-diag-final leaves no point of either direction with an unaligned word.
    english, french = {e for e, _ in gdf}, {f for _, f in gdf}
    assert all(e in english and f in french for e, f in forward | backward)


def test_final_and_is_not_inside_final():
    """grow-diag-final-and is not always inside grow-diag-final (hypothesis found this pair):
    the final step walks the directions in order, and the points "final" adds early (one word
    unaligned suffices) can align both words of a later point that "final-and" adds."""
    forward, backward = {(5, 1), (0, 5), (0, 0)}, {(0, 0), (1, 1), (5, 5)}
    assert grow_diag(forward, backward) == {(0, 0), (1, 1)}
    assert grow_diag_final_and(forward, backward) == {(0, 0), (1, 1), (5, 5)}
    assert grow_diag_final(forward, backward) == {(0, 0), (1, 1), (5, 1), (0, 5)}


@settings(max_examples=100, deadline=None)
@given(two_directions())
def test_agreeing_directions_are_a_fixed_point(pair):
    forward, _ = pair
    for method in SYMMETRIZATIONS:
        assert symmetrize(forward, forward, method) == forward
