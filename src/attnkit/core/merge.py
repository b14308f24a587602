"""Exact merging of attention computed over disjoint sets of keys (split KV caches, ring attention).

With ``lse_s`` the log-sum-exp of a query's scores over key set ``s`` and ``c_s`` its softmax
attention over that set, attention over the union is

    lse = log Σ_s exp(lse_s),        c = Σ_s exp(lse_s - lse) · c_s

and its weights are those of each set scaled by ``exp(lse_s - lse)``, side by side. A set whose keys
are all masked for a query (``lse_s = -inf``) contributes nothing; a query with no admissible key in
any set gets a zero context and ``lse = -inf``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnkit.core.call import AttentionOutput


def merge_attention(partials: Sequence[AttentionOutput]) -> AttentionOutput:
    """Combine softmax attention over disjoint key sets into attention over all of them.

    Args:
        partials: outputs of :func:`attnkit.attention` (softmax alignment) over the same queries
            and disjoint key sets, each with ``context [..., M, d_v]`` and ``lse [..., M]``; with
            ``weights [..., M, N_s]`` in every one, the merged weights are concatenated in order.

    Returns:
        ``AttentionOutput(context, weights, lse)`` equal to one call over all keys. Differentiable.

    Example::

        >>> q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
        >>> first = ak.attention(q, k[:, :, :2], v[:, :, :2], return_lse=True)
        >>> rest = ak.attention(q, k[:, :, 2:], v[:, :, 2:], return_lse=True)
        >>> merged = ak.merge_attention([first, rest])
        >>> torch.allclose(merged.context, ak.attention(q, k, v).context, atol=1e-6)
        True
    """
    if not partials:
        raise ValueError("merge_attention needs at least one partial result, got none")
    if any(p.lse is None for p in partials):
        raise ValueError(
            "merge_attention needs the lse of every partial result (softmax alignment); "
            f"got lse=None in partial(s) {[i for i, p in enumerate(partials) if p.lse is None]}"
        )
    shapes = {tuple(p.context.shape) for p in partials}
    if len(shapes) != 1:
        raise ValueError(f"partial contexts must share one shape, got {sorted(shapes)}")
    lses = torch.stack([p.lse for p in partials])  # [S, ..., M]
    total = torch.logsumexp(lses, dim=0)
    safe_total = torch.where(torch.isfinite(total), total, torch.zeros_like(total))
    factors = torch.exp(lses - safe_total)  # exp(-inf) = 0 for empty sets and key-less queries
    context = sum(
        f.unsqueeze(-1).to(p.context.dtype) * p.context
        for f, p in zip(factors, partials, strict=True)
    )
    weights = None
    if all(p.weights is not None for p in partials):
        weights = torch.cat(
            [
                f.unsqueeze(-1).to(p.weights.dtype) * p.weights
                for f, p in zip(factors, partials, strict=True)
            ],
            dim=-1,
        )
    return AttentionOutput(context=context, weights=weights, lse=total)
