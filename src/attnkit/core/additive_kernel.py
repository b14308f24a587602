"""The ``additive`` backend: the additive score's tiled attention, compiled by ``torch.compile``.

The additive score of Bahdanau et al. (survey Table 2; ``ak.scores.Additive``),

    s_ij = scale · wᵀ tanh(W₁ q_i + W₂ k_j + b) + bias_ij,

costs ``d_w`` activations per score: for ``M = N = 2048`` and ``d_w = 128``, 537 million ``tanh``.
The ``tiled`` backend computes them block by block in eager PyTorch, materialising each block's
``[bq, bk, d_w]`` hidden units, and differentiates them by autograd; about 3.5 ``tanh`` passes
forward and 13.5 forward + backward on one CPU thread (``benchmarks/limits.py``). Here the same
FlashAttention algorithm (online softmax over key blocks, backward by recomputation from the
log-sum-exp ``lse``) is written once as plain PyTorch per block — :func:`additive_forward_block`
and :func:`additive_backward_block` — and compiled by ``torch.compile`` (inductor: a C++ kernel on
the CPU, Triton on CUDA, from the same code):

- forward, per block: ``s = Σ_d w_d tanh(q'_id + k'_jd)`` is one reduction whose ``tanh`` is
  never stored, then the online-softmax update of the running max ``m``, sum ``l`` and
  unnormalised context ``acc``;
- backward, per block: ``t = tanh(q'_i + k'_j)`` is recomputed once and kept for the block (on the
  CPU inductor stores a reused ``tanh`` rather than recomputing it), then

      p = exp(s - lse),   dS = p ∘ (dO Vᵀ - D),   D_i = Σ_e dO_ie O_ie - dlse_i
      dq'_id = w_d Σ_j dS_ij (1 - t_ijd²),   dk'_jd = w_d Σ_i dS_ij (1 - t_ijd²)
      dw_d = Σ_ij dS_ij t_ijd,   dV = pᵀ dO

  (three reductions over the stored block, instead of autograd through it).

Both blocks evaluate ``tanh(x)`` as ``2 σ(2x) − 1`` (:func:`tanh_by_sigmoid`), the same function:
inductor's C++ code vectorises the sigmoid (an ``exp`` and a division) about four times faster
than its ``tanh`` on the AMD EPYC of ``docs/benchmarks.md`` (0.56 against 2.41 ns per element,
compiled, the reduction over ``d_w = 128`` included), at the same float32 error against float64
(largest of 64 × 512 scores: 4.6·10⁻⁶ against 4.0·10⁻⁶).

The per-vector features ``q' = W₁ q`` and ``k' = W₂ k + b`` and ``w · scale`` are computed
before, under ordinary autograd, so their gradients reach ``q``, ``k`` and every parameter of the
score as on the other backends. Inputs are cut into blocks padded to whole blocks (padded keys
get ``-inf``), so every block of a call has one shape and one compiled kernel serves it; blocks
with no admissible key are skipped. The bool mask, ``causal`` (bottom-right), a ``mask_mod`` and
the float mask become one additive ``[B·H, bq, bk]`` bias per block (``-inf`` where masked).

Equivalent reference (``reference.py``; the ``tiled`` backend runs every call declined here)::

    s = w · tanh(q' [..., :, None, :] + k' [..., None, :, :]) · scale + bias; s[~mask] = -inf
    lse = logsumexp(s, -1); O = softmax(s) @ v                 # rows with no key: O = 0

Declined (the engine runs them on ``tiled``): other scores, another activation than ``tanh`` (or
a subclass with its own ``pairwise``), multi-dimensional scores, other alignments, weights,
summaries, dropout, a ``score_mod``, a float mask that needs a gradient, non-finite inputs
(``nonfinite=False``) and calls while ``torch.compile`` traces. A call whose output comes out
non-finite (a non-finite parameter of the score) is declined after running, and so is a call on
``meta`` tensors (no values to run on). When the engine chooses by itself it also passes over
calls with fewer than :data:`MIN_HIDDEN` hidden units ``B·H·M·N·d_w`` (compiling takes seconds,
more than such a call takes on ``tiled``); ``backend="additive"`` runs them anyway.

Compiled once per kind of call (device, dtype, ``B·H == 1``, block sizes, ``d_w``, ``d_v``): the
block shapes do not depend on ``M`` and ``N``, so other lengths reuse the kernel, and ``B·H`` is
a dynamic size. At most :data:`MAX_KERNELS` kinds are compiled per process (dynamo's recompile
limit is 8 per function), after which new kinds are declined. A compilation that fails warns
once, is remembered (that kind is declined from then on) and the call is declined; if the
backward fails to compile, it runs the same block function eagerly (the same formula, with each
block's hidden units materialised). Inductor's cache (``TORCHINDUCTOR_CACHE_DIR``) keeps the
kernels across processes.

Shapes: B batch, H heads, X = B·H, M queries, N keys, d_w hidden units, Dv value features.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnkit.core.backend import Declined
from attnkit.core.call import AttentionCall, AttentionOutput, compute_dtype, max_abs
from attnkit.core.compile_failures import decline_after_failure, failure_reason, remember
from attnkit.core.reference import score_features
from attnkit.core.scores import Additive

#: calls with fewer hidden units B·H·M·N·d_w stay on the tiled path: 2²⁶ is 1 × 1 × 1024 × 512
#: × 128, about 0.1 s on tiled (forward, one CPU thread), against seconds for a compile
MIN_HIDDEN = 1 << 26
#: kinds of call compiled per process at most (dynamo recompiles each function at most 8 times;
#: a dynamic size becoming dynamic costs one more)
MAX_KERNELS = 6
#: hidden units per backward block, where the tanh is stored once (4 MiB in float32; 2 MiB
#: blocks, inside a CPU's L2 cache, took 15% longer forward + backward on a loaded 2-core
#: machine at M = N = 2048, d_w = 128: twice the calls)
BACKWARD_HIDDEN = 1 << 20
#: a forward block spans this many backward blocks of keys (its hidden units are never stored,
#: the reduction consumes each tanh at once, so it can be larger: fewer calls)
FORWARD_BLOCKS = 8
#: query rows per block at most
MAX_BLOCK_Q = 64
NEG_INF = float("-inf")

_kernels: OrderedDict[Hashable, None] = OrderedDict()  # kinds of call compiled so far
_failed: OrderedDict[Hashable, str] = OrderedDict()  # kinds whose compilation failed


# --- the block computation, as plain PyTorch (what torch.compile compiles) --------------------


def tanh_by_sigmoid(x: Tensor) -> Tensor:
    """``tanh(x) = 2 σ(2x) − 1``, elementwise: what the compiled blocks evaluate (the module
    docstring says why). Exact at ±∞ (σ saturates to 0 or 1); near 0 its error is absolute, a
    few float32 ulps of 1, which the reduction over ``d_w`` units then dominates."""
    return 2.0 * torch.sigmoid(2.0 * x) - 1.0


def additive_forward_block(
    qf: Tensor,
    kf: Tensor,
    w: Tensor,
    v: Tensor,
    bias: Tensor,
    row_max: Tensor,
    row_sum: Tensor,
    acc: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """One key block of the online softmax for one query block.

    Args:
        qf: query features ``W₁ q`` ``[X, bq, d_w]``.
        kf: key features ``W₂ k + b`` ``[X, bk, d_w]``.
        w: ``w · scale`` ``[d_w]``.
        v: values ``[X, bk, Dv]``.
        bias: added to the scores, ``-inf`` where masked ``[X, bq, bk]``.
        row_max: running maximum of the scores ``[X, bq]`` (``-inf`` before any key).
        row_sum: running sum of ``exp(s - row_max)`` ``[X, bq]``.
        acc: running ``Σ_j exp(s_j - row_max) v_j`` ``[X, bq, Dv]``.

    Returns:
        ``(row_max, row_sum, acc)`` after this block.
    """
    s = (tanh_by_sigmoid(qf.unsqueeze(-2) + kf.unsqueeze(-3)) * w).sum(-1) + bias  # [X, bq, bk]
    new_max = torch.maximum(row_max, s.amax(-1))
    # a row with no admissible key so far keeps -inf: shift by 0 so exp(-inf) = 0, not NaN
    shift = torch.where(new_max == NEG_INF, torch.zeros_like(new_max), new_max)
    p = torch.exp(s - shift.unsqueeze(-1))
    rescale = torch.exp(row_max - shift)
    row_sum = rescale * row_sum + p.sum(-1)
    acc = rescale.unsqueeze(-1) * acc + p @ v
    return new_max, row_sum, acc


def additive_backward_block(
    qf: Tensor,
    kf: Tensor,
    w: Tensor,
    v: Tensor,
    bias: Tensor,
    lse: Tensor,
    d_out: Tensor,
    row_term: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of one block (see the module docstring for the formulas).

    Args:
        qf, kf, w, v, bias: as for :func:`additive_forward_block`.
        lse: the rows' log-sum-exp ``[X, bq]`` (0 for rows with no admissible key, whose
            ``bias`` is ``-inf`` everywhere).
        d_out: gradient of the context ``[X, bq, Dv]``.
        row_term: ``D_i - dlse_i`` ``[X, bq]``.

    Returns:
        ``(dq' [X, bq, d_w], dk' [X, bk, d_w], dv [X, bk, Dv], dw [d_w])`` of this block.
    """
    t = tanh_by_sigmoid(qf.unsqueeze(-2) + kf.unsqueeze(-3))  # [X, bq, bk, d_w], kept
    s = (t * w).sum(-1) + bias
    p = torch.exp(s - lse.unsqueeze(-1))
    ds = p * (d_out @ v.transpose(-2, -1) - row_term.unsqueeze(-1))  # [X, bq, bk]
    dv = p.transpose(-2, -1) @ d_out
    g = ds.unsqueeze(-1) * t
    gt = g * t  # dS · t²; dS · (1 - t²) = dS - dS · t², summed over keys or queries
    dq = (ds.sum(-1).unsqueeze(-1) - gt.sum(-2)) * w
    dk = (ds.sum(-2).unsqueeze(-1) - gt.sum(-3)) * w
    dw = g.sum(-2).sum((0, 1))  # Σ_j first: the same loops as dq's sums, one read of t
    return dq, dk, dv, dw


