"""Input checks and small building blocks shared by the feature-set mechanisms."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def projection(d_in: int, d_out: int | None) -> nn.Module:
    """``W [d_out, d_in]`` of eq. (1), or the identity (features used as they are) for None."""
    return nn.Identity() if d_out is None else nn.Linear(d_in, d_out, bias=False)


def check_features(name: str, x: object, d: int) -> Tensor:
    """``x`` as a feature set ``[B, N, d]``, or a clear error."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d:
        raise ValueError(f"{name} must have shape [B, N, {d}], got {tuple(x.shape)}")
    return x


def check_mask(name: str, mask: object, features: Tensor) -> Tensor | None:
    """``mask`` as a bool ``[B, N]`` marking the real elements of ``features``, or a clear error."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        given = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool tensor (True = real element), got {given}")
    if tuple(mask.shape) != tuple(features.shape[:2]):
        raise ValueError(
            f"{name} must have shape [B, N] = {tuple(features.shape[:2])}, got {tuple(mask.shape)}"
        )
    return mask
