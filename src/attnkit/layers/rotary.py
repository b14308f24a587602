"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", eq. 34).

Each pair of features ``(x_{2i}, x_{2i+1})`` of a query or key at position ``p`` is rotated by the
angle ``p · θ_i`` with ``θ_i = base^{-2i/d}``:

    (x'_{2i}, x'_{2i+1}) = (x_{2i} cos pθ_i − x_{2i+1} sin pθ_i,  x_{2i} sin pθ_i + x_{2i+1} cos pθ_i)

so ``<R(p) q, R(p') k>`` depends on ``p − p'`` only. It changes ``q`` and ``k`` and nothing in the
attention itself, so a dot-product attention with RoPE still runs on the fused SDPA kernel; and
since positions are passed explicitly, cached decoding rotates the new token by its own position.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    """Rotates pairs of features by position-dependent angles (RoPE).

    Args:
        dim: ``D``, the per-head feature size to rotate (even).
        base: ``θ_i = base^{-2i/d}`` (10000 in the paper).

    Shapes: ``x [B, H, L, D]``, ``positions [B, L]`` (integers) → ``[B, H, L, D]``.

    Example::

        >>> rope = RotaryEmbedding(8)
        >>> q = torch.randn(2, 4, 5, 8)
        >>> rope(q, torch.arange(5).expand(2, 5)).shape
        torch.Size([2, 4, 5, 8])
    """

    inv_freq: Tensor

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if dim <= 0 or dim % 2:
            raise ValueError(f"rotary dim must be a positive even number, got {dim}")
        self.dim, self.base = dim, base
        # float64 angles: positions of thousands times θ_0 = 1 keep their precision
        inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.taxonomy: dict[str, str] = {}

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate each feature pair ``(x_{2i}, x_{2i+1})`` of ``x`` by ``position · θ_i``.

        Args:
            x: queries or keys ``[B, H, L, D]``.
            positions: integers ``[B, L]`` (or ``[1, L]`` for every row).

        Returns:
            The rotated ``x``, ``[B, H, L, D]``.
        """
        if x.dim() != 4 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [B, H, L, D={self.dim}], got {tuple(x.shape)}")
        if positions.shape != (x.shape[0], x.shape[2]) and positions.shape != (1, x.shape[2]):
            raise ValueError(
                f"positions must be [B={x.shape[0]}, L={x.shape[2]}], got {tuple(positions.shape)}"
            )
        angles = positions.to(torch.float64)[:, None, :, None] * self.inv_freq  # [B, 1, L, D/2]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}"
