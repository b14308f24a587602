"""The ``flex`` backend: the forward of softmax attention run by compiled FlexAttention.

``torch.nn.attention.flex_attention`` computes ``softmax(score_mod(scale · q kᵀ)) v`` over the
admissible blocks of a ``BlockMask`` in one generated kernel (a C++ template on the CPU, Triton on
CUDA; Dong et al. 2024, "Flex Attention"). A call goes there when what it asks is expressible in
that form:

- the score is a dot product of per-vector features (``Score.pairwise_is_dot``: dot, scaled dot,
  general, biased general, cosine), or ``act`` of one (the activated general score,
  ``act(kᵀ W q + b)``: the activation and bias become part of the ``score_mod``);
- the float mask is added, and the user's ``score_mod`` applied, inside the kernel's ``score_mod``;
- the bool mask, ``causal`` (bottom-right) and the user's ``mask_mod`` become one ``mask_mod``; its
  block structure is built from attnkit's own blocks (``AttentionCall.mask_block``, one row of
  query blocks at a time, never a ``[B, H, M, N]`` tensor), so blocks with no admissible key are
  skipped and blocks where every key is admissible never evaluate it.

Equivalent reference (the tiled path, ``tiled.py``, runs what this backend declines; the tests
compare both against the formula)::

    s = score_mod(act(scale · q' k'ᵀ) + bias); s[~mask] = -inf     # act only for activated general
    O = softmax(s) v                                               # rows with no key: O = 0

Declined (the engine runs them on the next backend, ``tiled``): calls that need gradients (FlexAttention has no CPU
backward), weights, lse, summaries, dropout, other alignments, the additive, location and
euclidean scores (the euclidean score's dot-product form ``|q|² + |k|² - 2 q·k`` loses the small
distances to cancellation, ``scores.py``), float64 (FlexAttention's CPU kernel has none), and calls
with fewer than ``MIN_SCORES`` scores: compiling a kernel takes seconds (tens of seconds on a busy
machine), more than such a call takes on the tiled path; and (``nonfinite=False``) inputs that
are not finite or scores that may overflow. A non-finite output (a ``score_mod`` giving ``+inf``)
is known only after running: the backend then returns ``Declined`` and the engine computes the
call on the next backend, which defines it. So do calls on ``meta`` tensors (no kernel runs
there).

Compiled once per process (``torch.compile(..., dynamic=False)`` of one function, imported on first
use so ``import attnkit`` never loads inductor); each new shape, dtype or mod compiles a new kernel,
and at most ``MAX_KERNELS`` are compiled (dynamo's recompile limit: beyond it dynamo would run
FlexAttention eagerly, materialising the scores), after which new kinds of call are declined. A
call whose compilation fails warns once, is declined (``Declined``: the engine moves on), and is
remembered, so ``flex_limits`` declines that kind of call from then on.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.backend import Declined
from attnkit.core.call import AttentionCall, AttentionOutput, max_abs
from attnkit.core.captured import reads_tensors_requiring_grad
from attnkit.core.checks import check_score_mod
from attnkit.core.compile_failures import decline_after_failure
from attnkit.core.masks import MaskMod, ScoreMod
from attnkit.core.memory import feature_bytes, sizes
from attnkit.core.reference import score_features
from attnkit.core.scores import ActivatedGeneral, Score

#: calls with fewer scores (B·H·M·N) stay on the tiled path: 1 × 8 × 2048 × 2048. At this size a
#: tiled forward takes about 0.3 s on one CPU thread, a compile several seconds (once per shape)
MIN_SCORES = 1 << 25
#: kernels compiled per process at most (dynamo's recompile limit is 8 by default)
MAX_KERNELS = 8
#: query rows per block; keys per block without a mask, and with one (finer blocks skip more)
Q_BLOCK, KV_BLOCK, MASKED_KV_BLOCK = 128, 1024, 256
#: dtypes of FlexAttention's CPU kernel (CUDA also has these; float64 stays tiled everywhere)
FLEX_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_kernels: OrderedDict[Hashable, None] = OrderedDict()  # kinds of call compiled so far
_failed: OrderedDict[Hashable, str] = OrderedDict()  # kinds of call whose compilation failed


# --- what FlexAttention can compute -----------------------------------------------------------


def _activation(score: Score) -> Callable[[Tensor], Tensor] | None:
    """``act`` of an activated general score whose pairwise part is the class's own."""
    if isinstance(score, ActivatedGeneral) and type(score).pairwise is ActivatedGeneral.pairwise:
        return score.act
    return None


