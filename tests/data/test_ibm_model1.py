"""IBM Model 1 against a direct float64 transcription of Brown et al. (1993) eqs. 15–17."""

import itertools
import math
from collections import defaultdict

import pytest

from attnkit.data import IBMModel1
from attnkit.data.ibm_model1 import NULL

# Koehn (2010), "Statistical Machine Translation", §4.4 toy corpus.
CORPUS = [
    (["das", "haus"], ["the", "house"]),
    (["das", "buch"], ["the", "book"]),
    (["ein", "buch"], ["a", "book"]),
]


def reference_em(pairs, iterations):
    """Loops over words, dicts, float64: t[(f, e)] after `iterations` EM steps from uniform."""
    target_vocabulary = {f for _, target in pairs for f in target}
    t = defaultdict(lambda: 1.0 / len(target_vocabulary))
    for _ in range(iterations):
        count, total = defaultdict(float), defaultdict(float)
        for source, target in pairs:
            source = [NULL, *source]
            for f in target:
                z = sum(t[(f, e)] for e in source)
                for e in source:
                    count[(f, e)] += t[(f, e)] / z
                    total[e] += t[(f, e)] / z
        t = defaultdict(float, {(f, e): c / total[e] for (f, e), c in count.items()})
    return t


def test_one_iteration_by_hand():
    model = IBMModel1().fit(CORPUS, iterations=1)
    # First E-step from uniform t: every target word spreads 1/3 over {NULL, e_1, e_2}.
    # c(the | das) = 1/3 + 1/3, total(das) = 4 * 1/3  ->  t = 1/2.
    assert model.probability("the", "das") == pytest.approx(0.5, abs=1e-15)
    assert model.probability("house", "haus") == pytest.approx(0.5, abs=1e-15)
    # NULL sees all 6 target tokens (total 2); "book" twice -> (2/3) / 2.
    assert model.probability("book", NULL) == pytest.approx(1 / 3, abs=1e-15)
    assert model.probability("a", "das") == 0.0  # never co-occur


@pytest.mark.parametrize("iterations", [0, 1, 2, 5])
def test_table_matches_reference_em(iterations):
    pairs = [*CORPUS, (["das", "haus", "ist", "klein"], ["the", "house", "is", "small"]),
             (["klein", "ist", "das", "haus", "haus"], ["the", "house", "is", "small", "the"])]  # fmt: skip
    model = IBMModel1().fit(pairs, iterations=iterations)
    reference = reference_em(pairs, iterations)
    for source, target in pairs:
        for e in [NULL, *source]:
            for f in target:
                assert model.probability(f, e) == pytest.approx(reference[(f, e)], rel=1e-12)


def brute_force_viterbi(model, source, target):
    """Argmax over all (l+1)^m alignments of Π_j t(f_j | e_{a_j}) (eq. 4), NULL = no link."""
    words = [NULL, *source]
    best = max(
        itertools.product(range(len(words)), repeat=len(target)),
        key=lambda a: math.prod(
            model.probability(f, words[i]) for f, i in zip(target, a, strict=True)
        ),
    )
    return frozenset((i - 1, j) for j, i in enumerate(best) if i > 0)


def test_recovers_the_obvious_alignment():
    model = IBMModel1().fit(CORPUS, iterations=10)
    assert model.align(["das", "haus"], ["the", "house"]) == {(0, 0), (1, 1)}
    assert model.align(["das", "buch"], ["the", "book"]) == {(0, 0), (1, 1)}
    assert model.align(["ein", "buch"], ["a", "book"]) == {(0, 0), (1, 1)}
    # Word order does not matter to Model 1; unknown words get no link.
    assert model.align(["buch", "das"], ["the", "book", "zzz"]) == {(1, 0), (0, 1)}
    for source, target in [*CORPUS, (["das", "buch", "haus"], ["the", "house", "book"])]:
        assert model.align(source, target) == brute_force_viterbi(model, source, target)


def test_bad_input():
    with pytest.raises(ValueError, match="iterations must be an int >= 0, got -1"):
        IBMModel1().fit(CORPUS, iterations=-1)
    with pytest.raises(TypeError, match="not str"):
        IBMModel1().fit([("das haus", "the house")])
    with pytest.raises(ValueError, match="at least one pair"):
        IBMModel1().fit([([], ["a"])])
    with pytest.raises(RuntimeError, match="not fitted"):
        IBMModel1().align(["a"], ["b"])
