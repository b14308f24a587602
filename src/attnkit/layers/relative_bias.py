"""T5's relative position bias (Raffel et al. 2020, §2.1; Shaw et al. 2018 simplified).

Each head learns one scalar per *bucket* of relative distance ``j − i`` (key minus query): the
first half of the buckets hold exact small distances, the rest cover distances up to
``max_distance`` logarithmically; beyond it every distance shares the last bucket. Bidirectional
(encoder) buckets split by sign; causal (decoder) buckets only count the past. The bias is added to
the scores:

    e_ij = q_i · k_j + table[bucket(j − i), h]

Expressed as a ``score_mod`` whose closure holds the learned table, so it runs on the tiled
(linear memory) backend, which gives the table its gradient.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit.core.masks import ScoreMod


def relative_position_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's bucket of each relative position ``j − i`` (integer tensor → long tensor).

    Args:
        relative_position: ``j − i``, an integer tensor of any shape.
        bidirectional: separate buckets for the future (encoder); else the future is bucket 0.
        num_buckets: buckets in all: half exact small distances, half log-spaced larger ones.
        max_distance: distances from here on share the last bucket.

    Returns:
        The buckets, the shape of ``relative_position``, in ``[0, num_buckets)``.

    Example::

        >>> relative_position_bucket(torch.tensor([-3, -1, 0, 1, 3]), True, 8, 16)
        tensor([2, 1, 0, 5, 6])
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp_min(0)  # the future all falls in bucket 0
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets between max_exact and max_distance (distance >= max_exact here)
    large = (
        max_exact
        + (
            torch.log(distance.double().clamp_min(1) / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = large.clamp_max(num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """T5's bucketed, learned relative position bias, per head, as a score_mod.

    Args:
        num_heads: ``H``.
        num_buckets: buckets of relative distance (32 in T5).
        max_distance: distances from here on share the last bucket (128 in T5).
        bidirectional: encoder-style (past and future) or decoder-style (past only) buckets.

    Parameters: ``relative_attention_bias``, an ``nn.Embedding(num_buckets, H)`` (T5's name).

    Example::

        >>> bias = RelativePositionBias(num_heads=4)
        >>> pos = torch.arange(5).expand(2, 5)
        >>> q = k = v = torch.randn(2, 4, 5, 8)
        >>> ak.attention(q, k, v, score_mod=bias.score_mod(pos, pos)).context.shape
        torch.Size([2, 4, 5, 8])
    """

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ) -> None:
        super().__init__()
        if num_buckets < 4 or max_distance <= num_buckets // 4:
            raise ValueError(
                f"need num_buckets >= 4 and max_distance > num_buckets // 4, got "
                f"num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.num_heads, self.num_buckets = num_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def bucket(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """Buckets of ``k − q`` for broadcastable position tensors."""
        return relative_position_bucket(
            k_positions - q_positions, self.bidirectional, self.num_buckets, self.max_distance
        )

    def score_mod(self, q_positions: Tensor, k_positions: Tensor) -> ScoreMod:
        """``score_mod`` adding ``table[bucket(pos_k − pos_q), h]`` for queries at
        ``q_positions [B, L]`` and keys at ``k_positions [B, N]``."""
        table = self.relative_attention_bias.weight  # [buckets, H]; the closure holds it
        bidirectional, num_buckets = self.bidirectional, self.num_buckets
        max_distance = self.max_distance

        def t5_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            rel = k_positions[b, kv_idx] - q_positions[b, q_idx]
            bucket = relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
            return score + table[bucket, h].to(score.dtype)

        return t5_bias

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )
