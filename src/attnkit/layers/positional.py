"""Absolute position encodings added to the token embeddings.

- sinusoidal (Vaswani et al. 2017, §3.5): ``PE(p, 2i) = sin(p / 10000^{2i/d})``,
  ``PE(p, 2i+1) = cos(p / 10000^{2i/d})``, fixed;
- learned (Gehring et al. 2017; BERT, GPT): one trained vector per position.

Both take explicit positions (``[B, L]`` integers), so a decoding step adds the encoding of its
own position. Without any position information self-attention is permutation-equivariant
(tests/layers/test_layer_properties.py): permuting the tokens permutes the outputs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _positions(x: Tensor, positions: Tensor | None, max_len: int) -> Tensor:
    n, length = x.shape[0], x.shape[1]
    if positions is None:
        positions = torch.arange(length, device=x.device).expand(n, length)
    if positions.shape[-1] != length:
        raise ValueError(f"positions must be [B, {length}], got {tuple(positions.shape)}")
    if positions.numel() and (int(positions.max()) >= max_len or int(positions.min()) < 0):
        raise ValueError(
            f"positions must lie in [0, {max_len}), got [{int(positions.min())}, "
            f"{int(positions.max())}]"
        )
    return positions


class SinusoidalPositionalEncoding(nn.Module):
    """``x + PE(positions)`` with the fixed sinusoids of Vaswani et al. (2017), §3.5.

    Args:
        d_model: ``E`` (even).
        max_len: positions ``0 … max_len - 1`` are tabulated.
        dropout: dropout on the sum (the paper's P_drop).

    Shapes: ``x [B, L, E]``, ``positions [B, L]`` (default ``0 … L-1``) → ``[B, L, E]``.

    Example::

        >>> SinusoidalPositionalEncoding(16)(torch.zeros(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    pe: Tensor

    def __init__(self, d_model: int, max_len: int = 4096, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model <= 0 or d_model % 2:
            raise ValueError(f"d_model must be a positive even number, got {d_model}")
        position = torch.arange(max_len, dtype=torch.float64)[:, None]
        div = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(1e4) / d_model)
        )
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
        self.register_buffer("pe", pe.float(), persistent=False)
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the encodings of ``positions`` to ``x``.

        Args:
            x: ``[B, L, E]``.
            positions: int ``[B, L]`` in ``[0, max_len)``; ``None``: ``0 … L-1`` in every row.

        Returns:
            ``Drop(x + PE(positions))``, ``[B, L, E]``.
        """
        positions = _positions(x, positions, self.max_len)
        return self.dropout(x + self.pe.to(x.dtype)[positions])


class LearnedPositionalEmbedding(nn.Module):
    """``x + P[positions]`` with a trained table ``P [max_len, E]`` (``embedding``).

    Args:
        d_model: ``E``.
        max_len: rows of the table: positions ``0 … max_len - 1``.
        dropout: dropout on the sum.

    Shapes: ``x [B, L, E]``, ``positions [B, L]`` (default ``0 … L-1``) → ``[B, L, E]``.

    Example::

        >>> LearnedPositionalEmbedding(16, max_len=32)(torch.zeros(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, d_model: int, max_len: int = 4096, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Add the learned embeddings of ``positions`` to ``x``.

        Args:
            x: ``[B, L, E]``.
            positions: int ``[B, L]`` in ``[0, max_len)``; ``None``: ``0 … L-1`` in every row.

        Returns:
            ``Drop(x + P[positions])``, ``[B, L, E]``.
        """
        positions = _positions(x, positions, self.max_len)
        return self.dropout(x + self.embedding(positions))
