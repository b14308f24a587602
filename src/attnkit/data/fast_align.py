"""fast_align: the reparameterized IBM Model 2 of Dyer, Chahuneau & Smith (2013), a statistical
word aligner with a diagonal prior — a better teacher for supervised attention than IBM Model 1.

Model (target ``f = f_1 … f_m``, source ``e = e_1 … e_n`` plus the empty word ``e_0 = NULL``;
``i`` a target position, ``j`` a source position, both 1-based as in the paper)::

    p(f, a | e) = Π_i δ(a_i | i, m, n) · θ(f_i | e_{a_i})

    δ(a_i = j | i, m, n) = p0                                        if j = 0
                         = (1 - p0) · exp(λ h(i, j, m, n)) / Z_λ(i, m, n)   if 1 ≤ j ≤ n

    h(i, j, m, n) = -| i/m - j/n |,    Z_λ(i, m, n) = Σ_{j=1..n} exp(λ h(i, j, m, n))

``p0`` is the null word's probability (fixed, 0.08), ``λ`` the *tension*: how sharply links
concentrate on the diagonal ``i/m = j/n``. ``Z`` is two geometric series (the ``h`` of
consecutive ``j`` on each side of the diagonal differ by ``1/n``), so it has a closed form
(:func:`diagonal_normalizer`).

Training (EM, Dyer et al. §2–3): the E-step gives each link the posterior
``q(a_i = j) ∝ δ(j | i, m, n) θ(f_i | e_j)``; the M-step sets ``θ(f | e)`` to the normalised
expected counts — or, with a symmetric Dirichlet prior ``α`` on each ``θ(· | e)`` (fast_align's
``-v``, variational Bayes), ``θ(f | e) = exp(ψ(c(f, e) + α) - ψ(Σ_f' c(f', e) + α))`` over the
words ``f'`` that co-occur with ``e``. The tension is fit by gradient ascent on the expected
complete-data log-likelihood (fast_align's ``-o``)::

    ∂Q/∂λ = Σ_tokens Σ_{j≥1} q(a_i = j) · (h(i, j, m, n) - ∂ log Z_λ(i, m, n)/∂λ)

with ``∂ log Z/∂λ = E_δ[h]``: after each E-step, 8 steps ``λ += 20 · ∂Q/∂λ / (#target tokens)``,
``λ`` kept in ``[0.1, 14]`` (fast_align's schedule). Two deliberate departures from fast_align's
source: its accumulated feature uses the 0-based target position ``i - 1`` and the model side is
not weighted by the non-null posterior ``1 - q(a_i = 0)``; here both follow the formula above.

Viterbi links: each target word links to ``argmax_j δ(j | i, m, n) θ(f_i | e_j)``; none when
that is ``NULL``.

Implementation: as :mod:`attnkit.data.ibm_model1`, one entry of flat numpy arrays per
(sentence, target position, source position incl. NULL). The prior depends on ``(i, m, n)`` only,
so it is a small table with one row per distinct ``(i, m, n)`` of the corpus, gathered into the
entries; the tension's gradient is computed from the posteriors summed into that table.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import digamma

from attnkit.data.ibm_model1 import NULL, index_pairs

TENSION_STEPS = 8  # gradient steps on λ after each E-step (fast_align)
TENSION_RATE = 20.0  # fast_align's step size, on the gradient averaged over target tokens
TENSION_RANGE = (0.1, 14.0)  # fast_align clamps λ to this interval


def diagonal_feature(i: ArrayLike, j: ArrayLike, m: ArrayLike, n: ArrayLike) -> np.ndarray:
    """``h(i, j, m, n) = -|i/m - j/n|`` (Dyer et al. 2013, §2): 0 on the diagonal, down to -1.

    Args:
        i: target positions, 1-based; ``j``: source positions, 1-based; ``m``, ``n``: target and
            source lengths. Arrays (or ints) that broadcast together.

    Returns:
        float64 array of the broadcast shape.
    """
    i, j, m, n = (np.asarray(x, dtype=np.float64) for x in (i, j, m, n))
    return -np.abs(i / m - j / n)


def _geometric_sum(count: np.ndarray, ratio_log: np.ndarray) -> np.ndarray:
    """``Σ_{k=0}^{count-1} r^k`` with ``r = exp(ratio_log)``, ``ratio_log <= 0``, accurate for
    ``r`` near 1 (expm1) and exact (``count``) at ``r = 1``."""
    safe = np.where(ratio_log == 0, -1.0, ratio_log)
    return np.where(ratio_log == 0, count, np.expm1(count * safe) / np.expm1(safe))


def diagonal_normalizer(i: ArrayLike, m: ArrayLike, n: ArrayLike, tension: float) -> np.ndarray:
    """``Z_λ(i, m, n) = Σ_{j=1..n} exp(λ h(i, j, m, n))`` in closed form (Dyer et al. 2013, §2).

    With ``s = ⌊i n / m⌋`` the source positions ``j ≤ s`` lie below the diagonal and ``j > s``
    above it; on each side ``exp(λ h)`` falls by the factor ``r = exp(-λ/n)`` per step away from
    it, so ``Z = exp(λ h(i, s+1)) · (1 - r^(n-s))/(1 - r) + exp(λ h(i, s)) · (1 - r^s)/(1 - r)``.

    Args:
        i: target positions (1-based); m: target lengths; n: source lengths (without NULL), ints
            or integer arrays that broadcast; every ``1 <= i <= m``, ``n >= 1``.
        tension: ``λ >= 0``.

    Returns:
        float64 array of the broadcast shape.

    Example::

        >>> float(diagonal_normalizer(1, 2, 2, 0.0))   # λ = 0: n terms of exp(0)
        2.0
    """
    i, m, n = (np.asarray(x, dtype=np.int64) for x in (i, m, n))
    if np.any(i < 1) or np.any(i > m) or np.any(n < 1):
        raise ValueError("diagonal_normalizer needs 1 <= i <= m and n >= 1")
    if not np.isfinite(tension) or tension < 0:
        raise ValueError(f"tension must be a finite float >= 0, got {tension!r}")
    below = (i * n) // m  # s = ⌊i n / m⌋, exact in integers
    above = n - below
    ratio_log = np.broadcast_to(-tension / n.astype(np.float64), below.shape)
    top = np.exp(tension * diagonal_feature(i, below + 1, m, n)) * _geometric_sum(above, ratio_log)
    bottom = np.exp(tension * diagonal_feature(i, below, m, n)) * _geometric_sum(below, ratio_log)
    return top + bottom


def diagonal_prior(
    target_length: int, source_length: int, tension: float, null_probability: float = 0.08
) -> np.ndarray:
    """The alignment distribution ``δ(j | i, m, n)`` of every target position of one pair.

    Args:
        target_length: ``m``; source_length: ``n``; tension: ``λ``; null_probability: ``p0``.

    Returns:
        ``[m, n + 1]`` float64: row ``i - 1`` is ``δ(· | i, m, n)``, column 0 the NULL word,
        column ``j`` source position ``j``; rows sum to 1.
    """
    if target_length < 1 or source_length < 1:
        raise ValueError(f"lengths must be >= 1, got m={target_length}, n={source_length}")
    i = np.arange(1, target_length + 1)[:, None]
    j = np.arange(1, source_length + 1)[None, :]
    weights = np.exp(tension * diagonal_feature(i, j, target_length, source_length))
    weights *= (1.0 - null_probability) / diagonal_normalizer(
        i, target_length, source_length, tension
    )
    return np.concatenate([np.full((target_length, 1), null_probability), weights], axis=1)


@functools.lru_cache(maxsize=1024)
def _shared_prior(
    target_length: int, source_length: int, tension: float, null_probability: float
) -> np.ndarray:
    """:func:`diagonal_prior`, kept per sentence shape for :meth:`FastAlign.align`: computing one
    costs more than the rest of a link (measured 53 of about 93 µs a pair). Read-only, since
    every caller shares it; at most 1,024 shapes, so at most 83 MB with 100-word sentences."""
    prior = diagonal_prior(target_length, source_length, tension, null_probability)
    prior.flags.writeable = False
    return prior


class FastAlign:
    """fast_align's reparameterized IBM Model 2: lexical table ``θ(target | source)`` by EM,
    diagonal prior with tension ``λ`` (optionally fit), null probability ``p0``.

    Args:
        null_probability: ``p0`` in ``[0, 1)`` (fast_align: 0.08).
        tension: initial ``λ > 0`` (fast_align: 4).
        optimize_tension: fit ``λ`` by gradient steps after each E-step (fast_align's ``-o``).
        alpha: ``None`` for maximum-likelihood EM; a float ``> 0`` for the symmetric Dirichlet
            prior of variational Bayes (fast_align's ``-v``, ``α = 0.01``).

    Example::

        >>> model = FastAlign().fit([(["das", "haus"], ["the", "house"]), ...], iterations=5)
        >>> model.align(["das", "haus"], ["the", "house"])
        frozenset({(0, 0), (1, 1)})
    """

    def __init__(
        self,
        null_probability: float = 0.08,
        tension: float = 4.0,
        optimize_tension: bool = True,
        alpha: float | None = None,
    ) -> None:
        if not 0.0 <= null_probability < 1.0:
            raise ValueError(f"null_probability must be in [0, 1), got {null_probability!r}")
        if not (np.isfinite(tension) and tension > 0):
            raise ValueError(f"tension must be a finite float > 0, got {tension!r}")
        if alpha is not None and not (np.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be None or a finite float > 0, got {alpha!r}")
        self.null_probability = float(null_probability)
        self.tension = float(tension)
        self.optimize_tension = bool(optimize_tension)
        self.alpha = alpha
        self.log_likelihoods: list[float] = []  # log p(f | e) of the corpus before each M-step
        self.source_ids: dict[str, int] = {NULL: 0}
        self.target_ids: dict[str, int] = {}
        self._keys = np.zeros(0, dtype=np.int64)  # sorted source_id * |V_target| + target_id
        self._probabilities = np.zeros(0, dtype=np.float64)

    def fit(
        self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], iterations: int = 5
    ) -> FastAlign:
        """Run ``iterations`` EM steps on ``(source tokens, target tokens)`` pairs.

        Args:
            pairs: sentence pairs; pairs with an empty side are skipped.
            iterations: E-step + tension steps + M-step rounds (fast_align's ``-I 5`` does 4,
                its fifth pass only writes the links).

        Returns:
            ``self`` (``tension`` holds the fitted ``λ``).
        """
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
            raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
        sources, targets = self._index(pairs)
        target_size = len(self.target_ids)
        source_lengths = np.array([len(s) - 1 for s in sources], dtype=np.int64)  # without NULL
        target_lengths = np.array([len(t) for t in targets], dtype=np.int64)

        # Groups = target tokens (pair, i); a group holds n + 1 entries (NULL, then j = 1..n).
        group_m = np.repeat(target_lengths, target_lengths)
        group_n = np.repeat(source_lengths, target_lengths)
        group_i = np.concatenate([np.arange(1, m + 1) for m in target_lengths])
        sizes = group_n + 1
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        # Distinct (i, m, n): the rows of the prior table.
        longest = int(source_lengths.max())
        shape = (int(target_lengths.max()) + 1, int(target_lengths.max()) + 1, longest + 1)
        cells, group_cell = np.unique(
            np.ravel_multi_index((group_i, group_m, group_n), shape), return_inverse=True
        )
        self._table_i, self._table_m, self._table_n = np.unravel_index(cells, shape)
        width = longest + 1
        entry_position = np.arange(int(sizes.sum())) - np.repeat(starts, sizes)  # j, 0 = NULL
        entry_cell = np.repeat(group_cell.astype(np.int64) * width, sizes) + entry_position
        entry_cell = entry_cell.astype(np.int32 if entry_cell.max() < 2**31 else np.int64)
        del entry_position, group_i, group_m, group_n

        entry_source = np.concatenate(
            [
                np.tile(np.asarray(s, dtype=np.int64), len(t))
                for s, t in zip(sources, targets, strict=True)
            ]
        )
        entry_target = np.concatenate(
            [
                np.repeat(np.asarray(t, dtype=np.int64), len(s))
                for s, t in zip(sources, targets, strict=True)
            ]
        )
        keys, entry_pair = np.unique(entry_source * target_size + entry_target, return_inverse=True)
        del entry_source, entry_target, sources, targets
        entry_pair = entry_pair.astype(np.int32 if len(keys) < 2**31 else np.int64)
        pair_source = keys // target_size

        features = self._feature_table(width)
        probabilities = np.full(len(keys), 1.0 / target_size)  # uniform start, as fast_align
        tokens = float(len(group_cell))
        self.log_likelihoods = []
        for _ in range(iterations):
            prior = self._prior_table(features, self.tension)
            p = probabilities[entry_pair] * prior.ravel()[entry_cell]
            normaliser = np.add.reduceat(p, starts)  # p(f_i | e) per target token
            self.log_likelihoods.append(float(np.log(normaliser).sum()))
            posterior = p / np.repeat(normaliser, sizes)
            del p
            counts = np.bincount(entry_pair, weights=posterior, minlength=len(keys))
            cell_counts = np.bincount(entry_cell, weights=posterior, minlength=prior.size)
            del posterior
            if self.optimize_tension:
                self.tension = self._fit_tension(cell_counts.reshape(prior.shape), features, tokens)
            probabilities = self._m_step(counts, pair_source, len(self.source_ids))
        self._keys, self._probabilities = keys, probabilities
        return self

    def _index(
        self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]
    ) -> tuple[list[list[int]], list[list[int]]]:
        source_ids, target_ids, sources, targets = index_pairs(pairs, "FastAlign.fit")
        self.source_ids, self.target_ids = source_ids, target_ids
        return sources, targets

    def _feature_table(self, width: int) -> np.ndarray:
        """``h`` per (prior row, j); 0 in the NULL column and beyond ``n``."""
        j = np.arange(width)[None, :]
        n = self._table_n[:, None]
        h = diagonal_feature(self._table_i[:, None], np.maximum(j, 1), self._table_m[:, None], n)
        return np.where((j >= 1) & (j <= n), h, 0.0)

    def _prior_table(self, features: np.ndarray, tension: float) -> np.ndarray:
        """``δ(j | i, m, n)`` per (prior row, j); 0 beyond ``n`` (never gathered)."""
        inside = np.arange(features.shape[1])[None, :] <= self._table_n[:, None]
        z = diagonal_normalizer(self._table_i, self._table_m, self._table_n, tension)[:, None]
        prior = np.where(
            inside, np.exp(tension * features) * ((1.0 - self.null_probability) / z), 0.0
        )
        prior[:, 0] = self.null_probability
        return prior

    def _fit_tension(self, cell_counts: np.ndarray, features: np.ndarray, tokens: float) -> float:
        """fast_align's gradient steps on ``λ`` with the E-step's posteriors held fixed."""
        empirical = float((cell_counts * features).sum())  # Σ q · h over non-null links
        linked = cell_counts[:, 1:].sum(axis=1)  # Σ_{j≥1} q per prior row
        tension = self.tension
        for _ in range(TENSION_STEPS):
            prior = self._prior_table(features, tension)
            expected_feature = (prior * features).sum(axis=1) / (1.0 - self.null_probability)
            gradient = empirical - float((linked * expected_feature).sum())
            tension = float(np.clip(tension + TENSION_RATE * gradient / tokens, *TENSION_RANGE))
        return tension

    def _m_step(self, counts: np.ndarray, pair_source: np.ndarray, sources: int) -> np.ndarray:
        if self.alpha is None:
            totals = np.bincount(pair_source, weights=counts, minlength=sources)
            return counts / totals[pair_source]
        smoothed = counts + self.alpha
        totals = np.bincount(pair_source, weights=smoothed, minlength=sources)
        return np.exp(digamma(smoothed) - digamma(totals[pair_source]))

    def probability(self, target_word: str, source_word: str) -> float:
        """``θ(target_word | source_word)``; 0 for pairs never seen together. ``NULL`` is the
        empty source word."""
        self._check_fitted()
        e, f = self.source_ids.get(source_word), self.target_ids.get(target_word)
        if e is None or f is None:
            return 0.0
        return float(self._lookup(np.array([e]), np.array([f]))[0])

    def _check_fitted(self) -> None:
        if not self.target_ids:
            raise RuntimeError("FastAlign is not fitted: call fit(pairs) first")

    def _lookup(self, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        """``θ`` for broadcast arrays of word ids; 0 where an id is -1 (unknown) or unseen."""
        known = (source >= 0) & (target >= 0)
        keys = np.where(known, source * len(self.target_ids) + target, -1)
        index = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        return np.where(known & (self._keys[index] == keys), self._probabilities[index], 0.0)

    def align(self, source: Sequence[str], target: Sequence[str]) -> frozenset[tuple[int, int]]:
        """Viterbi links ``(source_pos, target_pos)``, 0-based: each target word links to the
        source word maximising ``δ · θ``; none when that is ``NULL`` (or the word is unknown)."""
        self._check_fitted()
        if not source or not target:
            return frozenset()
        source_ids = np.array([0] + [self.source_ids.get(w, -1) for w in source], dtype=np.int64)
        target_ids = np.array([self.target_ids.get(w, -1) for w in target], dtype=np.int64)
        prior = _shared_prior(len(target), len(source), self.tension, self.null_probability)
        scores = self._lookup(source_ids[None, :], target_ids[:, None]) * prior
        best = scores.argmax(axis=1)  # ties go to the earliest: NULL, then the first word
        return frozenset((int(j) - 1, i) for i, j in enumerate(best) if j > 0 and scores[i, j] > 0)