def expressible(score: Score) -> bool:
    """Whether ``score`` is a dot product of features, possibly inside an activation."""
    if score.value_features is not None:
        return False
    return score.pairwise_is_dot or _activation(score) is not None


def _callable_key(fn: object, depth: int = 0) -> Hashable:
    """What dynamo specialises a traced callable on, approximately: its code and the constants
    it closes over (tensors by their metadata, other objects by identity)."""
    if depth > 4:
        return ("id", id(fn))
    if isinstance(fn, Tensor):
        return ("tensor", tuple(fn.shape), fn.stride(), fn.dtype, fn.device.type)
    if fn is None or isinstance(fn, (bool, int, float, str)):
        return fn
    if isinstance(fn, (tuple, list)):
        return tuple(_callable_key(x, depth + 1) for x in fn)
    if isinstance(fn, functools.partial):
        args = tuple(_callable_key(x, depth + 1) for x in fn.args)
        kwargs = tuple((k, _callable_key(x, depth + 1)) for k, x in sorted(fn.keywords.items()))
        return ("partial", _callable_key(fn.func, depth + 1), args, kwargs)
    code = getattr(fn, "__code__", None)
    if code is None or isinstance(fn, nn.Module):
        return ("id", id(fn))
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    defaults = list(getattr(fn, "__defaults__", None) or ())
    return (code, tuple(_callable_key(x, depth + 1) for x in cells + defaults))


def _layout(t: Tensor | None) -> Hashable:
    return None if t is None else (tuple(t.shape), t.stride(), t.dtype)


def kernel_key(call: AttentionCall) -> Hashable:
    """The kind of call one compiled kernel serves: shapes, dtypes, score form and mods."""
    return (
        _layout(call.q),
        _layout(call.k),
        _layout(call.v),
        call.q.device.type,
        type(call.score),
        _callable_key(_activation(call.score)),
        call.scale,
        _layout(call.bias),
        None if call.mask is None else tuple(call.mask.shape),
        call.causal,
        _callable_key(call.score_mod),
        _callable_key(call.mask_mod),
    )


def flex_limits(call: AttentionCall) -> list[str]:
    """Why the ``flex`` backend passes over ``call``, beyond its declared capabilities."""
    why = []
    if not expressible(call.score):
        why.append(
            f"score {call.score.registry_name!r} is not a dot product of features (or act() of "
            "one), the form FlexAttention computes"
        )
    b, h, m, n = call.shape
    if b * h * m * n < MIN_SCORES:
        why.append(
            f"{b * h * m * n} scores (B·H·M·N) is below {MIN_SCORES}: the tiled path takes less "
            "time than compiling a kernel"
        )
    if not why and reads_tensors_requiring_grad(call.score_mod, call.q):
        # a tensor the engine's search for captured tensors missed: this kernel has no backward
        why.append("gradients are needed: the score_mod reads a tensor that requires grad")
    if not why and call.q.device.type != "meta":
        key = kernel_key(call)
        if key in _failed:
            why.append(f"compiling FlexAttention for this kind of call failed: {_failed[key]}")
        elif key not in _kernels and len(_kernels) >= MAX_KERNELS:
            why.append(
                f"{MAX_KERNELS} kernels were compiled in this process (dynamo's recompile limit): "
                "a new shape, dtype or mod stays on the tiled path"
            )
    return why


# --- the kernel's mods and block mask ---------------------------------------------------------


