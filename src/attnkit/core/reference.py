"""The materialised path: the general attention module computed as written (survey eq. 2-4, 30-32).

It is the readable definition every faster backend must match, and the backend of last resort: it
holds the full score tensor ``[B, H, M, N]`` (``[B, H, M, N, d_v]`` multi-dimensional).

Equivalent code, for single-dimensional attention::

    e = score(q, k, scale)                     # eq. (2)   [B, H, M, N]
    e = score_mod(e + bias, b, h, q_idx, kv_idx)
    a = align(e, mask)                         # eq. (3)   [B, H, M, N]
    c = dropout(a) @ v                         # eq. (4)   [B, H, M, d_v]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.align import Softmax
from attnkit.core.call import AttentionCall, AttentionOutput, compute_dtype, known_values
from attnkit.core.checks import checked_scores
from attnkit.core.masks import index_grids
from attnkit.core.memory import feature_bytes, sizes
from attnkit.core.summary import summarize


def module_dtype(module: torch.nn.Module, default: torch.dtype) -> torch.dtype:
    """The dtype a module computes in: its parameters', or ``default`` if it has none."""
    param = next(iter(module.parameters()), None)
    return default if param is None else param.dtype


def score_features(call: AttentionCall, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """The score's per-vector features of ``q`` and ``k``, in the compute dtype (parametric
    scores run in their own dtype first)."""
    dtype = compute_dtype(q.dtype)
    arg_dtype = module_dtype(call.score, dtype)
    qf, kf = call.score.features(q.to(arg_dtype), k.to(arg_dtype))
    return qf.to(dtype), kf.to(dtype)


def call_scores(
    call: AttentionCall, qf: Tensor, kf: Tensor, q_offset: int = 0, kv_offset: int = 0
) -> Tensor:
    """Scores of a block of query features ``qf`` (rows from ``q_offset``) and key features
    ``kf`` (keys from ``kv_offset``), scaled, with the call's bias and ``score_mod`` applied.
    ``[B, H, m, n]`` (``[B, H, m, n, d_v]`` multi-dimensional)."""
    e = call.score.pairwise(qf, kf, kv_offset)
    factor = call.score.resolve_scale(call.scale, call.k.shape[-1])
    if factor is not None:
        e = e * factor
    multi = call.score.value_features is not None
    m, n = qf.shape[-2], kf.shape[-2]
    bias = call.bias_block(q_offset, q_offset + m, kv_offset, kv_offset + n)
    if bias is not None:
        e = e + (bias.unsqueeze(-1) if multi else bias).to(e.dtype)
    if call.score_mod is not None:
        b, h = call.shape[:2]
        grids = index_grids(b, h, m, n, qf.device, int(multi), q_offset, kv_offset)
        e = checked_scores(call.score_mod(e, *grids), e, call.shape)
    return e


def weighted_values(
    a: Tensor, allowed: Tensor | None, v: Tensor, finite: bool | None = None
) -> Tensor:
    """``c = Σ_l a_l v_l`` over the admissible keys only (eq. 4; eq. 30 for weight vectors
    ``a [..., M, N, d_v]``), as IEEE arithmetic would give it over those keys.

    A matrix product would also multiply the zero weights of masked keys by their values, so a
    NaN or infinite value at a masked key would poison rows that may not see it. With finite
    values (``finite``; checked here when ``None``) that cannot happen and this is one product.
    Otherwise the finite part is one product and the non-finite values are counted per row and
    feature: NaN, or an infinity met by a zero weight (``0 · inf``), or infinities of both signs
    give NaN; else an infinity with a positive weight gives that infinity.

    Args:
        a: weights ``[B, H, M, N]`` or ``[B, H, M, N, d_v]`` (0 at masked keys).
        allowed: bool, broadcastable to ``[B, H, M, N]``; ``None``: every key.
        v: values ``[B, H, N, d_v]``.
    """
    multi = a.dim() == v.dim() + 1

    def product(x: Tensor, y: Tensor) -> Tensor:
        return torch.einsum("bhmnd,bhnd->bhmd", x, y) if multi else x @ y

    if finite is None:
        finite = v.device.type == "meta" or (known_values(v) and bool(torch.isfinite(v).all()))
    if finite:
        return product(a, v)
    ok = torch.isfinite(v)
    out = product(a, torch.where(ok, v, torch.zeros_like(v)))
    admissible = torch.ones_like(a, dtype=torch.bool)
    if allowed is not None:
        admissible = admissible & (allowed.unsqueeze(-1) if multi else allowed)
    w = a.detach()

    def hits(weights: Tensor, values: Tensor) -> Tensor:
        """Per row and feature: is there a key where both indicators hold."""
        return product(weights.to(v.dtype), values.to(v.dtype)) > 0

    up_w, down_w = admissible & (w > 0), admissible & (w < 0)
    pos, neg = torch.isposinf(v), torch.isneginf(v)
    up = hits(up_w, pos) | hits(down_w, neg)
    down = hits(up_w, neg) | hits(down_w, pos)
    nan = hits(admissible, torch.isnan(v)) | hits(admissible & (w == 0), ~ok) | (up & down)
    infinity = torch.full_like(out, float("inf"))
    out = torch.where(up, infinity, torch.where(down, -infinity, out))
    return torch.where(nan, torch.full_like(out, float("nan")), out)


def align_multi_dimensional(
    call: AttentionCall, e: Tensor, mask: Tensor | None, q: Tensor, k: Tensor, q_offset: int = 0
) -> tuple[Tensor, Tensor | None]:
    """Eq. (32): the alignment applied over the keys separately for each of the ``d_v`` features.

    The feature axis is folded into the head axis so every alignment (which works on rows of
    ``[..., M, N]``) applies unchanged. ``e [B, H, M, N, D]`` → weights ``[B, H, M, N, D]``.
    """
    b, h, m, n, d = e.shape
    folded = e.permute(0, 1, 4, 2, 3).reshape(b, h * d, m, n)
    if mask is not None:
        mask = mask.expand(b, h, m, n).unsqueeze(2).expand(b, h, d, m, n).reshape(b, h * d, m, n)
    queries = q.unsqueeze(2).expand(b, h, d, *q.shape[-2:]).reshape(b, h * d, *q.shape[-2:])
    keys = k.unsqueeze(2).expand(b, h, d, *k.shape[-2:]).reshape(b, h * d, *k.shape[-2:])
    a, log_prob = call.align.sample(folded, mask, query=queries, key=keys, q_offset=q_offset)
    a = a.view(b, h, d, m, n).permute(0, 1, 3, 4, 2)
    if log_prob is not None:
        log_prob = log_prob.view(b, h, d, m).sum(2)  # features are drawn independently
    return a, log_prob


def attend_rows(
    call: AttentionCall,
    q_offset: int = 0,
    rows: int | None = None,
    features: tuple[Tensor, Tensor] | None = None,
) -> AttentionOutput:
    """Materialised attention for query rows ``[q_offset, q_offset + rows)`` of the call;
    ``features`` are the score's features of all queries and keys, if already computed."""
    m = call.q.shape[-2]
    rows = m - q_offset if rows is None else rows
    q = call.q[..., q_offset : q_offset + rows, :]
    k, v = call.k, call.v
    mask = call.mask_block(q_offset, q_offset + rows, 0, k.shape[-2])

    qf, kf = score_features(call, call.q, k) if features is None else features
    e = call_scores(call, qf[..., q_offset : q_offset + rows, :], kf, q_offset)
    dtype = e.dtype
    if k.shape[-2] == 0:  # no keys: every row is key-less (zeros; weights [.., 0]; lse -inf)
        return _keyless(call, e, v.to(dtype))
    # Alignments that read the queries/keys (local-predictive, reinforced) get them in their dtype.
    align_dtype = module_dtype(call.align, dtype)
    q, k = q.to(align_dtype), k.to(align_dtype)
    if call.score.value_features is not None:
        a, log_prob = align_multi_dimensional(call, e, mask, q, k, q_offset)
    else:
        a, log_prob = call.align.sample(e, mask, query=q, key=k, q_offset=q_offset)
    a_used = F.dropout(a, call.dropout) if call.dropout > 0 else a
    context = weighted_values(a_used, mask, v.to(dtype), call.finite or None)  # eq. (4), (30)

    lse = None
    if isinstance(call.align, Softmax) and call.score.value_features is None:
        masked = e if mask is None else e.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(masked, dim=-1)
    summary = None
    if call.summary is not None:
        summary = summarize(a if a.dim() == 4 else a.mean(-1), call.summary)
    return AttentionOutput(
        context=context.to(call.q.dtype),
        weights=(a_used if call.weights_after_dropout else a).to(call.q.dtype)
        if call.return_weights
        else None,
        lse=lse,
        log_prob=log_prob,
        summary=summary,
    )


def _keyless(call: AttentionCall, e: Tensor, v: Tensor) -> AttentionOutput:
    """The result for zero keys, still connected to ``v`` so autograd sees the inputs."""
    weights = e.new_zeros(e.shape)
    context = (
        torch.einsum("bhmnd,bhnd->bhmd", weights, v)
        if call.score.value_features is not None
        else weights @ v
    )
    rows = e.shape[:3]
    lse = e.new_full(rows, float("-inf")) if isinstance(call.align, Softmax) else None
    log_prob = e.new_zeros(rows) if call.align.stochastic else None
    weights_4d = weights if weights.dim() == 4 else weights.mean(-1)
    return AttentionOutput(
        context=context.to(call.q.dtype),
        weights=weights.to(call.q.dtype) if call.return_weights else None,
        lse=lse,
        log_prob=log_prob,
        summary=None if call.summary is None else summarize(weights_4d, call.summary),
    )


def reference_attention(call: AttentionCall) -> AttentionOutput:
    """All query rows at once: the survey's general attention module, materialised."""
    return attend_rows(call)


#: live ``[B, H, rows, N]`` tensors at the peak of the materialised formula for each alignment,
#: counted in score tensors (the scores, the masked scores, the weights and each alignment's own
#: temporaries: the sort of sparsemax and 1.5-entmax, top-k's threshold, the window of the local
#: ones): ``(forward, forward + backward, forward + backward of a checkpointed block)`` (the
#: last for the chunked backend; measured with tests/core/test_memory.py's tally)
ALIGN_TENSORS: dict[str, tuple[float, float, float]] = {
    "softmax": (3.0, 7.0, 10.0),
    "sparsemax": (8.3, 8.8, 8.6),
    "entmax15": (13.0, 13.5, 13.4),
    "topk": (4.3, 6.5, 6.1),
    "hard": (6.0, 7.0, 7.0),
    "local_monotonic": (4.1, 6.3, 6.3),
}
#: for an alignment not in the table
OTHER_ALIGN_TENSORS = (8.0, 10.0, 10.0)


def rows_memory(call: AttentionCall, rows: int, backward: bool, checkpointed: bool = False) -> int:
    """Predicted peak bytes of :func:`attend_rows` over ``rows`` query rows: the alignment's
    score tensors (:data:`ALIGN_TENSORS`; ``checkpointed``: the block is recomputed in the
    backward pass), or, for a score that holds several numbers per score (the additive score's
    ``d_w``), its hidden ``[B, H, rows, N, d_w]`` and activation, whichever is larger; one more
    score tensor for a mask or dropout and (backward) for the weights."""
    z = sizes(call)
    per_score = z.b * z.h * rows * z.n * (call.score.value_features or 1) * z.compute
    forward, both, again = ALIGN_TENSORS.get(call.align.registry_name, OTHER_ALIGN_TENSORS)
    both = again if checkpointed else both
    masked = call.mask is not None or call.causal or call.mask_mod is not None
    forward += float(masked) + float(call.dropout > 0)
    both += float(call.return_weights) + 0.5 * float(masked)
    hidden = call.score.elements_per_score
    if hidden > 1:  # the pairwise hidden units and their activation
        forward = max(forward, 2.0 * hidden)
        both = max(both, 3.0 * hidden + 1.0)
    return int((both if backward else forward) * per_score)


def reference_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`reference_attention` (see ``memory.py``): every query
    row at once (:func:`rows_memory`), the features and the context; the backward adds the
    gradients of ``q``, ``k``, ``v``."""
    z = sizes(call)
    context = z.context * z.compute
    total = rows_memory(call, z.m, backward) + feature_bytes(call) + context
    if backward:
        total += context
    return total