@dataclass(frozen=True)
class CompiledBlocks:
    """The two block functions compiled, and dynamo's ``maybe_mark_dynamic``."""

    forward: Callable[..., tuple[Tensor, ...]]
    backward: Callable[..., tuple[Tensor, ...]]
    mark_dynamic: Callable[[Tensor, int], None]


@functools.cache
def compiled_blocks() -> CompiledBlocks:
    """``torch.compile`` of the two block functions, built on first use (importing dynamo and
    inductor then); one C++ kernel at a time (a pool of compile workers costs more than it saves
    here)."""
    from torch._dynamo import maybe_mark_dynamic

    options = {"compile_threads": 1}
    return CompiledBlocks(
        torch.compile(additive_forward_block, fullgraph=True, options=options),
        torch.compile(additive_backward_block, fullgraph=True, options=options),
        maybe_mark_dynamic,
    )


# --- what the kernel computes ------------------------------------------------------------------


def expressible(call: AttentionCall) -> bool:
    """The score is ``ak.scores.Additive``'s own ``wᵀ tanh(q' + k')``, one score per key."""
    score = call.score
    return (
        isinstance(score, Additive)
        and type(score).pairwise is Additive.pairwise
        and score.act is torch.tanh
        and score.value_features is None
    )


def _pow2_floor(x: float) -> int:
    return 1 << max(0, math.floor(math.log2(max(x, 1.0))))


