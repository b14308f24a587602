"""Transformer stacks and the encoder–decoder model (Vaswani et al. 2017), torch's drop-ins.

``TransformerEncoder``, ``TransformerDecoder`` and ``Transformer`` repeat the layers of
:mod:`attnkit.layers.transformer_layer` (re-exported here) with torch's arguments, parameter names
(``layers.i``, ``norm``; ``encoder``, ``decoder``) and initialisation, so
``load_state_dict(torch_module.state_dict())`` reproduces torch's outputs. A stack of layers
refines its queries layer after layer: "Multi-Hop" (survey §3.3.2).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.kinds import AttentionKind
from attnkit.layers.attention import LayerOutput
from attnkit.layers.kv_cache import CrossAttentionCache, DecoderLayerCache, KVCache
from attnkit.layers.transformer_layer import (
    Activation,
    AttentionSpec,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    TransformerLayer,
    kind_attention,
)
from attnkit.mechanisms.nested import pad_nested

__all__ = [
    "Activation",
    "AttentionSpec",
    "LayerOutput",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "TransformerLayer",
    "kind_attention",
]


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

    Args:
        encoder_layer: the layer copied ``num_layers`` times (each copy its own parameters).
        num_layers: the number of layers.
        norm: applied to the last layer's output (``None``: none).
        enable_nested_tensor: torch's; ignored.
        mask_check: torch's; ignored.

    Example::

        >>> layer = TransformerEncoderLayer(32, 4, 64, batch_first=True)
        >>> TransformerEncoder(layer, num_layers=2)(torch.randn(2, 7, 32)).shape
        torch.Size([2, 7, 32])
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
        need_weights: bool = False,
    ) -> Tensor | LayerOutput:
        """torch's forward (``caches``, ``lengths``: see :class:`TransformerEncoderLayer`). A
        nested ``src`` (strided or jagged, no masks) is padded once for all layers and the
        output is nested like it, as torch's stack returns for nested input.

        Args:
            src: ``[L, B, E]`` (``[B, L, E]`` with ``batch_first``, ``[L, E]`` unbatched).
            mask: ``[L, L]`` or ``[B·H, L, L]``, bool (True = may *not* attend) or float.
            src_key_padding_mask: ``[B, L]``, True at padding.
            is_causal: a hint that ``mask`` is the causal mask.
            caches: one :class:`~attnkit.layers.KVCache` per layer (:meth:`new_caches`).
            lengths: ``[B]``, the real tokens of each row (with ``caches``).
            need_weights: also return the last layer's self-attention weights.

        Returns:
            The last layer's output (after ``norm``), the shape of ``src``; with
            ``need_weights`` a :class:`~attnkit.layers.LayerOutput` of it and the last layer's
            self-attention weights per head ``[B, H, L, N]``, before dropout.
        """
        if src.is_nested:
            if mask is not None or src_key_padding_mask is not None or caches is not None:
                raise ValueError("a nested src takes no mask, src_key_padding_mask or caches")
            if need_weights:
                raise ValueError("a nested src takes no need_weights (pad it to read the weights)")
            batch = pad_nested(src, "src")
            return batch.nested(self(batch.values, None, batch.padding, is_causal, lengths=lengths))
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"need one cache per layer ({len(self.layers)}), got {len(caches)}")
        if need_weights and not self.layers:
            raise ValueError("need_weights=True needs at least one encoder layer")
        x, weights = src, None
        for i, layer in enumerate(self.layers):
            last = need_weights and i == len(self.layers) - 1
            out = layer(
                x,
                mask,
                src_key_padding_mask,
                bool(is_causal),
                cache=None if caches is None else caches[i],
                lengths=lengths,
                need_weights=last,
            )
            x, weights = (out.output, out.weights) if last else (out, None)
        x = x if self.norm is None else self.norm(x)
        return LayerOutput(x, weights) if need_weights else x


class TransformerDecoder(nn.Module):
    """``num_layers`` copies of a decoder layer and an optional final norm (torch's).

    Args:
        decoder_layer: the layer copied ``num_layers`` times (each copy its own parameters).
        num_layers: the number of layers.
        norm: applied to the last layer's output (``None``: none).

    Example::

        >>> layer = TransformerDecoderLayer(32, 4, 64, batch_first=True)
        >>> decoder = TransformerDecoder(layer, num_layers=2)
        >>> decoder(torch.randn(2, 5, 32), torch.randn(2, 7, 32)).shape
        torch.Size([2, 5, 32])
    """

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
    ) -> Tensor | LayerOutput:
        """torch's forward; with ``need_weights`` it also returns the last layer's
        cross-attention weights per head (the alignment a translation model reads), before
        dropout.

        Args:
            tgt: ``[M, B, E]`` (``[B, M, E]`` with ``batch_first``, ``[M, E]`` unbatched).
            memory: the encoder's output ``[N, B, E]`` (``[B, N, E]`` with ``batch_first``).
            tgt_mask: ``[M, M]`` or ``[B·H, M, M]``, bool (True = may *not* attend) or float.
            memory_mask: ``[M, B]`` or ``[B·H, M, N]``, bool or float.
            tgt_key_padding_mask: ``[B, M]``, True at padding.
            memory_key_padding_mask: ``[B, N]``, True at padding.
            tgt_is_causal: a hint that ``tgt_mask`` is the causal mask.
            memory_is_causal: a hint that ``memory_mask`` is the causal mask.
            caches: one :class:`~attnkit.layers.DecoderLayerCache` per layer
                (:meth:`new_caches`); ``tgt`` then holds the next target tokens.
            lengths: ``[B]``, the real target tokens of each row (with ``caches``).
            need_weights: also return the last layer's cross-attention weights.

        Returns:
            The output (after ``norm``), the shape of ``tgt``; with ``need_weights`` a
            :class:`~attnkit.layers.LayerOutput` of it and the weights ``[B, H, M, N]``.
        """
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"need one cache per layer ({len(self.layers)}), got {len(caches)}")
        if need_weights and not self.layers:
            raise ValueError("need_weights=True needs at least one decoder layer")
        x, weights = tgt, None
        for i, layer in enumerate(self.layers):
            last = need_weights and i == len(self.layers) - 1
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
                need_weights=last,
            )
            x, weights = (out.output, out.weights) if last else (out, None)
        x = x if self.norm is None else self.norm(x)
        return LayerOutput(x, weights) if need_weights else x


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

    Args:
        d_model: ``E``, as :class:`TransformerLayer` (the embeddings' size).
        nhead: ``H``, heads per attention.
        num_encoder_layers: layers of the encoder stack.
        num_decoder_layers: layers of the decoder stack.
        dim_feedforward, dropout, activation: as :class:`TransformerLayer`, for every layer.
        custom_encoder: replaces the encoder stack.
        custom_decoder: replaces the decoder stack.
        layer_norm_eps, batch_first, norm_first, bias: as :class:`TransformerLayer`.
        device, dtype: of the parameters.
        decoder_attention: keyword-only: the decoder self-attention's kind, replacing
            ``attention`` there.
        **layer_options: the keyword-only arguments of :class:`TransformerLayer` (``attention``,
            ``cross_attention``, ``score``, ``align``, ``num_kv_heads``, ``rotary``,
            ``position_bias``), for every layer.

    Example::

        >>> model = Transformer(32, 4, 2, 2, 64, batch_first=True)
        >>> model(torch.randn(2, 7, 32), torch.randn(2, 5, 32)).shape
        torch.Size([2, 5, 32])
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
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's initialisation: ``xavier_uniform_`` on every parameter with ``dim > 1``."""
        for p in self.parameters():
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
    ) -> Tensor | LayerOutput:
        """The decoder's output for ``tgt`` (the next target tokens when ``caches`` are given);
        with ``need_weights`` a :class:`~attnkit.layers.LayerOutput` of it and the last layer's
        cross-attention weights, as :meth:`TransformerDecoder.forward`."""
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
        """torch's forward: encode ``src``, decode ``tgt`` against its memory.

        Args:
            src: ``[S, B, E]`` (``[B, S, E]`` with ``batch_first``, ``[S, E]`` unbatched).
            tgt: ``[T, B, E]`` (``[B, T, E]`` with ``batch_first``, ``[T, E]`` unbatched).
            src_mask: the encoder's self-attention mask ``[S, S]``, bool (True = may *not*
                attend) or float.
            tgt_mask: the decoder's self-attention mask ``[T, T]`` (causal:
                :meth:`generate_square_subsequent_mask`).
            memory_mask: the cross-attention mask ``[T, S]``.
            src_key_padding_mask: ``[B, S]``, True at padding.
            tgt_key_padding_mask: ``[B, T]``, True at padding.
            memory_key_padding_mask: ``[B, S]``, True at padding.
            src_is_causal: a hint that ``src_mask`` is the causal mask.
            tgt_is_causal: a hint that ``tgt_mask`` is the causal mask.
            memory_is_causal: a hint that ``memory_mask`` is the causal mask.

        Returns:
            The decoder's output, the shape of ``tgt``.
        """
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
