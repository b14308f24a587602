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

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.kinds import AttentionKind, kind_name
from attnkit.core.scores import Score
from attnkit.layers.attention import PositionBias, Rotary, cross_attend, self_attend
from attnkit.layers.kv_cache import CrossAttentionCache, DecoderLayerCache, KVCache
from attnkit.mechanisms.multi_head import MultiHeadAttention

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
    **options: Any,
) -> MultiHeadAttention:
    """A ``MultiHeadAttention`` from an attention-kind name or object, or the given module as is.

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
    # Always batch-first inside: the layer transposes once (state_dicts do not record the layout).
    return MultiHeadAttention(
        d_model,
        nhead,
        dropout=dropout if exact else 0.0,
        bias=bias,
        batch_first=True,
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


class _LayerBase(nn.Module):
    """What encoder and decoder layers share: their construction, the feed-forward block,
    layout and options."""

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
        """The parts of both layers: ``self_attn``, (decoder) ``multihead_attn`` when
        ``cross_attention`` is given, the feed-forward block and its norms."""
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        options: dict[str, Any] = {"score": score, "align": align, "num_kv_heads": num_kv_heads}
        self.self_attn = _attention_module(
            attention, d_model, nhead, dropout, bias, factory, "Self-Attentive", **options
        )
        norms = 2
        if cross_attention is not None:
            self.multihead_attn = _attention_module(
                cross_attention, d_model, nhead, dropout, bias, factory, "Basic", **options
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

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _batch_first(self, x: Tensor) -> Tensor:
        """``[N, L, E]`` from the user's layout (torch's: ``[L, N, E]`` unless ``batch_first``)."""
        return x if self.batch_first or x.dim() == 2 else x.transpose(0, 1)

    def _self_attention(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        cache: KVCache | None,
        lengths: Tensor | None,
    ) -> Tensor:
        return self_attend(
            self.self_attn,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            rotary=self.rotary,
            position_bias=self.position_bias,
            cache=cache,
            lengths=lengths,
        )


class TransformerEncoderLayer(_LayerBase):
    """Self-attention and a feed-forward block (torch's ``TransformerEncoderLayer``).

    Args (torch's): d_model, nhead, dim_feedforward, dropout, activation (``"relu"``,
        ``"gelu"`` or a callable), layer_norm_eps, batch_first, norm_first (pre-norm), bias,
        device, dtype.
    Keyword-only (attnkit's):
        attention: an attention-kind name (``"exact"`` or one of :func:`attnkit.core.kinds.
            kind_names`), a configured kind object (``SlidingWindowAttention(window=512)``,
            owned by this layer's attention: give each layer its own), or a ready
            :class:`attnkit.MultiHeadAttention` (``embed_dim == d_model`` and
            ``batch_first=True``; the layer's own ``batch_first`` sets its inputs' layout).
            Kinds other than ``"exact"`` run without attention-weight dropout.
        score, align: any score / alignment name or object, given to ``MultiHeadAttention``.
        num_kv_heads: grouped-query attention (``None``: one per query head).
        rotary: rotates queries and keys by position (:class:`~attnkit.layers.RotaryEmbedding`).
        position_bias: a score_mod position bias (:class:`~attnkit.layers.ALiBi`,
            :class:`~attnkit.layers.RelativePositionBias`).

    Shapes: ``src [L, N, E]`` (``[N, L, E]`` with ``batch_first``, ``[L, E]`` unbatched).

    Example::

        >>> layer = TransformerEncoderLayer(32, 4, 64, batch_first=True, score="additive")
        >>> layer(torch.randn(2, 7, 32)).shape
        torch.Size([2, 7, 32])
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

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        *,
        cache: KVCache | None = None,
        lengths: Tensor | None = None,
    ) -> Tensor:
        """torch's forward; with ``cache`` (decoder-only models) ``src`` holds the next tokens
        and attends them and every cached one causally (``lengths [N]``: real tokens per row)."""
        x = self._batch_first(src)
        attn = (src_mask, src_key_padding_mask, is_causal, cache, lengths)
        if self.norm_first:
            x = x + self.dropout1(self._self_attention(self.norm1(x), *attn))
            x = x + self.dropout2(self._ff_block(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self._self_attention(x, *attn)))
            x = self.norm2(x + self.dropout2(self._ff_block(x)))
        return self._batch_first(x)


class TransformerDecoderLayer(_LayerBase):
    """Self-attention, cross-attention to the encoder's memory, and a feed-forward block
    (torch's ``TransformerDecoderLayer``). Arguments as :class:`TransformerEncoderLayer`, plus
    ``cross_attention`` (kind name or module) for ``multihead_attn``, whose queries are
    "Basic" (they come from the decoder's state, §3.3.1). Positions (rotary, position bias)
    apply to the self-attention only.
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

    def _cross_attention(
        self,
        x: Tensor,
        memory: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        cache: CrossAttentionCache | None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            if cache is not None:
                raise ValueError("need_weights=True is for a whole target, not a cached step")
            # asked of the module, as torch's MHA is: the engine picks the fastest backend
            # that returns the weights (per head, before dropout)
            return self.multihead_attn(
                x,
                memory,
                memory,
                attn_mask=attn_mask,
                key_padding_mask=key_padding_mask,
                need_weights=True,
                average_attn_weights=False,
                is_causal=is_causal,
            )
        out = cross_attend(
            self.multihead_attn,
            x,
            memory,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            cache=cache,
        )
        return out, None

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
    ) -> Tensor | tuple[Tensor, Tensor]:
        """torch's forward; with ``cache``, ``tgt`` holds the next target tokens (causal over
        the cached ones), and the memory's keys/values are projected on the first call only.
        With ``need_weights`` (no cache) it returns ``(output, weights)``: the cross-attention
        weights per head ``[N, H, L, S]``, before dropout."""
        x, memory = self._batch_first(tgt), self._batch_first(memory)
        self_cache = None if cache is None else cache.self_attn
        cross_cache = None if cache is None else cache.cross_attn
        sa = (tgt_mask, tgt_key_padding_mask, bool(tgt_is_causal), self_cache, lengths)
        ca = (memory_mask, memory_key_padding_mask, memory_is_causal, cross_cache, need_weights)
        if self.norm_first:
            x = x + self.dropout1(self._self_attention(self.norm1(x), *sa))
            attended, weights = self._cross_attention(self.norm2(x), memory, *ca)
            x = x + self.dropout2(attended)
            x = x + self.dropout3(self._ff_block(self.norm3(x)))
        else:
            x = self.norm1(x + self.dropout1(self._self_attention(x, *sa)))
            attended, weights = self._cross_attention(x, memory, *ca)
            x = self.norm2(x + self.dropout2(attended))
            x = self.norm3(x + self.dropout3(self._ff_block(x)))
        if need_weights:
            assert weights is not None
            return self._batch_first(x), weights
        return self._batch_first(x)


def _copy_kind(spec: Any) -> Any:
    """A copy of an attention kind object (other layer options as they are)."""
    return copy.deepcopy(spec) if isinstance(spec, AttentionKind) else spec


def _clones(layer: nn.Module, num_layers: int) -> nn.ModuleList:
    if num_layers < 0:
        raise ValueError(f"num_layers must be >= 0, got {num_layers}")
    return nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(nn.Module):
    """``num_layers`` copies of an encoder layer and an optional final norm (torch's).

    ``enable_nested_tensor`` and ``mask_check`` are accepted for torch's signature and ignored:
    padded positions are computed like any other (torch's nested fast path returns zeros there).
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: nn.Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.taxonomy = {"query_multiplicity": "Multi-Hop"}

    def new_caches(self, capacity: int, window: int | None = None) -> list[KVCache]:
        """One empty :class:`KVCache` per layer (decoder-only use: causal self-attention)."""
        return [KVCache(capacity, window=window) for _ in self.layers]

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
        *,
        caches: Sequence[KVCache] | None = None,
        lengths: Tensor | None = None,
    ) -> Tensor:
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"need one cache per layer ({len(self.layers)}), got {len(caches)}")
        x = src
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            x = layer(x, mask, src_key_padding_mask, bool(is_causal), cache=cache, lengths=lengths)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(nn.Module):
    """``num_layers`` copies of a decoder layer and an optional final norm (torch's)."""

    def __init__(
        self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.taxonomy = {"query_multiplicity": "Multi-Hop"}

    def new_caches(self, capacity: int, window: int | None = None) -> list[DecoderLayerCache]:
        """Empty caches, one per layer: self-attention keys and the memory's keys/values."""
        return [
            DecoderLayerCache(KVCache(capacity, window=window), CrossAttentionCache())
            for _ in self.layers
        ]

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
        *,
        caches: Sequence[DecoderLayerCache] | None = None,
        lengths: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """torch's forward; with ``need_weights`` it returns ``(output, weights)``: the last
        layer's cross-attention weights per head ``[N, H, L, S]`` (the alignment a translation
        model reads), before dropout."""
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"need one cache per layer ({len(self.layers)}), got {len(caches)}")
        if need_weights and not self.layers:
            raise ValueError("need_weights=True needs at least one decoder layer")
        x, weights = tgt, None
        for i, layer in enumerate(self.layers):
            out = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                bool(tgt_is_causal),
                memory_is_causal,
                cache=None if caches is None else caches[i],
                lengths=lengths,
                need_weights=need_weights and i == len(self.layers) - 1,
            )
            x, weights = out if isinstance(out, tuple) else (out, None)
        x = x if self.norm is None else self.norm(x)
        if need_weights:
            assert weights is not None
            return x, weights
        return x