def _entry(t: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """``t[b, h, q_idx, kv_idx]`` of a 4-D tensor broadcastable to ``[B, H, M, N]``."""
    index = [i if size > 1 else 0 for i, size in zip((b, h, q_idx, kv_idx), t.shape, strict=True)]
    return t[index[0], index[1], index[2], index[3]]


def kernel_score_mod(call: AttentionCall) -> ScoreMod | None:
    """The ``score_mod`` FlexAttention applies to ``scale · q' k'ᵀ``: the activated general
    score's ``act(· + b) · scale``, then the float mask, then the user's ``score_mod``."""
    act = _activation(call.score)
    factor = call.score.resolve_scale(call.scale, call.k.shape[-1]) if act is not None else None
    act_bias = call.score.bias if act is not None else None
    bias, user = call.bias, call.score_mod
    if act is None and bias is None and user is None:
        return None

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if act is not None:
            score = act(score + act_bias)
            if factor is not None:
                score = score * factor
        if bias is not None:
            score = score + _entry(bias, b, h, q_idx, kv_idx)
        if user is not None:
            score = user(score, b, h, q_idx, kv_idx)
        return score

    return score_mod


def kernel_mask_mod(call: AttentionCall) -> MaskMod | None:
    """One ``mask_mod`` for the bool mask, ``causal`` (bottom-right) and the user's mask_mod."""
    mask, user = call.mask, call.mask_mod
    offset = call.shape[3] - call.shape[2] if call.causal else None
    if mask is None and user is None and offset is None:
        return None

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        parts = []
        if mask is not None:
            parts.append(_entry(mask, b, h, q_idx, kv_idx))
        if offset is not None:
            parts.append(kv_idx <= q_idx + offset)
        if user is not None:
            parts.append(user(b, h, q_idx, kv_idx))
        out = parts[0]
        for part in parts[1:]:
            out = out & part
        return out

    return mask_mod


def _ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """``(count [..., QB], indices [..., QB, KB])`` of the True key blocks of each query block,
    listed first (FlexAttention's sparse format)."""
    count = blocks.sum(-1, dtype=torch.int32)
    order = torch.argsort(blocks.to(torch.int8), dim=-1, descending=True, stable=True)
    return count, order.to(torch.int32)


def kernel_block_mask(call: AttentionCall, mask_mod: MaskMod | None) -> Any:
    """FlexAttention's ``BlockMask`` of the call: which ``Q_BLOCK`` × kv-block tiles hold an
    admissible key (``partial``: evaluate ``mask_mod`` there) or only admissible keys (``full``).
    Built from ``call.mask_block``, one row of query blocks at a time: ``O(B·H·Q_BLOCK·N)``."""
    from torch.nn.attention.flex_attention import BlockMask

    _, _, m, n = call.shape
    kv_block = KV_BLOCK if mask_mod is None else MASKED_KV_BLOCK
    n_kv = -(-n // kv_block)
    pad = n_kv * kv_block - n
    partial_rows, full_rows = [], []
    for q0 in range(0, m, Q_BLOCK):
        q1 = min(m, q0 + Q_BLOCK)
        allowed = call.mask_block(q0, q1, 0, n) if mask_mod is not None else None
        if allowed is None:
            # every key admissible: each tile holds one (the padding is under one block), and
            # all of them but for the padding (below); no need to read q1 - q0 by n booleans
            any_key = torch.ones(1, 1, n_kv, dtype=torch.bool, device=call.q.device)
            every_key = any_key.clone()
        else:
            allowed = allowed.expand(*allowed.shape[:2], q1 - q0, n)
            tiles = torch.nn.functional.pad(allowed, (0, pad), value=False)
            tiles = tiles.unflatten(-1, (n_kv, kv_block))  # [B', H', rows, KB, kv_block]
            any_key = tiles.any(-1).any(-2)  # [B', H', KB]
            every_key = tiles.all(-1).all(-2)
        if q1 - q0 < Q_BLOCK:  # an incomplete tile is never "full": its bounds are checked
            every_key = torch.zeros_like(every_key)
        if pad:
            every_key[..., -1] = False
        partial_rows.append(any_key & ~every_key)
        full_rows.append(every_key)
    shape = torch.broadcast_shapes(*(r.shape for r in partial_rows))
    partial = torch.stack([r.expand(shape) for r in partial_rows], -2)  # [B', H', QB, KB]
    full = torch.stack([r.expand(shape) for r in full_rows], -2)
    kv_count, kv_indices = _ordered(partial)
    full_count, full_indices = _ordered(full)
    return BlockMask.from_kv_blocks(
        kv_count,
        kv_indices,
        full_count,
        full_indices,
        BLOCK_SIZE=(Q_BLOCK, kv_block),
        mask_mod=mask_mod,
        seq_lengths=(m, n),
    )


# --- compiling and running --------------------------------------------------------------------


def _flex_call(q: Tensor, k: Tensor, v: Tensor, score_mod, block_mask, scale: float) -> Tensor:  # type: ignore[no-untyped-def]
    """The function compiled: its own frame, so its recompile count is attnkit's alone."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


@functools.cache
def compiled_flex() -> Callable[..., Tensor]:
    """``torch.compile(flex_attention)``, built on first use (importing inductor then)."""
    # one C++ (or Triton) kernel per compile: a pool of compile workers would only add its
    # start-up (seen as 30-50% of a cached compile on a busy 2-core machine)
    return torch.compile(_flex_call, dynamic=False, options={"compile_threads": 1})


def kernels_compiled() -> int:
    """How many kinds of call (shape, dtype, score form, mods) have a compiled kernel."""
    return len(_kernels)


def flex_attention_forward(call: AttentionCall) -> AttentionOutput | Declined:
    """Run ``call`` through compiled FlexAttention (see the module docstring); ``Declined``
    when the kernel cannot be compiled or gives a result attnkit defines otherwise."""
    if call.q.device.type == "meta":
        return Declined(("tensors on 'meta' have no values for a compiled kernel to run on",))
    key = kernel_key(call)
    q, k = score_features(call, call.q, call.k)  # e.g. W q of the general score
    scale = call.score.resolve_scale(call.scale, call.k.shape[-1])
    if _activation(call.score) is not None or scale is None:
        scale = 1.0  # the activated score scales after its activation (in the score_mod)
    mask_mod = kernel_mask_mod(call)
    if call.score_mod is not None:  # inside the kernel a wrong result is traced, not refused
        check_score_mod(call.score_mod, call.q, call.shape)
    try:
        context = compiled_flex()(
            q.to(call.v.dtype),
            k.to(call.v.dtype),
            call.v,
            kernel_score_mod(call),
            kernel_block_mask(call, mask_mod),
            float(scale),
        )
    except Exception as error:  # inductor or the mods could not compile: another backend can
        return decline_after_failure(_failed, key, error, "FlexAttention")
    _kernels[key] = None
    if context.numel() and not bool(torch.isfinite(max_abs(context))):  # one read, no copies
        # e.g. a +inf score: attnkit shares the row among the +inf keys, the kernel gives NaN
        return Declined(("the compiled kernel's context is not finite (a score was ±inf)",))
    return AttentionOutput(context=context)


def flex_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`flex_attention_forward` (see ``memory.py``; forward only:
    the backend declines calls that need gradients): the context and the log-sum-exp the kernel
    returns, the ``BlockMask``'s tables (a few ints per tile) and, while it is built, one row of
    query blocks of the mask, ``[B', H', Q_BLOCK, N]`` over the dims it varies in: 2 bytes an
    entry for a bool mask or ``causal`` (the mask and its padded copy), freed before the kernel
    runs; 10 for a ``mask_mod`` (an int64 expression and its bools, as a window's ``|i - j| <= w``),
    whose rows were measured beside the kernel's outputs (``tests/core/test_memory_compiled.py``).
    A mask that cannot be evaluated on one entry is taken to vary over every batch and head."""
    z = sizes(call)
    b, h, m, n = call.shape
    tiles = -(-m // Q_BLOCK) * -(-n // MASKED_KV_BLOCK)
    masked = call.mask is not None or call.causal or call.mask_mod is not None
    outputs = (z.context + z.rows) * z.item + z.rows * 4
    if not masked:
        return feature_bytes(call) + outputs + 4 * tiles * 4
    try:
        one = call.mask_block(0, 1, 0, 1)  # the mask's broadcast dims, from one entry
        varying = 1 if one is None else one.shape[0] * one.shape[1]
    except Exception:  # a mask_mod that fails here fails in the call itself, with its own error
        varying = b * h
    rows = min(varying, b * h) * Q_BLOCK * n
    tables = 4 * tiles * 4 * b * h
    if call.mask_mod is not None:
        return feature_bytes(call) + outputs + tables + 10 * rows
    return feature_bytes(call) + max(outputs, 2 * rows) + tables
