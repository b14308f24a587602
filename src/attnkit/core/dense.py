"""The ``dense`` backend: weights on demand for dot-product scores, written once.

When the caller asks for the attention weights ``a [B, H, M, N]`` (``return_weights``; torch's
``MultiheadAttention`` default ``need_weights=True``), a tensor of that size must be written
anyway. The cheapest way to produce it is the way ``torch.nn.functional.multi_head_attention_forward``
does: the scores by one GEMM straight into that buffer, softmax over it, one GEMM with ``v``
(survey eq. 2-4)::

    s = (scale · q') k'ᵀ + bias          # eq. (2), one GEMM; the scale on q' is O(M·d), not O(M·N)
    s[~mask] = -inf                      # in place
    a = softmax(s)                       # eq. (3); in place of s when nothing needs gradients
    c = dropout(a) v                     # eq. (4), one GEMM

The tiled backend would run its online-softmax pass and then a second pass over every block to
write the weights: two score computations for one result. Every score whose pairwise part is a dot
product of features (``Score.pairwise_is_dot``: dot, scaled dot, general, biased general, cosine)
qualifies; the features are computed first, under autograd.

Non-finite numbers: like the fused kernels, the GEMM and ``torch.softmax`` define nothing for NaN
and infinities that matches attnkit's semantics (docs/reliability.md), so calls whose inputs are
not finite, or whose scores could overflow, are computed by the tiled algorithm instead. Rows with
no admissible key get zero weights and a zero context, as on every backend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnkit.core.align import possibly
from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.reference import score_features
from attnkit.core.sdpa import scores_stay_finite
from attnkit.core.summary import summarize
from attnkit.core.tiled import tiled_attention


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
    if not scores_stay_finite(call, qf, kf, scale):
        return tiled_attention(call)  # NaN/inf semantics that softmax over a GEMM does not give
    v = call.v.to(qf.dtype)
    inputs = (qf, kf, v) if call.bias is None else (qf, kf, v, call.bias)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    s = (qf * scale) @ kf.transpose(-1, -2)  # [B, H, M, N]: the buffer the weights will fill
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
    context = a_used @ v  # eq. (4)
    returned = a_used if call.weights_after_dropout else a
    return AttentionOutput(
        context=context.to(call.q.dtype),
        weights=returned.to(call.q.dtype) if call.return_weights else None,
        lse=lse,
        summary=None if call.summary is None else summarize(a, call.summary),
    )
