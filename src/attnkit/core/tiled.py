"""The ``tiled`` backend: the FlashAttention algorithm in PyTorch, for every score with softmax.

Queries and keys are processed in blocks; each query block keeps a running maximum ``m``, a running
sum ``l`` and an unnormalised output ``acc`` (online softmax, Milakov & Gimelshein 2018; Dao et al.
2022), so no ``[M, N]`` tensor — and for the additive score no ``[M, N, d_w]`` tensor — ever
exists: memory is ``O(M · d + block²·d_w)``. Blocks with no admissible key (causal, windows) are
skipped, not computed. The backward pass recomputes each block's probabilities from the saved
log-sum-exp ``lse`` (``p = exp(s - lse)``) instead of storing them:

    D_i  = Σ_d dO_id · O_id
    dV  += p̃^T dO                    (p̃: p with the dropout mask applied)
    dS   = p ∘ (dO V^T ∘ z - D + dlse + dW - Σ_j dW_ij W_ij)
    dQ, dK (and the score's parameters) from dS through the score function

Weights on demand: when ``return_weights=True`` the ``[M, N]`` weights are the result anyway, so
blocks span whole rows and each block's weights are written once, as soon as its softmax is final;
no second full-size scores tensor exists. The per-query summaries (entropy, argmax) are accumulated
in the same online pass; the per-key column sum takes a second pass from the final ``lse``.

Equivalent reference (see ``reference.py``)::

    s = score_mod(score(q, k) + bias); s[~mask] = -inf
    lse = logsumexp(s, -1); W = exp(s - lse); O = dropout(W) @ v
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.core.align import possibly
from attnkit.core.call import AttentionCall, AttentionOutput, known_values
from attnkit.core.captured import captured_tensors, describe_tensor, leaf_outside
from attnkit.core.memory import feature_bytes, sizes
from attnkit.core.reference import call_scores, compute_dtype, score_features, weighted_values

#: numbers of one block's score tensor [B, H, bq, bk] (times the score's own elements per score)
BLOCK_BUDGET = 1 << 21
NEG_INF = float("-inf")


def block_sizes(batch_heads: int, m: int, n: int, elements_per_score: int) -> tuple[int, int]:
    """Query/key block sizes whose score block holds about ``BLOCK_BUDGET`` numbers."""
    per_pair = max(1, batch_heads * elements_per_score)
    side = max(16, int(math.sqrt(BLOCK_BUDGET / per_pair)))
    side = 1 << (side.bit_length() - 1)  # a power of two: blocks align with causal diagonals
    return max(1, min(m, side)), max(1, min(n, side))


@dataclass
class TiledPlan:
    """What the autograd function needs besides tensors: how to score a block, and the blocks."""

    call: AttentionCall
    dot_scale: float | None  # the score is s = dot_scale · q'^T k' of its features (+ bias, mod)
    block_q: int
    block_k: int
    seed: int  # dropout stream: block (i, j) draws from seed + i · n_key_blocks + j
    n_extras: int  # tensors after q, k, v that get gradients: the score's parameters first
    param_names: list[str]  # names of the score's parameters among them
    finite_values: bool = True  # v holds no NaN/inf (else masked keys need weighted_values)
    # autograd was on at the call: the first block's score_mod runs under it, and a tensor it
    # reads that is not among this function's inputs is refused (it would get no gradient)
    check_reads: bool = False

    def scores(self, qf: Tensor, kf: Tensor, q0: int, k0: int) -> Tensor:
        """Scores of a block of features, ``[B, H, bq, bk]`` (masked entries not filled)."""
        return call_scores(self.call, qf, kf, q0, k0)

    @property
    def whole_rows(self) -> bool:
        """Each block spans all keys, so its softmax is final when computed."""
        return self.block_k >= self.call.shape[3]

    def analytic_backward(self) -> bool:
        """Plain dot scores: dQ, dK by two matmuls instead of autograd per block."""
        return self.dot_scale is not None and self.call.score_mod is None and self.n_extras == 0

    def keep(self, shape: torch.Size, i: int, j: int, device: torch.device) -> Tensor | None:
        """Dropout's kept-and-rescaled factor for block (i, j), the same in forward and backward."""
        p = self.call.dropout
        if p == 0:
            return None
        n_key_blocks = -(-self.call.shape[3] // self.block_k)
        generator = torch.Generator(device=device).manual_seed(self.seed + i * n_key_blocks + j)
        kept = torch.rand(shape, generator=generator, device=device) >= p
        return kept / (1 - p)

    def blocks(self):
        """``(i, q0, q1, j, k0, k1, mask)`` for every block with an admissible key."""
        _, _, m, n = self.call.shape
        for i, q0 in enumerate(range(0, m, self.block_q)):
            q1 = min(m, q0 + self.block_q)
            for j, k0 in enumerate(range(0, n, self.block_k)):
                k1 = min(n, k0 + self.block_k)
                mask = self.call.mask_block(q0, q1, k0, k1)
                if mask is not None and known_values(mask):
                    if not bool(mask.any()):
                        continue  # fully masked block: skipped, not computed
                    if bool(mask.all()):
                        mask = None  # e.g. below the causal diagonal: no masking work at all
                yield i, q0, q1, j, k0, k1, mask


def _probabilities(s: Tensor, mask: Tensor | None, lse: Tensor, total: Tensor) -> Tensor:
    """``exp(s - lse)`` with masked entries and key-less rows (``lse = -inf``) at 0; rows with a
    ``+inf`` score (``lse = +inf``) share the weight among their ``+inf`` keys (``total`` of
    them), rows with a NaN score are NaN (see ``align.masked_softmax``)."""
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    finite = torch.isfinite(lse)
    p = torch.exp(s - torch.where(finite, lse, torch.zeros_like(lse)).unsqueeze(-1))
    if possibly(~finite):
        top, nan = torch.isposinf(lse).unsqueeze(-1), torch.isnan(lse).unsqueeze(-1)
        share = (s == float("inf")).to(p.dtype) / total.unsqueeze(-1)
        p = torch.where(top, share, torch.where(nan, torch.full_like(p, float("nan")), p))
    return p


def _limits(
    s: Tensor, p: Tensor, old_max: Tensor, new_max: Tensor, rescale: Tensor
) -> tuple[Tensor, Tensor]:
    """``(p, rescale)`` for rows whose running max is ``+inf``: each ``+inf`` score counts 1 and
    every finite one 0, so the weight is shared among the ``+inf`` keys (the limit attnkit
    defines, ``align.masked_softmax``); the previous blocks count only if they had one too."""
    top = torch.isposinf(new_max)
    if not possibly(top):
        return p, rescale
    p = torch.where(top.unsqueeze(-1), (s == float("inf")).to(p.dtype), p)
    kept = torch.isposinf(old_max).to(rescale.dtype)
    return p, torch.where(top, kept, rescale)


def _online_softmax(
    plan: TiledPlan,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    weights: Tensor | None,
    inputs: list[Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """One pass over the blocks: ``(context, lse, summary)``; the per-query summaries
    (``"entropy"``, ``"argmax"``) are accumulated online with the running max and sum. When a
    block spans whole rows (``plan.block_k >= N``), its weights are final at once and are written
    into ``weights`` (if given) in this same pass."""
    b, h, m, _ = plan.call.shape
    dtype, device = compute_dtype(q.dtype), q.device
    out = torch.zeros(b, h, m, v.shape[-1], dtype=dtype, device=device)
    row_max = torch.full((b, h, m), NEG_INF, dtype=dtype, device=device)
    row_sum = torch.zeros(b, h, m, dtype=dtype, device=device)
    kind = plan.call.summary
    finite = plan.finite_values
    row_ps = torch.zeros_like(row_sum) if kind == "entropy" else None  # Σ_j p_j s_j
    best = torch.full((b, h, m), -1, dtype=torch.long, device=device) if kind == "argmax" else None
    for i, q0, q1, j, k0, k1, mask in plan.blocks():
        if inputs is not None:  # the first block, once: the same scores, seen by autograd
            with torch.enable_grad():
                s = plan.scores(q[..., q0:q1, :], k[..., k0:k1, :], q0, k0)
            _refuse_unreached(s, inputs)
            s, inputs = s.detach(), None
        else:
            s = plan.scores(q[..., q0:q1, :], k[..., k0:k1, :], q0, k0)
        if mask is not None:
            s = s.masked_fill(~mask, NEG_INF)
        old_max = row_max[..., q0:q1]
        block_max, block_arg = s.max(-1)
        new_max = torch.maximum(old_max, block_max)
        safe_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        p = torch.exp(s - safe_max.unsqueeze(-1))
        rescale = torch.exp(old_max - safe_max)
        p, rescale = _limits(s, p, old_max, new_max, rescale)
        row_sum[..., q0:q1] = rescale * row_sum[..., q0:q1] + p.sum(-1)
        keep = plan.keep(p.shape, i, j, device)
        pv = weighted_values(p if keep is None else p * keep, mask, v[..., k0:k1, :], finite)
        out[..., q0:q1, :] = rescale.unsqueeze(-1) * out[..., q0:q1, :] + pv
        if row_ps is not None:  # masked entries: p = 0, and 0 · -inf must not become NaN
            finite_s = torch.where((p > 0) & torch.isfinite(s), s, torch.zeros_like(s))
            row_ps[..., q0:q1] = rescale * row_ps[..., q0:q1] + (p * finite_s).sum(-1)
        if best is not None:
            better = block_max > old_max
            best[..., q0:q1] = torch.where(better, block_arg + k0, best[..., q0:q1])
        row_max[..., q0:q1] = new_max
        if weights is not None and plan.whole_rows:
            total = row_sum[..., q0:q1]
            weights[..., q0:q1, k0:k1] = p / torch.where(total != 0, total, 1.0).unsqueeze(-1)
    has_key = row_sum != 0  # NaN rows too: their lse is NaN, not -inf
    total = torch.where(has_key, row_sum, torch.ones_like(row_sum))
    out = out / total.unsqueeze(-1)
    lse = torch.where(has_key, row_max + torch.log(total), torch.full_like(row_max, NEG_INF))
    summary = best
    if row_ps is not None:  # H = lse - Σ_j a_j s_j; log(count) for equal shares of +inf keys
        entropy = torch.where(torch.isposinf(lse), torch.log(total), lse - row_ps / total)
        summary = torch.where(has_key, entropy, torch.zeros_like(lse))
    return out, lse, summary, total


def _weights_pass(
    plan: TiledPlan, q: Tensor, k: Tensor, lse: Tensor, total: Tensor, weights: Tensor | None
) -> Tensor | None:
    """Second pass, from the final ``lse``: write the weights block by block into ``weights``
    (if given) and return the ``"column_sum"`` summary (if asked)."""
    column_sum = None
    if plan.call.summary == "column_sum":
        b, h, _, n = plan.call.shape
        column_sum = torch.zeros(b, h, n, dtype=lse.dtype, device=lse.device)
    if weights is None and column_sum is None:
        return None
    for _, q0, q1, _, k0, k1, mask in plan.blocks():
        s = plan.scores(q[..., q0:q1, :], k[..., k0:k1, :], q0, k0)
        p = _probabilities(s, mask, lse[..., q0:q1], total[..., q0:q1])
        if weights is not None:
            weights[..., q0:q1, k0:k1] = p
        if column_sum is not None:
            column_sum[..., k0:k1] += p.sum(-2)
    return column_sum


class _Run(nn.Module):
    """Calls a function while ``torch.func.functional_call`` has the score's parameters swapped."""

    def __init__(self, score: nn.Module) -> None:
        super().__init__()
        self.score = score

    def forward(self, fn):  # type: ignore[no-untyped-def]
        return fn()


def with_parameters(score: nn.Module, names: list[str], tensors: list[Tensor], fn) -> None:  # type: ignore[no-untyped-def]
    """Run ``fn`` with ``score``'s parameters ``names`` set to ``tensors``."""
    if not names:
        fn()
        return
    swapped = {f"score.{name}": t for name, t in zip(names, tensors, strict=False)}
    torch.func.functional_call(_Run(score), swapped, (fn,))


class TiledAttentionFunction(torch.autograd.Function):
    """Forward by online softmax over blocks; backward by recomputation from ``lse``."""

    @staticmethod
    def forward(
        ctx, plan: TiledPlan, want_weights: bool, q: Tensor, k: Tensor, v: Tensor, *extras: Tensor
    ):  # type: ignore[override]
        b, h, m, n = plan.call.shape
        dtype = compute_dtype(q.dtype)
        weights = torch.zeros(b, h, m, n, dtype=dtype, device=q.device) if want_weights else None
        inputs = [q, k, v, *extras] if plan.check_reads else None
        out, lse, summary, total = _online_softmax(plan, q, k, v.to(dtype), weights, inputs)
        nan_rows = torch.isnan(lse).unsqueeze(-1)
        if weights is not None and possibly(nan_rows):
            # A row with a NaN score is NaN at every key, also where no block was computed.
            weights.masked_fill_(nan_rows, float("nan"))
        if plan.whole_rows and weights is not None and plan.call.summary == "column_sum":
            summary = weights.sum(-2)
        elif not plan.whole_rows or plan.call.summary == "column_sum":
            pending = None if plan.whole_rows else weights
            column_sum = _weights_pass(plan, q, k, lse, total, pending)
            summary = column_sum if column_sum is not None else summary
            if pending is not None and possibly(nan_rows):
                weights.masked_fill_(nan_rows, float("nan"))
        if summary is None:
            summary = lse.new_empty(0)
        ctx.mark_non_differentiable(summary)
        ctx.plan = plan
        ctx.want_weights = want_weights
        saved = [q, k, v, out, lse, total, *extras]
        if weights is not None:
            saved.append(weights)
        ctx.save_for_backward(*saved)
        ctx.set_materialize_grads(False)
        # Outputs in the inputs' dtype (v is the raw input; q, k are features in compute dtype).
        return (
            out.to(v.dtype),
            lse,
            weights.to(v.dtype) if weights is not None else lse.new_empty(0),
            summary,
        )

    @staticmethod
    def backward(ctx, d_out, d_lse, d_weights, _d_summary):  # type: ignore[override]
        plan: TiledPlan = ctx.plan
        q, k, v, out, lse, total, *rest = ctx.saved_tensors
        extras = rest[: plan.n_extras]
        weights = rest[plan.n_extras] if ctx.want_weights else None
        dtype = compute_dtype(q.dtype)
        vc = v.to(dtype)
        if not plan.finite_values:  # a value at a masked key must not reach dS as 0 · NaN
            vc = torch.where(torch.isfinite(vc), vc, torch.zeros_like(vc))
        # Rows with a +inf score have weights constant in the scores (equal shares): dS = 0.
        top = torch.isposinf(lse).unsqueeze(-1)
        top = top if possibly(top) else None
        d_out = None if d_out is None else d_out.to(dtype)
        row_term = torch.zeros_like(lse)  # D - dlse + Σ dW·W, per query row
        if d_out is not None:
            row_term = row_term + (d_out * out).sum(-1)
        if d_lse is not None:
            row_term = row_term - torch.where(torch.isfinite(lse), d_lse.to(dtype), 0.0)
        if d_weights is not None and weights is not None:
            d_weights = d_weights.to(dtype)
            row_term = row_term + (d_weights * weights).sum(-1)
        else:
            d_weights = None
        dq = torch.zeros(q.shape, dtype=dtype, device=q.device)
        dk = torch.zeros(k.shape, dtype=dtype, device=k.device)
        dv = torch.zeros(v.shape, dtype=dtype, device=v.device)
        # made on a first gradient: a mod may reach many tensors (a global model) and use few
        d_extras: list[Tensor | None] = [None] * len(extras)
        analytic = plan.analytic_backward()

        def accumulate() -> None:
            for i, q0, q1, j, k0, k1, mask in plan.blocks():
                qb, kb = q[..., q0:q1, :], k[..., k0:k1, :]
                if analytic and weights is not None:
                    p = weights[..., q0:q1, k0:k1]  # the probabilities were kept: no recompute
                elif analytic:
                    s = plan.scores(qb, kb, q0, k0)
                    p = _probabilities(s, mask, lse[..., q0:q1], total[..., q0:q1])
                else:
                    qb = qb.detach().requires_grad_(True)
                    kb = kb.detach().requires_grad_(True)
                    with torch.enable_grad():
                        s = plan.scores(qb, kb, q0, k0)
                    p = _probabilities(s.detach(), mask, lse[..., q0:q1], total[..., q0:q1])
                keep = plan.keep(p.shape, i, j, q.device)
                ds_row = -row_term[..., q0:q1].unsqueeze(-1)
                if d_out is not None:
                    dob = d_out[..., q0:q1, :]
                    dp = dob @ vc[..., k0:k1, :].transpose(-2, -1)
                    dp = dp if keep is None else dp * keep
                    dv[..., k0:k1, :] += (p if keep is None else p * keep).transpose(-2, -1) @ dob
                    ds_row = ds_row + dp
                if d_weights is not None:
                    ds_row = ds_row + d_weights[..., q0:q1, k0:k1]
                ds = p * ds_row
                if top is not None:
                    ds = torch.where(top[..., q0:q1, :], torch.zeros_like(ds), ds)
                if analytic:
                    scale = plan.dot_scale
                    dq[..., q0:q1, :] += (ds @ kb.to(dtype)) * scale
                    dk[..., k0:k1, :] += (ds.transpose(-2, -1) @ qb.to(dtype)) * scale
                    continue
                grads = torch.autograd.grad(s, [qb, kb, *extras], ds, allow_unused=True)
                if grads[0] is not None:
                    dq[..., q0:q1, :] += grads[0]
                if grads[1] is not None:
                    dk[..., k0:k1, :] += grads[1]
                for index, g in enumerate(grads[2:]):
                    if g is not None:
                        acc = d_extras[index]
                        d_extras[index] = g if acc is None else acc + g

        # Recompute with the parameters saved in forward, not whatever the module holds now (they
        # differ under torch.func.functional_call, and parametrizations rebuild their weights).
        with_parameters(plan.call.score, plan.param_names, extras, accumulate)
        return (None, None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), *d_extras)


def _refuse_unreached(scores: Tensor, inputs: list[Tensor]) -> None:
    """Refuse a ``score_mod`` that read a tensor requiring grad which is none of this autograd
    function's ``inputs``: its gradient would be lost (``captured.py`` says how they are found)."""
    lost = leaf_outside(scores, inputs)
    if lost is not None:
        raise ValueError(
            f"the score_mod reads {describe_tensor(lost)} that requires grad, out of attnkit's "
            "sight (not in its closure, defaults, a functools.partial, the globals its code names, "
            "an object's attributes or a container): the tiled backend would give it no "
            "gradient; hold it in one of those, or use backend='chunked' or 'reference'"
        )


def call_blocks(call: AttentionCall) -> tuple[int, int]:
    """``(block_q, block_k)`` of ``call``: about ``BLOCK_BUDGET`` numbers per score block; with
    ``return_weights``, blocks of whole rows when one row fits the budget."""
    b, h, m, n = call.shape
    cost = call.score.elements_per_score
    if call.return_weights and b * h * n * cost <= BLOCK_BUDGET:
        # The [M, N] weights will exist anyway: blocks of whole rows finish each row's softmax in
        # one pass, so the weights are written as they are computed instead of recomputed. (When
        # even one row exceeds the budget, a second pass writes them from the final lse.)
        return max(1, min(m, BLOCK_BUDGET // max(1, b * h * n * cost))), max(n, 1)
    return block_sizes(b * h, m, n, cost)


def tiled_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`tiled_attention` (see ``memory.py``): the accumulator and
    the context ``[B, H, M, Dv]``, the weights ``[B, H, M, N]`` if asked, and the live score
    blocks ``[B, H, block_q, block_k]`` (times the score's own elements per score, e.g. the
    additive score's ``d_w``): 3 in a single block, 4 when blocks follow each other (the last
    block's probabilities live on); the backward adds the gradients of ``q``, ``k``, ``v`` and 5
    (7) blocks of recomputed probabilities and their gradients."""
    z = sizes(call)
    block_q, block_k = call_blocks(call)
    block = z.b * z.h * block_q * block_k * call.score.elements_per_score * z.compute
    several = block_q < z.m or block_k < z.n
    weights = z.scores * z.compute if call.return_weights else 0
    context = z.context * z.compute
    rows = block_q * z.b * z.h * z.dv * z.compute  # one block of rows of the context
    fixed = feature_bytes(call) + weights
    forward = fixed + (4 if several else 3) * block + 2 * context + rows
    if not backward:
        return forward
    grads = (z.queries + z.keys + z.values) * z.compute + context
    if call.return_weights:  # the probabilities are read from the saved weights
        return fixed + grads + (4 if several else 3) * block + 2 * rows
    return max(forward, fixed + grads + (7 if several else 5) * block + 2 * rows)


def tiled_attention(call: AttentionCall) -> AttentionOutput:
    """Run ``call`` by tiles (see the module docstring)."""
    # Per-vector features run here, once, under ordinary autograd; blocks see only pairwise.
    q, k = score_features(call, call.q, call.k)
    dot_scale = None
    if call.score.pairwise_is_dot:
        factor = call.score.resolve_scale(call.scale, call.k.shape[-1])
        dot_scale = 1.0 if factor is None else factor
    named = [(name, p) for name, p in call.score.named_parameters() if p.requires_grad]
    extras = [p for _, p in named]
    if call.bias is not None and call.bias.requires_grad:
        extras.append(call.bias)
    extras += [t for t in captured_tensors(call.score_mod) if all(t is not e for e in extras)]
    block_q, block_k = call_blocks(call)
    seed = int(torch.randint(0, 2**62, (1,))) if call.dropout > 0 else 0
    finite_values = call.finite or call.v.device.type == "meta" or bool(call.v.isfinite().all())
    check_reads = call.score_mod is not None and torch.is_grad_enabled()
    plan = TiledPlan(
        call,
        dot_scale,
        block_q,
        block_k,
        seed,
        len(extras),
        [n for n, _ in named],
        finite_values,
        check_reads,
    )
    context, lse, weights, summary = TiledAttentionFunction.apply(
        plan, call.return_weights, q, k, call.v, *extras
    )
    return AttentionOutput(
        context=context,
        weights=weights if call.return_weights else None,
        lse=lse,
        summary=summary if call.summary is not None else None,
    )
