"""Per-head score functions of multi-head attention (survey §3.3.2, eq. 38-39).

Each head of :class:`attnkit.MultiHeadAttention` may score with its own function and parameters
(each head is its own attention module in the survey's Fig. 9) while all heads still run as one
engine call: :class:`HeadwiseScore` stacks them along the head axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from attnkit.core.scores import Score, build_score


class HeadwiseScore(Score):
    """One score function per head: head ``j`` is scored by ``scores[j]`` (eq. 38-39).

    Lets heads own their score parameters (each head is its own attention module in the survey's
    Fig. 9) or use different score functions, while all heads still run as one engine call. Each
    head's own scale (``1/sqrt(d_k)`` of the scaled dot product) is applied inside: folded into
    the query features when that head's pairwise part is a dot product (so fused dot-product
    kernels still apply when every head's is), else multiplied into its scores.

    Args:
        scores: one :class:`~attnkit.core.scores.Score` per head; their features must have one
            size, and all give one score per key or all the same ``value_features``.
        d_key: the per-head key size the scales are computed for.

    Shapes: ``q [B, H, M, d_q]``, ``k [B, H, N, d_key]`` (4-D: dim 1 is the head) →
    ``e [B, H, M, N]`` (``[B, H, M, N, d_v]`` multi-dimensional).
    """

    def __init__(self, scores: Sequence[Score], d_key: int) -> None:
        super().__init__()
        if len(scores) == 0:
            raise ValueError("HeadwiseScore needs at least one score")
        self.heads = nn.ModuleList(scores)
        kinds = {s.value_features for s in scores}
        if len(kinds) != 1:
            raise ValueError(
                "the heads' scores must all give one score per key or all the same number of "
                f"value features, got value_features {sorted(kinds, key=str)}"
            )
        self.value_features = kinds.pop()
        self.d_key = d_key
        self.scales = [s.default_scale(d_key) for s in scores]
        self.parametric = any(s.parametric for s in scores)
        self.pairwise_is_dot = all(s.pairwise_is_dot for s in scores)
        self.elements_per_score = max(s.elements_per_score for s in scores)
        names = dict.fromkeys(s.registry_name for s in scores)  # unique, in head order
        self.registry_name = "per-head(" + ", ".join(names) + ")"

    @property
    def _scores(self) -> list[Score]:
        return [cast(Score, s) for s in self.heads]

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        if d_key != self.d_key:
            raise ValueError(f"per-head score was built for d_k={self.d_key}, got d_k={d_key}")
        for s in self._scores:
            s.check(d_query, d_key, n_keys)

    def _check_heads(self, t: Tensor, what: str) -> None:
        if t.dim() != 4 or t.shape[1] != len(self.heads):
            raise ValueError(
                f"a per-head score of {len(self.heads)} heads needs {what} "
                f"[B, {len(self.heads)}, L, d], got {tuple(t.shape)}"
            )

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        self._check_heads(q, "queries")
        self._check_heads(k, "keys")
        qs, ks = [], []
        for j, score in enumerate(self._scores):
            qf, kf = score.features(q[:, j : j + 1], k[:, j : j + 1])
            factor = self.scales[j]
            if score.pairwise_is_dot and factor is not None:
                qf = qf * factor  # (s q')·k' = s (q'·k'): the scale rides on the query
            qs.append(qf)
            ks.append(kf)
        if len({f.shape[-1] for f in qs}) > 1 or len({f.shape[-1] for f in ks}) > 1:
            raise ValueError(
                "the heads' scores must give features of one size, got query features "
                f"{[f.shape[-1] for f in qs]} and key features {[f.shape[-1] for f in ks]}"
            )
        return torch.cat(qs, 1), torch.cat(ks, 1)

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        parts = []
        for j, score in enumerate(self._scores):
            e = score.pairwise(qf[:, j : j + 1], kf[:, j : j + 1], kv_offset)
            factor = self.scales[j]
            if not score.pairwise_is_dot and factor is not None:
                e = e * factor
            parts.append(e)
        return torch.cat(parts, 1)


def build_head_scores(spec: object, num_heads: int, d_key: int) -> Score:
    """The score of a multi-head module whose heads see queries and keys of size ``d_key``.

    A non-parametric name gives one shared object; a parametric name (``"additive"``,
    ``"general"``, …) one score per head, each with its own parameters; a ``Score`` object is
    shared by all heads as given; a sequence of ``num_heads`` names/objects gives one per head.
    """
    if isinstance(spec, (str, Score)):
        score = build_score(spec, d_key, d_key)
        if isinstance(spec, str) and score.parametric:
            others = [build_score(spec, d_key, d_key) for _ in range(1, num_heads)]
            return HeadwiseScore([score, *others], d_key)
        return score
    if isinstance(spec, Sequence):
        if len(spec) != num_heads:
            raise ValueError(
                f"a score per head needs num_heads={num_heads} scores, got {len(spec)}"
            )
        return HeadwiseScore([build_score(s, d_key, d_key) for s in spec], d_key)
    raise TypeError(
        "score must be a name, an ak.scores.Score, or a sequence of one per head, "
        f"got {type(spec).__name__}"
    )
