"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

Raw attention of one layer says how a layer mixes its *inputs*, which are already mixtures of the
tokens. Rollout follows the mixing down the stack. With a residual connection around each
attention layer, half of a token's next representation is itself, so each layer's map is

    Ã_l = normalise_rows(0.5 · A_l + 0.5 · I)

and the rollout to layer ``n`` is the product ``R = Ã_n · Ã_{n-1} · … · Ã_1``: ``R[i, j]`` is how
much output token ``i`` of the top layer draws on input token ``j``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

HEAD_FUSIONS = ("mean", "max", "min")


def fuse_heads(weights: Tensor, head_fusion: str = "mean") -> Tensor:
    """One map from the heads of a layer: ``[B, H, L, L]`` or ``[H, L, L]`` → ``[B, L, L]`` /
    ``[L, L]`` (a ``[L, L]`` map is returned as is). Abnar & Zuidema average the heads.

    Args:
        weights: ``[B, H, L, L]``, ``[H, L, L]`` or ``[L, L]``.
        head_fusion: ``"mean"``, ``"max"`` or ``"min"`` over the heads.

    Returns:
        ``[B, L, L]`` or ``[L, L]``.

    Example::

        >>> fuse_heads(torch.softmax(torch.randn(2, 5, 5), -1)).shape  # [H, L, L] -> [L, L]
        torch.Size([5, 5])"""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion must be one of {HEAD_FUSIONS}, got {head_fusion!r}")
    if weights.dim() == 2:
        return weights
    if weights.dim() not in (3, 4):
        raise ValueError(
            f"a layer's attention must be [L, L], [H, L, L] or [B, H, L, L], got {tuple(weights.shape)}"
        )
    if head_fusion == "mean":
        return weights.mean(-3)
    return weights.amax(-3) if head_fusion == "max" else weights.amin(-3)


def residual_attention(weights: Tensor, residual: float = 0.5) -> Tensor:
    """``normalise_rows((1 - residual) · A + residual · I)`` for square maps ``[..., L, L]``.

    Args:
        weights: attention maps ``[..., L, L]``.
        residual: the identity's weight (the residual connection's share).

    Returns:
        ``[..., L, L]``, rows summing to 1.

    Example::

        >>> residual_attention(torch.full((2, 2), 0.5))
        tensor([[0.7500, 0.2500],
                [0.2500, 0.7500]])
    """
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"rollout needs self-attention maps [..., L, L], got {tuple(weights.shape)}"
        )
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype, device=weights.device)
    augmented = (1.0 - residual) * weights + residual * eye
    # rows of a masked query (all zero) stay zero instead of dividing by zero
    return augmented / augmented.sum(-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)


def layer_maps(
    maps: Sequence[Tensor], head_fusion: str = "mean", residual: float = 0.5
) -> list[Tensor]:
    """The residual-augmented, head-fused map of every layer, bottom to top, checked to agree."""
    if len(maps) == 0:
        raise ValueError("need the attention of at least one layer, got none")
    fused = [residual_attention(fuse_heads(m, head_fusion), residual) for m in maps]
    shapes = {tuple(m.shape) for m in fused}
    if len(shapes) != 1:
        raise ValueError(f"every layer's map must have one shape, got {sorted(shapes)}")
    return fused


def attention_rollout(
    maps: Sequence[Tensor], *, head_fusion: str = "mean", residual: float = 0.5
) -> Tensor:
    """Attention rollout ``Ã_n ⋯ Ã_1`` over a stack of self-attention layers.

    Args:
        maps: one map per layer, bottom (input side) first, each ``[L, L]``, ``[H, L, L]`` or
            ``[B, H, L, L]`` (e.g. ``recorder.maps()``).
        head_fusion: how a layer's heads become one map: ``"mean"`` (the paper), ``"max"``,
            ``"min"``.
        residual: weight of the identity for the residual connection (0.5 in the paper; 0
            multiplies the raw maps).

    Returns:
        ``[L, L]`` (``[B, L, L]`` batched): row ``i`` = how much top-layer token ``i`` draws on
        each input token; rows sum to 1.

    Example::

        >>> r = attention_rollout([torch.full((3, 3), 1 / 3), torch.eye(3)])
    """
    fused = layer_maps(maps, head_fusion, residual)
    rolled = fused[0]
    for layer in fused[1:]:
        rolled = layer @ rolled  # layer l mixes what layers below it already mixed
    return rolled
