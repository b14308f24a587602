"""Transformer layers and stacks (Vaswani et al. 2017) with any attention, positions and KV caches.

Drop-ins for ``torch.nn.TransformerEncoderLayer``, ``TransformerDecoderLayer``,
``TransformerEncoder``, ``TransformerDecoder`` and ``Transformer``: the same constructor arguments
(defaults included: ``batch_first=False``, ``norm_first=False``, post-norm), parameter names
(``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1..3``; ``layers.i``,
``norm``; ``encoder``, ``decoder``) and ``forward`` conventions (torch's masks: bool ``True`` =
NOT allowed, or float added), so ``load_state_dict(torch_module.state_dict())`` reproduces torch's
outputs. Each attention is an :class:`attnkit.MultiHeadAttention`, so it takes any score and
alignment of the survey (§3.2) and grouped-query heads; positions enter through a rotary
embedding or a score_mod position bias (ALiBi, T5); decoders decode incrementally with KV caches.

Post-norm (the paper):   x = LN(x + Drop(SA(x)));            x = LN(x + Drop(FF(x)))
Pre-norm (norm_first):   x = x + Drop(SA(LN(x)));            x = x + Drop(FF(LN(x)))
FF(x) = W_2 Drop(act(W_1 x + b_1)) + b_2

Taxonomy: the self-attention is "Self-Attentive" and "Multi-Head"; the decoder's cross-attention
queries come from the decoder's state: "Basic" (§3.3.1); a stack of layers refines its queries
layer after layer: "Multi-Hop" (§3.3.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.kinds import AttentionKind, kind_name
from attnkit.core.scores import Score
from attnkit.layers.attention import (
    LayerOutput,
    PositionBias,
    Rotary,
    cross_attend,
    self_attend,
)
from attnkit.layers.kv_cache import CrossAttentionCache, DecoderLayerCache, KVCache
from attnkit.mechanisms.multi_head import MultiHeadAttention
from attnkit.mechanisms.nested import pad_nested

Activation = str | Callable[[Tensor], Tensor]


def _activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise ValueError(f"activation should be 'relu', 'gelu' or a callable, got {activation!r}")


#: what a layer's ``attention=`` takes: a kind name, a configured kind object, or a ready module
AttentionSpec = str | AttentionKind | MultiHeadAttention


def _attention_module(
    spec: AttentionSpec,
    d_model: int,
    nhead: int,
    dropout: float,
    bias: bool,
    factory: dict[str, Any],
    query_type: str,
    batch_first: bool,
    **options: Any,
) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` from an attention-kind name or object, or the given module as is.
    Built in the layer's layout (``batch_first``), as torch's layers build theirs.

    A kind other than ``"exact"`` gets no attention-weight dropout (those kinds refuse it: most
    never form the weights); the layer's residual and feed-forward dropout stay.
    """
    if isinstance(spec, MultiHeadAttention):
        if spec.embed_dim != d_model:
            raise ValueError(
                f"the attention module's embed_dim ({spec.embed_dim}) must equal d_model "
                f"({d_model})"
            )
        if not spec.batch_first:
            raise ValueError(
                "a given attention module must have batch_first=True (the layer keeps its own "
                "batch_first for its inputs)"
            )
        return spec
    if not isinstance(spec, (str, AttentionKind)):
        raise TypeError(
            "attention must be a kind name, an attention kind object or an "
            f"ak.MultiHeadAttention, got {type(spec).__name__}"
        )
    exact = kind_name(spec) == "exact"
    return MultiHeadAttention(
        d_model,
        nhead,
        dropout=dropout if exact else 0.0,
        bias=bias,
        batch_first=batch_first,
        attention=spec,
        query_type=query_type,
        **options,
        **factory,
    )


def kind_attention(kind: str | AttentionKind, d_model: int, nhead: int) -> str | MultiHeadAttention:
    """An attention kind as a layer's ``attention`` argument.

    ``"exact"`` stays a name, so the layer builds its attention as before (torch's, with the
    layer's ``dropout`` on the attention weights). Any other kind (a name or object of
    ``attnkit.efficient``) becomes a batch-first :class:`MultiHeadAttention` without
    attention-weight dropout: those kinds never form the weight matrix, so there is nothing to
    drop (and they refuse ``dropout > 0``); the layer's residual and feed-forward dropout stay.

    Raises:
        ValueError: ``kind`` is not a registered name (the message lists the known kinds).
    """
    if isinstance(kind, str) and kind == "exact":
        return kind
    return MultiHeadAttention(d_model, nhead, batch_first=True, attention=kind)