def _pow2_ceil(x: int) -> int:
    return 1 << max(0, (max(x, 1) - 1).bit_length())


def kernel_blocks(x: int, m: int, n: int, d_w: int) -> tuple[int, int, int]:
    """``(block_q, block_k forward, block_k backward)``, powers of two (at least 8, at most the
    lengths rounded up): a backward block holds about :data:`BACKWARD_HIDDEN` hidden units
    ``X · block_q · block_k · d_w``, a forward block :data:`FORWARD_BLOCKS` times as many keys."""
    per_pair = max(1, x * d_w)  # an empty batch has blocks too (none is computed)
    side = _pow2_floor(math.sqrt(BACKWARD_HIDDEN / per_pair))
    block_q = min(max(8, min(MAX_BLOCK_Q, side)), _pow2_ceil(m))
    backward = min(max(8, _pow2_floor(BACKWARD_HIDDEN / (per_pair * block_q))), _pow2_ceil(n))
    forward = min(backward * FORWARD_BLOCKS, _pow2_ceil(n))
    return block_q, forward, backward


def kernel_key(call: AttentionCall) -> Hashable:
    """The kind of call one compiled kernel serves."""
    b, h, m, n = call.shape
    d_w = call.score.elements_per_score
    return (
        call.q.device.type,
        compute_dtype(call.q.dtype),
        b * h == 1,
        kernel_blocks(b * h, m, n, d_w),
        d_w,
        call.v.shape[-1],
    )


