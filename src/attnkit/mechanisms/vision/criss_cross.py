"""Criss-cross attention (Huang et al., 2019, "CCNet"): each position attends its row and column.

For a feature map ``H [C, h, w]`` the module computes ``Q, K [C', h, w]`` and ``V [C, h, w]`` by
1 x 1 convolutions (``C' < C``; the paper's code uses ``C' = C/8``). Position ``u`` compares its
query with the keys ``Ω_u`` of the positions in its row and column — ``h + w - 1`` of them, ``u``
itself counted once — and aggregates the values ``Φ_u`` at the same positions:

    d_{i,u} = Q_u Ω_{i,u}^T,   A_{:,u} = softmax_i(d_{:,u})                (affinity, §3.2)
    H'_u = Σ_{i ∈ Φ_u} A_{i,u} Φ_{i,u} + H_u                               (aggregation, §3.2)

One pass links each position to its cross only. Applied twice with the same weights ("recurrent
criss-cross attention", RCCA, ``R = 2``) every position reaches every other: ``u`` reaches
``(x, y)`` through the corner ``(u_x, y)``, which is in ``u``'s column and ``(x, y)``'s row.

Computation: the softmax over the cross is split into two :func:`attnkit.attention` calls over
disjoint key sets — the row (``w`` keys, incl. ``u``) and the column without ``u`` (``h - 1``
keys, ``u`` masked) — merged exactly by their log-sum-exps (:func:`attnkit.merge_attention`).
Memory is ``O(B h w (h + w))`` scores, as in the paper, against ``O(B (h w)^2)`` for a mask over
all ``h w`` keys. :meth:`CrissCrossAttention.attention_weights` gives the merged weights ``A``;
``attnkit.interpret.record`` sees the two calls before merging (each its own softmax: row weights
``[B, h, w, w]``, column weights ``[B, w, h, h]``), which ``A`` rescales by ``exp(lse_s - lse)``.

The paper's equation adds ``H_u`` unscaled; its released code scales the aggregation by a
zero-initialised ``γ`` (as DANet does). Here is the equation: no ``γ``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.merge import merge_attention
from attnkit.mechanisms.vision._checks import check_feature_map, check_positive


class CrissCrossAttention(nn.Module):
    """Criss-cross attention: ``H'_u = Σ_i softmax_i(Q_u Ω_{i,u}^T) Φ_{i,u} + H_u`` (CCNet §3.2).

    Args:
        channels: ``C`` of the input and of the values.
        key_channels: ``C'`` of the queries and keys (default ``max(1, C // 8)``).

    Shapes: ``x [B, C, h, w]`` → ``[B, C, h, w]``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import CrissCrossAttention
        >>> CrissCrossAttention(16)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"scoring": "Multiplicative", "alignment": "Local", "query_type": "Self-Attentive"}

    def __init__(self, channels: int, key_channels: int | None = None) -> None:
        super().__init__()
        key_channels = key_channels or max(1, channels // 8)
        check_positive("CrissCrossAttention", channels=channels, key_channels=key_channels)
        self.channels, self.key_channels = channels, key_channels
        self.query = nn.Conv2d(channels, key_channels, 1)
        self.key = nn.Conv2d(channels, key_channels, 1)
        self.value = nn.Conv2d(channels, channels, 1)

    def _attend(self, x: Tensor, want_weights: bool) -> AttentionOutput:
        """Softmax attention of each position over its cross, context ``[B, h, w, C]``."""
        check_feature_map("CrissCrossAttention", x, self.channels)
        h = x.shape[2]
        q = self.query(x).permute(0, 2, 3, 1)  # [B, h, w, C']: rows as heads, w queries each
        k = self.key(x).permute(0, 2, 3, 1)
        v = self.value(x).permute(0, 2, 3, 1)  # [B, h, w, C]
        # u's row, u included: [B, h, w, ·]
        row = attention(q, k, v, score="dot", return_lse=True, return_weights=want_weights)
        # u's column without u (counted once, in its row): [B, w, h, ·], diagonal masked
        not_self = ~torch.eye(h, dtype=torch.bool, device=x.device)
        col = attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            score="dot",
            mask=not_self,
            return_lse=True,
            return_weights=want_weights,
        )
        assert row.lse is not None and col.lse is not None
        col = AttentionOutput(
            context=col.context.transpose(1, 2),
            weights=None if col.weights is None else col.weights.transpose(1, 2),
            lse=col.lse.transpose(1, 2),
        )
        return merge_attention([row, col])  # one softmax over the h + w - 1 keys of the cross

    def attention_weights(self, x: Tensor) -> Tensor:
        """The weights ``A`` of every position over its cross: ``[B, h, w, w + h]``.

        Entry ``[b, r, c, :w]`` weighs the positions ``(r, 0..w-1)`` of the row, ``[b, r, c, w:]``
        the positions ``(0..h-1, c)`` of the column, where ``(r, c)`` itself is 0 (it is counted
        in the row); each ``[b, r, c]`` sums to 1 over its ``h + w - 1`` positions.
        """
        weights = self._attend(x, want_weights=True).weights
        assert weights is not None
        return weights

    def aggregate(self, x: Tensor) -> Tensor:
        """``Σ_i A_{i,u} Φ_{i,u}`` for every position ``u`` (no residual): ``[B, C, h, w]``."""
        return self._attend(x, want_weights=False).context.permute(0, 3, 1, 2)

    def forward(self, x: Tensor) -> Tensor:
        """``H' = aggregation + H``.

        Args:
            x: the feature map ``H [B, C, h, w]``.

        Returns:
            ``H' [B, C, h, w]``.
        """
        return self.aggregate(x) + x


class RecurrentCrissCrossAttention(nn.Module):
    """Recurrent criss-cross attention (RCCA): one criss-cross attention applied ``R`` times.

    The loops share their weights (CCNet §3.3), and ``R = 2`` already gives every position
    information from every other ("full-image dependencies"); the paper uses ``R = 2``.

    Args:
        channels: ``C``.
        key_channels: ``C'`` (default ``max(1, C // 8)``).
        recurrence: ``R``.

    Shapes: ``x [B, C, h, w]`` → ``[B, C, h, w]``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import RecurrentCrissCrossAttention
        >>> RecurrentCrissCrossAttention(16)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    # Each loop's queries come from the previous loop's output: the survey's multi-hop attention.
    taxonomy = {"query_multiplicity": "Multi-Hop"}

    def __init__(self, channels: int, key_channels: int | None = None, recurrence: int = 2) -> None:
        super().__init__()
        check_positive("RecurrentCrissCrossAttention", recurrence=recurrence)
        self.attention = CrissCrossAttention(channels, key_channels)
        self.recurrence = recurrence

    def forward(self, x: Tensor) -> Tensor:
        """``R`` passes of :class:`CrissCrossAttention` with shared weights.

        Args:
            x: the feature map ``[B, C, h, w]``.

        Returns:
            ``[B, C, h, w]``: every position has seen every other after two passes.
        """
        for _ in range(self.recurrence):
            x = self.attention(x)
        return x