def _given(**options: Any) -> dict[str, Any]:
    """attnkit's per-call extras that are set (not ``None`` or ``False``): a block receives them
    only when given, so a block overridden with torch's signature keeps working without them."""
    return {
        name: value for name, value in options.items() if value is not None and value is not False
    }


class TransformerLayer(nn.Module):
    """What :class:`TransformerEncoderLayer` and :class:`TransformerDecoderLayer` share: their
    arguments (documented here once), the residual connections around each block (post-norm
    or ``norm_first``) and the feed-forward block.

    The arguments are torch's, in torch's order and with its defaults, then attnkit's keyword-only
    ones. Each layer writes each block once: ``x = residual(x, norm_i, block_i)`` where a block is
    ``Drop(SA(x))``, ``Drop(CA(x, memory))`` or ``Drop(FF(x))``; the attention blocks take the
    layer's positions (``rotary``, ``position_bias``), the call's KV cache and ``lengths``, and
    return the weights when asked (``need_weights=True``: a :class:`LayerOutput`).

    Args:
        d_model: ``E``, the size of the inputs and outputs.
        nhead: ``H``, the number of heads (``E`` divisible by ``H``).
        dim_feedforward: the feed-forward block's hidden size.
        dropout: on the attention weights, after each block and inside the feed-forward block.
        activation: of the feed-forward block: ``"relu"``, ``"gelu"`` or a callable.
        layer_norm_eps: of the layer norms.
        batch_first: inputs and outputs ``[B, L, E]`` instead of ``[L, B, E]``.
        norm_first: pre-norm (``x + Block(Norm(x))``) instead of post-norm.
        bias: the linear layers and layer norms learn biases.
        device: of the parameters.
        dtype: of the parameters.
        attention: keyword-only, as all below (attnkit's): an attention-kind name (``"exact"``
            or one of :func:`attnkit.core.kinds.kind_names`), a configured kind object
            (``SlidingWindowAttention(window=512)``, owned by this layer's attention: give each
            layer its own), or a ready :class:`attnkit.MultiHeadAttention` (``embed_dim ==
            d_model`` and ``batch_first=True``; the layer's own ``batch_first`` sets its inputs'
            layout). Kinds other than ``"exact"`` run without attention-weight dropout.
        cross_attention: as ``attention``, for the decoder's cross-attention to the memory
            (``multihead_attn``, whose queries are "Basic": they come from the decoder's state,
            §3.3.1); ``None`` (the encoder): no cross-attention.
        score: any score name or object (or one per head), given to ``MultiHeadAttention``.
        align: any alignment name or object, given to ``MultiHeadAttention``.
        num_kv_heads: ``G``, grouped-query attention (``None``: one per query head).
        rotary: rotates queries and keys by position (:class:`~attnkit.layers.RotaryEmbedding`),
            in the self-attention.
        position_bias: a score_mod position bias (:class:`~attnkit.layers.ALiBi`,
            :class:`~attnkit.layers.RelativePositionBias`), in the self-attention.

    Example::

        >>> layer = TransformerEncoderLayer(32, 4, 64, batch_first=True, score="additive")
        >>> isinstance(layer, TransformerLayer), layer.norm_first
        (True, False)
    """

    self_attn: MultiHeadAttention
    multihead_attn: MultiHeadAttention
    rotary: Rotary | None
    position_bias: PositionBias | None
    activation: Callable[[Tensor], Tensor]
    norm1: nn.LayerNorm
    norm2: nn.LayerNorm
    norm3: nn.LayerNorm
    dropout1: nn.Dropout
    dropout2: nn.Dropout
    dropout3: nn.Dropout

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int,
        dropout: float,
        activation: Activation,
        layer_norm_eps: float,
        batch_first: bool,
        norm_first: bool,
        bias: bool,
        device: torch.device | str | None,
        dtype: torch.dtype | None,
        *,
        attention: AttentionSpec,
        cross_attention: AttentionSpec | None,
        score: str | Score | Sequence[str | Score],
        align: str | Align,
        num_kv_heads: int | None,
        rotary: Rotary | None,
        position_bias: PositionBias | None,
    ) -> None:
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        options: dict[str, Any] = {"score": score, "align": align, "num_kv_heads": num_kv_heads}
        layout = {"batch_first": batch_first}
        self.self_attn = _attention_module(
            attention, d_model, nhead, dropout, bias, factory, "Self-Attentive", **layout, **options
        )
        norms = 2
        if cross_attention is not None:
            self.multihead_attn = _attention_module(
                cross_attention,
                d_model,
                nhead,
                dropout,
                bias,
                factory,
                "Basic",
                **layout,
                **options,
            )
            norms = 3
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first, self.batch_first = norm_first, batch_first
        for i in range(1, norms + 1):
            setattr(
                self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
            )
            setattr(self, f"dropout{i}", nn.Dropout(dropout))
        self.activation = _activation(activation)
        self.rotary, self.position_bias = rotary, position_bias

    def _feed_forward(self, x: Tensor) -> Tensor:
        """``FF(x) = W_2 Drop(act(W_1 x + b_1)) + b_2``, without the residual dropout."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _batch_first(self, x: Tensor) -> Tensor:
        """``[B, L, E]`` from the user's layout (torch's: ``[L, B, E]`` unless ``batch_first``);
        the same swap takes it back."""
        return x if self.batch_first or x.dim() == 2 else x.transpose(0, 1)

    def _to(self, mha: MultiHeadAttention, x: Tensor) -> Tensor:
        """``x`` from the layer's layout to ``mha``'s (they differ only for a given module, which
        is batch-first); the same swap takes the output back."""
        swap = x.dim() == 3 and mha.batch_first != self.batch_first
        return x.transpose(0, 1) if swap else x

    def _back(
        self, mha: MultiHeadAttention, out: Tensor | LayerOutput, dropout: nn.Dropout
    ) -> Tensor | LayerOutput:
        """An attention's result in the layer's layout, after the block's residual dropout (the
        weights, when asked, stay before dropout: the alignment a model reads)."""
        if isinstance(out, LayerOutput):
            return LayerOutput(dropout(self._to(mha, out.output)), out.weights)
        return dropout(self._to(mha, out))

    def _residual(
        self, x: Tensor, norm: nn.Module, block: Callable[[Tensor], Tensor | LayerOutput]
    ) -> tuple[Tensor, Tensor | None]:
        """``x + block(norm(x))`` (``norm_first``) or ``norm(x + block(x))``, and the block's
        attention weights when it returns them."""
        out = block(norm(x) if self.norm_first else x)
        weights = None
        if isinstance(out, LayerOutput):
            out, weights = out.output, out.weights
        return (x + out if self.norm_first else norm(x + out)), weights

    def _sa_block(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
        *,
        cache: KVCache | None = None,
        lengths: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | LayerOutput:
        """The self-attention block ``Drop(SA(x))`` (``dropout1``) in the layer's layout, with
        the layer's positions and the call's cache and ``lengths`` (:func:`self_attend`).
        Overridable with torch's signature: ``forward`` passes the keyword-only extras only when
        a call sets them (with ``need_weights``, a :class:`LayerOutput`)."""
        mha = self.self_attn
        out = self_attend(
            mha,
            self._to(mha, x),
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            rotary=self.rotary,
            position_bias=self.position_bias,
            cache=cache,
            lengths=lengths,
            need_weights=need_weights,
        )
        return self._back(mha, out, self.dropout1)

    @staticmethod
    def _output(x: Tensor, weights: Tensor | None, need_weights: bool) -> Tensor | LayerOutput:
        if not need_weights:
            return x
        assert weights is not None
        return LayerOutput(x, weights)


class TransformerEncoderLayer(TransformerLayer):
    """Self-attention and a feed-forward block (torch's ``TransformerEncoderLayer``, a drop-in:
    its constructor, parameter names, ``forward`` and overridable ``_sa_block`` / ``_ff_block``).

    The arguments are described once, in :class:`TransformerLayer`; this layer has no
    ``cross_attention``.

    Example::

        >>> layer = TransformerEncoderLayer(32, 4, 64, batch_first=True, score="additive")
        >>> layer(torch.randn(2, 7, 32)).shape
        torch.Size([2, 7, 32])
        >>> layer(torch.randn(2, 7, 32), need_weights=True).weights.shape
        torch.Size([2, 4, 7, 7])
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        attention: AttentionSpec = "exact",
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
        num_kv_heads: int | None = None,
        rotary: Rotary | None = None,
        position_bias: PositionBias | None = None,
    ) -> None:
        # torch's signature, written out (positional order included) so that help() and type
        # checkers show it; the decoder layer repeats it with cross_attention. The body is shared.
        super().__init__(
            d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
            norm_first, bias, device, dtype, attention=attention, cross_attention=None,
            score=score, align=align, num_kv_heads=num_kv_heads, rotary=rotary,
            position_bias=position_bias,
        )  # fmt: skip
        # torch's flag for its fused kernel: 1 relu, 2 gelu, 0 any other activation
        act = self.activation
        if act is F.relu or isinstance(act, nn.ReLU):
            self.activation_relu_or_gelu = 1
        elif act is F.gelu or isinstance(act, nn.GELU):
            self.activation_relu_or_gelu = 2
        else:
            self.activation_relu_or_gelu = 0

    def _ff_block(self, x: Tensor) -> Tensor:
        """torch's feed-forward block: ``Drop(FF(x))`` (``dropout2``); overridable."""
        return self.dropout2(self._feed_forward(x))

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        *,
        cache: KVCache | None = None,
        lengths: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | LayerOutput:
        """torch's forward; with ``cache`` (decoder-only models) ``src`` holds the next tokens
        and attends them and every cached one causally (``lengths [B]``: real tokens per row).

        ``src`` may be a nested tensor (strided or jagged, ``batch_first``; no masks): the
        output is nested like it (see :mod:`attnkit.mechanisms.nested`).

        Args:
            src: ``[L, B, E]`` (``[B, L, E]`` with ``batch_first``, ``[L, E]`` unbatched).
            src_mask: ``[L, L]`` or ``[B·H, L, L]``, bool (True = may *not* attend, torch's
                convention) or float (added to the scores).
            src_key_padding_mask: ``[B, L]``, True (or ``-inf``) at padding.
            is_causal: a hint that ``src_mask`` is the causal mask (or, with no mask, causal).
            cache: a :class:`~attnkit.layers.KVCache` for incremental decoding.
            lengths: ``[B]``, the real tokens of each row (with ``cache``).
            need_weights: also return the self-attention weights per head, before dropout.

        Returns:
            The layer's output, the shape of ``src``; with ``need_weights`` a
            :class:`LayerOutput` of it and the weights ``[B, H, L, N]`` (``N = L``, or the
            tokens the cache holds).
        """
        if src.is_nested:
            if src_mask is not None or src_key_padding_mask is not None or cache is not None:
                raise ValueError("a nested src takes no src_mask, src_key_padding_mask or cache")
            if need_weights:
                raise ValueError("a nested src takes no need_weights (pad it to read the weights)")
            if not self.batch_first:
                raise ValueError("nested tensors need batch_first=True")
            batch = pad_nested(src, "src")
            out = self(batch.values, None, batch.padding, is_causal, lengths=lengths)
            return batch.nested(out)
        extras = _given(cache=cache, lengths=lengths, need_weights=need_weights)

        def sa(x: Tensor) -> Tensor | LayerOutput:
            return self._sa_block(x, src_mask, src_key_padding_mask, is_causal=is_causal, **extras)

        x, weights = self._residual(src, self.norm1, sa)
        x, _ = self._residual(x, self.norm2, self._ff_block)
        return self._output(x, weights, need_weights)