class Transformer(nn.Module):
    """The encoder–decoder Transformer (Vaswani et al. 2017; torch's ``nn.Transformer``).

    Arguments are torch's (``custom_encoder``/``custom_decoder`` replace the stacks); the
    keyword-only ones of :class:`TransformerEncoderLayer` apply to every layer (``rotary`` and
    ``position_bias`` to every self-attention), except that ``decoder_attention`` (a kind name or
    module), when given, replaces ``attention`` for the decoder's self-attention: an encoder can
    use a kind that cannot be causal (Nyström, Linformer) while the decoder keeps one that can.
    A configured kind object (``attention=LinformerAttention(max_length=8192)``) configures
    every layer: each gets its own copy, as torch's stacks copy their layer (so parameters drawn
    at construction start equal in every layer; a name, or a kind whose parameters need the head
    sizes, draws nothing before it is bound). :meth:`encode` and :meth:`decode` split
    :meth:`forward` for generation (``decode(..., caches=self.decoder.new_caches(C))``).
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        custom_encoder: nn.Module | None = None,
        custom_decoder: nn.Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        decoder_attention: AttentionSpec | None = None,
        **layer_options: Any,
    ) -> None:
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        common: dict[str, Any] = {
            "d_model": d_model,
            "nhead": nhead,
            "dim_feedforward": dim_feedforward,
            "dropout": dropout,
            "activation": activation,
            "layer_norm_eps": layer_norm_eps,
        }
        layout: dict[str, Any] = {
            "batch_first": batch_first,
            "norm_first": norm_first,
            "bias": bias,
        }
        # The decoder's template layer gets its own copy of a kind object given for both
        # stacks (one kind per module); each stack then copies its template layer per layer.
        dec_options = {k: _copy_kind(v) for k, v in layer_options.items()}
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            enc_options = {k: v for k, v in layer_options.items() if k != "cross_attention"}
            layer = TransformerEncoderLayer(**common, **layout, **factory, **enc_options)
            norm = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            if decoder_attention is not None:
                dec_options["attention"] = decoder_attention
            dec_layer = TransformerDecoderLayer(**common, **layout, **factory, **dec_options)
            norm = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
            self.decoder = TransformerDecoder(dec_layer, num_decoder_layers, norm)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():  # torch's initialisation
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    @staticmethod
    def generate_square_subsequent_mask(
        sz: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Tensor:
        """torch's float causal mask: ``-inf`` above the diagonal, ``0`` elsewhere."""
        return torch.triu(
            torch.full((sz, sz), float("-inf"), device=device, dtype=dtype or torch.float32),
            diagonal=1,
        )

    def encode(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
    ) -> Tensor:
        """The encoder's memory."""
        return self.encoder(src, src_mask, src_key_padding_mask, src_is_causal)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
        *,
        caches: Sequence[DecoderLayerCache] | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The decoder's output for ``tgt`` (the next target tokens when ``caches`` are given);
        with ``need_weights``, ``(output, weights)`` as :meth:`TransformerDecoder.forward`."""
        return self.decoder(
            tgt,
            memory,
            tgt_mask,
            memory_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            memory_is_causal,
            caches=caches,
            need_weights=need_weights,
        )

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.dim() == 3 and tgt.dim() == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise ValueError(
                f"src and tgt must share the batch size, got {tuple(src.shape)} and "
                f"{tuple(tgt.shape)}"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(
                f"src and tgt must have d_model={self.d_model} features, got {tuple(src.shape)} "
                f"and {tuple(tgt.shape)}"
            )
        memory = self.encode(src, src_mask, src_key_padding_mask, src_is_causal)
        return self.decode(
            tgt,
            memory,
            tgt_mask,
            memory_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            memory_is_causal,
        )
