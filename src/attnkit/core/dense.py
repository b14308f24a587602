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

    The head views of a packed projection (``[N, L, 3E]`` split into heads) do not fold into
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
        call: a prepared call: ``q [B, H, M, d_q]``, ``k [B, H, N, d_k]``, ``v [B, H, N, d_v]``.

    Returns:
        :class:`AttentionOutput` with ``context [B, H, M, d_v]`` and, if asked for, ``weights
        [B, H, M, N]``, ``lse [B, H, M]`` and ``summary``.
    """
    qf, kf = score_features(call, call.q, call.k)  # e.g. W q of the general score, under autograd
    scale = call.score.resolve_scale(call.scale, call.k.shape[-1])
    scale = 1.0 if scale is None else scale
    v = call.v.to(qf.dtype)
    inputs = (qf, kf, v) if call.bias is None else (qf, kf, v, call.bias)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    s = batched_gemm(qf, kf.transpose(-1, -2), scale)  # [B, H, M, N]: the weights' buffer
    if call.bias is not None:
        s += call.bias.to(s.dtype)  # in place: add's backward does not need s
    mask = call.full_mask()
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
    lse = None
    if call.return_lse:  # one more read of the scores, only when asked
        lse = torch.logsumexp(s, -1)
        if keyless is not None:
            lse = lse.masked_fill(keyless.squeeze(-1), float("-inf"))
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


def dense_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`dense_attention` (see ``memory.py``): the scores
    ``[B, H, M, N]``, overwritten by the weights (one tensor), and the context; under autograd
    the scores, the weights autograd saves and, in the backward, their gradient (three, five with
    a mask: the masked fill's gradient), with the gradients of ``q``, ``k``, ``v``. Dropout adds
    the dropped weights and their mask; half inputs, the weights cast back."""
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
    if mask_bytes(call) or call.mask is not None:  # masked_fill_'s gradient, and ~mask
        extra += 2 * scores
    return extra + 3 * scores + 2 * context