def additive_kernel_limits(call: AttentionCall) -> list[str]:
    """Why the ``additive`` backend passes over ``call``, beyond its declared capabilities."""
    why = []
    if not expressible(call):
        why.append(
            f"score {call.score.registry_name!r} is not ak.scores.Additive's own "
            "w^T tanh(W1 q + W2 k + b), the form this kernel computes"
        )
        return why
    if call.bias is not None and call.bias.requires_grad and torch.is_grad_enabled():
        why.append("the float mask requires grad (this kernel gives the mask no gradient)")
    if not why and call.q.device.type != "meta":
        key = kernel_key(call)
        if key in _failed:
            why.append(
                f"compiling the additive kernel for this kind of call failed: {_failed[key]}"
            )
        elif key not in _kernels and len(_kernels) >= MAX_KERNELS:
            why.append(
                f"{MAX_KERNELS} additive kernels were compiled in this process (dynamo's "
                "recompile limit): a new kind of call stays on the tiled path"
            )
    return why


def additive_kernel_preferences(call: AttentionCall) -> list[str]:
    """Why the engine, choosing by itself, passes over ``call``: too small a call to pay for
    compiling a kernel (not counted when the backend is named alone)."""
    if not expressible(call):
        return []
    b, h, m, n = call.shape
    hidden = b * h * m * n * call.score.elements_per_score
    if hidden >= MIN_HIDDEN:
        return []
    return [
        f"{hidden} hidden units (B·H·M·N·d_w) is below {MIN_HIDDEN}: the tiled path takes less "
        "time than compiling a kernel (name the backend to use it anyway)"
    ]


# --- blocks ------------------------------------------------------------------------------------


