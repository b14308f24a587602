"""Ring attention: exact attention over a sequence split across ranks (Liu et al. 2023).

Each of the W ranks holds ``n/W`` positions of the sequence — its queries, keys and values. The
key/value blocks travel around the ring (rank r sends to r+1, receives from r-1) in W-1 hops
while every rank keeps its queries; at each step a rank attends its queries to the block it
holds, with attnkit's engine, while the next block is already in flight. The partial results over
disjoint key sets are combined exactly by the log-sum-exp merge (``attnkit.merge_attention``):

    lse = log Σ_s exp(lse_s),        O = Σ_s exp(lse_s - lse) · O_s

Backward (the FlashAttention recipe, blockwise): with ``D = Σ_d dO ∘ O`` per query and the saved
``lse``, the loss reaches block s's partial result through ``O_s`` and ``lse_s`` only:

    ∂L/∂O_s   = w_s · dO,        ∂L/∂lse_s = w_s · (Σ_d dO ∘ O_s − D + dlse),   w_s = exp(lse_s − lse)

so each block is recomputed by the engine under autograd and differentiated with those output
gradients (no ``[n, n]`` tensor is stored between passes). The key/value blocks go around the ring
again and their gradient accumulators ``dK, dV`` travel with them, W hops, ending at their owner.

Causal masking uses positions, so it needs to know which positions a rank holds: the
``layout`` (``attnkit.distributed.layout``); zig-zag chunks balance the causal work. A block
entirely above the diagonal is skipped, one entirely below runs unmasked, a diagonal chunk runs
with ``causal=True``.

Shapes: B batch, H query heads, G key/value heads, n sequence length, W ranks, m = n_pad / W
local positions, d_k / d_v head sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.merge import merge_attention
from attnkit.core.scores import Location, Score, resolve_score
from attnkit.distributed.layout import Chunk, local_chunks
from attnkit.distributed.process_group import rank_and_size
from attnkit.distributed.ring import Ring

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Segment:
    """Local query rows ``[q0, q1)`` attending rows ``[k0, k1)`` of a visiting key block."""

    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool = False  # a diagonal chunk: same positions for queries and keys
    mask: Tensor | None = None  # [q1 - q0, k1 - k0] bool, only for partly overlapping chunks


def plan_segments(
    q_chunks: list[Chunk], kv_chunks: list[Chunk], causal: bool, length: int
) -> list[Segment]:
    """The admissible (query rows, key rows) pairs between two shards; padding (positions
    ``>= length``) dropped from both sides, causal blocks above the diagonal skipped."""
    segments = []
    for qc in q_chunks:
        nq = min(qc.size, length - qc.start)
        for kc in kv_chunks:
            nk = min(kc.size, length - kc.start)
            if nq <= 0 or nk <= 0:
                continue
            rows = (qc.local_start, qc.local_start + nq, kc.local_start, kc.local_start + nk)
            if not causal or kc.start + nk - 1 <= qc.start:  # every key at or before every query
                segments.append(Segment(*rows))
            elif kc.start > qc.start + nq - 1:  # every key after every query
                continue
            elif kc.start == qc.start and nk == nq:
                segments.append(Segment(*rows, causal=True))
            else:  # chunks of unequal sizes that overlap in part (not produced by the layouts)
                q_pos = torch.arange(qc.start, qc.start + nq)
                k_pos = torch.arange(kc.start, kc.start + nk)
                segments.append(Segment(*rows, mask=q_pos[:, None] >= k_pos[None, :]))
    return _coalesce(segments)


def _coalesce(segments: list[Segment]) -> list[Segment]:
    """Merge unmasked segments that are adjacent in the key rows, then in the query rows, so a
    non-causal step is one engine call over the whole block."""

    def plain(s: Segment) -> bool:
        return not s.causal and s.mask is None

    for along_keys in (True, False):
        out: list[Segment] = []
        for s in segments:
            last = out[-1] if out else None
            if last is not None and plain(last) and plain(s):
                if along_keys and (last.q0, last.q1) == (s.q0, s.q1) and last.k1 == s.k0:
                    out[-1] = Segment(last.q0, last.q1, last.k0, s.k1)
                    continue
                if not along_keys and (last.k0, last.k1) == (s.k0, s.k1) and last.q1 == s.q0:
                    out[-1] = Segment(last.q0, s.q1, last.k0, last.k1)
                    continue
            out.append(s)
        segments = out
    return segments


@dataclass
class RingSpec:
    """Everything about one ring-attention call except the tensors."""

    score: Score
    scale: float | None
    causal: bool
    length: int
    layout: str
    rank: int
    world_size: int
    local_length: int
    backend: str | None
    group: dist.ProcessGroup | None
    _plans: dict[int, list[Segment]] = field(default_factory=dict)

    def segments(self, source: int) -> list[Segment]:
        """The segments of this rank's queries against the key block of rank ``source``."""
        if source not in self._plans:
            mine = local_chunks(self.rank, self.world_size, self.local_length, self.layout)
            theirs = local_chunks(source, self.world_size, self.local_length, self.layout)
            self._plans[source] = plan_segments(mine, theirs, self.causal, self.length)
        return self._plans[source]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, s: Segment) -> tuple[Tensor, Tensor]:
        """The engine on one segment, given its rows ``q [B, H, q1-q0, d_k]``,
        ``k [B, G, k1-k0, d_k]``, ``v [B, G, k1-k0, d_v]``: ``(context [B, H, q1-q0, d_v],
        lse [B, H, q1-q0])``."""
        mask = None if s.mask is None else s.mask.to(q.device)
        out = attention(
            q,
            k,
            v,
            score=self.score,
            scale=self.scale,
            causal=s.causal,
            mask=mask,
            return_lse=True,
            backend=self.backend,
        )
        assert out.lse is not None  # return_lse=True: the engine guarantees it
        return out.context, out.lse

    def ring(self) -> Ring | None:
        return Ring(self.group) if self.world_size > 1 else None


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _source(spec: RingSpec, step: int) -> int:
    """Whose key/value block a rank holds at ``step`` (its own at step 0)."""
    return (spec.rank - step) % spec.world_size


