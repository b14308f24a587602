"""Per-query and per-key summaries of the attention weights, without returning the weights.

What KV-cache eviction (which keys are attended at all) and long-context interpretability (how
peaked is each query) need, at ``O(M + N)`` output size instead of ``O(M · N)``:

- ``"column_sum"``: ``[B, H, N]``, the total weight each key receives, ``Σ_i a_il``;
- ``"entropy"``: ``[B, H, M]``, ``-Σ_l a_il log a_il`` (0 for a query with no admissible key);
- ``"argmax"``: ``[B, H, M]``, the key with the largest weight (``-1`` with no admissible key).

Summaries describe the weights before dropout and are not differentiable.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Summary = Literal["column_sum", "entropy", "argmax"]
SUMMARIES: tuple[str, ...] = ("column_sum", "entropy", "argmax")


def check_summary(summary: str | None) -> None:
    """Raise ``ValueError`` for an unknown summary name."""
    if summary is not None and summary not in SUMMARIES:
        raise ValueError(f"unknown summary {summary!r}; expected one of: {', '.join(SUMMARIES)}")


def summarize(weights: Tensor, summary: str) -> Tensor:
    """The summary of materialised weights ``[B, H, M, N]`` (the reference for the tiled pass)."""
    weights = weights.detach()
    if summary == "column_sum":
        return weights.sum(-2)
    if summary == "entropy":
        return -torch.special.xlogy(weights, weights).sum(-1)
    if weights.shape[-1] == 0:  # no keys at all: no argmax
        return torch.full(weights.shape[:-1], -1, dtype=torch.long, device=weights.device)
    has_key = weights.sum(-1) > 0
    return torch.where(has_key, weights.argmax(-1), torch.full_like(has_key, -1, dtype=torch.long))