def _blocked(t: Tensor, block: int) -> Tensor:
    """``[X, L, ...]`` → ``[ceil(L / block), X, block, ...]``, zero-padded, contiguous: block
    ``i`` is ``out[i]``, a contiguous tensor of one shape for every ``i``."""
    x, length = t.shape[:2]
    count = -(-length // block)
    padded = t.new_zeros((x, count * block, *t.shape[2:]))
    padded[:, :length] = t
    return padded.unflatten(1, (count, block)).transpose(0, 1).contiguous()


def _unblocked(t: Tensor, length: int) -> Tensor:
    """The inverse of :func:`_blocked`: ``[count, X, block, ...]`` → ``[X, length, ...]``."""
    return t.transpose(0, 1).flatten(1, 2)[:, :length]


@dataclass
class KernelPlan:
    """The call, its block sizes, and how to run a block (compiled, or eagerly after a failed
    compile of the backward)."""

    call: AttentionCall
    block_q: int
    block_k: int  # forward
    block_k_backward: int
    key: Hashable
    dtype: torch.dtype
    _zeros: dict[tuple[int, int], Tensor] = field(default_factory=dict)

    def bias(self, q0: int, k0: int, block_k: int) -> Tensor | None:
        """The additive bias of the block of queries ``[q0, q0 + block_q)`` × keys
        ``[k0, k0 + block_k)``, ``[X, block_q, block_k]``: the float mask, ``-inf`` where the
        mask (bool, causal, ``mask_mod``) or the padding excludes a key; ``None`` when no key
        is admissible (the block is skipped)."""
        call, bq = self.call, self.block_q
        b, h, m, n = call.shape
        q1, k1 = min(m, q0 + bq), min(n, k0 + block_k)
        mask = call.mask_block(q0, q1, k0, k1)
        if mask is not None:
            if not bool(mask.any()):
                return None
            if bool(mask.all()):
                mask = None  # e.g. below the causal diagonal: no masking work
        float_mask = call.bias_block(q0, q1, k0, k1)
        if mask is None and float_mask is None and q1 - q0 == bq and k1 - k0 == block_k:
            zeros = self._zeros.get((bq, block_k))
            if zeros is None:
                zeros = torch.zeros(b * h, bq, block_k, dtype=self.dtype, device=call.q.device)
                self._zeros[(bq, block_k)] = zeros
            return zeros
        out = torch.zeros(b, h, bq, block_k, dtype=self.dtype, device=call.q.device)
        region = out[..., : q1 - q0, : k1 - k0]
        if float_mask is not None:
            region += float_mask.to(self.dtype)
        if mask is not None:
            region.masked_fill_(~mask, NEG_INF)
        out[..., k1 - k0 :] = NEG_INF  # padded keys
        return out.view(b * h, bq, block_k)

    def run(self, backward: bool, first: bool, *args: Tensor) -> tuple[Tensor, ...]:
        """One block, by the compiled function; a failed compile of the backward runs the same
        function eagerly (the forward's failure declines the call: see the run function).
        ``first``: the call's first block (all of a call's blocks have one shape, so only the
        first can compile), where ``B·H`` is marked dynamic: it varies with the batch size, and
        one kernel serves every size."""
        kernels = compiled_blocks()
        if first and args[0].shape[0] > 1:
            for t in args:
                if t.dim() > 1:
                    kernels.mark_dynamic(t, 0)
        if not backward:
            return kernels.forward(*args)
        if self.key in _failed:
            return additive_backward_block(*args)
        try:
            return kernels.backward(*args)
        except Exception as error:  # inductor could not compile: the same formula, eagerly
            reason = failure_reason(error)
            remember(_failed, self.key, reason)
            warnings.warn(
                f"attnkit: the compiled additive backward failed ({reason}); it runs eagerly, and "
                "this kind of call runs on the tiled backend from now on",
                RuntimeWarning,
                stacklevel=2,
            )
            return additive_backward_block(*args)


class AdditiveKernelFunction(torch.autograd.Function):
    """Forward by compiled blocks with online softmax; backward by compiled blocks from ``lse``.

    Inputs ``qf [X, M, d_w]``, ``kf [X, N, d_w]``, ``v [X, N, Dv]``, ``w [d_w]`` in the compute
    dtype; outputs ``context [X, M, Dv]`` and ``lse [X, M]`` (``-inf`` for a row with no key)."""

    @staticmethod
    def forward(ctx, plan: KernelPlan, qf: Tensor, kf: Tensor, v: Tensor, w: Tensor):  # type: ignore[override]
        x, m, _ = qf.shape
        bq, bk = plan.block_q, plan.block_k
        qb, kb, vb = _blocked(qf, bq), _blocked(kf, bk), _blocked(v, bk)
        wd = w.detach()
        out = qf.new_zeros(qb.shape[0], x, bq, v.shape[-1])
        lse = qf.new_zeros(qb.shape[0], x, bq)
        first = True
        for i in range(qb.shape[0] if x else 0):  # an empty batch computes nothing
            row_max = qf.new_full((x, bq), NEG_INF)
            row_sum = qf.new_zeros(x, bq)
            acc = qf.new_zeros(x, bq, v.shape[-1])
            for j in range(kb.shape[0]):
                bias = plan.bias(i * bq, j * bk, bk)
                if bias is None:
                    continue  # no admissible key: skipped, not computed
                row_max, row_sum, acc = plan.run(
                    False, first, qb[i], kb[j], wd, vb[j], bias, row_max, row_sum, acc
                )
                first = False
            has_key = row_sum > 0
            total = torch.where(has_key, row_sum, torch.ones_like(row_sum))
            out[i] = acc / total.unsqueeze(-1)
            lse[i] = torch.where(has_key, row_max + torch.log(total), NEG_INF)
        context, lse = _unblocked(out, m), _unblocked(lse, m)
        ctx.plan = plan
        ctx.save_for_backward(qf, kf, v, w, context, lse)
        return context, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out: Tensor, d_lse: Tensor):  # type: ignore[override]
        plan: KernelPlan = ctx.plan
        qf, kf, v, w, context, lse = ctx.saved_tensors
        m, n = qf.shape[1], kf.shape[1]
        bq, bk = plan.block_q, plan.block_k_backward
        finite = torch.isfinite(lse)
        d_out = d_out.to(qf.dtype)
        row_term = (d_out * context).sum(-1) - torch.where(finite, d_lse.to(qf.dtype), 0.0)
        qb, kb, vb = _blocked(qf, bq), _blocked(kf, bk), _blocked(v, bk)
        ob, rb = _blocked(d_out, bq), _blocked(row_term, bq)
        lb = _blocked(torch.where(finite, lse, torch.zeros_like(lse)), bq)
        dq, dk, dv = torch.zeros_like(qb), torch.zeros_like(kb), torch.zeros_like(vb)
        dw = torch.zeros_like(w)
        wd = w.detach()
        first = True
        for i in range(qb.shape[0] if qf.shape[0] else 0):
            for j in range(kb.shape[0]):
                bias = plan.bias(i * bq, j * bk, bk)
                if bias is None:
                    continue
                dq_ij, dk_ij, dv_ij, dw_ij = plan.run(
                    True, first, qb[i], kb[j], wd, vb[j], bias, lb[i], ob[i], rb[i]
                )
                first = False
                dq[i] += dq_ij
                dk[j] += dk_ij
                dv[j] += dv_ij
                dw += dw_ij
        return None, _unblocked(dq, m), _unblocked(dk, n), _unblocked(dv, n), dw


