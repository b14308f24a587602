"""Attention-via-attention (survey §3.1.2, Fig. 7; Zhao & Zhang): a word-level context steers the
character-level attention.

    q^(c) ─► Attention Module_w over F^(w) ─► c^(w) ─┐
    concat(q^(c), c^(w)) ─► Attention Module_c over F^(c) ─► c^(c)
    c = concat(c^(w), c^(c))

Two levels of the same input are attended, each with its own feature matrix: the higher level
(words, ``F^(w)``) first, with the model's query ``q^(c)`` (e.g. a character-level decoder's
state); then the lower level (characters, ``F^(c)``), whose query is the concatenation of
``q^(c)`` and the word context ``c^(w)`` ("if we know which words are most important, it becomes
easier to identify which characters are most important"). The output is the concatenation of the
two context vectors. Each module is the general attention module (eq. 1-4) with its own keys,
values, score and alignment.

Rows are vectors: ``F^(w)`` is ``[B, n_w, d_f^(w)]``, ``F^(c)`` is ``[B, n_c, d_f^(c)]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.general import GeneralAttention
from attnkit.mechanisms.hierarchical import AlignSpec, ScoreSpec, per_level


@dataclass(frozen=True, kw_only=True)
class AttentionViaAttentionOutput(AttentionOutput):
    """What :class:`AttentionViaAttention` returns (without the ``M`` axis for a single query).

    An :class:`~attnkit.AttentionOutput` (``context``, ``weights``, ``log_prob`` as there)
    with this mechanism's extra fields (keyword-only). ``weights`` is None: the two levels'
    weights are ``high_weights`` and ``low_weights``.

    Attributes:
        context: ``concat(c^(w), c^(c))`` ``[B, M, d_v^(w) + d_v^(c)]``.
        high_context: the word-level (higher-level) context ``c^(w)`` ``[B, M, d_v^(w)]``.
        low_context: the character-level (lower-level) context ``c^(c)`` ``[B, M, d_v^(c)]``.
        high_weights: word-level weights ``[B, M, n_w]``, when ``return_weights=True``.
        low_weights: character-level weights ``[B, M, n_c]``, when ``return_weights=True``.

    Example::

        >>> ava = ak.mechanisms.AttentionViaAttention(d_query=8, d_high=12, d_low=4)
        >>> out = ava(torch.randn(2, 8), torch.randn(2, 6, 12), torch.randn(2, 30, 4))
        >>> out.high_context.shape, out.low_context.shape, out.context.shape
        (torch.Size([2, 12]), torch.Size([2, 4]), torch.Size([2, 16]))
    """

    high_context: Tensor
    low_context: Tensor
    high_weights: Tensor | None = None
    low_weights: Tensor | None = None


class AttentionViaAttention(nn.Module):
    """Attention-via-attention (Fig. 7): higher-level attention first, its context joins the query
    of the lower-level attention.

    ``c^(w) = Σ_l a_l^(w) v_l^(w)`` with ``a^(w) = align(score(q, K^(w)))``;
    ``c^(c) = Σ_l a_l^(c) v_l^(c)`` with ``a^(c) = align(score(concat(q, c^(w)), K^(c)))``;
    ``c = concat(c^(w), c^(c))``. Keys and values of each level are ``K = F W_K^T``,
    ``V = F W_V^T`` (eq. 1; identity when the sizes are not given). The survey numbers no equation
    here; each module is eq. (1)-(4).

    Args:
        d_query: size of the query ``q^(c)``, ``d_q``.
        d_high: size of the higher-level (word) feature vectors ``d_f^(w)``.
        d_low: size of the lower-level (character) feature vectors ``d_f^(c)``.
        d_high_key, d_high_value: ``d_k^(w)``, ``d_v^(w)``: learned projections of ``F^(w)``;
            ``None`` keeps the features (``W = I``).
        d_low_key, d_low_value: ``d_k^(c)``, ``d_v^(c)`` likewise for ``F^(c)``.
        score: a score name or object for both levels, or a pair ``(high, low)``. Parametric
            names are built with each level's sizes: the lower level's query has size
            ``d_q + d_v^(w)``.
        align: an alignment name or object, or a pair ``(high, low)``.
        d_hidden: ``d_w`` of the additive score (default: the level's key size).
        dropout: dropout on the attention weights of both levels, in training mode only.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.attention_via_attention import AttentionViaAttention
        >>> ava = AttentionViaAttention(d_query=32, d_high=64, d_low=16)
        >>> q = torch.randn(2, 32)                                # decoder state, one per example
        >>> words, chars = torch.randn(2, 6, 64), torch.randn(2, 30, 16)
        >>> out = ava(q, words, chars, return_weights=True)
        >>> out.context.shape, out.high_weights.shape, out.low_weights.shape
        (torch.Size([2, 80]), torch.Size([2, 6]), torch.Size([2, 30]))
    """

    taxonomy = {"feature_levels": "Attention-via-Attention"}

    def __init__(
        self,
        d_query: int,
        d_high: int,
        d_low: int,
        *,
        d_high_key: int | None = None,
        d_high_value: int | None = None,
        d_low_key: int | None = None,
        d_low_value: int | None = None,
        score: ScoreSpec | tuple[ScoreSpec, ScoreSpec] = "additive",
        align: AlignSpec | tuple[AlignSpec, AlignSpec] = "softmax",
        d_hidden: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        high_score, low_score = per_level(score, "score")
        high_align, low_align = per_level(align, "align")
        self.d_query = d_query
        self.high_attention = GeneralAttention(  # Attention Module_w
            d_query,
            d_high,
            d_key=d_high_key,
            d_value=d_high_value,
            score=high_score,
            align=high_align,
            d_hidden=d_hidden,
            dropout=dropout,
            query_type="Basic",
        )
        self.low_attention = GeneralAttention(  # Attention Module_c, query concat(q, c^(w))
            d_query + self.high_attention.d_value,
            d_low,
            d_key=d_low_key,
            d_value=d_low_value,
            score=low_score,
            align=low_align,
            d_hidden=d_hidden,
            dropout=dropout,
            query_type="Basic",
        )

    def forward(
        self,
        query: Tensor,
        high_features: Tensor,
        low_features: Tensor,
        *,
        high_mask: Tensor | None = None,
        low_mask: Tensor | None = None,
        return_weights: bool = False,
    ) -> AttentionViaAttentionOutput:
        """Attend the higher level, then the lower level with the higher level's context.

        Args:
            query: ``q^(c)`` ``[B, M, d_q]`` (e.g. one per decoding step) or ``[B, d_q]``.
            high_features: ``F^(w)`` ``[B, n_w, d_f^(w)]``.
            low_features: ``F^(c)`` ``[B, n_c, d_f^(c)]``.
            high_mask: bool ``[B, n_w]``, True = a real word; padded words get exactly zero weight.
            low_mask: bool ``[B, n_c]``, True = a real character.
            return_weights: include the weights of both levels.

        Returns:
            :class:`AttentionViaAttentionOutput`. A level with no real element gives a zero
            context and zero weights (the lower level then attends with ``concat(q, 0)``).
        """
        single = isinstance(query, Tensor) and query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        if not isinstance(query, Tensor) or query.dim() != 3 or query.shape[-1] != self.d_query:
            given = tuple(query.shape) if isinstance(query, Tensor) else type(query).__name__
            raise ValueError(
                f"query must be [B, M, {self.d_query}] or [B, {self.d_query}], got {given}"
            )
        high = self.high_attention(
            query,
            high_features,
            _padding("high_mask", high_mask, high_features),
            return_weights=return_weights,
        )
        low_query = torch.cat([query, high.context], dim=-1)  # concat(q^(c), c^(w))
        low = self.low_attention(
            low_query,
            low_features,
            _padding("low_mask", low_mask, low_features),
            return_weights=return_weights,
        )
        out = AttentionViaAttentionOutput(
            context=torch.cat([high.context, low.context], dim=-1),  # concat(c^(w), c^(c))
            high_context=high.context,
            low_context=low.context,
            high_weights=high.weights,
            low_weights=low.weights,
        )
        if single:
            out = AttentionViaAttentionOutput(
                context=out.context.squeeze(1),
                high_context=out.high_context.squeeze(1),
                low_context=out.low_context.squeeze(1),
                high_weights=_drop_query_axis(out.high_weights),
                low_weights=_drop_query_axis(out.low_weights),
            )
        return out


def _padding(name: str, mask: Tensor | None, features: Tensor) -> Tensor | None:
    """Key padding ``[B, N]`` as a mask over all queries ``[B, 1, N]``."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        given = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a bool tensor [B, N] (True = real), got {given}")
    if not isinstance(features, Tensor) or features.dim() != 3:
        return mask  # GeneralAttention reports the features' shape
    if tuple(mask.shape) != tuple(features.shape[:2]):
        raise ValueError(
            f"{name} must have shape {tuple(features.shape[:2])} (the features' [B, N]), "
            f"got {tuple(mask.shape)}"
        )
    return mask.unsqueeze(1)


def _drop_query_axis(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.squeeze(1)
