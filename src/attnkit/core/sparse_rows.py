"""The ``sparse_rows`` backend: sparsemax and 1.5-entmax of dot-product scores, by blocks of rows.

Sparsemax (Martins & Astudillo 2016) and 1.5-entmax (Peters, Niculae & Martins 2019) are
thresholds: with ``x = s / t`` (``t = 1`` for sparsemax, ``t = 2`` for 1.5-entmax) each row has
one number ``τ`` such that

    sparsemax:   p_j = [x_j - τ]_+          (Σ_j p_j = 1)
    1.5-entmax:  p_j = [x_j - τ]_+ ²        (Σ_j p_j = 1)

so the weights of a row are known from its scores and ``τ`` alone. The forward pass computes, per
block of query rows, the scores by one product, ``τ`` by a partial sort, and ``c = p @ v``; it
keeps only ``τ`` (and the row's largest score, for precision) per query — never the ``[M, N]``
scores, so memory is ``O(block · N + M · d)``. The backward pass recomputes a block's scores and
``p`` from ``τ`` (no sort) and applies the closed-form Jacobian-vector products with respect
to the scores ``s``:

    sparsemax:   ds_j = 1[p_j > 0] (dp_j - Σ_{p_i > 0} dp_i / |{i: p_i > 0}|)
    1.5-entmax:  ds_j = g_j dp_j - g_j Σ_i g_i dp_i / Σ_i g_i,    g = √p = [x - τ]_+

with ``dp = dO vᵀ`` (for 1.5-entmax, ``∂p_j/∂s_j = 2 g_j · 1/2``: the square's 2 cancels the
half of ``x = s / 2``); then ``dq' = scale · ds k'``, ``dk' = scale · dsᵀ q'``, ``dv = pᵀ dO``
by matrix products. The score's per-vector features (``W q`` of the general score)
run outside, under ordinary autograd, so their parameters get gradients as usual.

Finding ``τ``: the sort-based algorithms of the papers run on a partial sort (``torch.topk``) of
each row's ``k`` largest scores, ``k`` small first and larger only for the rows whose support
filled all ``k`` — never more than the keys with ``x_j >= max(x) - 1``, among which the support
lies (the largest weight is at most 1). A full sort of the row (the ``entmax`` package's way) is
needed only for rows whose scores are nearly all within 1 of their maximum.

Equivalent reference (see ``reference.py``; ``align.Sparsemax``, ``align.Entmax15``)::

    s = scale · q' k'ᵀ + bias; s[~mask] = -inf
    a = sparsemax(s) or entmax15(s); c = a @ v

The backend declines (and the engine runs on the next backend, ``chunked``, which defines their
results, docs/reliability.md) what it does not declare — weights, dropout, summaries, a
``score_mod`` — and (:func:`sparse_rows_limits`) a float mask that needs a gradient and empty
calls; with ``nonfinite=False``, inputs that are not finite and scores that may overflow
(``backend.overflow_reasons``). On ``meta`` tensors, whose thresholds cannot be found without
values, its run returns ``Declined``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.core.align import Entmax15
from attnkit.core.backend import Declined
from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.memory import feature_bytes, sizes
from attnkit.core.reference import compute_dtype, score_features

#: numbers in one block's score tensor [B, H, rows, N]
ROW_BLOCK_BUDGET = 1 << 21
#: the first partial sort's size (supports are often a few keys: ~6 for sparsemax, ~15 for
#: 1.5-entmax of 8192 standard normal scores)
FIRST_K = 32
NEG_INF = float("-inf")


@dataclass(frozen=True)
class SparsePlan:
    """How to score a block of query rows; shared by the forward and backward passes, so the
    backward recomputes bit-for-bit the scores (and so the support) of the forward."""

    call: AttentionCall
    scale: float  # s = scale · q'·k' + bias
    divisor: float  # t: 1 for sparsemax, 2 for 1.5-entmax (x = s / 2)
    rows: int  # query rows per block

    @property
    def entmax(self) -> bool:
        return self.divisor == 2.0

    def blocks(self):
        """``(q0, q1, n1)``: query rows ``[q0, q1)`` and the keys ``[0, n1)`` they may attend
        (causal rows see no key past ``q1 - 1 + N - M``, so those are not computed)."""
        _, _, m, n = self.call.shape
        for q0 in range(0, m, self.rows):
            q1 = min(m, q0 + self.rows)
            n1 = min(n, max(0, q1 + n - m)) if self.call.causal else n
            yield q0, q1, n1

    def scores(self, qf: Tensor, kf: Tensor, q0: int, q1: int, n1: int) -> Tensor:
        """``x = s / t`` of a block ``[B, H, q1 - q0, n1]``, ``-inf`` at masked keys."""
        x = (qf[..., q0:q1, :] * (self.scale / self.divisor)) @ kf[..., :n1, :].transpose(-2, -1)
        bias = self.call.bias_block(q0, q1, 0, n1)
        if bias is not None:
            x = x + (bias.to(x.dtype) / self.divisor)  # halving is exact in binary floats
        mask = self.call.mask_block(q0, q1, 0, n1)
        if mask is not None:
            x = x.masked_fill(~mask, NEG_INF)
        return x


def sorted_threshold(z: Tensor, entmax: bool) -> tuple[Tensor, Tensor]:
    """``(τ [R], support size [R])`` from each row's ``k`` largest values ``z [R, k]``, sorted
    descending and shifted so that ``z[:, 0] = 0`` (``-inf`` for absent keys).

    Sparsemax, Martins & Astudillo (2016) Algorithm 1: the support is the largest ``j`` with
    ``1 + j z_j > Σ_{i<=j} z_i``, and ``τ = (Σ_{i<=K} z_i - 1) / K``. 1.5-entmax, Peters et al.
    (2019): for a support of the ``j`` largest, ``Σ_{i<=j} (z_i - τ_j)² = 1`` gives
    ``τ_j = mean_j - √((1 - ss_j) / j)``; the support is the largest ``j`` with ``τ_j <= z_j``.
    Both tests hold on a prefix of the sorted row and fail after it, so ``τ`` is exact when the
    support is shorter than ``k`` or when ``z`` holds every key that could be in it. Absent keys
    fail both tests (the comparisons see ``-inf`` or NaN).
    """
    j = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    if entmax:
        mean = z.cumsum(-1) / j
        mean_sq = (z * z).cumsum(-1) / j
        ss = j * (mean_sq - mean * mean)
        tau = mean - torch.sqrt(torch.clamp((1 - ss) / j, min=0))
        support = (tau <= z).sum(-1, keepdim=True)
        return tau.gather(-1, support - 1).squeeze(-1), support.squeeze(-1)
    total = z.cumsum(-1) - 1
    support = (j * z > total).sum(-1, keepdim=True)
    tau = total.gather(-1, support - 1) / support.to(z.dtype)
    return tau.squeeze(-1), support.squeeze(-1)


def row_thresholds(x: Tensor, entmax: bool) -> tuple[Tensor, Tensor]:
    """``(peak, tau)``, each ``[R]``, for the rows of ``x [R, N]``: the weights are
    ``[(x - peak) - tau]_+`` (squared for 1.5-entmax). A row with no admissible key (all
    ``-inf``) gets ``peak = 0, tau = +inf``: zero weights.

    Each row is solved from a partial sort (``torch.topk``) of its ``k`` largest values, with
    ``k = FIRST_K`` first and 4 ``k`` for the rows whose support filled all ``k`` (the
    ``entmax`` package's strategy), up to the number of candidates ``x_j >= max(x) - 1``: the
    support of both mappings lies among them (each weight is at most 1), so a sort of that many
    values is always final.
    """
    n = x.shape[-1]
    peak = x.amax(-1)
    live = peak > NEG_INF
    tau = torch.full_like(peak, float("inf"))
    count = (x >= (peak - 1).unsqueeze(-1)).sum(-1)
    # a power of two at least the candidate count: few distinct sizes, so few groups of rows
    enough = torch.exp2(torch.ceil(torch.log2(count.clamp(min=1).to(torch.float32))))
    enough = enough.to(torch.long).clamp(max=n)
    pending = live.nonzero().squeeze(-1)
    tries = enough.index_select(0, pending).clamp(max=FIRST_K)
    while pending.numel():
        retry: list[Tensor] = []
        retry_k: list[Tensor] = []
        for k in tries.unique().tolist():
            group = pending if len(retry) == 0 and bool((tries == k).all()) else pending[tries == k]
            part = x if group.numel() == x.shape[0] else x.index_select(0, group)
            top = part.topk(k, dim=-1).values if k < n else part.sort(-1, descending=True).values
            found, support = sorted_threshold(top - top[:, :1], entmax)
            bound = enough.index_select(0, group)
            done = (support < k) | (bound <= k)
            tau.index_copy_(0, group[done], found[done])
            retry.append(group[~done])
            retry_k.append(bound[~done].clamp(max=4 * k))
        pending, tries = torch.cat(retry), torch.cat(retry_k)
    return torch.where(live, peak, torch.zeros_like(peak)), tau


def _weights(x: Tensor, peak: Tensor, tau: Tensor) -> Tensor:
    """``[(x - peak) - τ]_+`` in place on ``x`` (``g``: the sparsemax weights, or the square
    root of the 1.5-entmax weights)."""
    return x.sub_(peak.unsqueeze(-1)).sub_(tau.unsqueeze(-1)).clamp_(min=0)


class SparseRowsFunction(torch.autograd.Function):
    """Forward: scores, threshold and context per block of rows. Backward: recomputation from
    the saved thresholds and the closed-form Jacobians (see the module docstring)."""

    @staticmethod
    def forward(ctx, plan: SparsePlan, qf: Tensor, kf: Tensor, v: Tensor) -> Tensor:  # type: ignore[override]
        b, h, m, _ = plan.call.shape
        dtype = qf.dtype
        vc = v.to(dtype)
        context = torch.zeros(b, h, m, v.shape[-1], dtype=dtype, device=v.device)
        peaks = torch.zeros(b, h, m, dtype=dtype, device=v.device)
        taus = torch.full((b, h, m), float("inf"), dtype=dtype, device=v.device)
        for q0, q1, n1 in plan.blocks():
            if n1 == 0:
                continue  # no admissible key in this block: zero context
            x = plan.scores(qf, kf, q0, q1, n1)
            peak, tau = row_thresholds(x.reshape(-1, n1), plan.entmax)
            peak, tau = peak.view(b, h, -1), tau.view(b, h, -1)
            p = _weights(x, peak, tau)
            if plan.entmax:
                p = p.square_()
            context[..., q0:q1, :] = p @ vc[..., :n1, :]
            peaks[..., q0:q1], taus[..., q0:q1] = peak, tau
        ctx.plan = plan
        ctx.save_for_backward(qf, kf, v, peaks, taus)
        ctx.set_materialize_grads(False)
        return context.to(v.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor | None):  # type: ignore[override]
        if d_out is None:
            return None, None, None, None
        plan: SparsePlan = ctx.plan
        qf, kf, v, peaks, taus = ctx.saved_tensors
        dtype = qf.dtype
        vc, d_out = v.to(dtype), d_out.to(dtype)
        want_q, want_k, want_v = ctx.needs_input_grad[1:4]
        # accumulated only where wanted (an empty tensor stands for "not asked")
        dq = torch.zeros_like(qf) if want_q else qf.new_empty(0)
        dk = torch.zeros_like(kf) if want_k else kf.new_empty(0)
        dv = torch.zeros(v.shape, dtype=dtype, device=v.device) if want_v else vc.new_empty(0)
        for q0, q1, n1 in plan.blocks():
            if n1 == 0:
                continue
            x = plan.scores(qf, kf, q0, q1, n1)
            g = _weights(x, peaks[..., q0:q1], taus[..., q0:q1])
            dob = d_out[..., q0:q1, :]
            if want_v:
                p = g * g if plan.entmax else g
                dv[..., :n1, :] += p.transpose(-2, -1) @ dob
            if not (want_q or want_k):
                continue
            dp = dob @ vc[..., :n1, :].transpose(-2, -1)
            if plan.entmax:
                gdp = g * dp
                total = g.sum(-1, keepdim=True)
                mean = gdp.sum(-1, keepdim=True) / torch.where(total > 0, total, 1.0)
                ds = gdp.sub_(g.mul_(mean))
            else:
                support = g > 0
                count = support.sum(-1, keepdim=True).clamp(min=1).to(dtype)
                dp = torch.where(support, dp, 0.0)
                mean = dp.sum(-1, keepdim=True) / count
                ds = torch.where(support, dp - mean, 0.0)
            if want_q:
                dq[..., q0:q1, :] = (ds @ kf[..., :n1, :]) * plan.scale
            if want_k:
                dk[..., :n1, :] += ds.transpose(-2, -1) @ (qf[..., q0:q1, :] * plan.scale)
        return (
            None,
            dq if want_q else None,
            dk if want_k else None,
            dv.to(v.dtype) if want_v else None,
        )


def divisor(call: AttentionCall) -> float:
    """``t`` of ``x = s / t``: 2 for 1.5-entmax, 1 for sparsemax."""
    return 2.0 if isinstance(call.align, Entmax15) else 1.0


def sparse_rows_limits(call: AttentionCall) -> list[str]:
    """Why the ``sparse_rows`` backend passes over ``call``, beyond its declared capabilities."""
    why = []
    if call.bias is not None and call.bias.requires_grad:
        why.append("the float mask needs a gradient (the backward computes none for it)")
    b, h, m, n = call.shape
    if b * h * m * n * call.v.shape[-1] == 0:
        why.append("the call is empty (B·H·M·N·Dv = 0)")
    return why


def sparse_rows_attention(call: AttentionCall) -> AttentionOutput | Declined:
    """Run ``call`` (sparsemax or 1.5-entmax of a dot-product score) by blocks of query rows,
    backward from the saved thresholds (see the module docstring)."""
    if call.q.device.type == "meta":
        return Declined(("tensors on 'meta' have no values to find the thresholds from",))
    b, h, m, n = call.shape
    qf, kf = score_features(call, call.q, call.k)  # e.g. W q of the general score, autograd
    factor = call.score.resolve_scale(call.scale, call.k.shape[-1])
    scale = 1.0 if factor is None else factor
    rows = max(1, min(m, ROW_BLOCK_BUDGET // max(1, b * h * n)))
    plan = SparsePlan(call, scale, divisor(call), rows)
    dtype = compute_dtype(call.q.dtype)
    context = SparseRowsFunction.apply(plan, qf.to(dtype), kf.to(dtype), call.v)
    return AttentionOutput(context=context)


def sparse_rows_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`sparse_rows_attention` (see ``memory.py``): the context,
    two numbers per query, and the live blocks of scores ``[B, H, rows, N]`` — the block, the
    previous one's weights and the rows being sorted (2 in a single block, 3 when blocks follow
    each other); the backward recomputes a block's weights and their gradients (about 4.5 and
    5.25 blocks) next to the gradients of ``q``, ``k``, ``v``."""
    z = sizes(call)
    rows = max(1, min(z.m, ROW_BLOCK_BUDGET // max(1, z.b * z.h * z.n)))
    block = z.b * z.h * rows * z.n * z.compute
    several = rows < z.m
    fixed = feature_bytes(call) + z.context * z.compute + 2 * z.rows * z.compute
    # 1.5-entmax's threshold keeps more of the sorted row (means, squares) than sparsemax's
    sorting = 0.3 if several else 0.8
    forward = fixed + int(((3 if several else 2) + sorting * (divisor(call) == 2.0)) * block)
    if not backward:
        return forward
    grads = (z.queries + z.keys + z.values) * z.compute
    return max(forward, int(fixed + grads + (5.25 if several else 4.5) * block))
