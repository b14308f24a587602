"""The ``dense`` backend: weights on demand for dot-product scores, written once.

When the caller asks for the attention weights ``a [B, H, M, N]`` (``return_weights``; torch's
``MultiheadAttention`` default ``need_weights=True``), a tensor of that size must be written
anyway. The cheapest way to produce it is the way ``torch.nn.functional.multi_head_attention_forward``
does: the scores by one GEMM straight into that buffer, softmax over it, one GEMM with ``v``
(survey eq. 2-4)::

    s = scale · q' k'ᵀ + bias            # eq. (2), one GEMM, the scale its alpha (no O(M·N) pass)
    s[~mask] = -inf                      # in place
    a = softmax(s)                       # eq. (3); in place of s when nothing needs gradients
    c = dropout(a) v                     # eq. (4), one GEMM

The tiled backend would run its online-softmax pass and then a second pass over every block to
write the weights: two score computations for one result. Every score whose pairwise part is a dot
product of features (``Score.pairwise_is_dot``: dot, scaled dot, general, biased general, cosine)
qualifies; the features are computed first, under autograd.

Non-finite numbers: like the fused kernels, the GEMM and ``torch.softmax`` define nothing for NaN
and infinities that matches attnkit's semantics (docs/reliability.md), so the backend declares
``nonfinite=False``: it declines calls whose inputs are not finite, or whose scores could
overflow, and the engine runs them on the next backend (``tiled``). Rows with no admissible key
get zero weights and a zero context, as on every backend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.align import possibly
from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.memory import feature_bytes, mask_bytes, sizes
from attnkit.core.reference import score_features
from attnkit.core.summary import summarize


def batched_gemm(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """``alpha · a @ b [B, H, x, z]`` of ``a [B, H, x, y]`` and ``b [B, H, y, z]``: one GEMM with
    ``alpha`` (no pass over the product to scale it) of the operands folded to 3-D.

    The head views of a packed projection (``[B, L, 3E]`` split into heads) do not fold into
    one batch axis, so folding would copy them, one more tensor at the peak beside the weights.
    Without autograd such operands are read in place instead: one strided batched GEMM per index
    of the shorter batch axis, into a new buffer (BLAS takes any row stride; at most
    ``min(B, H)`` calls)."""
    batch = a.shape[:-2]
    if a.dim() != 4 or b.shape[:-2] != batch:  # broadcast batch axes: matmul folds them
        return (a * alpha if alpha != 1.0 else a) @ b
    shape = (*batch, a.shape[-2], b.shape[-1])
    folds = all(t.stride(0) == t.shape[1] * t.stride(1) for t in (a, b))
    grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    if folds or grad:
        n = batch.numel()
        a3, b3 = a.reshape(n, *a.shape[-2:]), b.reshape(n, *b.shape[-2:])
        # beta = 0: the (scalar) input is ignored, so the GEMM writes straight into a new buffer
        out = torch.baddbmm(a3.new_zeros(()), a3, b3, beta=0.0, alpha=alpha)
        return out.view(shape)
    out = a.new_empty(shape)
    axis = 0 if batch[0] <= batch[1] else 1
    for i in range(batch[axis]):
        part = out.select(axis, i)
        torch.baddbmm(part, a.select(axis, i), b.select(axis, i), beta=0.0, alpha=alpha, out=part)
    return out


def dense_attention(call: AttentionCall) -> AttentionOutput:
    """Run ``call`` (softmax over dot-product scores) materialised once (see the module docstring).

    Args:
        call: a prepared call: ``q [B, H, M, D]``, ``k [B, H, N, D]``, ``v [B, H, N, Dv]``.

    Returns:
        :class:`AttentionOutput` with ``context [B, H, M, Dv]`` and, if asked for, ``weights
        [B, H, M, N]``, ``lse [B, H, M]`` and ``summary``.
    """
    qf, kf = score_features(call, call.q, call.k)  # e.g. W q of the general score, under autograd
    scale = call.score.resolve_scale(call.scale, call.k.shape[-1])
    scale = 1.0 if scale is None else scale
    v = call.v.to(qf.dtype)
    inputs = (qf, kf, v) if call.bias is None else (qf, kf, v, call.bias)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    if grad and _one_buffer(call):
        context, a, lse = _SoftmaxAttention.apply(
            qf, kf, v, scale, call.bias, call.full_mask(), call.return_lse
        )
        return AttentionOutput(
            context=context.to(call.q.dtype),
            weights=a.to(call.q.dtype) if call.return_weights else None,
            lse=lse,
        )
    s, keyless, lse = _scores(qf, kf, scale, call.bias, call.full_mask(), call.return_lse)
    # Without autograd, softmax overwrites the scores: the weights are the only M×N tensor.
    a = torch.softmax(s, -1) if grad else torch.softmax(s, -1, out=s)
    if keyless is not None:
        a = a.masked_fill(keyless, 0.0)
    a_used = F.dropout(a, call.dropout) if call.dropout > 0 else a
    context = batched_gemm(a_used, v)  # eq. (4)
    returned = a_used if call.weights_after_dropout else a
    return AttentionOutput(
        context=context.to(call.q.dtype),
        weights=returned.to(call.q.dtype) if call.return_weights else None,
        lse=lse,
        summary=None if call.summary is None else summarize(a, call.summary),
    )


def _one_buffer(call: AttentionCall) -> bool:
    """Whether a differentiated call keeps one ``[B, H, M, N]`` tensor (:class:`_SoftmaxAttention`):
    no dropout (its mask would be a second one), no float mask that needs a gradient (that
    gradient is a second one) and no summary (computed from the weights under autograd)."""
    learned_bias = call.bias is not None and call.bias.requires_grad
    return call.dropout == 0 and not learned_bias and call.summary is None


def _scores(
    qf: Tensor, kf: Tensor, scale: float, bias: Tensor | None, mask: Tensor | None, lse: bool
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The scores ``s = scale · q' k'ᵀ + bias [B, H, M, N]`` with inadmissible keys at ``-inf``
    (eq. 2), the bool ``keyless [.., M, 1]`` of rows with no admissible key (``None`` if there
    are none; their scores are set to 0 so softmax stays finite, and the caller zeroes their
    weights), and ``logsumexp(s) [B, H, M]`` when ``lse``."""
    s = batched_gemm(qf, kf.transpose(-1, -2), scale)  # [B, H, M, N]: the weights' buffer
    if bias is not None:
        s += bias.to(s.dtype)  # in place: add's backward does not need s
    keyless = None
    if mask is not None:
        s.masked_fill_(~mask, float("-inf"))
        # A row with no admissible key would be softmax(-inf, ..., -inf) = NaN; attnkit defines
        # it as zero weights, so such rows (rare: a read of the bool mask finds them) are set to
        # a finite constant first and zeroed after.
        keyless = ~mask.any(-1, keepdim=True)
        if possibly(keyless):
            s.masked_fill_(keyless, 0.0)
        else:
            keyless = None
    log_sum = None
    if lse:  # one more read of the scores, only when asked
        log_sum = torch.logsumexp(s, -1)
        if keyless is not None:
            log_sum = log_sum.masked_fill(keyless.squeeze(-1), float("-inf"))
    return s, keyless, log_sum


