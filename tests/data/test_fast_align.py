"""fast_align (Dyer et al. 2013) against brute-force sums and a loop-by-loop float64 transcription
of the model and its EM with tension steps, written from the paper's formulas."""

import math
from collections import defaultdict

import numpy as np
import pytest
from scipy.special import digamma

from attnkit.data import FastAlign, symmetrize, transpose_links
from attnkit.data.fast_align import diagonal_normalizer, diagonal_prior
from attnkit.data.ibm_model1 import NULL

CORPUS = [
    (["das", "haus"], ["the", "house"]),
    (["das", "buch"], ["the", "book"]),
    (["ein", "buch"], ["a", "book"]),
    (["das", "haus", "ist", "klein"], ["the", "house", "is", "small"]),
    (["klein", "ist", "das", "buch"], ["small", "is", "the", "book"]),
    (["ein", "haus", "ist", "klein"], ["a", "house", "is", "small"]),
]


def h(i, j, m, n):
    return -abs(i / m - j / n)


def brute_prior(i, m, n, tension, p0):
    """δ(0..n | i, m, n) as a list, Z summed term by term."""
    z = sum(math.exp(tension * h(i, j, m, n)) for j in range(1, n + 1))
    return [p0] + [(1 - p0) * math.exp(tension * h(i, j, m, n)) / z for j in range(1, n + 1)]


def reference_fit(pairs, iterations, p0=0.08, tension=4.0, optimize=True, alpha=None):
    """Dicts and loops: θ[(f, e)] and λ after `iterations` rounds of E-step, 8 tension steps on
    ∂Q/∂λ = Σ Σ_{j≥1} q_j (h_j - E_δ[h]) / #tokens (rate 20, clamp [0.1, 14]), M-step."""
    target_vocabulary = {f for _, target in pairs for f in target}
    theta = defaultdict(lambda: 1.0 / len(target_vocabulary))
    tokens = sum(len(target) for _, target in pairs)
    for _ in range(iterations):
        counts = defaultdict(float)
        empirical, linked = 0.0, defaultdict(float)  # linked[(i, m, n)] = Σ_{j≥1} q_j
        for source, target in pairs:
            source = [NULL, *source]
            m, n = len(target), len(source) - 1
            for i, f in enumerate(target, start=1):
                prior = brute_prior(i, m, n, tension, p0)
                scores = [prior[j] * theta[(f, e)] for j, e in enumerate(source)]
                total = sum(scores)
                for j, e in enumerate(source):
                    q = scores[j] / total
                    counts[(f, e)] += q
                    if j >= 1:
                        empirical += q * h(i, j, m, n)
                        linked[(i, m, n)] += q
        if optimize:
            for _ in range(8):
                model = 0.0
                for (i, m, n), weight in linked.items():
                    prior = brute_prior(i, m, n, tension, 0.0)  # δ restricted to j ≥ 1
                    model += weight * sum(prior[j] * h(i, j, m, n) for j in range(1, n + 1))
                tension = min(max(tension + 20.0 * (empirical - model) / tokens, 0.1), 14.0)
        totals = defaultdict(float)
        for (_f, e), c in counts.items():
            totals[e] += c if alpha is None else c + alpha
        if alpha is None:
            theta = defaultdict(float, {(f, e): c / totals[e] for (f, e), c in counts.items()})
        else:
            theta = defaultdict(
                float,
                {(f, e): math.exp(digamma(c + alpha) - digamma(totals[e]))
                 for (f, e), c in counts.items()},
            )  # fmt: skip
    return theta, tension


@pytest.mark.parametrize("tension", [0.0, 0.1, 1.0, 4.0, 14.0, 40.0])
def test_normalizer_equals_brute_force_sum(tension):
    for m in range(1, 13):
        for n in range(1, 13):
            i = np.arange(1, m + 1)
            closed = diagonal_normalizer(i, m, n, tension)
            brute = [sum(math.exp(tension * h(k, j, m, n)) for j in range(1, n + 1)) for k in i]
            np.testing.assert_allclose(closed, brute, rtol=1e-12)


