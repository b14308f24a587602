"""Multi-hop (multi-step) attention (survey §3.3.2, eq. 41-42, Fig. 10).

Attention is applied in ``S`` rounds ("hops") over the same keys and values. Before hop ``s`` the
query is transformed, possibly using the current context vector (eq. 41), and the query given to the
score function is the new query concatenated with the current context (eq. 42):

    q^(s+1) = transform(q^(s), c^(s))                                   (41)
    e_l^(s) = score(concat(q^(s+1), c^(s)), k_l)                        (42)
    c^(s+1) = Σ_l align(e^(s))_l v_l                                     (eq. 3-4)

with ``c^(0)`` the unweighted mean of the (real) value vectors. ``transform`` reads the query, the
context or their concatenation (the survey's three options), either through a learned layer
(:class:`LinearQueryTransform`) or, as in the question-answering model the survey generalises
([85]), by attending over the feature vectors the query came from
(:class:`AttentiveQueryTransform`). Hops share one set of weights ([85]) or each has its own ([88],
the Transformer).

Rows are vectors; every hop runs through :func:`attnkit.attention`, with any score and alignment.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.masks import masked_mean
from attnkit.core.scores import Activation, Score, build_score, resolve_activation

TransformSource = Literal["query", "context", "concat"]
_SOURCES = ("query", "context", "concat")


def _check_source(source: str) -> None:
    if source not in _SOURCES:
        raise ValueError(f"transform source must be one of {_SOURCES}, got {source!r}")


def _source_size(source: str, d_query: int, d_value: int) -> int:
    return {"query": d_query, "context": d_value, "concat": d_query + d_value}[source]


def _pick(source: str, query: Tensor, context: Tensor) -> Tensor:
    if source == "query":
        return query
    if source == "context":
        return context
    return torch.cat([query, context], dim=-1)


def _check_set(name: str, x: Tensor, d: int, mask: Tensor | None, what: str) -> None:
    """Raise ``ValueError`` unless ``x [B, N, d]`` and ``mask`` bool ``[B, N]``."""
    if x.dim() != 3 or x.shape[-1] != d:
        raise ValueError(f"{name} expects {what} [B, N, {d}], got {tuple(x.shape)}")
    if mask is None:
        return
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} expects a bool {what} mask (True = real), got {mask.dtype}")
    if tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"{name} expects a {what} mask [B, N] = {tuple(x.shape[:2])}, got {tuple(mask.shape)}"
        )


class LinearQueryTransform(nn.Module):
    """``q^(s+1) = act(W x + b)`` with ``x`` the query, the context or both (eq. 41).

    Args:
        d_query: ``d_q``, the size of the queries (in and out).
        d_value: ``d_v``, the size of the context vectors.
        source: ``"query"`` (``x = q^(s)``), ``"context"`` (``x = c^(s)``) or ``"concat"``
            (``x = concat(q^(s), c^(s))``).
        activation: ``act()``; a name (``"tanh"``, ``"identity"``, …) or a callable.

    ``self.linear.weight`` is ``W [d_q, d_x]``, ``self.linear.bias`` is ``b [d_q]``.

    Example::

        >>> transform = LinearQueryTransform(d_query=8, d_value=16, source="concat")
        >>> transform(torch.randn(2, 3, 8), torch.randn(2, 3, 16)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(
        self,
        d_query: int,
        d_value: int,
        source: TransformSource = "concat",
        activation: Activation = "tanh",
    ) -> None:
        super().__init__()
        _check_source(source)
        self.source = source
        self.linear = nn.Linear(_source_size(source, d_query, d_value), d_query)
        self.act = resolve_activation(activation)

    def forward(
        self,
        query: Tensor,
        context: Tensor,
        query_features: Tensor | None = None,
        query_mask: Tensor | None = None,
    ) -> Tensor:
        """``q^(s+1) [B, M, d_q]`` from ``query [B, M, d_q]`` and ``context [B, M, d_v]``.

        Args:
            query: ``q^(s) [B, M, d_q]``.
            context: ``c^(s) [B, M, d_v]``.
            query_features: unused (the attentive transform's).
            query_mask: unused (the attentive transform's).

        Returns:
            ``q^(s+1) [B, M, d_q]`` (eq. 41).
        """
        return self.act(self.linear(_pick(self.source, query, context)))


class AttentiveQueryTransform(nn.Module):
    """``q^(s+1)`` = attention over the query's feature vectors, asked by ``x`` (eq. 41, as [85]).

    The query came from a set of feature vectors (a question's words, say) ``Q_F [B, N_q, d_q]``.
    The next query is the context of an attention over them (keys = values = ``Q_F``) whose query
    is ``x``: the previous query (``"query"``, [85]), the previous context (``"context"``, as in
    LCR-Rot-hop and [88]) or both (``"concat"``).

    Args:
        d_query: ``d_q``, the size of the query feature vectors (and of the queries).
        d_value: ``d_v``, the size of the context vectors.
        source: what asks: ``"query"``, ``"context"`` or ``"concat"``.
        score: a score name or ``ak.scores.Score``, built for queries of the source's size and
            keys of size ``d_q``.
        align: an alignment name or ``ak.align.Align``.
        d_hidden: ``d_w`` of the additive score (default ``d_q``).

    Example::

        >>> transform = AttentiveQueryTransform(d_query=8, d_value=16)
        >>> question = torch.randn(2, 5, 8)  # the query's feature vectors Q_F
        >>> transform(torch.randn(2, 1, 8), torch.randn(2, 1, 16), question).shape
        torch.Size([2, 1, 8])
    """

    def __init__(
        self,
        d_query: int,
        d_value: int,
        source: TransformSource = "query",
        score: str | Score = "additive",
        align: str | Align = "softmax",
        d_hidden: int | None = None,
    ) -> None:
        super().__init__()
        _check_source(source)
        self.source = source
        self.d_query = d_query
        d_x = _source_size(source, d_query, d_value)
        self.score = build_score(score, d_x, d_query, d_hidden)
        self.score.check(d_x, d_query, 0)
        self.align = build_align(align, d_x, d_query)

    def forward(
        self,
        query: Tensor,
        context: Tensor,
        query_features: Tensor | None = None,
        query_mask: Tensor | None = None,
    ) -> Tensor:
        """``q^(s+1) [B, M, d_q]``; needs ``query_features [B, N_q, d_q]`` (and its mask).

        Args:
            query: ``q^(s) [B, M, d_q]``.
            context: ``c^(s) [B, M, d_v]``.
            query_features: ``Q_F [B, N_q, d_q]``, keys and values of the attention.
            query_mask: bool ``[B, N_q]``, True at real feature vectors (``None``: all).

        Returns:
            ``q^(s+1) [B, M, d_q]`` (eq. 41).
        """
        if query_features is None:
            raise ValueError(
                "AttentiveQueryTransform attends over the query's feature vectors: pass "
                "query_features [B, N_q, d_q] to the multi-hop module"
            )
        key_mask = None if query_mask is None else query_mask.unsqueeze(1)  # [B, 1, N_q]
        x = _pick(self.source, query, context)
        out = attention(
            x, query_features, query_features, score=self.score, align=self.align, mask=key_mask
        )
        return out.context


@dataclass(frozen=True, kw_only=True)
class MultiHopOutput(AttentionOutput):
    """What :class:`MultiHopAttention` returns (``(M,)``: absent for a single query ``[B, d_q]``).

    An :class:`~attnkit.AttentionOutput` (``context``, ``weights``, ``log_prob`` as there)
    with this mechanism's extra fields (keyword-only).

    Attributes:
        context: the final context ``c^(S)``, ``[B, (M,) d_v]``.
        contexts: ``c^(1) … c^(S)``, ``[B, S, (M,) d_v]``.
        queries: ``q^(1) … q^(S)``, ``[B, S, (M,) d_q]``.
        initial_query: ``q^(0)``, ``[B, (M,) d_q]``.
        initial_context: ``c^(0)``, the mean of the real value vectors, ``[B, d_v]``.
        weights: each hop's weights ``[B, S, (M,) N]`` when asked, else ``None``.
        log_prob: each hop's log-probability ``[B, S, (M,)]`` for stochastic alignments.

    Example::

        >>> hop = ak.mechanisms.MultiHopAttention(d_query=8, d_feature=16, num_hops=3)
        >>> out = hop(torch.randn(4, 8), torch.randn(4, 10, 16))
        >>> out.context.shape, out.contexts.shape
        (torch.Size([4, 16]), torch.Size([4, 3, 16]))
    """

    contexts: Tensor
    queries: Tensor
    initial_query: Tensor
    initial_context: Tensor


class MultiHopAttention(nn.Module):
    """Multi-hop attention: ``S`` rounds that refine the query and the context (eq. 41-42).

    Args:
        d_query: ``d_q``, the size of the queries.
        d_feature: ``d_f``, the size of the feature vectors.
        num_hops: ``S >= 1``.
        d_key: ``d_k``: a learned ``W_K [d_k, d_f]``; ``None`` keeps the features as keys.
        d_value: ``d_v``: a learned ``W_V [d_v, d_f]``; ``None`` keeps the features as values.
        score: a score name or ``ak.scores.Score``; its queries are ``concat(q^(s+1), c^(s))``,
            of size ``d_q + d_v`` (eq. 42), so dot-product scores need ``d_k = d_q + d_v``.
        align: an alignment name or ``ak.align.Align``.
        transform: ``"query"``, ``"context"`` or ``"concat"`` for a
            :class:`LinearQueryTransform` reading that source, or a transform module
            (``forward(query, context, query_features, query_mask) -> next query``), e.g.
            :class:`AttentiveQueryTransform`.
        share_weights: one transform, score and alignment for every hop ([85]: parameters do not
            grow with ``S``); ``False`` gives each hop its own (built from a name, or deep copies
            of a given object, each starting from the same values).
        d_hidden: ``d_w`` of the additive score (default ``d_k``).
        dropout: dropout on the attention weights, in training mode only.
        query_type: where the initial query comes from, in the survey's words (§3.3.1).

    Keys and values are computed once from the features (``W_K``, ``W_V`` shared by all hops).

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.multi_hop import MultiHopAttention
        >>> hop = MultiHopAttention(d_query=8, d_feature=16, num_hops=3, transform="concat")
        >>> out = hop(torch.randn(4, 8), torch.randn(4, 10, 16), return_weights=True)
        >>> out.context.shape, out.contexts.shape, out.weights.shape
        (torch.Size([4, 16]), torch.Size([4, 3, 16]), torch.Size([4, 3, 10]))
    """

    def __init__(
        self,
        d_query: int,
        d_feature: int,
        num_hops: int,
        d_key: int | None = None,
        d_value: int | None = None,
        score: str | Score = "additive",
        align: str | Align = "softmax",
        transform: TransformSource | nn.Module = "concat",
        share_weights: bool = True,
        d_hidden: int | None = None,
        dropout: float = 0.0,
        query_type: str = "Basic",
    ) -> None:
        super().__init__()
        if num_hops < 1:
            raise ValueError(f"num_hops must be >= 1, got {num_hops}")
        self.d_query, self.d_feature, self.num_hops = d_query, d_feature, num_hops
        self.d_key, self.d_value = d_key or d_feature, d_value or d_feature
        self.key_proj = nn.Linear(d_feature, d_key, bias=False) if d_key else nn.Identity()
        self.value_proj = nn.Linear(d_feature, d_value, bias=False) if d_value else nn.Identity()
        d_score_query = d_query + self.d_value  # concat(q^(s+1), c^(s)), eq. (42)
        copies = 1 if share_weights else num_hops

        def per_hop(make: Callable[[], nn.Module]) -> nn.ModuleList:
            # A given object serves every hop when weights are shared; otherwise each hop gets
            # its own copy, so no parameters are shared by accident.
            if copies == 1:
                return nn.ModuleList([make()])
            return nn.ModuleList(copy.deepcopy(make()) for _ in range(copies))

        if isinstance(transform, str):
            _check_source(transform)
            source = transform
            self.transforms = per_hop(lambda: LinearQueryTransform(d_query, self.d_value, source))
        elif isinstance(transform, nn.Module):
            given = transform
            self.transforms = per_hop(lambda: given)
        else:
            raise TypeError(
                "transform must be 'query', 'context', 'concat' or an nn.Module, "
                f"got {type(transform).__name__}"
            )
        build_score(score, d_score_query, self.d_key, d_hidden).check(d_score_query, self.d_key, 0)
        self.scores = per_hop(lambda: build_score(score, d_score_query, self.d_key, d_hidden))
        self.aligns = per_hop(lambda: build_align(align, d_score_query, self.d_key))
        self.share_weights = share_weights
        self.dropout = dropout
        self.query_type = query_type

    @property
    def taxonomy(self) -> dict[str, str]:
        return {"query_multiplicity": "Multi-Hop", "query_type": self.query_type}

    def forward(
        self,
        query: Tensor | None,
        features: Tensor,
        mask: Tensor | None = None,
        *,
        query_features: Tensor | None = None,
        query_mask: Tensor | None = None,
        return_weights: bool = False,
    ) -> MultiHopOutput:
        """Run the ``S`` hops.

        Args:
            query: the initial query ``q^(0)``, ``[B, d_q]`` or ``[B, M, d_q]``; ``None`` takes
                the mean of the real ``query_features`` (as [85]).
            features: ``F [B, N, d_f]``.
            mask: bool ``[B, N]``, True = a real feature vector; padded ones get zero weight in
                every hop and are left out of ``c^(0)``.
            query_features: ``[B, N_q, d_q]``, the feature vectors the query came from, for
                :class:`AttentiveQueryTransform` and for ``query=None``.
            query_mask: bool ``[B, N_q]`` for ``query_features``.
            return_weights: include each hop's weights.

        Returns:
            :class:`MultiHopOutput`.
        """
        name = "MultiHopAttention"
        _check_set(name, features, self.d_feature, mask, "features")
        if query_features is not None:
            _check_set(name, query_features, self.d_query, query_mask, "query_features")
            if query_features.shape[0] != features.shape[0]:
                raise ValueError(
                    f"{name}: query_features {tuple(query_features.shape)} and features "
                    f"{tuple(features.shape)} have different batch sizes"
                )
        if query is None:
            if query_features is None:
                raise ValueError(f"{name} needs a query [B, (M,) d_q] or query_features")
            query = masked_mean(query_features, query_mask)  # q^(0) of [85]
        if query.dim() not in (2, 3) or query.shape[-1] != self.d_query:
            raise ValueError(
                f"{name} expects query [B, d_q={self.d_query}] or [B, M, d_q], "
                f"got {tuple(query.shape)}"
            )
        if query.shape[0] != features.shape[0]:
            raise ValueError(
                f"{name}: query {tuple(query.shape)} and features {tuple(features.shape)} have "
                "different batch sizes"
            )
        single = query.dim() == 2
        q = query.unsqueeze(1) if single else query  # [B, M, d_q]
        keys, values = self.key_proj(features), self.value_proj(features)  # eq. (1)
        initial_context = masked_mean(values, mask)  # c^(0) [B, d_v]
        c = initial_context.unsqueeze(1).expand(-1, q.shape[1], -1)  # [B, M, d_v]
        key_mask = None if mask is None else mask.unsqueeze(1)  # [B, 1, N]
        dropout = self.dropout if self.training else 0.0

        contexts, queries, weights, log_probs = [], [], [], []
        for s in range(self.num_hops):
            i = 0 if self.share_weights else s
            q = self.transforms[i](q, c, query_features, query_mask)  # eq. (41)
            expected = (*c.shape[:-1], self.d_query)
            if tuple(q.shape) != expected:
                raise ValueError(
                    f"{name}: hop {s}'s transform must return the next query {expected}, "
                    f"got {tuple(q.shape)}"
                )
            out = attention(
                torch.cat([q, c], dim=-1),  # eq. (42)
                keys,
                values,
                score=cast(Score, self.scores[i]),
                align=cast(Align, self.aligns[i]),
                mask=key_mask,
                dropout=dropout,
                return_weights=return_weights,
            )
            c = out.context
            contexts.append(c)
            queries.append(q)
            weights.append(out.weights)
            log_probs.append(out.log_prob)

        def stack(ts: list[Tensor | None]) -> Tensor | None:
            if any(t is None for t in ts):
                return None
            stacked = torch.stack(ts, dim=1)  # type: ignore[arg-type]  # [B, S, M, ...]
            return stacked.squeeze(2) if single else stacked

        return MultiHopOutput(
            context=c.squeeze(1) if single else c,
            contexts=stack(contexts),  # type: ignore[arg-type]
            queries=stack(queries),  # type: ignore[arg-type]
            initial_query=query,
            initial_context=initial_context,
            weights=stack(weights),
            log_prob=stack(log_probs),
        )