#: bytes of the ``[c, M, N]`` temporaries of one step of :class:`_SoftmaxAttention`'s backward
BACKWARD_BLOCK = 64 << 20


def _block(h: int, m: int, n: int, item: int) -> tuple[int, int]:
    """Heads and query rows per step of :class:`_SoftmaxAttention`'s backward: as many heads as
    fit :data:`BACKWARD_BLOCK` with all their rows, else one head and as many rows as fit."""
    per_head = max(1, m * n * item)  # empty sets of queries or keys: one step of nothing
    if per_head <= BACKWARD_BLOCK:
        return max(1, min(h, BACKWARD_BLOCK // per_head)), max(1, m)
    return 1, max(1, BACKWARD_BLOCK // (n * item))  # n > 0 here


class _SoftmaxAttention(torch.autograd.Function):
    """``c = softmax(scale · q' k'ᵀ + bias) v`` (eq. 2-4) keeping one ``[B, H, M, N]`` tensor.

    Autograd through the plain formula holds the scores, the weights, their gradient and the
    scores' gradient, four ``[B, H, M, N]`` tensors at the backward's peak. Here the forward
    writes the weights over the scores, and the backward reads them in blocks of heads (of query
    rows, when one head is larger), so its temporaries stay within :data:`BACKWARD_BLOCK`
    whatever ``H·M·N``. Per block, with ``δc`` the context's gradient, ``δa`` the weights' (if
    they were used) and ``δl`` the lse's::

        δv = aᵀ δc
        δa' = δc vᵀ + δa
        δs = a ∘ (δa' − Σ_j a_j δa'_j + δl)   # softmax's and logsumexp's Jacobians
        δq' = scale · δs k'        δk' = scale · δs ᵀ q'

    ``Σ_j a_j δa'_j`` is ``Σ_d δc_d c_d`` when the weights get no gradient (``c = a v``): an
    ``[M, Dv]`` product instead of an ``[M, N]`` one. The products are autograd's; whether the
    blocks cost time is for ``benchmarks/`` to measure, not assumed here.
    """

    @staticmethod
    def forward(ctx, qf, kf, v, scale, bias, mask, return_lse):  # type: ignore[no-untyped-def, override]
        s, keyless, lse = _scores(qf, kf, scale, bias, mask, return_lse)
        a = torch.softmax(s, -1, out=s)  # in place: the weights are the scores' buffer
        if keyless is not None:
            a.masked_fill_(keyless, 0.0)
        context = batched_gemm(a, v)  # eq. (4)
        ctx.save_for_backward(qf, kf, v, a, context, lse)
        ctx.scale = scale
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        return context, a, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_context, d_weights, d_lse):  # type: ignore[no-untyped-def, override]
        qf, kf, v, a, context, lse = ctx.saved_tensors
        b, h, m, n = a.shape
        if d_lse is not None:  # a row with no admissible key has lse -inf, a constant
            d_lse = d_lse.masked_fill(lse == float("-inf"), 0.0)
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        # gradients in the broadcast shape [B, H, ..]; autograd sums them to each input's shape
        qf, kf, v = (t.expand(b, h, *t.shape[-2:]) for t in (qf, kf, v))
        dq = qf.new_zeros(qf.shape) if need_q else None
        dk = kf.new_zeros(kf.shape) if need_k else None
        dv = v.new_zeros(v.shape) if need_v else None
        if d_context is None:
            d_context = context.new_zeros(context.shape)
        heads, rows = _block(h, m, n, a.element_size())
        for i in range(b):
            for h0 in range(0, h, heads):
                hk = (i, slice(h0, h0 + heads))  # keys and values of these heads
                for r0 in range(0, m, rows):
                    at = (*hk, slice(r0, r0 + rows))  # their queries r0 ..
                    ai, dci = a[at], d_context[at]
                    if dv is not None:
                        dv[hk].baddbmm_(ai.transpose(-1, -2), dci)
                    if dq is None and dk is None:
                        continue
                    ds = dci @ v[hk].transpose(-1, -2)  # δa' [c, rows, N]
                    if d_weights is not None:
                        ds += d_weights.expand(b, h, m, n)[at]
                        row = (ai * ds).sum(-1, keepdim=True)
                    else:
                        row = (dci * context[at]).sum(-1, keepdim=True)
                    ds.sub_(row)
                    if d_lse is not None:
                        ds.add_(d_lse.expand(b, h, m)[at].unsqueeze(-1))
                    ds.mul_(ai)  # δs
                    if dq is not None:
                        dq[at] = torch.matmul(ds, kf[hk]).mul_(ctx.scale)
                    if dk is not None:
                        dk[hk].baddbmm_(ds.transpose(-1, -2), qf[at], alpha=ctx.scale)
                    # freed now, not when the next block's δa' is assigned: one block at a time
                    del ds, row
        return dq, dk, dv, None, None, None, None


def dense_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`dense_attention` (see ``memory.py``): the scores
    ``[B, H, M, N]``, overwritten by the weights (one tensor), and the context. Under autograd,
    :class:`_SoftmaxAttention` adds one block of heads' ``[M, N]`` gradient and the gradients of
    the features; with dropout, a learned float mask or a summary, plain autograd holds the
    scores, the weights it saves and, in the backward, their gradient (three, five with a mask:
    the masked fill's gradient). Dropout adds the dropped weights and their mask; half inputs,
    the weights cast back."""
    z = sizes(call)
    scores = z.scores * z.compute
    extra = feature_bytes(call) + mask_bytes(call) + (z.rows * z.compute if call.return_lse else 0)
    if call.dropout > 0:
        extra += scores + z.scores  # F.dropout's output and its bool mask
    if call.return_weights and z.item != z.compute:
        extra += z.scores * z.item
    context = z.context * z.compute
    if not backward:
        return extra + scores + context
    if _one_buffer(call):
        # the weights (the scores' buffer) and the context saved; in the backward one block of
        # heads' δs, the context's gradient and the gradients of q', k', v
        heads, rows = _block(z.h, z.m, z.n, z.compute)
        block = heads * rows * z.n * z.compute
        grads = (z.queries + z.keys + z.values) * z.compute
        return extra + scores + 2 * context + block + grads
    if mask_bytes(call) or call.mask is not None:  # masked_fill_'s gradient, and ~mask
        extra += 2 * scores
    return extra + 3 * scores + 2 * context
