"""Rank correlation between attention weights and human attention (survey §4.2.1; Das et al.
2017 compare model and human attention maps with Spearman's rank correlation)."""

from __future__ import annotations

import torch
from scipy import stats
from torch import Tensor

METHODS = ("spearman", "kendall")


def rank_correlation(weights: Tensor, human: Tensor, method: str = "spearman") -> Tensor:
    """Spearman's ρ or Kendall's τ (τ-b, ties handled) between model and human attention.

    Args:
        weights: ``[..., N]`` model attention.
        human: ``[..., N]`` human attention (same shape), e.g. fixation densities of the regions.
        method: ``"spearman"`` or ``"kendall"`` (computed by scipy.stats).

    Returns:
        float64 correlation per row, ``[...]`` (0-D for one row); NaN for a constant row.

    Example::

        >>> rank_correlation(torch.tensor([0.1, 0.5, 0.4]), torch.tensor([1.0, 3.0, 2.0]))
        tensor(1., dtype=torch.float64)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if weights.shape != human.shape or weights.dim() < 1:
        raise ValueError(
            f"weights and human must have one shape [..., N], got {tuple(weights.shape)} and "
            f"{tuple(human.shape)}"
        )
    if weights.shape[-1] < 2:
        raise ValueError(f"a rank correlation needs N >= 2 positions, got {weights.shape[-1]}")
    a = weights.detach().double().cpu().reshape(-1, weights.shape[-1]).numpy()
    b = human.detach().double().cpu().reshape(-1, weights.shape[-1]).numpy()
    correlate = stats.spearmanr if method == "spearman" else stats.kendalltau
    values = [float(correlate(x, y)[0]) for x, y in zip(a, b, strict=True)]
    return torch.tensor(values, dtype=torch.float64).reshape(weights.shape[:-1])
