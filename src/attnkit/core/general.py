"""``GeneralAttention``: the general attention module of the survey (Fig. 2, eq. 1-5, 30-32).

    F ─► K = F W_K, V = F W_V ─┐
    q ──────────────────────────┴─► e = score(q, K) ─► a = align(e) ─► c = Σ a_l v_l ─► ŷ (eq. 5)

Rows are vectors, so eq. (1) ``K = W_K F`` is written ``K = F W_K^T`` here.
"""

from __future__ import annotations

import dataclasses

from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.scores import Score, build_score


class GeneralAttention(nn.Module):
    """The general attention module: keys and values from features, any score and alignment.

    Args:
        d_query: size of the queries ``d_q``.
        d_feature: size of the feature vectors ``d_f``.
        d_key: ``d_k``: a learned ``W_K [d_k, d_f]`` (eq. 1); ``None`` keeps the feature vectors
            as keys (``W_K = I``).
        d_value: ``d_v``: a learned ``W_V [d_v, d_f]``; ``None`` keeps the features as values.
        score: a score name or ``ak.scores.Score``; parametric names are built with these sizes.
        align: an alignment name or ``ak.align.Align``.
        multi_dimensional: one weight per value feature (eq. 30-32), with the additive score of
            eq. (31).
        d_hidden: ``d_w`` of the additive score (default ``d_k``).
        d_output: if given, an output model ``ŷ = softmax(W_c c + b_c)`` with ``d_y = d_output``
            (eq. 5), returned as ``AttentionOutput.output``.
        dropout: dropout on the attention weights, in training mode only.
        query_type: where its queries come from, in the survey's words (§3.3.1): ``"Basic"``
            (the model's state, e.g. a decoder's), ``"Specialized"`` or ``"Self-Attentive"``.

    Shapes: ``query [B, M, d_q]`` (or ``[B, d_q]`` for one query), ``features [B, N, d_f]``
    → ``context [B, M, d_v]`` (or ``[B, d_v]``).

    Example::

        >>> import torch, attnkit as ak
        >>> attn = ak.GeneralAttention(d_query=32, d_feature=64, d_key=48, d_value=16)
        >>> out = attn(torch.randn(8, 32), torch.randn(8, 10, 64), return_weights=True)
        >>> out.context.shape, out.weights.shape
        (torch.Size([8, 16]), torch.Size([8, 10]))
    """

    def __init__(
        self,
        d_query: int,
        d_feature: int,
        d_key: int | None = None,
        d_value: int | None = None,
        score: str | Score = "additive",
        align: str | Align = "softmax",
        multi_dimensional: bool = False,
        d_hidden: int | None = None,
        d_output: int | None = None,
        dropout: float = 0.0,
        query_type: str = "Basic",
    ) -> None:
        super().__init__()
        self.d_query, self.d_feature = d_query, d_feature
        self.d_key, self.d_value = d_key or d_feature, d_value or d_feature
        self.key_proj = nn.Linear(d_feature, d_key, bias=False) if d_key else nn.Identity()
        self.value_proj = nn.Linear(d_feature, d_value, bias=False) if d_value else nn.Identity()
        value_features = self.d_value if multi_dimensional else None
        self.score = build_score(score, d_query, self.d_key, d_hidden, value_features)
        if multi_dimensional and self.score.value_features != self.d_value:
            raise ValueError(
                "multi_dimensional=True needs a score with one output per value feature "
                f"(d_v={self.d_value}), got {type(self.score).__name__} with "
                f"value_features={self.score.value_features}"
            )
        self.align = build_align(align, d_query, self.d_key)
        self.output_model = nn.Linear(self.d_value, d_output) if d_output else None
        self.dropout = dropout
        self.taxonomy = {"query_type": query_type}

    def forward(
        self,
        query: Tensor,
        features: Tensor,
        mask: Tensor | None = None,
        *,
        causal: bool = False,
        return_weights: bool = False,
    ) -> AttentionOutput:
        """Attend ``features`` with ``query``.

        Args:
            query: ``[B, M, d_q]`` or ``[B, d_q]``.
            features: ``[B, N, d_f]``.
            mask: bool ``[B, N]`` key padding (True = a real feature vector), or any mask
                broadcastable to ``[B, M, N]``.
            causal: bottom-right causal mask over query/feature positions.
            return_weights: include the weights ``[B, M, N]`` (``[B, M, N, d_v]``
                multi-dimensional; without the M axis for a single query).

        Returns:
            :class:`~attnkit.AttentionOutput` with ``context [B, M, d_v]`` (``[B, d_v]`` for a
            single query) of eq. (4), and ``weights`` when asked for.
        """
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        if features.dim() != 3 or query.dim() != 3:
            raise ValueError(
                "GeneralAttention expects query [B, M, d_q] or [B, d_q] and features [B, N, d_f], "
                f"got {tuple(query.shape)} and {tuple(features.shape)}"
            )
        if features.shape[-1] != self.d_feature:
            raise ValueError(
                f"features must have d_f={self.d_feature}, got {tuple(features.shape)}"
            )
        if mask is not None and mask.dim() == 2 and tuple(mask.shape) == tuple(features.shape[:2]):
            mask = mask.unsqueeze(1)  # key padding [B, N] -> [B, 1, N]
        out = attention(
            query,
            self.key_proj(features),  # eq. (1)
            self.value_proj(features),
            score=self.score,
            align=self.align,
            mask=mask,
            causal=causal,
            dropout=self.dropout if self.training else 0.0,
            return_weights=return_weights,
        )
        output = None
        if self.output_model is not None:
            output = self.output_model(out.context).softmax(-1)  # eq. (5)
        out = dataclasses.replace(out, output=output)
        if single:
            out = dataclasses.replace(
                out,
                **{f.name: _drop_query_axis(getattr(out, f.name)) for f in dataclasses.fields(out)},
            )
        return out


def _drop_query_axis(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.squeeze(1)