def test_prior_by_hand():
    # i = 1, m = 2, n = 2: h(1, 1) = 0, h(1, 2) = -1/2; λ = 2 ln 3 -> weights 1 and 1/3, Z = 4/3.
    prior = diagonal_prior(2, 2, 2 * math.log(3), null_probability=0.2)
    np.testing.assert_allclose(prior[0], [0.2, 0.8 * 3 / 4, 0.8 / 4], rtol=1e-14)
    np.testing.assert_allclose(prior.sum(axis=1), 1.0, rtol=1e-14)
    for m, n in [(1, 1), (3, 7), (9, 4)]:
        expected = [brute_prior(i, m, n, 4.0, 0.08) for i in range(1, m + 1)]
        np.testing.assert_allclose(diagonal_prior(m, n, 4.0), expected, rtol=1e-12)


@pytest.mark.parametrize("iterations", [0, 1, 2, 4])
@pytest.mark.parametrize(("optimize", "alpha"), [(False, None), (True, None), (True, 0.01)])
def test_matches_reference_em(iterations, optimize, alpha):
    model = FastAlign(optimize_tension=optimize, alpha=alpha).fit(CORPUS, iterations=iterations)
    theta, tension = reference_fit(CORPUS, iterations, optimize=optimize, alpha=alpha)
    assert model.tension == pytest.approx(tension, rel=1e-10)
    for source, target in CORPUS:
        for e in [NULL, *source]:
            for f in target:
                assert model.probability(f, e) == pytest.approx(theta[(f, e)], rel=1e-9)


def test_em_converges_to_the_obvious_alignment():
    translation = {"the": "das", "house": "haus", "book": "buch", "a": "ein", "is": "ist",
                   "small": "klein"}  # fmt: skip
    model = FastAlign().fit(CORPUS, iterations=10)
    for source, target in CORPUS:
        expected = {(source.index(translation[word]), j) for j, word in enumerate(target)}
        assert model.align(source, target) == expected


def test_likelihood_never_decreases_under_em():
    model = FastAlign(optimize_tension=False).fit(CORPUS, iterations=8)
    steps = np.diff(model.log_likelihoods)
    assert np.all(steps >= -1e-12), model.log_likelihoods


def test_diagonal_prior_breaks_ties_the_lexical_table_cannot():
    # Repeated words: θ cannot tell the "x" apart (Model 1 links every "y" to the same word or
    # NULL); the diagonal prior links them one to one.
    pairs = [(["x", "x"], ["y", "y"]), (["x", "x", "x"], ["y", "y", "y"])]
    assert FastAlign().fit(pairs).align(["x", "x", "x"], ["y", "y", "y"]) == {
        (0, 0), (1, 1), (2, 2)
    }  # fmt: skip


def test_tension_rises_on_monotone_data():
    words = [f"w{k}" for k in range(6)]
    monotone = [(words[:n], [w.upper() for w in words[:n]]) for n in range(2, 7)] * 3
    assert FastAlign(tension=4.0).fit(monotone).tension > 4.0
    assert FastAlign(tension=4.0, optimize_tension=False).fit(monotone).tension == 4.0


def test_both_directions_symmetrized():
    forward = FastAlign().fit(CORPUS, iterations=10)
    backward = FastAlign().fit([(f, e) for e, f in CORPUS], iterations=10)
    source, target = ["klein", "ist", "das", "buch"], ["small", "is", "the", "book"]
    a = forward.align(source, target)
    b = transpose_links(backward.align(target, source))
    obvious = {(0, 0), (1, 1), (2, 2), (3, 3)}
    assert symmetrize(a, b, "intersection") == obvious
    assert symmetrize(a, b, "grow-diag-final-and") == obvious
    assert symmetrize(a, b, "union") == a | b


def test_unknown_words_get_no_link():
    model = FastAlign().fit(CORPUS[:2])
    assert model.align(["das", "unbekannt"], ["the", "mystery"]) == {(0, 0)}
    assert model.probability("mystery", "das") == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"null_probability": 1.0}, "null_probability"), ({"tension": 0.0}, "tension"),
     ({"tension": float("nan")}, "tension"), ({"alpha": 0.0}, "alpha")],
)  # fmt: skip
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FastAlign(**kwargs)


def test_bad_input():
    with pytest.raises(ValueError, match="iterations"):
        FastAlign().fit(CORPUS, iterations=-1)
    with pytest.raises(TypeError, match="str"):
        FastAlign().fit([("das haus", "the house")])
    with pytest.raises(ValueError, match="non-empty"):
        FastAlign().fit([([], ["a"])])
    with pytest.raises(RuntimeError, match="fit"):
        FastAlign().align(["a"], ["b"])
    with pytest.raises(ValueError, match="1 <= i <= m"):
        diagonal_normalizer(0, 3, 3, 4.0)
