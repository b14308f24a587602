"""Supervised attention (survey §4.2): a loss between the attention weights and gold attention,
added to the task loss, ``L = L_task + λ · L_attention`` (Liu et al. 2016 with annotated
alignments; Liu et al. 2017 with human attention).

With gold attention ``g`` (marks normalised to a distribution per row) and weights ``a``:

    kl:  Σ_n g_n log(g_n / a_n)        ce:  -Σ_n g_n log a_n        mse:  mean_n (a_n - g_n)^2
"""

from __future__ import annotations

import torch
from torch import Tensor

KINDS = ("kl", "ce", "mse")


def supervised_attention_loss(
    weights: Tensor, gold: Tensor, kind: str = "kl", eps: float = 1e-12
) -> Tensor:
    """Mean over rows of the distance between attention and gold attention.

    Args:
        weights: ``[..., N]`` attention weights (rows sum to 1).
        gold: ``[..., N]`` non-negative gold attention (0/1 marks or weights); each row is divided
            by its sum. Rows with no gold mass are left out of the mean.
        kind: ``"kl"`` (KL(g ‖ a)), ``"ce"`` (cross-entropy) or ``"mse"``.
        eps: floor inside the logarithm so a zero weight gives a large finite loss.

    Returns:
        a scalar, differentiable with respect to ``weights``.

    Example::

        >>> weights = torch.softmax(torch.randn(2, 4), -1)  # e.g. rec["attn"] of a recording
        >>> gold = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
        >>> supervised_attention_loss(weights, gold, "ce").shape  # add to the task loss
        torch.Size([])
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if weights.shape != gold.shape or weights.dim() < 1:
        raise ValueError(
            f"weights and gold must have one shape [..., N], got {tuple(weights.shape)} and "
            f"{tuple(gold.shape)}"
        )
    if (gold < 0).any():
        raise ValueError("gold attention must be non-negative")
    gold = gold.to(weights.dtype)
    mass = gold.sum(-1, keepdim=True)
    rows = mass.squeeze(-1) > 0
    if not rows.any():
        raise ValueError("gold attention has no mass in any row")
    g = gold / mass.clamp_min(eps)
    log_a = weights.clamp_min(eps).log()
    if kind == "kl":
        per_row = (torch.xlogy(g, g) - g * log_a).sum(-1)
    elif kind == "ce":
        per_row = -(g * log_a).sum(-1)
    else:
        per_row = (weights - g).pow(2).mean(-1)
    return per_row[rows].mean()
