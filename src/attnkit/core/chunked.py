"""The ``chunked`` backend: the materialised formula over blocks of queries.

Alignments that need a whole row of scores at once (sparsemax, 1.5-entmax, top-k, hard, local,
reinforced) and multi-dimensional attention cannot use the online softmax of ``tiled``. Queries are
independent of each other, though, so computing ``block`` query rows at a time bounds the peak
memory by ``O(block · N · d)`` instead of ``O(M · N · d)``. Under autograd each block is
checkpointed: only its inputs are kept, and its scores are recomputed in the backward pass (with
the same random draws, so stochastic alignments and dropout match).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.memory import feature_bytes, sizes
from attnkit.core.reference import attend_rows, reference_memory, rows_memory, score_features

#: numbers in one block's score tensor [B, H, block, N] (times the score's elements and d_v)
CHUNK_BUDGET = 1 << 22


def chunk_rows(call: AttentionCall) -> int:
    """Query rows per block, so one block's scores hold about ``CHUNK_BUDGET`` numbers."""
    b, h, _, n = call.shape
    per_row = b * h * max(n, 1) * call.score.elements_per_score * (call.score.value_features or 1)
    return max(1, CHUNK_BUDGET // max(per_row, 1))


def chunked_attention(call: AttentionCall) -> AttentionOutput:
    """Run ``call`` one block of query rows at a time (see the module docstring)."""
    m = call.q.shape[-2]
    rows = chunk_rows(call)
    if rows >= m:
        return attend_rows(call)
    fields = ("context", "weights", "lse", "log_prob", "summary")
    features = score_features(call, call.q, call.k)  # once, not once per block

    def block(q0: int) -> tuple:
        out = attend_rows(call, q0, min(rows, m - q0), features)
        return tuple(getattr(out, f) for f in fields)

    grad = torch.is_grad_enabled()
    parts = [
        checkpoint(block, q0, use_reentrant=False) if grad else block(q0)
        for q0 in range(0, m, rows)
    ]
    merged = {}
    for index, name in enumerate(fields):
        pieces = [p[index] for p in parts]
        if pieces[0] is None:
            merged[name] = None
        elif name == "summary" and call.summary == "column_sum":
            merged[name] = torch.stack(pieces).sum(0)  # per key: add the blocks of queries
        else:
            # Rows are dim 2 of everything: context/weights [B, H, m, ...], lse etc. [B, H, m].
            merged[name] = torch.cat(pieces, dim=2)
    return AttentionOutput(**merged)


def chunked_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`chunked_attention` (see ``memory.py``): one block of
    query rows at a time (:func:`~attnkit.core.reference.rows_memory`), the blocks' outputs and
    their concatenation (the context, and the weights if asked). Under autograd a block is
    recomputed in the backward pass, next to the gradients of ``q``, ``k``, ``v``."""
    z = sizes(call)
    rows = chunk_rows(call)
    if rows >= z.m:
        return reference_memory(call, backward)
    outputs = z.context + (
        z.scores * (call.score.value_features or 1) if call.return_weights else 0
    )
    fixed = feature_bytes(call) + 2 * outputs * z.compute
    if not backward:
        return fixed + rows_memory(call, rows, False)
    grads = (z.queries + z.keys + z.values) * z.compute
    return fixed + grads + rows_memory(call, rows, True, checkpointed=True)
