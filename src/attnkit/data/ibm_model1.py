"""IBM Model 1 (Brown et al. 1993): a statistical word aligner, for supervised-attention targets.

Model (source ``e = e_1 … e_l`` plus the empty word ``e_0 = NULL``, target ``f = f_1 … f_m``)::

    p(f, a | e) ∝ Π_j t(f_j | e_{a_j}),   a_j ∈ {0, …, l}   (Brown et al. 1993, eq. 4)

EM on translation probabilities ``t(f | e)`` (Brown et al. 1993, eqs. 15–17)::

    E:  c(f, e) = Σ_pairs Σ_j Σ_i [f_j = f][e_i = e] · t(f_j | e_i) / Σ_i' t(f_j | e_i')
    M:  t(f | e) = c(f, e) / Σ_f' c(f', e)

starting from uniform ``t``. The Viterbi alignment links each target word to the source word
maximising ``t(f_j | e_i)`` (Model 1's alignment prior is uniform); ``NULL`` means no link.

Implementation: the table is sparse, one entry per (source word, target word) pair that
co-occurs in some sentence pair; every (sentence, target position, source position) triple is
one entry of flat numpy arrays, so an EM iteration is a gather, a segment sum
(``np.add.reduceat``) and two ``np.bincount`` — no Python loop over words.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NULL = "<null>"


def index_pairs(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]], what: str
) -> tuple[dict[str, int], dict[str, int], list[list[int]], list[list[int]]]:
    """Word ids of sentence pairs for the statistical aligners: ``(source ids, target ids,
    sources, targets)``, each source sentence starting with the NULL word (id 0); pairs with an
    empty side are skipped. ``what`` names the caller in errors."""
    source_ids: dict[str, int] = {NULL: 0}
    target_ids: dict[str, int] = {}
    sources: list[list[int]] = []
    targets: list[list[int]] = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"pairs must be (source tokens, target tokens), got {pair!r:.80}")
        source_words, target_words = pair
        if isinstance(source_words, str) or isinstance(target_words, str):
            raise TypeError(f"pair sides must be token sequences, not str: {pair!r:.80}")
        if not source_words or not target_words:
            continue
        sources.append([0] + [source_ids.setdefault(w, len(source_ids)) for w in source_words])
        targets.append([target_ids.setdefault(w, len(target_ids)) for w in target_words])
    if not sources:
        raise ValueError(f"{what} needs at least one pair with two non-empty sides")
    return source_ids, target_ids, sources, targets


class IBMModel1:
    """IBM Model 1 translation table ``t(target word | source word)`` fit by EM.

    Example::

        >>> model = IBMModel1().fit([(["das", "haus"], ["the", "house"]), ...], iterations=5)
        >>> model.align(["das", "haus"], ["the", "house"])
        frozenset({(0, 0), (1, 1)})
    """

    def __init__(self) -> None:
        self.source_ids: dict[str, int] = {NULL: 0}
        self.target_ids: dict[str, int] = {}
        self._keys = np.zeros(0, dtype=np.int64)  # sorted source_id * |V_target| + target_id
        self._probabilities = np.zeros(0, dtype=np.float64)

    def fit(
        self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], iterations: int = 5
    ) -> IBMModel1:
        """Run ``iterations`` EM steps on ``(source tokens, target tokens)`` pairs.

        Args:
            pairs: sentence pairs; pairs with an empty side are skipped.
            iterations: EM iterations (Och & Ney 2003 use ~5 for Model 1).

        Returns:
            ``self``.
        """
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
            raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
        source_ids, target_ids, sources, targets = index_pairs(pairs, "IBMModel1.fit")
        self.source_ids, self.target_ids = source_ids, target_ids
        target_size = len(target_ids)

        # One entry per (pair, target position j, source position i incl. NULL), grouped by
        # (pair, j): each group has l + 1 consecutive entries.
        source_entries, target_entries, group_sizes = [], [], []
        for source_row, target_row in zip(sources, targets, strict=True):
            s, t = np.asarray(source_row, dtype=np.int64), np.asarray(target_row, dtype=np.int64)
            source_entries.append(np.tile(s, len(t)))
            target_entries.append(np.repeat(t, len(s)))
            group_sizes.append(np.full(len(t), len(s), dtype=np.int64))
        entry_source = np.concatenate(source_entries)
        keys, entry_pair = np.unique(
            entry_source * target_size + np.concatenate(target_entries), return_inverse=True
        )
        del entry_source, source_entries, target_entries, sources, targets
        # int32 indices halve the memory of the largest arrays (one entry per word pair token).
        entry_pair = entry_pair.astype(np.int32 if len(keys) < 2**31 else np.int64)
        sizes = np.concatenate(group_sizes)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        pair_source = keys // target_size
        # Uniform start: any constant gives the same first E-step.
        probabilities = np.full(len(keys), 1.0 / target_size)
        for _ in range(iterations):
            p = probabilities[entry_pair]
            normaliser = np.add.reduceat(p, starts)  # Σ_i t(f_j | e_i) per (pair, j)
            posterior = p / np.repeat(normaliser, sizes)
            counts = np.bincount(entry_pair, weights=posterior, minlength=len(keys))
            totals = np.bincount(pair_source, weights=counts, minlength=len(source_ids))
            probabilities = counts / totals[pair_source]
        self._keys, self._probabilities = keys, probabilities
        return self

    def probability(self, target_word: str, source_word: str) -> float:
        """``t(target_word | source_word)``; 0 for pairs never seen together. ``NULL`` is
        the empty source word."""
        if not self.target_ids:
            raise RuntimeError("IBMModel1 is not fitted: call fit(pairs) first")
        e, f = self.source_ids.get(source_word), self.target_ids.get(target_word)
        if e is None or f is None:
            return 0.0
        return float(self._lookup(np.array([e]), f)[0])

    def _lookup(self, source: np.ndarray, target_id: int) -> np.ndarray:
        keys = source * len(self.target_ids) + target_id
        index = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        return np.where(self._keys[index] == keys, self._probabilities[index], 0.0)

    def align(self, source: Sequence[str], target: Sequence[str]) -> frozenset[tuple[int, int]]:
        """Viterbi links ``(source_pos, target_pos)``, 0-based: each target word links to its
        most probable source word; none when that is ``NULL`` or the word is unknown."""
        if not self.target_ids:
            raise RuntimeError("IBMModel1 is not fitted: call fit(pairs) first")
        # Unknown source words get id -1, which never matches a key (keys are >= 0).
        ids = np.array([0] + [self.source_ids.get(w, -1) for w in source], dtype=np.int64)
        links = set()
        for j, word in enumerate(target):
            f = self.target_ids.get(word)
            if f is None:
                continue
            scores = np.where(ids >= 0, self._lookup(np.maximum(ids, 0), f), 0.0)
            best = int(np.argmax(scores))  # ties go to the earliest: NULL, then the first word
            if best > 0 and scores[best] > 0:
                links.add((best - 1, j))
        return frozenset(links)
