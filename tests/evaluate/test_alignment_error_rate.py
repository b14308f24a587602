"""AER (Och & Ney 2003) on hand-computed examples and the Hansards gold standard."""

from pathlib import Path

import pytest
import torch

from attnkit.evaluate import (
    alignment_error_rate,
    corpus_alignment_error_rate,
    links_from_weights,
    parse_pharaoh,
)

HANSARDS = Path("/work/shared/data/hansards-en-fr/gold")


def test_aer_by_hand():
    # A = {(0,0), (1,1), (2,1)}, S = {(0,0)}, P = S ∪ {(1,1)}:
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 1 → AER = 1 - 3/4
    assert alignment_error_rate({(0, 0), (1, 1), (2, 1)}, {(0, 0)}, {(1, 1)}) == pytest.approx(0.25)
    # the same gold as one Pharaoh line: i-j sure, i?j possible
    assert alignment_error_rate("0-0 1-1 2-1", "0-0 1?1") == pytest.approx(0.25)
    assert alignment_error_rate({(0, 0)}, {(0, 0)}) == 0.0
    assert alignment_error_rate({(5, 5)}, {(0, 0)}) == 1.0


def test_matrix_inputs_are_target_by_source():
    # weights [target, source]: target 0 attends source 1, target 1 attends source 0
    weights = torch.tensor([[0.2, 0.7, 0.1], [0.6, 0.3, 0.1]])
    assert links_from_weights(weights) == {(1, 0), (0, 1)}
    assert links_from_weights(weights, method="threshold", threshold=0.3) == {
        (1, 0),
        (0, 1),
        (1, 1),
    }
    gold = torch.tensor([[0, 1, 0], [1, 0, 0]])
    assert alignment_error_rate(weights > 0.5, gold) == 0.0
    with pytest.raises(ValueError, match="'mutual_argmax' or 'threshold', got 'max'"):
        links_from_weights(weights, method="max")


def test_mutual_argmax_keeps_the_links_both_directions_agree_on():
    # [target, source]. Row argmax: t0->s0, t1->s0, t2->s2, t3->s2 (a zero row t4 links nothing).
    # Column argmax: s0->t1 (0.8 > 0.5), s1->t0 (0.4 is its largest), s2->t2 (0.7 > 0.6).
    weights = torch.tensor(
        [[0.5, 0.4, 0.1], [0.8, 0.1, 0.1], [0.2, 0.1, 0.7], [0.1, 0.3, 0.6], [0.0, 0.0, 0.0]]
    )
    assert links_from_weights(weights) == {(0, 0), (0, 1), (2, 2), (2, 3)}
    # only t1-s0 and t2-s2 are the largest of their row and of their column
    assert links_from_weights(weights, method="mutual_argmax") == {(0, 1), (2, 2)}
    # a permutation matrix: every link is mutual
    perm = torch.eye(4)[[2, 0, 3, 1]]
    assert links_from_weights(perm, method="mutual_argmax") == links_from_weights(perm)


def test_parse_pharaoh_and_bad_input():
    sure, possible = parse_pharaoh("0-0 1?2 3p4")
    assert sure == {(0, 0)} and possible == {(0, 0), (1, 2), (3, 4)}
    with pytest.raises(ValueError, match="not a Pharaoh link"):
        parse_pharaoh("0-0 1:2")
    with pytest.raises(ValueError, match="undefined"):
        alignment_error_rate(set(), set())


def test_corpus_aer_sums_counts():
    # sentence 1: |A∩S|=1, |A∩P|=1, |A|=1, |S|=1; sentence 2: 0, 0, 1, 2 → 1 - 2/5
    got = corpus_alignment_error_rate(["0-0", "0-1"], ["0-0", "1-1 2-2"])
    assert got == pytest.approx(1 - 2 / 5)


@pytest.mark.skipif(not (HANSARDS / "trial.pharaoh").exists(), reason="Hansards gold not present")
def test_hansards_gold():
    pharaoh = (HANSARDS / "trial.pharaoh").read_text().splitlines()[:5]
    # the original NAACL file: "SENT EN FR S|P", 1-based
    links: dict[int, tuple[set, set]] = {}
    for line in (HANSARDS / "trial.wa.nonullalign").read_text().splitlines():
        sent, en, fr, kind = line.split()
        sure, possible = links.setdefault(int(sent), (set(), set()))
        (sure if kind == "S" else possible).add((int(en) - 1, int(fr) - 1))
    for i, line in enumerate(pharaoh, start=1):
        sure, possible = links[i]
        # S ⊆ A ⊆ P gives AER 0: the sure links and all links alike
        assert alignment_error_rate(sure, line) == 0.0
        assert alignment_error_rate(sure | possible, line) == 0.0
        # the diagonal, counted by hand from the NAACL file
        n = 1 + max(e for e, _ in sure | possible)
        diagonal = {(k, k) for k in range(n)}
        a_s, a_p = len(diagonal & sure), len(diagonal & (sure | possible))
        expected = 1 - (a_s + a_p) / (len(diagonal) + len(sure))
        assert alignment_error_rate(diagonal, line) == pytest.approx(expected)
