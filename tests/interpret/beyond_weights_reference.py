"""A Transformer encoder layer written out in float64 from Vaswani et al. (2017), for the tests of
the maps beyond the attention weights (value norm, value zeroing, ALTI, patching).

Nothing here calls attnkit: the parameters are read from an ``ak.layers.TransformerEncoderLayer``
(torch's parameter layout: packed ``in_proj_weight [3E, E]``, ``out_proj``, ``linear1/2``,
``norm1/2``; ReLU) and every step is the formula, rows as vectors:

    q, k, v = x W_qᵀ + b_q, x W_kᵀ + b_k, x W_vᵀ + b_v          (split into H heads of d = E / H)
    a = softmax(q kᵀ / √d)  (masked keys: -inf),   c = a v,   o = concat(c) W_Oᵀ + b_O
    post-norm: h = LN1(x + o), y = LN2(h + FF(h));  pre-norm: h = x + o(LN1(x)), y = h + FF(LN2(h))

Hooks let a test change one step: ``zero_value=j`` zeroes ``v_j`` in every head, ``context=``
``fn(c [B, H, M, d]) -> c`` replaces the heads' contexts, ``qkv=fn(q, k, v) -> (q, k, v)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn


def layer_norm(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    """``γ ⊙ (x - mean) / sqrt(Var + ε) + β`` (biased variance)."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return norm.weight.double() * (x - mean) / torch.sqrt(var + norm.eps) + norm.bias.double()


def heads(mha: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q, k, v [B, H, N, d]`` of self-attention on ``x [B, N, E]`` (packed projections)."""
    w, b = mha.in_proj_weight.double(), mha.in_proj_bias.double()
    e, h = w.shape[1], mha.num_heads

    def split(t: Tensor) -> Tensor:
        return t.unflatten(-1, (h, e // h)).transpose(1, 2)

    return tuple(split(x @ w[i * e : (i + 1) * e].T + b[i * e : (i + 1) * e]) for i in range(3))


def weights(q: Tensor, k: Tensor, allowed: Tensor | None = None) -> Tensor:
    """``softmax(q kᵀ / √d)`` with ``allowed`` (bool, broadcastable to ``[B, H, M, N]``)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)


def attention_block(
    mha: nn.Module,
    x: Tensor,
    allowed: Tensor | None = None,
    zero_value: int | None = None,
    context: Callable[[Tensor], Tensor] | None = None,
    qkv: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]] | None = None,
) -> Tensor:
    """``concat(a v) W_Oᵀ + b_O`` for ``x [B, N, E]``, with the changes of the module docstring."""
    q, k, v = heads(mha, x)
    if qkv is not None:
        q, k, v = qkv(q, k, v)
    if zero_value is not None:
        v = v.clone()
        v[:, :, zero_value] = 0
    c = weights(q, k, allowed) @ v  # [B, H, M, d]
    if context is not None:
        c = context(c)
    concat = c.transpose(1, 2).flatten(2)
    return concat @ mha.out_proj.weight.double().T + mha.out_proj.bias.double()


def encoder_layer(layer: nn.Module, x: Tensor, allowed: Tensor | None = None, **change) -> Tensor:
    """One ``TransformerEncoderLayer`` (batch-first, ReLU, no dropout) on ``x [B, N, E]``."""

    def feed_forward(h: Tensor) -> Tensor:
        hidden = torch.relu(h @ layer.linear1.weight.double().T + layer.linear1.bias.double())
        return hidden @ layer.linear2.weight.double().T + layer.linear2.bias.double()

    if layer.norm_first:
        h = x + attention_block(layer.self_attn, layer_norm(x, layer.norm1), allowed, **change)
        return h + feed_forward(layer_norm(h, layer.norm2))
    h = layer_norm(x + attention_block(layer.self_attn, x, allowed, **change), layer.norm1)
    return layer_norm(h + feed_forward(h), layer.norm2)