class TransformerDecoderLayer(TransformerLayer):
    """Self-attention, cross-attention to the encoder's memory, and a feed-forward block
    (torch's ``TransformerDecoderLayer``, a drop-in: its constructor, parameter names,
    ``forward`` and overridable ``_sa_block`` / ``_mha_block`` / ``_ff_block``).

    The arguments are described once, in :class:`TransformerLayer`; positions (``rotary``,
    ``position_bias``) apply to the self-attention only.

    Example::

        >>> layer = TransformerDecoderLayer(32, 4, 64, batch_first=True)
        >>> tgt, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
        >>> layer(tgt, memory).shape
        torch.Size([2, 5, 32])
        >>> layer(tgt, memory, need_weights=True).weights.shape  # the cross-attention's
        torch.Size([2, 4, 5, 7])
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        attention: AttentionSpec = "exact",
        cross_attention: AttentionSpec = "exact",
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
        num_kv_heads: int | None = None,
        rotary: Rotary | None = None,
        position_bias: PositionBias | None = None,
    ) -> None:
        # torch's signature (see TransformerEncoderLayer.__init__); the body is shared
        super().__init__(
            d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
            norm_first, bias, device, dtype, attention=attention,
            cross_attention=cross_attention, score=score, align=align,
            num_kv_heads=num_kv_heads, rotary=rotary, position_bias=position_bias,
        )  # fmt: skip

    def _mha_block(
        self,
        x: Tensor,
        mem: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
        *,
        cache: CrossAttentionCache | None = None,
        need_weights: bool = False,
    ) -> Tensor | LayerOutput:
        """The cross-attention block ``Drop(CA(x, mem))`` (``dropout2``) in the layer's layout,
        with the call's cache (:func:`cross_attend`). Overridable with torch's signature:
        ``forward`` passes the keyword-only extras only when a call sets them (with
        ``need_weights``, a :class:`LayerOutput`)."""
        mha = self.multihead_attn
        out = cross_attend(
            mha,
            self._to(mha, x),
            self._to(mha, mem),
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            cache=cache,
            need_weights=need_weights,
        )
        return self._back(mha, out, self.dropout2)

    def _ff_block(self, x: Tensor) -> Tensor:
        """torch's feed-forward block: ``Drop(FF(x))`` (``dropout3``); overridable."""
        return self.dropout3(self._feed_forward(x))

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
        *,
        cache: DecoderLayerCache | None = None,
        lengths: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | LayerOutput:
        """torch's forward; with ``cache``, ``tgt`` holds the next target tokens (causal over
        the cached ones), and the memory's keys/values are projected on the first call only.

        ``tgt`` and ``memory`` may be nested tensors (``batch_first``; no masks, no cache): the
        output is nested like ``tgt``.

        Args:
            tgt: ``[M, B, E]`` (``[B, M, E]`` with ``batch_first``, ``[M, E]`` unbatched).
            memory: the encoder's output ``[N, B, E]`` (``[B, N, E]`` with ``batch_first``).
            tgt_mask: ``[M, M]`` or ``[B·H, M, M]``, bool (True = may *not* attend) or float.
            memory_mask: ``[M, B]`` or ``[B·H, M, N]``, bool or float.
            tgt_key_padding_mask: ``[B, M]``, True at padding.
            memory_key_padding_mask: ``[B, N]``, True at padding.
            tgt_is_causal: a hint that ``tgt_mask`` is the causal mask.
            memory_is_causal: a hint that ``memory_mask`` is the causal mask.
            cache: a :class:`~attnkit.layers.DecoderLayerCache` for incremental decoding.
            lengths: ``[B]``, the real target tokens of each row (with ``cache``).
            need_weights: also return the cross-attention weights per head, before dropout.

        Returns:
            The output, the shape of ``tgt``; with ``need_weights`` a :class:`LayerOutput` of
            it and the cross-attention weights ``[B, H, M, N]``.
        """
        if tgt.is_nested or memory.is_nested:
            masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)
            if any(m is not None for m in masks) or cache is not None or need_weights:
                raise ValueError("nested tgt/memory take no masks, cache or need_weights")
            if not self.batch_first:
                raise ValueError("nested tensors need batch_first=True")
            target, source = pad_nested(tgt, "tgt"), pad_nested(memory, "memory")
            out = self(
                target.values, source.values, None, None, target.padding, source.padding,
                tgt_is_causal, memory_is_causal, lengths=lengths,
            )  # fmt: skip
            assert isinstance(out, Tensor)
            return target.nested(out)
        self_extras = _given(cache=None if cache is None else cache.self_attn, lengths=lengths)
        cross_extras = _given(
            cache=None if cache is None else cache.cross_attn, need_weights=need_weights
        )
        tgt_is_causal = bool(tgt_is_causal)

        def sa(x: Tensor) -> Tensor | LayerOutput:
            causal = tgt_is_causal
            return self._sa_block(x, tgt_mask, tgt_key_padding_mask, causal, **self_extras)

        def ca(x: Tensor) -> Tensor | LayerOutput:
            padding, causal = memory_key_padding_mask, memory_is_causal
            return self._mha_block(x, memory, memory_mask, padding, causal, **cross_extras)

        x, _ = self._residual(tgt, self.norm1, sa)
        x, weights = self._residual(x, self.norm2, ca)
        x, _ = self._residual(x, self.norm3, self._ff_block)
        return self._output(x, weights, need_weights)
