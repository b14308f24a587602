"""Multi-head attention inside a Transformer layer: positions, position biases and KV caches.

:class:`attnkit.MultiHeadAttention` is torch's drop-in (eq. 38-40). A Transformer layer sometimes
needs to act between its projections and its attention: rotate queries and keys by their positions
(RoPE), add a position bias to the scores (ALiBi, T5), or attend cached keys of earlier tokens.
:func:`self_attend` does that with the parameters of any ``MultiHeadAttention`` (so its
``state_dict`` stays torch's), and when none of it is asked for it simply calls the module.

    q^(j) = R(pos_q) q W_q^(j)T,  K^(j) = R(pos_k) F W_K^(j)T  (rotary: R rotates pairs of features)
    e^(j)_{il} = score(q_i^(j), k_l^(j)) + bias_h(pos_q[i], pos_k[l])   (ALiBi / T5 score_mod)

Shapes: N batch, L queries, S keys, E embed_dim, H query heads, G key/value heads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.hooks import exact_attention
from attnkit.core.masks import ScoreMod
from attnkit.layers.kv_cache import CrossAttentionCache, KVCache
from attnkit.mechanisms.multi_head import MultiHeadAttention, engine_mask


class PositionBias(Protocol):
    """A position-dependent term added to the scores (ALiBi, T5 relative bias), as a score_mod."""

    def score_mod(self, q_positions: Tensor, k_positions: Tensor) -> ScoreMod: ...


class Rotary(Protocol):
    """Rotates features by their positions (RoPE): ``x [N, H, L, d]``, ``positions [N, L]``."""

    def __call__(self, x: Tensor, positions: Tensor) -> Tensor: ...


def _check_plain(mha: MultiHeadAttention) -> None:
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError(
            "positions and KV caches need a MultiHeadAttention without add_bias_kv and "
            "add_zero_attn (their extra keys have no position)"
        )


def project_queries(mha: MultiHeadAttention, x: Tensor) -> Tensor:
    """``q W_q^T + b_q`` of every head, ``[N, H, L, d_k]`` (eq. 38)."""
    q_size = mha._sizes[0]
    w = mha.q_proj_weight if mha.in_proj_weight is None else mha.in_proj_weight[:q_size]
    b = None if mha.in_proj_bias is None else mha.in_proj_bias[:q_size]
    assert w is not None
    q = F.linear(x, w, b)
    return q.unflatten(-1, (mha.num_heads, mha.head_dim_k)).transpose(1, 2)


def project_keys_values(
    mha: MultiHeadAttention, key: Tensor, value: Tensor
) -> tuple[Tensor, Tensor]:
    """``F W_K^T + b_K`` and ``F W_V^T + b_V``, ``[N, G, S, d_k]`` and ``[N, G, S, d_v]``."""
    q_size, k_size, _v_size = mha._sizes
    b = mha.in_proj_bias
    b_k = None if b is None else b[q_size : q_size + k_size]
    b_v = None if b is None else b[q_size + k_size :]
    w_k: Tensor | None = mha.k_proj_weight
    w_v: Tensor | None = mha.v_proj_weight
    if mha.in_proj_weight is not None:
        w_k = mha.in_proj_weight[q_size : q_size + k_size]
        w_v = mha.in_proj_weight[q_size + k_size :]
    assert w_k is not None and w_v is not None
    k = F.linear(key, w_k, b_k).unflatten(-1, (mha.num_kv_heads, mha.head_dim_k)).transpose(1, 2)
    v = F.linear(value, w_v, b_v).unflatten(-1, (mha.num_kv_heads, mha.head_dim_v)).transpose(1, 2)
    return k, v


def _combine_heads(mha: MultiHeadAttention, context: Tensor) -> Tensor:
    """Concatenate the heads and project (eq. 40): ``[N, H, L, d_v]`` → ``[N, L, E]``."""
    return mha.out_proj(context.transpose(1, 2).flatten(2))


def _attend(mha: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, **options: object) -> Tensor:
    out = mha.attention_kind(
        q,
        k,
        v,
        score=mha.score,
        align=mha.align,
        dropout=mha.dropout if mha.training else 0.0,
        return_weights=False,
        **options,
    )
    return out.context


def _to_batch_first(mha: MultiHeadAttention, *xs: Tensor) -> list[Tensor]:
    return [x if mha.batch_first else x.transpose(0, 1) for x in xs]


def self_attend(
    mha: MultiHeadAttention,
    x: Tensor,
    *,
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    rotary: Rotary | None = None,
    position_bias: PositionBias | None = None,
    cache: KVCache | None = None,
    lengths: Tensor | None = None,
) -> Tensor:
    """Self-attention of ``x`` (in ``mha``'s layout) with positions and an optional KV cache.

    Without ``rotary``, ``position_bias`` and ``cache`` this is ``mha(x, x, x)`` exactly.

    Args:
        mha: the projections, score and alignment.
        x: ``[N, L, E]`` if ``mha.batch_first`` else ``[L, N, E]``.
        attn_mask, key_padding_mask: torch's conventions (bool ``True`` = NOT allowed, or float
            added); not with ``cache`` (the cache's positions say which keys exist).
        is_causal: query ``i`` sees keys ``j <= i`` (without ``attn_mask``; a hint with one, as
            in torch). Always the case with a cache.
        rotary: rotates queries and keys by their positions (RoPE) before the cache stores them.
        position_bias: adds ``bias(pos_q, pos_k)`` to the scores through a ``score_mod``.
        cache: the keys/values of earlier tokens; ``x`` holds the next ``L`` tokens.
        lengths: ``[N]`` real tokens per row of ``x`` (right-padded ragged prompt), with a cache.

    Returns:
        ``[N, L, E]`` (``[L, N, E]``) like ``x``.

    Example::

        >>> mha = ak.MultiHeadAttention(16, 2, batch_first=True).eval()
        >>> cache = ak.layers.KVCache(capacity=8)
        >>> with torch.no_grad():
        ...     prompt = self_attend(mha, torch.randn(2, 3, 16), cache=cache)
        ...     step = self_attend(mha, torch.randn(2, 1, 16), cache=cache)  # sees all 4 tokens
        >>> prompt.shape, step.shape
        (torch.Size([2, 3, 16]), torch.Size([2, 1, 16]))
    """
    if rotary is None and position_bias is None and cache is None:
        out, _ = mha(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )
        return out
    _check_plain(mha)
    if x.dim() != 3:
        raise ValueError(
            f"positions and caches need batched input [N, L, E] or [L, N, E], got {tuple(x.shape)}"
        )
    (x,) = _to_batch_first(mha, x)
    n, length, _ = x.shape
    q = project_queries(mha, x)  # [N, H, L, d_k]
    k, v = project_keys_values(mha, x, x)  # [N, G, L, d_k], [N, G, L, d_v]
    if cache is None:
        if lengths is not None:
            raise ValueError("lengths= is for a cache; without one pass key_padding_mask")
        positions = torch.arange(length, device=x.device).expand(n, length)  # [N, L]
    else:
        positions = cache.query_positions(length, n, x.device)  # continue each row's count
    k_positions = positions  # the new keys are the tokens the queries stand at
    if rotary is not None:
        q, k = rotary(q, positions), rotary(k, k_positions)
    options: dict[str, object] = {}
    if cache is None:
        allowed, bias = mha._masks(key_padding_mask, attn_mask, n, length, length, x, True)
        mask = engine_mask(allowed, bias)
        options.update(mask=mask, causal=bool(is_causal) and attn_mask is None)
    else:
        if attn_mask is not None or key_padding_mask is not None:
            raise ValueError(
                "with a KV cache, pass lengths= for ragged rows instead of attn_mask / "
                "key_padding_mask (causal masking comes from the cached positions)"
            )
        # A prefill of an empty cache is plain causal attention: keep the fused kernels' flag.
        plain_prefill = cache.size == 0 and lengths is None and cache.window is None
        k, v, k_positions, positions = cache.append(k, v, lengths)
        if plain_prefill:
            options.update(causal=True)
        else:
            options.update(mask=cached_mask(positions, k_positions, cache.window))
    if position_bias is not None:
        options["score_mod"] = position_bias.score_mod(positions, k_positions)
    context = _attend(mha, q, k, v, **options)  # [N, H, L, d_v]
    out = _combine_heads(mha, context)
    return out if mha.batch_first else out.transpose(0, 1)


def cached_mask(q_positions: Tensor, k_positions: Tensor, window: int | None) -> Tensor:
    """Bool ``[N, 1, L, S]``: key ``l`` exists (position ``>= 0``), is not in the future of query
    ``i`` and, with a window, lies in ``(pos_q - window, pos_q]``."""
    q = q_positions[:, None, :, None]
    k = k_positions[:, None, None, :]
    allowed = (k >= 0) & (k <= q)
    if window is not None:
        allowed = allowed & (k > q - window)
    return allowed


def cross_attend(
    mha: MultiHeadAttention,
    x: Tensor,
    memory: Tensor,
    *,
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    cache: CrossAttentionCache | None = None,
) -> Tensor:
    """Cross-attention of ``x`` to the encoder's ``memory`` (survey: a basic query, §3.3.1);
    with ``cache`` the memory's keys/values are projected on the first call only.

    Args:
        mha: the projections, score and alignment.
        x: the queries' source ``[N, L, E]`` if ``mha.batch_first`` else ``[L, N, E]``.
        memory: ``[N, S, E]`` (``[S, N, E]``).
        attn_mask: torch's ``[L, S]`` mask (bool ``True`` = NOT allowed, or float added); not
            with ``cache``.
        key_padding_mask: ``[N, S]``, True at the memory's padding.
        is_causal: a hint that ``attn_mask`` is causal (torch's).
        cache: keeps the memory's keys and values between decoding steps.

    Returns:
        ``[N, L, E]`` (``[L, N, E]``) like ``x``.

    Example::

        >>> mha = ak.MultiHeadAttention(16, 2, batch_first=True)
        >>> cross_attend(mha, torch.randn(2, 3, 16), torch.randn(2, 7, 16)).shape
        torch.Size([2, 3, 16])
    """
    if cache is None:
        out, _ = mha(
            x,
            memory,
            memory,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )
        return out
    _check_plain(mha)
    if attn_mask is not None:
        raise ValueError("a cached cross-attention takes key_padding_mask, not attn_mask")
    x, memory = _to_batch_first(mha, x, memory)
    n, length, _ = x.shape
    if cache.k is None:
        cache.k, cache.v = project_keys_values(mha, memory, memory)
        allowed, bias = mha._masks(key_padding_mask, None, n, length, memory.shape[1], x, True)
        cache.allowed = engine_mask(allowed, bias)
    assert cache.v is not None
    q = project_queries(mha, x)
    context = _attend(mha, q, cache.k, cache.v, mask=cache.allowed, causal=False)
    out = _combine_heads(mha, context)
    return out if mha.batch_first else out.transpose(0, 1)


@contextmanager
def exact_kinds(model: nn.Module) -> Iterator[list[str]]:
    """Inside the block, every :class:`MultiHeadAttention` of ``model`` with an efficient kind
    (``attention="linear"``, ...) computes exact attention through :func:`attnkit.attention`
    with its own projections; yields the names of the modules switched.

    A scope of this context (:func:`attnkit.core.hooks.exact_attention`): the modules are not
    changed, and another thread running them meanwhile keeps their kinds.

    For evaluations whose result does not depend on the weights being replaced: the uniform
    ablation (``evaluate.ablate(model, "uniform")``, survey §4.1) replaces the weights of the
    engine's calls, and efficient kinds make none, so without this block it would leave them
    untouched and report the model itself. Uniform weights over the admissible keys (the masks'
    keys, not a kind's window) are the same whichever attention they replace.

    Args:
        model: any module; its :class:`MultiHeadAttention` submodules with a kind are switched.

    Yields:
        The names (in ``model.named_modules()``) of the modules switched.

    Example::

        >>> model = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True, attention="linear")
        >>> with exact_kinds(model) as switched:
        ...     y = model(torch.randn(2, 5, 16))
        >>> switched
        ['self_attn']
    """
    switched = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, MultiHeadAttention) and module.attention != "exact"
    ]
    with exact_attention(module for _, module in switched):
        yield [name for name, _ in switched]