def ring_forward(spec: RingSpec, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(context [B, H, m, d_v], lse [B, H, m])`` of this rank's queries over all keys."""
    b, h, m, _ = q.shape
    dtype = _accumulator_dtype(v.dtype)
    out = torch.zeros(b, h, m, v.shape[-1], dtype=dtype, device=q.device)
    lse = torch.full((b, h, m), NEG_INF, dtype=dtype, device=q.device)
    ring = spec.ring()
    for step in range(spec.world_size):
        shift = None
        if ring is not None and step < spec.world_size - 1:  # the next block travels meanwhile
            shift = ring.shift([k, v], f"the key/value block of rank {_source(spec, step + 1)}")
        for s in spec.segments(_source(spec, step)):
            rows, keys = slice(s.q0, s.q1), slice(s.k0, s.k1)
            context, part_lse = spec.attend(q[..., rows, :], k[..., keys, :], v[..., keys, :], s)
            so_far = AttentionOutput(out[..., rows, :], lse=lse[..., rows])
            part = AttentionOutput(context.to(dtype), lse=part_lse.to(dtype))
            merged = merge_attention([so_far, part])
            assert merged.lse is not None
            out[..., rows, :], lse[..., rows] = merged.context, merged.lse
        if shift is not None:
            k, v = shift.wait()
    return out, lse


def ring_backward(
    spec: RingSpec,
    saved: tuple[Tensor, ...],
    d_out: Tensor | None,
    d_lse: Tensor | None,
    params: list[Tensor],
) -> tuple[Tensor, Tensor, Tensor, list[Tensor | None]]:
    """``dq, dk, dv`` and the score parameters' gradients (see the module docstring)."""
    q, k, v, out, lse = saved
    dtype = _accumulator_dtype(v.dtype)
    d_out = torch.zeros_like(out) if d_out is None else d_out.to(dtype)
    row_term = (d_out * out).sum(-1)  # D
    if d_lse is not None:
        row_term = row_term - torch.where(torch.isfinite(lse), d_lse.to(dtype), 0.0)
    safe_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    dq = torch.zeros(q.shape, dtype=dtype, device=q.device)
    d_params: list[Tensor | None] = [None] * len(params)
    ring = spec.ring()
    k_block, v_block, carried = k, v, None
    for step in range(spec.world_size):
        shift = None
        if ring is not None and step < spec.world_size - 1:
            shift = ring.shift([k_block, v_block], "a key/value block (backward)")
        dk = torch.zeros(k.shape, dtype=dtype, device=k.device)
        dv = torch.zeros(v.shape, dtype=dtype, device=v.device)
        for s in spec.segments(_source(spec, step)):
            rows, keys = slice(s.q0, s.q1), slice(s.k0, s.k1)
            # Leaves of the segment's rows only: their gradients are segment-sized, not [m, d].
            qs, ks, vs = (
                t[..., r, :].detach().requires_grad_(True)
                for t, r in ((q, rows), (k_block, keys), (v_block, keys))
            )
            with torch.enable_grad():
                context, part_lse = spec.attend(qs, ks, vs, s)
            weight = torch.exp(part_lse.detach().to(dtype) - safe_lse[..., rows])  # w_s; 0 if empty
            d_out_rows = d_out[..., rows, :]
            d_context = weight.unsqueeze(-1) * d_out_rows
            d_part_lse = weight * (
                (d_out_rows * context.detach().to(dtype)).sum(-1) - row_term[..., rows]
            )
            grads = torch.autograd.grad(
                [context, part_lse],
                [qs, ks, vs, *params],
                [d_context.to(context.dtype), d_part_lse.to(part_lse.dtype)],
                allow_unused=True,
            )
            for acc, r, g in zip((dq, dk, dv), (rows, keys, keys), grads[:3], strict=True):
                if g is not None:
                    acc[..., r, :] += g
            for i, g in enumerate(grads[3:]):
                if g is not None:
                    previous = d_params[i]
                    d_params[i] = g if previous is None else previous + g
        if carried is not None:  # the gradient of this block from the ranks it visited before
            previous_dk, previous_dv = carried.wait()
            dk, dv = dk + previous_dk, dv + previous_dv
        if ring is not None:  # pass the accumulators on with the block; the last hop returns home
            carried = ring.shift([dk, dv], "the key/value gradient accumulators")
        if shift is not None:
            k_block, v_block = shift.wait()
    if carried is not None:
        dk, dv = carried.wait()
    return dq, dk, dv, d_params


class RingAttentionFunction(torch.autograd.Function):
    """Forward and backward ring passes; saves only ``q, k, v``, the output and ``lse``."""

    @staticmethod
    def forward(ctx, spec: RingSpec, q: Tensor, k: Tensor, v: Tensor, *params: Tensor):  # type: ignore[override]
        out, lse = ring_forward(spec, q, k, v)
        ctx.spec = spec
        ctx.save_for_backward(q, k, v, out, lse, *params)
        ctx.set_materialize_grads(False)
        return out.to(v.dtype), lse

    @staticmethod
    def backward(ctx, d_out: Tensor | None, d_lse: Tensor | None):  # type: ignore[override]
        q, k, v, out, lse, *params = ctx.saved_tensors
        dq, dk, dv, d_params = ring_backward(ctx.spec, (q, k, v, out, lse), d_out, d_lse, params)
        return (None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), *d_params)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, score: Score) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not (q.dim() == k.dim() == v.dim()) or q.dim() not in (3, 4):
        raise ValueError(
            "q, k, v must all be 3-D [B, m, d] or all 4-D [B, H, m, d], got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not q.shape[-2] == k.shape[-2] == v.shape[-2]:
        raise ValueError(
            "ring attention is self-attention over one sharded sequence: q, k, v must hold the "
            f"same local positions (dim -2), got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    if any(isinstance(s, Location) for s in score.modules()) or score.value_features is not None:
        raise ValueError(
            f"ring attention needs a score of one query and one key, independent of the key's "
            f"position, with softmax: got {score.registry_name!r} (the 'location' score indexes "
            "keys by position and multi-dimensional scores have no single lse to merge)"
        )


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    group: dist.ProcessGroup | None = None,
    causal: bool = False,
    *,
    score: str | Score = "scaled_dot",
    scale: float | None = None,
    length: int | None = None,
    layout: str = "zigzag",
    backend: str | None = None,
) -> AttentionOutput:
    """Softmax attention of this rank's queries over the keys of every rank in ``group``.

    Equal to ``attnkit.attention(Q, K, V, causal=causal)`` over the whole sequence, restricted to
    this rank's query rows (eq. 2-4 with softmax; module docstring for the algorithm). Every rank
    of ``group`` must call it with same-shaped tensors; differentiable (the backward is a second
    ring pass). With one process (or torch.distributed not initialised) it is plain attention.

    Args:
        q: this rank's queries ``[B, H, m, d_k]`` (or ``[B, m, d_k]``).
        k, v: this rank's keys ``[B, G, m, d_k]`` and values ``[B, G, m, d_v]``, same positions
            (``G`` divides ``H``: grouped-query attention; only the G heads travel).
        group: the process group forming the ring (``None``: the default group).
        causal: query at position i attends keys at positions ``j <= i``.
        score: any score of ``attnkit.scores`` whose value does not depend on the key's position
            (not ``"location"``), one number per key; a ``Score`` module's parameters get
            gradients (this rank's share: sum them over ranks, e.g.
            :func:`~attnkit.distributed.all_reduce_gradients`). The engine picks the backend
            per block (one that returns ``lse``: ``tiled`` for single-number scores).
        scale: multiplies the scores (``scaled_dot``: replaces ``1/sqrt(d_k)``).
        length: number of real positions ``n`` of the whole sequence; positions ``>= n``
            (padding from :func:`~attnkit.distributed.shard_sequence`) are never attended and get
            zero output. ``None``: ``W · m`` (no padding).
        layout: ``"zigzag"`` (default) or ``"contiguous"``, as the sequence was sharded.
        backend: force the engine's backend for every block.

    Returns:
        ``AttentionOutput(context [B, H, m, d_v], lse [B, H, m])`` for this rank's positions.

    Example::

        >>> def work(rank, world_size):  # on each rank
        ...     torch.manual_seed(0)  # the same full sequence everywhere
        ...     full = torch.randn(1, 2, 8, 4)
        ...     x = ak.distributed.shard_sequence(full, rank=rank, world_size=world_size)
        ...     out = ring_attention(x, x, x, causal=True, length=8).context
        ...     exact = ak.attention(full, full, full, causal=True).context
        ...     whole = ak.distributed.gather_sequence(out, length=8)
        ...     return torch.allclose(whole, exact, atol=1e-5)
        >>> [result.value for result in ak.distributed.launch_local(work, 2)]
        [True, True]
    """
    score_obj = resolve_score(score)
    _check_inputs(q, k, v, score_obj)
    rank, world = rank_and_size(group)
    three_d = q.dim() == 3
    if three_d:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    m = q.shape[-2]
    local_chunks(rank, world, m, layout)  # validates the layout and an even zig-zag shard
    total = world * m
    if length is None:
        length = total
    if isinstance(length, bool) or not isinstance(length, int) or not 0 < length <= total:
        raise ValueError(
            f"length must be an int in (0, {total}] ({world} ranks x {m} local positions), "
            f"got {length!r}"
        )
    spec = RingSpec(score_obj, scale, bool(causal), length, layout, rank, world, m, backend, group)
    params = [p for p in score_obj.parameters() if p.requires_grad]
    context, lse = RingAttentionFunction.apply(spec, q, k, v, *params)
    if three_d:
        context, lse = context.squeeze(1), lse.squeeze(1)
    return AttentionOutput(context=context, lse=lse)
