"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long").

No position embeddings; instead head ``h`` adds ``−m_h · (i − j)`` to the score of query ``i``
for key ``j`` (causal), with the geometric slopes ``m_h = 2^{−8h/H}`` (``h = 1 … H``) for ``H`` a
power of two, and for other ``H`` the slopes of the nearest smaller power of two followed by every
other slope of the next one (the paper's reference code). A bidirectional variant (encoders) uses
``−m_h · |i − j|``.

Expressed as a FlexAttention ``score_mod``, so it runs on attnkit's tiled (linear memory) backend
and never materialises an ``[L, L]`` bias.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit.core.masks import ScoreMod


def alibi_slopes(num_heads: int) -> list[float]:
    """The per-head slopes ``m_h`` of Press et al. (2022), §3.

    Args:
        num_heads: ``H``.

    Returns:
        ``H`` slopes: the geometric sequence ``2^{-8/H}, 2^{-16/H}, …`` (interleaved from the
        next power of two when ``H`` is not one).

    Example::

        >>> alibi_slopes(4)
        [0.25, 0.0625, 0.015625, 0.00390625]
    """
    if num_heads <= 0:
        raise ValueError(f"num_heads must be > 0, got {num_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


class ALiBi(nn.Module):
    """Linear position biases per head, as a score_mod.

    Args:
        num_heads: ``H``; head ``h`` gets slope ``m_h`` (:func:`alibi_slopes`).
        bidirectional: ``−m|i − j|`` instead of ``−m(i − j)`` (keys after the query are also
            penalised by their distance; use with non-causal attention).

    Example::

        >>> import torch, attnkit as ak
        >>> q = k = v = torch.randn(1, 4, 6, 8)
        >>> pos = torch.arange(6).expand(1, 6)                # positions [B, L]
        >>> out = ak.attention(q, k, v, causal=True, score_mod=ALiBi(4).score_mod(pos, pos))
    """

    slopes: Tensor

    def __init__(self, num_heads: int, bidirectional: bool = False) -> None:
        super().__init__()
        self.num_heads, self.bidirectional = num_heads, bidirectional
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)

    def score_mod(self, q_positions: Tensor, k_positions: Tensor) -> ScoreMod:
        """``score_mod(score, b, h, q_idx, kv_idx)`` adding ``−m_h · distance`` for queries at
        ``q_positions [B, L]`` and keys at ``k_positions [B, N]``."""
        slopes = self.slopes

        def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            distance = q_positions[b, q_idx] - k_positions[b, kv_idx]
            if self.bidirectional:
                distance = distance.abs()
            return score - slopes.to(score.dtype)[h] * distance.to(score.dtype)

        return alibi

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, bidirectional={self.bidirectional}"
