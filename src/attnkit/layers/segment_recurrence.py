"""Transformer-XL: segment-level recurrence with relative positions (Dai et al. 2019, §3.2-3.3).

A vanilla Transformer LM sees a fixed-length segment; context stops at the segment boundary.
Transformer-XL keeps, for every layer ``n``, the hidden states ``h^{n-1}`` of the previous segment
as a **memory** ``m^{n-1}`` and lets the current segment attend to it (§3.2). The memory is a
constant (stop-gradient ``SG``), so training cost stays that of one segment while the context
grows by ``mem_len`` states per layer, i.e. ``O(num_layers · mem_len)`` tokens in all:

    h̃^{n-1} = [SG(m^{n-1}) ∘ h^{n-1}]                         (∘: concatenation along length)
    q = h^{n-1} W_q^T,   k = h̃^{n-1} W_{k,E}^T,   v = h̃^{n-1} W_v^T   (queries: segment only)
    A_ij = q_i^T k_j + q_i^T W_{k,R} R_{i-j} + u^T k_j + v^T W_{k,R} R_{i-j}
         =   (a)           (b)                  (c)        (d)                 (§3.3)
    a = Masked-Softmax(A / √d_head) v ;  o = LayerNorm(Linear(a) + h^{n-1})
    h^n = LayerNorm(o + FF(o))

Absolute positions cannot be reused across segments (position 0 of two segments would look the
same), so positions enter only through the distance ``i - j`` between query and key: ``R`` is
the fixed sinusoid table (Vaswani et al. 2017, §3.5) of distances, ``W_{k,R}`` its own key
projection, and ``u``, ``v`` (one vector per head) replace the query in the terms that do not
depend on the query's content (global content bias, global position bias).

Computation, and why. Terms (a)+(c) are ``(q_i + u)^T k_j``: a plain scaled dot product, which
attnkit's engine computes. Terms (b)+(d) are ``(q_i + v)^T r_{i-j}`` with ``r_δ = W_{k,R} R_δ``:
we score every query against the projected table of all ``L + N - 1`` distances once
(``P [B, H, L, L+N-1]``) and hand the engine a ``score_mod`` that *indexes* ``P`` at the distance
of each (query, key) pair. The indexing is the exact equivalent of the paper's "relative shift"
trick (pad, reshape, slice of ``P``), without its reshape: it is exact for every pair, future ones
included, and it runs on every backend that takes a ``score_mod`` (the tiled one gives ``P`` its
gradient), so dropout, masks, fully-masked rows and attention recording are the engine's.
:meth:`RelativeMultiHeadAttention.relative_scores` returns the whole ``A`` explicitly.

Causal masking is bottom-right aligned over ``[memory ∘ segment]``: query ``i`` (at key index
``R + i``) sees all ``R`` memory states and the segment's keys ``j <= i``.

Memory update (as the authors' code): ``m_new = SG([m ∘ h])[-mem_len:]``, the most recent
``mem_len`` states, so ``mem_len`` may exceed the segment length.

Shapes (the legend of :mod:`attnkit`): B batch, L segment length (the queries), R memory
length, N = R + L keys, E d_model, H heads, D = E / H per head, V vocabulary.

Taxonomy: the self-attention is "Self-Attentive" and "Multi-Head"; the stack of layers is
"Multi-Hop" (§3.3.2, where the survey cites Transformer-XL as an extension of the Transformer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.engine import attention
from attnkit.core.masks import ScoreMod
from attnkit.layers.attention import project_keys_values, project_queries
from attnkit.mechanisms.multi_head import MultiHeadAttention

Activation = str | Callable[[Tensor], Tensor]


def relative_sinusoids(distances: Tensor, d_model: int, dtype: torch.dtype) -> Tensor:
    """The fixed table ``R`` of Transformer-XL (§3.3): Vaswani's sinusoids of distances.

    ``R_δ[2k] = sin(δ / 10000^{2k/E})``, ``R_δ[2k+1] = cos(δ / 10000^{2k/E})``.

    Args:
        distances: integer tensor of any shape ``[...]`` (negative distances are defined too).
        d_model: ``E``, even.
        dtype: of the result (computed in float64 first).

    Returns:
        ``[..., E]``.

    Example::

        >>> relative_sinusoids(torch.tensor([0, 1, -1]), 4, torch.float32)[0]  # sin 0, cos 0, ...
        tensor([0., 1., 0., 1.])
    """
    if d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be a positive even number, got {d_model}")
    frequencies = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64, device=distances.device)
        * (-math.log(1e4) / d_model)
    )
    angles = distances.to(torch.float64)[..., None] * frequencies  # [..., E/2]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # interleaved
    return table.to(dtype)


def update_memory(memory: Tensor | None, hidden: Tensor, mem_len: int) -> Tensor:
    """The next segment's memory of one layer: ``SG([memory ∘ hidden])[:, -mem_len:]``.

    Args:
        memory: ``[B, R, E]`` or ``None`` (first segment).
        hidden: ``[B, L, E]``, this segment's input to the layer.
        mem_len: states kept (the most recent ones); 0 keeps none.

    Returns:
        ``[B, min(R + L, mem_len), E]``, detached from the graph (the paper's stop-gradient:
        the next segment's loss must not reach this segment).

    Example::

        >>> memory = update_memory(None, torch.randn(2, 5, 16), mem_len=8)
        >>> update_memory(memory, torch.randn(2, 5, 16), mem_len=8).shape  # the 8 most recent
        torch.Size([2, 8, 16])
    """
    if mem_len < 0:
        raise ValueError(f"mem_len must be >= 0, got {mem_len}")
    states = hidden if memory is None else torch.cat((memory.to(hidden.dtype), hidden), dim=1)
    start = max(states.shape[1] - mem_len, 0)
    return states[:, start:].detach()


def _check_memory(x: Tensor, memory: Tensor | None) -> Tensor:
    """``memory`` as ``[B, R, E]`` matching ``x [B, L, E]`` (empty when ``None``)."""
    if x.dim() != 3:
        raise ValueError(f"x must be [B, L, E], got {tuple(x.shape)}")
    if memory is None:
        return x.new_zeros(x.shape[0], 0, x.shape[2])
    if not isinstance(memory, Tensor):
        raise TypeError(f"memory must be a tensor [B, R, E] or None, got {type(memory).__name__}")
    if memory.dim() != 3 or memory.shape[0] != x.shape[0] or memory.shape[2] != x.shape[2]:
        raise ValueError(
            f"memory must be [B={x.shape[0]}, R, E={x.shape[2]}] like x {tuple(x.shape)}, "
            f"got {tuple(memory.shape)}"
        )
    return memory


class RelativeMultiHeadAttention(nn.Module):
    """Transformer-XL's multi-head self-attention over ``[SG(memory) ∘ x]`` with relative
    positions, scores ``A_ij = (a) + (b) + (c) + (d)`` of Dai et al. (2019), §3.3.

    Args:
        d_model: ``E``.
        nhead: ``H`` (divides ``E``, which must be even for the sinusoids).
        dropout: on the attention weights (the paper's "dropatt").
        device, dtype: for the parameters.

    Parameters: ``self_attn`` (an :class:`attnkit.MultiHeadAttention` without biases, holding
    ``W_q``, ``W_{k,E}``, ``W_v`` in ``in_proj_weight`` and the output ``Linear`` in
    ``out_proj``), ``position_proj`` (``W_{k,R}``, no bias), ``content_bias`` (``u [H, d_head]``)
    and ``position_bias`` (``v [H, d_head]``).

    Example::

        >>> attn = RelativeMultiHeadAttention(16, 2)
        >>> attn(torch.randn(3, 5, 16), torch.randn(3, 4, 16)).shape
        torch.Size([3, 5, 16])
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dropout: float = 0.0,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if d_model <= 0 or d_model % 2:
            raise ValueError(f"d_model must be a positive even number (sinusoids), got {d_model}")
        # The projections of a bias-free MultiHeadAttention, as in the authors' code (qkv_net and
        # o_net have no bias); its score is the scaled dot product terms (a)+(c) need.
        self.self_attn = MultiHeadAttention(
            d_model, nhead, dropout=dropout, bias=False, batch_first=True,
            device=device, dtype=dtype,
        )  # fmt: skip
        self.d_model, self.nhead, self.head_dim = d_model, nhead, d_model // nhead
        self.position_proj = nn.Linear(d_model, d_model, bias=False, device=device, dtype=dtype)
        self.content_bias = nn.Parameter(
            torch.empty(nhead, self.head_dim, device=device, dtype=dtype)
        )
        self.position_bias = nn.Parameter(
            torch.empty(nhead, self.head_dim, device=device, dtype=dtype)
        )
        nn.init.normal_(self.content_bias, std=0.02)  # the authors' init_std
        nn.init.normal_(self.position_bias, std=0.02)
        self.taxonomy = {"query_type": "Self-Attentive", "query_multiplicity": "Multi-Head"}

    def _project(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``q [B, H, L, D]``, ``k, v [B, H, N, D]`` and the position scores ``P`` of (b)+(d),
        ``[B, H, L, L+N-1]``, one column per distance (see :func:`_distance_index`)."""
        memory = _check_memory(x, memory).detach()  # SG(m): the memory is a constant
        length, keys = x.shape[1], memory.shape[1] + x.shape[1]
        context = torch.cat((memory.to(x.dtype), x), dim=1)  # h̃ = [SG(m) ∘ h], [B, N, E]
        q = project_queries(self.self_attn, x)  # [B, H, L, D]
        k, v = project_keys_values(self.self_attn, context, context)  # [B, H, N, D]
        # Every distance a (query, key) pair can have: δ = (R + i) - j in [-(L-1), N-1].
        distances = torch.arange(-(length - 1), keys, device=x.device)  # [L+N-1]
        r = self.position_proj(relative_sinusoids(distances, self.d_model, x.dtype))
        r = r.unflatten(-1, (self.nhead, self.head_dim)).transpose(0, 1)  # [H, L+N-1, D]
        p = (q + self.position_bias[:, None]) @ r.transpose(-1, -2)  # (b)+(d): [B, H, L, L+N-1]
        return q, k, v, p

    def relative_scores(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        """The unscaled, unmasked scores ``A_ij`` of §3.3 for every query ``i`` and key ``j``.

        Args:
            x: the segment ``[B, L, E]``.
            memory: ``[B, R, E]`` or ``None``.

        Returns:
            ``[B, H, L, R + L]`` (keys: memory first, then the segment).
        """
        q, k, _, p = self._project(x, memory)
        length, keys = q.shape[2], k.shape[2]
        i = torch.arange(length, device=x.device)[:, None]
        j = torch.arange(keys, device=x.device)[None, :]
        content = (q + self.content_bias[:, None]) @ k.transpose(-1, -2)  # (a)+(c)
        return content + p[:, :, i, _distance_index(i, j, length, keys)]

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        causal: bool = True,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attention of the segment ``x`` to ``[SG(memory) ∘ x]``.

        Args:
            x: ``[B, L, E]``.
            memory: ``[B, R, E]`` (the previous segment's inputs to this layer) or ``None``.
            causal: query ``i`` sees the memory and keys ``j <= i`` of the segment (bottom-right
                aligned over ``R + L`` keys); ``False`` lets it see the whole segment.
            return_weights: also return the attention weights ``[B, H, L, R + L]``.

        Returns:
            ``[B, L, E]`` (and the weights).
        """
        q, k, v, p = self._project(x, memory)
        length, keys = q.shape[2], k.shape[2]
        out = attention(
            q + self.content_bias[:, None],  # (q_i + u)^T k_j = (a) + (c)
            k,
            v,
            score=self.self_attn.score,
            align=self.self_attn.align,
            causal=causal,
            score_mod=_position_score_mod(p * self.head_dim**-0.5, length, keys),
            dropout=self.self_attn.dropout if self.training else 0.0,
            return_weights=return_weights,
        )
        # Concatenate the heads and project (W_o): [B, H, L, D] -> [B, L, E]
        result = self.self_attn.out_proj(out.context.transpose(1, 2).flatten(2))
        if return_weights:
            assert out.weights is not None
            return result, out.weights
        return result

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, nhead={self.nhead}"


def _distance_index(i: Tensor, j: Tensor, length: int, keys: int) -> Tensor:
    """Column of ``P`` holding distance ``δ = (R + i) - j`` for query ``i`` and key ``j``
    (``R = keys - length``; columns run over ``δ = -(L-1) … N-1``)."""
    return i + (keys - length) - j + (length - 1)


def _position_score_mod(scaled_p: Tensor, length: int, keys: int) -> ScoreMod:
    """score_mod adding ``(q_i + v)^T r_{i-j} / √d_head`` (terms (b)+(d), already scaled, as the
    engine scales the content score before the score_mod)."""

    def transformer_xl_position(
        score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
    ) -> Tensor:
        column = _distance_index(q_idx, kv_idx, length, keys)
        return score + scaled_p[b, h, q_idx, column].to(score.dtype)

    return transformer_xl_position


def _activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    if callable(activation):
        return activation
    if activation in ("relu", "gelu"):
        return F.relu if activation == "relu" else F.gelu
    raise ValueError(f"activation should be 'relu', 'gelu' or a callable, got {activation!r}")


class RecurrentTransformerLayer(nn.Module):
    """One Transformer-XL layer: relative self-attention over ``[SG(memory) ∘ x]`` and a
    feed-forward block (Dai et al. 2019, §3.3, the equations at its end).

    Post-norm (the paper):  o = LN(x + Drop(RelAttn(x, m)));   h = LN(o + Drop(FF(o)))
    Pre-norm (norm_first):  o = x + Drop(RelAttn(LN(x), LN(m)));  h = o + Drop(FF(LN(o)))
    FF(o) = W_2 Drop(act(W_1 o + b_1)) + b_2

    Args:
        d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first: as
            :class:`~attnkit.layers.TransformerEncoderLayer` (parameter names ``linear1``,
            ``linear2``, ``norm1``, ``norm2`` too); ``self_attn`` is a
            :class:`RelativeMultiHeadAttention` with attention dropout ``dropout``.
        device, dtype: keyword-only: of the parameters.

    Shapes: ``x [B, L, E]``, ``memory [B, R, E]`` (this layer's inputs of earlier segments) →
    ``[B, L, E]``. Always batch-first and causal (a language-model layer).

    Example::

        >>> layer = RecurrentTransformerLayer(16, 2, 32)
        >>> layer(torch.randn(2, 5, 16), memory=torch.randn(2, 3, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.self_attn = RelativeMultiHeadAttention(d_model, nhead, dropout, **factory)
        self.linear1 = nn.Linear(d_model, dim_feedforward, **factory)
        self.linear2 = nn.Linear(dim_feedforward, d_model, **factory)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, **factory)
        self.dropout, self.dropout1, self.dropout2 = (nn.Dropout(dropout) for _ in range(3))
        self.activation, self.norm_first = _activation(activation), norm_first

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        """One segment through the layer, attending its memory of earlier segments.

        Args:
            x: this segment ``[B, L, E]``.
            memory: this layer's inputs of earlier segments ``[B, R, E]`` (``None``: none).

        Returns:
            ``h [B, L, E]``.
        """
        memory = _check_memory(x, memory)
        if self.norm_first:
            # The memory holds the layer's raw inputs, so it is normalised like x is.
            attended = self.self_attn(self.norm1(x), self.norm1(memory))
            x = x + self.dropout1(attended)
            return x + self.dropout2(self._ff_block(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, memory)))
        return self.norm2(x + self.dropout2(self._ff_block(x)))


class TransformerXL(nn.Module):
    """A Transformer-XL language model (Dai et al. 2019): embedding, recurrent layers, head.

    ``forward(tokens, memory)`` processes one segment and returns the memory for the next, so a
    long sequence is read segment after segment with context beyond the segment length::

        h^0 = Drop(Embed(tokens));  h^n = Layer_n(h^{n-1}, m^{n-1});  logits = W h^N
        m^{n-1}_new = SG([m^{n-1} ∘ h^{n-1}])[-mem_len:]

    Args:
        vocab_size: ``V``.
        d_model, nhead, num_layers, dim_feedforward, dropout: the layers' sizes.
        mem_len: states of earlier segments kept per layer (0: no recurrence).
        activation, norm_first: of every layer (pre-norm adds a final LayerNorm).
        device, dtype: of the parameters.

    Example::

        >>> model = TransformerXL(100, d_model=16, nhead=2, num_layers=2, mem_len=8)
        >>> logits, memory = model(torch.randint(100, (3, 5)))
        >>> logits, memory = model(torch.randint(100, (3, 5)), memory)  # sees 8 earlier tokens
        >>> logits.shape, [m.shape for m in memory]
        (torch.Size([3, 5, 100]), [torch.Size([3, 8, 16]), torch.Size([3, 8, 16])])
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 2,
        mem_len: int = 64,
        dim_feedforward: int = 128,
        dropout: float = 0.0,
        *,
        activation: Activation = "relu",
        norm_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, value, low in (("vocab_size", vocab_size, 1), ("num_layers", num_layers, 1)):
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}")
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.vocab_size, self.d_model, self.mem_len = vocab_size, d_model, mem_len
        self.embedding = nn.Embedding(vocab_size, d_model, **factory)
        self.dropout = nn.Dropout(dropout)
        options: dict[str, Any] = {"activation": activation, "norm_first": norm_first, **factory}
        self.layers = nn.ModuleList(
            RecurrentTransformerLayer(d_model, nhead, dim_feedforward, dropout, **options)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, **factory) if norm_first else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size, **factory)
        self.taxonomy = {"query_multiplicity": "Multi-Hop"}

    def _check_memories(self, tokens: Tensor, memory: Sequence[Tensor] | None) -> list[Tensor]:
        if memory is None:
            return []
        if not isinstance(memory, (list, tuple)) or not all(isinstance(m, Tensor) for m in memory):
            raise TypeError(
                f"memory must be a list of {len(self.layers)} tensors [B, R, E] (one per layer), "
                f"got {type(memory).__name__}"
            )
        if len(memory) != len(self.layers):
            raise ValueError(
                f"memory must hold one tensor per layer ({len(self.layers)}), got {len(memory)}"
            )
        batch, length = tokens.shape[0], memory[0].shape[1] if memory[0].dim() == 3 else -1
        for n, m in enumerate(memory):
            if m.dim() != 3 or tuple(m.shape) != (batch, length, self.d_model):
                raise ValueError(
                    f"memory[{n}] must be [B={batch}, R, E={self.d_model}] with the same R in "
                    f"every layer, got shapes {[tuple(t.shape) for t in memory]}"
                )
        return list(memory)

    def forward(
        self, tokens: Tensor, memory: Sequence[Tensor] | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """Logits of the next token at every position of the segment, and the new memory.

        Args:
            tokens: ``[B, L]`` integer ids of the segment.
            memory: from the previous call (``num_layers`` tensors ``[B, R, E]``, detached) or
                ``None`` for the first segment.

        Returns:
            ``(logits [B, L, V], new_memory)``: ``new_memory[n]`` is ``[B, min(R + L, mem_len),
            E]``, the most recent inputs of layer ``n``.
        """
        if tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int):
            raise ValueError(
                f"tokens must be an integer tensor [B, L], got {tokens.dtype} {tuple(tokens.shape)}"
            )
        memories = self._check_memories(tokens, memory)
        h = self.dropout(self.embedding(tokens))
        new_memory = []
        for n, layer in enumerate(self.layers):
            previous = memories[n] if memories else None
            new_memory.append(update_memory(previous, h, self.mem_len))
            h = layer(h, previous)
        return self.head(self.norm(h)), new_memory
