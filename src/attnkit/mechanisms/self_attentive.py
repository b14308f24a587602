"""Self-attentive queries (survey §3.3.1, eq. 33-37): attention computed from the features alone.

The survey reads self-attention in two ways, and both are here:

- **the query is a constant or is learned** (eq. 33-34): one question asked of every input, "which
  feature vectors matter?". :class:`ConstantQueryAttention` keeps a fixed query (a buffer: all
  ones, zeros, or given); :class:`LearnedQueryAttention` learns one or several query vectors (a
  parameter, like the word and sentence context vectors of Yang et al.'s hierarchical network).
  Each pools a set of feature vectors into one context vector per query.
- **every feature vector is a query** (eq. 35): ``Q = F W_Q^T``, ``K = F W_K^T``, ``V = F W_V^T``,
  so each feature vector attends to all of them; :class:`SelfAttention` turns the context vectors
  into new representations, either the contexts themselves (eq. 36) or
  ``LayerNorm(f + c)`` (eq. 37).

Rows are vectors: the survey's ``Q = W_Q F`` is ``Q = F W_Q^T`` here, with ``W_Q`` the
``weight [d_q, d_f]`` of an ``nn.Linear``. Every module takes any score and alignment (a name or an
object) and runs each attention step through :func:`attnkit.attention`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.general import GeneralAttention
from attnkit.core.scores import Score, build_score

NewRepresentation = Literal["context", "residual_norm"]


def _check_features(name: str, features: Tensor, d_feature: int, mask: Tensor | None) -> None:
    """Raise ``ValueError`` unless ``features [B, N, d_f]`` and ``mask`` bool ``[B, N]``."""
    if features.dim() != 3 or features.shape[-1] != d_feature:
        raise ValueError(
            f"{name} expects features [B, N, d_f={d_feature}], got {tuple(features.shape)}"
        )
    if mask is None:
        return
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} expects a bool mask (True = real element), got {mask.dtype}")
    if tuple(mask.shape) != tuple(features.shape[:2]):
        raise ValueError(
            f"{name} expects mask [B, N] = {tuple(features.shape[:2])}, got {tuple(mask.shape)}"
        )


class _QueryAttention(nn.Module):
    """Shared forward of the constant and learned self-attentive queries: ``self.query`` is
    ``[r, d_q]`` (a buffer or a parameter) and ``self.single`` says whether ``r = 1`` without a
    query axis."""

    query: Tensor
    single: bool

    def __init__(
        self,
        d_query: int,
        d_feature: int,
        d_key: int | None,
        d_value: int | None,
        score: str | Score,
        align: str | Align,
        d_hidden: int | None,
        dropout: float,
    ) -> None:
        super().__init__()
        self.d_feature = d_feature
        # The general attention module of eq. (1)-(4); only where its query comes from differs.
        self.attend = GeneralAttention(
            d_query,
            d_feature,
            d_key=d_key,
            d_value=d_value,
            score=score,
            align=align,
            d_hidden=d_hidden,
            dropout=dropout,
            query_type="Self-Attentive",
        )
        self.attend.score.check(d_query, self.attend.d_key, 0)  # fail here, not at first call

    def forward(
        self, features: Tensor, mask: Tensor | None = None, *, return_weights: bool = False
    ) -> AttentionOutput:
        """Attend ``features`` with the module's own queries.

        Args:
            features: ``[B, N, d_f]``.
            mask: bool ``[B, N]``, True = a real feature vector; padded ones get zero weight, and
                a set with no real vector gives a zero context.
            return_weights: include the weights.

        Returns:
            :class:`AttentionOutput` with ``context [B, d_v]`` and ``weights [B, N]`` for a single
            query, ``[B, r, d_v]`` and ``[B, r, N]`` for ``r`` queries.
        """
        _check_features(type(self).__name__, features, self.d_feature, mask)
        batch = features.shape[0]
        query = self.query.to(features.dtype)
        query = query[0].expand(batch, -1) if self.single else query.expand(batch, -1, -1)
        return self.attend(query, features, mask, return_weights=return_weights)


class ConstantQueryAttention(_QueryAttention):
    """Self-attentive attention with a constant query (survey eq. 33): one fixed question.

    With the additive score, ``score(q, k_l) = w^T act(W_1 q + W_2 k_l + b)`` and a constant ``q``
    is eq. (33) ``w^T act(W k_l + b')`` with ``W = W_2`` and ``b' = W_1 q + b``; the zero query
    removes it entirely (``b' = b``). Any other score takes the constant query as it is.

    Args:
        d_feature: ``d_f``, the size of the feature vectors.
        query: the constant query, ``[d_q]`` (one query) or ``[r, d_q]`` (``r`` queries), kept as
            a buffer (saved, never trained); default all ones of size ``d_k``.
        d_key: ``d_k``: a learned ``W_K [d_k, d_f]``; ``None`` keeps the features as keys.
        d_value: ``d_v``: a learned ``W_V [d_v, d_f]``; ``None`` keeps the features as values.
        score: a score name or ``ak.scores.Score`` (default ``"additive"``, eq. 33).
        align: an alignment name or ``ak.align.Align``.
        d_hidden: ``d_w`` of the additive score (default ``d_k``).
        dropout: dropout on the attention weights, in training mode only.

    Shapes: ``features [B, N, d_f]``, ``mask [B, N]`` → ``context [B, d_v]`` (``[B, r, d_v]``).

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.self_attentive import ConstantQueryAttention
        >>> pool = ConstantQueryAttention(d_feature=16, query=torch.zeros(16))   # eq. (33)
        >>> pool(torch.randn(4, 9, 16)).context.shape
        torch.Size([4, 16])
    """

    def __init__(
        self,
        d_feature: int,
        query: Tensor | None = None,
        d_key: int | None = None,
        d_value: int | None = None,
        score: str | Score = "additive",
        align: str | Align = "softmax",
        d_hidden: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        if query is None:
            query = torch.ones(d_key or d_feature)
        if not isinstance(query, Tensor) or query.dim() not in (1, 2) or query.numel() == 0:
            shape = tuple(query.shape) if isinstance(query, Tensor) else type(query).__name__
            raise ValueError(f"query must be a tensor [d_q] or [r, d_q], got {shape}")
        super().__init__(
            query.shape[-1], d_feature, d_key, d_value, score, align, d_hidden, dropout
        )
        self.single = query.dim() == 1
        self.register_buffer("query", query.detach().clone().reshape(-1, query.shape[-1]))


class LearnedQueryAttention(_QueryAttention):
    """Self-attentive attention with learned queries (survey eq. 34): the question is trained.

    With the dot score this is eq. (34), ``score(k_l) = q^T k_l`` with a trainable ``q [d_k]``;
    ``r`` queries ask ``r`` questions of the same features (as Yang et al.'s word and sentence
    context vectors, one per level). Any score and alignment can be used.

    Args:
        d_feature: ``d_f``.
        num_queries: ``None`` for one query (outputs without a query axis), or the number ``r``
            of learned queries (outputs ``[B, r, ...]``).
        d_query: ``d_q`` (default ``d_k``, as the dot score needs).
        d_key: ``d_k``: a learned ``W_K [d_k, d_f]``; ``None`` keeps the features as keys.
        d_value: ``d_v``: a learned ``W_V [d_v, d_f]``; ``None`` keeps the features as values.
        score: a score name or ``ak.scores.Score`` (default ``"dot"``, eq. 34).
        align: an alignment name or ``ak.align.Align``.
        d_hidden: ``d_w`` of the additive score (default ``d_k``).
        dropout: dropout on the attention weights, in training mode only.

    The queries are ``self.query [r, d_q]`` (``r = 1`` for one query), initialised uniformly in
    ``±1/sqrt(d_q)`` like an ``nn.Linear`` weight.

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.self_attentive import LearnedQueryAttention
        >>> pool = LearnedQueryAttention(d_feature=16, num_queries=3, d_key=8)
        >>> out = pool(torch.randn(4, 9, 16), return_weights=True)
        >>> out.context.shape, out.weights.shape
        (torch.Size([4, 3, 16]), torch.Size([4, 3, 9]))
    """

    def __init__(
        self,
        d_feature: int,
        num_queries: int | None = None,
        d_query: int | None = None,
        d_key: int | None = None,
        d_value: int | None = None,
        score: str | Score = "dot",
        align: str | Align = "softmax",
        d_hidden: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        if num_queries is not None and num_queries < 1:
            raise ValueError(f"num_queries must be None or >= 1, got {num_queries}")
        d_query = d_query or d_key or d_feature
        super().__init__(d_query, d_feature, d_key, d_value, score, align, d_hidden, dropout)
        self.single = num_queries is None
        bound = 1.0 / math.sqrt(d_query)
        self.query = nn.Parameter(torch.empty(num_queries or 1, d_query).uniform_(-bound, bound))


class SelfAttention(nn.Module):
    """Self-attention: every feature vector is a query (survey eq. 35), new representations by
    eq. (36) or (37).

    ``Q = F W_Q^T``, ``K = F W_K^T``, ``V = F W_V^T`` (eq. 35 and 1, rows are vectors); row ``i``
    of the context ``C = attention(Q, K, V)`` summarises the features relevant to feature ``i``.
    The new representation is

    - ``"context"``: ``f_i^(new) = c_i`` (eq. 36), of size ``d_v``;
    - ``"residual_norm"``: ``f_i^(new) = LayerNorm(f_i^(old) + c_i)`` (eq. 37, the Transformer's
      normalisation layer), which needs ``d_v = d_f``.

    Args:
        d_feature: ``d_f``.
        d_query: ``d_q`` of ``W_Q [d_q, d_f]`` (default ``d_k``).
        d_key: ``d_k`` of ``W_K [d_k, d_f]`` (default ``d_f``).
        d_value: ``d_v`` of ``W_V [d_v, d_f]`` (default ``d_f``).
        score: a score name or ``ak.scores.Score`` (default ``"scaled_dot"``).
        align: an alignment name or ``ak.align.Align``.
        new_representation: ``"context"`` (eq. 36) or ``"residual_norm"`` (eq. 37).
        d_hidden: ``d_w`` of the additive score (default ``d_k``).
        dropout: dropout on the attention weights, in training mode only.

    Padding: with ``mask [B, N]``, padded vectors are never attended (zero weight) and their own
    rows of the context, the weights and the new representation are zero, so stacked layers keep
    padding inert and no gradient reaches padded inputs.

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.self_attentive import SelfAttention
        >>> layer = SelfAttention(d_feature=16, new_representation="residual_norm")
        >>> mask = torch.tensor([[True] * 9, [True] * 5 + [False] * 4])
        >>> out = layer(torch.randn(2, 9, 16), mask, return_weights=True)
        >>> out.output.shape, out.weights.shape     # f^(new) [B, N, d_f], a [B, N, N]
        (torch.Size([2, 9, 16]), torch.Size([2, 9, 9]))
    """

    taxonomy = {"query_type": "Self-Attentive"}

    def __init__(
        self,
        d_feature: int,
        d_query: int | None = None,
        d_key: int | None = None,
        d_value: int | None = None,
        score: str | Score = "scaled_dot",
        align: str | Align = "softmax",
        new_representation: NewRepresentation = "context",
        d_hidden: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        d_key = d_key or d_feature
        d_query = d_query or d_key
        d_value = d_value or d_feature
        if new_representation not in ("context", "residual_norm"):
            raise ValueError(
                "new_representation must be 'context' (eq. 36) or 'residual_norm' (eq. 37), "
                f"got {new_representation!r}"
            )
        if new_representation == "residual_norm" and d_value != d_feature:
            raise ValueError(
                "new_representation='residual_norm' (eq. 37) adds c_i to f_i, so it needs "
                f"d_v = d_f, got d_v={d_value} and d_f={d_feature}"
            )
        self.d_feature, self.d_query, self.d_key, self.d_value = d_feature, d_query, d_key, d_value
        self.query_proj = nn.Linear(d_feature, d_query, bias=False)  # W_Q, eq. (35)
        self.key_proj = nn.Linear(d_feature, d_key, bias=False)  # W_K, eq. (1)
        self.value_proj = nn.Linear(d_feature, d_value, bias=False)  # W_V, eq. (1)
        self.score = build_score(score, d_query, d_key, d_hidden)
        self.score.check(d_query, d_key, 0)
        self.align = build_align(align, d_query, d_key)
        self.new_representation = new_representation
        self.norm = nn.LayerNorm(d_feature) if new_representation == "residual_norm" else None
        self.dropout = dropout

    def forward(
        self,
        features: Tensor,
        mask: Tensor | None = None,
        *,
        causal: bool = False,
        return_weights: bool = False,
    ) -> AttentionOutput:
        """New representations of ``features``, each from attention over all of them.

        Args:
            features: ``F [B, N, d_f]``.
            mask: bool ``[B, N]``, True = a real feature vector.
            causal: feature ``i`` attends only features ``j <= i`` (a decoder's self-attention).
            return_weights: include the weights ``[B, N, N]`` (row ``i``: feature ``i`` as query).

        Returns:
            :class:`AttentionOutput` with ``context C [B, N, d_v]``, ``output`` the new
            representations ``F^(new)`` (``[B, N, d_v]`` by eq. 36, ``[B, N, d_f]`` by eq. 37)
            and ``weights`` when asked.
        """
        _check_features("SelfAttention", features, self.d_feature, mask)
        pair_mask = None
        if mask is not None:
            # Padded vectors are neither keys nor queries: their rows come out all-zero.
            pair_mask = mask.unsqueeze(-1) & mask.unsqueeze(-2)  # [B, N, N]
        out = attention(
            self.query_proj(features),  # Q = F W_Q^T, eq. (35)
            self.key_proj(features),
            self.value_proj(features),
            score=self.score,
            align=self.align,
            mask=pair_mask,
            causal=causal,
            dropout=self.dropout if self.training else 0.0,
            return_weights=return_weights,
        )
        if self.norm is None:
            new = out.context  # eq. (36)
        else:
            new = self.norm(features + out.context)  # eq. (37)
            if mask is not None:
                new = new.masked_fill(~mask.unsqueeze(-1), 0.0)
        return dataclasses.replace(out, output=new)