def kernels_compiled() -> int:
    """How many kinds of call have a compiled additive kernel in this process."""
    return len(_kernels)


def additive_kernel_attention(call: AttentionCall) -> AttentionOutput | Declined:
    """Run ``call`` through the compiled additive kernel (see the module docstring);
    ``Declined`` when the kernel cannot be compiled or gives a non-finite result."""
    if call.q.device.type == "meta":
        return Declined(("tensors on 'meta' have no values for a compiled kernel to run on",))
    key = kernel_key(call)
    b, h, m, n = call.shape
    qf, kf = score_features(call, call.q, call.k)  # W1 q, W2 k + b under ordinary autograd
    dtype = qf.dtype
    d_w, d_v = qf.shape[-1], call.v.shape[-1]
    w = call.score.out.weight[0].to(dtype)
    factor = call.score.resolve_scale(call.scale, call.k.shape[-1])
    if factor is not None:
        w = w * factor
    plan = KernelPlan(call, *kernel_blocks(b * h, m, n, d_w), key, dtype)
    try:
        context, lse = AdditiveKernelFunction.apply(
            plan,
            qf.reshape(b * h, m, d_w),
            kf.reshape(b * h, n, d_w),
            call.v.to(dtype).reshape(b * h, n, d_v),
            w,
        )
    except Exception as error:  # inductor could not compile: the tiled backend can
        return decline_after_failure(_failed, key, error, "the additive kernel")
    _kernels[key] = None
    if context.numel() and not bool(torch.isfinite(max_abs(context))):  # one read, no copies
        # e.g. a NaN parameter of the score: the tiled backend defines what each row gets
        return Declined(("the compiled kernel's context is not finite",))
    return AttentionOutput(
        context=context.reshape(b, h, m, d_v).to(call.v.dtype), lse=lse.reshape(b, h, m)
    )


def additive_kernel_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`additive_kernel_attention` (see ``memory.py``; measured
    against the RSS of a warm call, the tally not seeing inside compiled kernels):

    - forward: the features ``q'``, ``k'`` ``[X, M|N, d_w]`` (and ``v`` cast to the compute
      dtype), one padded block copy of them, and the context and ``lse`` (blocked and final); a
      block's scores and probabilities live inside the compiled loop
      (``tests/core/test_memory_compiled.py``);
    - backward: what the forward saved, the blocked copies again with ``dO``, the gradients of
      ``q'``, ``k'``, ``v`` (one blocked copy held at a time), the input gradients, and one
      block's stored ``tanh`` ``[X, bq, bk, d_w]`` with its ``[X, bq, bk]`` temporaries."""
    b, h, m, n = call.shape
    x = b * h
    d_w, d_v = call.score.elements_per_score, call.v.shape[-1]
    c = compute_dtype(call.q.dtype).itemsize
    item = call.q.element_size()
    bq, bk, bkb = kernel_blocks(x, m, n, d_w)
    mp, np_ = -(-m // bq) * bq, -(-n // bk) * bk
    features = x * (m + n) * d_w * c + (x * n * d_v * c if c != item else 0)
    padded = x * (mp + np_) * d_w * c + x * np_ * d_v * c
    rows = x * (mp + m) * (d_v + 1) * c + (x * m * d_v * item if c != item else 0)
    forward = features + padded + rows
    if not backward:
        return forward
    saved = features + x * m * (d_v + 1) * c
    blocked = padded + x * mp * (d_v + 2) * c
    grads = padded + x * (m * call.q.shape[-1] + n * (call.k.shape[-1] + d_v)) * item
    stored = x * bq * bkb * d_w * c + x * bq * bkb * 6 * c + x * (bq + bkb) * (d_w + d_v) * 2 * c
    return max(forward, saved + blocked + grads + stored)
