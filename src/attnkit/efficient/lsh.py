"""LSH attention (Kitaev et al. 2020, "Reformer: The Efficient Transformer", §2): shared
query/key vectors are hashed by angular locality-sensitive hashing, sorted by bucket, cut into
chunks, and each query attends the keys of its own and the previous chunk that share its bucket.

Hashing (§2, after Andoni et al. 2015): with a random rotation ``R [d, n_buckets/2]``,
``h(x) = argmax([xR ; -xR])``, so nearby directions share a bucket with high probability.
Shared-QK (§2 "Shared-QK Transformer"): the keys are the queries normalised,
``k_j = q_j / |q_j|``, so a query and its own key hash together; a query never attends its own
position unless it has no other key to attend (its score with itself would dominate).
Multi-round hashing (``n_rounds``, §2 "Multi-round LSH attention"): each round gives an output
``o_r`` and a log-normaliser ``z_r``; they are combined as ``Σ_r softmax_r(z_r) o_r``.

Which keys a query attends in one round, for chunks of ``c = bucket_size``:

* non-causal (Reformer's chunking): positions sorted by (bucket, position) and cut into chunks
  of ``c``; a query attends the keys of its bucket in its own chunk and the previous one (the
  first chunk's previous one is the last);
* causal: a query at position ``i`` with rank ``r`` among the positions of its bucket (``r``
  earlier positions share it) attends the positions ``j <= i`` of its bucket whose rank is at
  least ``c·(floor(r/c) - 1)``: between ``c`` and ``2c - 1`` of its bucket's latest keys (all of
  them near the start of the bucket). This is Reformer's chunking with each bucket's run
  starting a new chunk: the chunks are then the same whatever the later positions hash to, so
  no output depends on a later input, not even through which keys share its chunk (Reformer's
  plain sort lets a later position of a lower bucket shift where a chunk boundary falls).

Per round the scores held are ``[B, H, S/c, c, 2c]`` with ``S`` the sorted length (``L``
rounded up to chunks; causal adds at most one partial chunk per non-empty bucket, so
``S < 2L + 2c``): O(L·c) memory. ``n_buckets = 2·ceil(L / (2c))`` (the paper: about ``L / c``
buckets), and one bucket (``bucket_size >= L``) is exact softmax attention over the sequence with
the self rule (causal: over the earlier positions).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.efficient._inputs import (
    EfficientCall,
    EfficientKind,
    KindOptions,
    check_call,
    check_positive_int,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

TAXONOMY: dict[str, str | list[str]] = {"scoring": "Scaled-Multiplicative", "alignment": "Local"}


def lsh_buckets(x: Tensor, n_buckets: int, rotations: Tensor) -> Tensor:
    """Angular LSH of ``x [B, H, L, d]`` with ``rotations [d, n_buckets/2]``: ``[B, H, L]``."""
    if n_buckets == 1:
        return torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
    rotated = x @ rotations.to(x.dtype)
    return torch.cat([rotated, -rotated], -1).argmax(-1)


def _chunks_with_previous(x: Tensor, chunk: int) -> Tensor:
    """``x [B, H, nc·c, ...]`` → ``[B, H, nc, 2c, ...]``: each chunk followed by the previous
    one (the last, for the first chunk); a single chunk is not repeated."""
    b, h = x.shape[:2]
    xc = x.view(b, h, -1, chunk, *x.shape[3:])
    if xc.shape[2] == 1:
        return xc
    return torch.cat([xc, xc.roll(1, dims=2)], 3)


def _sorted_slots(buckets: Tensor, n_buckets: int, chunk: int, causal: bool) -> Tensor:
    """The position at each slot of the sorted order, ``[B, H, S]`` (``S`` a multiple of
    ``chunk``; ``L`` = ``buckets.shape[-1]`` marks an empty slot).

    Non-causal: positions by (bucket, position), then empty slots. Causal: the same, but each
    bucket's run starts at a chunk boundary (empty slots fill its last chunk), so a position's
    slot within its chunks depends only on the earlier positions of its bucket.
    """
    b, h, length = buckets.shape
    positions = torch.arange(length, device=buckets.device)
    order = (buckets * length + positions).argsort(-1)  # by bucket, then by position
    if not causal:
        slots = math.ceil(length / chunk) * chunk
        return F.pad(order, (0, slots - length), value=length)
    counts = torch.zeros(b, h, n_buckets, dtype=torch.long, device=buckets.device)
    counts.scatter_add_(2, buckets, torch.ones_like(buckets))
    run_start = counts.cumsum(-1) - counts  # where each bucket's run starts in ``order``
    padded_runs = (counts + chunk - 1) // chunk * chunk
    slot_start = padded_runs.cumsum(-1) - padded_runs  # ... and in the chunk-aligned order
    # ceil(a/c) + ceil(b/c) <= ceil((a+b)/c) + 1: at most one extra chunk per non-empty bucket
    slots = (math.ceil(length / chunk) + min(n_buckets, length) - 1) * chunk
    sorted_buckets = buckets.gather(2, order)
    rank = torch.arange(length, device=buckets.device) - run_start.gather(2, sorted_buckets)
    target = slot_start.gather(2, sorted_buckets) + rank
    slot_position = torch.full((b, h, slots), length, dtype=torch.long, device=buckets.device)
    return slot_position.scatter_(2, target, order)


def _attend_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    position: Tensor,
    bucket: Tensor,
    keep: Tensor,
    chunk: int,
    scale: float,
    causal: bool,
) -> tuple[Tensor, Tensor]:
    """One round over sorted slots: ``q, k [B, H, S, d]``, ``v [B, H, S, d_v]`` and each slot's
    ``position``, ``bucket``, ``keep`` ``[B, H, S]``; each chunk's queries attend the keys of
    their bucket in it and in the previous chunk. Returns the context ``[B, H, S, d_v]`` and the
    log-normaliser ``[B, H, S]`` (``-inf`` for a query with no key)."""
    b, h, slots, d = q.shape
    dv = v.shape[-1]
    n_chunks = slots // chunk

    def with_previous(x: Tensor) -> Tensor:
        return _chunks_with_previous(x.unsqueeze(-1), chunk).squeeze(-1)

    sq = q.view(b, h, n_chunks, chunk, d)
    sk = _chunks_with_previous(k, chunk)  # [B, H, nc, 2c, d]
    sv = _chunks_with_previous(v, chunk)
    q_pos = position.view(b, h, n_chunks, chunk)
    k_pos = with_previous(position)  # [B, H, nc, 2c]
    q_bucket = bucket.view(b, h, n_chunks, chunk)

    scores = (sq @ sk.transpose(-1, -2)) * scale  # [B, H, nc, c, 2c]
    allowed = (q_bucket.unsqueeze(-1) == with_previous(bucket).unsqueeze(-2)) & with_previous(
        keep
    ).unsqueeze(-2)
    if causal:
        allowed = allowed & (k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1))
    itself = k_pos.unsqueeze(-2) == q_pos.unsqueeze(-1)
    others = allowed & ~itself
    allowed = torch.where(others.any(-1, keepdim=True), others, allowed)  # self only if alone
    scores = scores.masked_fill(~allowed, float("-inf"))
    top = scores.amax(-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)  # masked entries: exp(-inf) = 0
    total = e.sum(-1, keepdim=True)
    some = total > 0  # (a row with no key: zeros, and a -inf normaliser, never NaN)
    ones = torch.ones_like(total)
    weights = e / torch.where(some, total, ones)
    lse = torch.where(some, top + torch.log(torch.where(some, total, ones)), -math.inf)
    return (weights @ sv).view(b, h, slots, dv), lse.view(b, h, slots)


class LSHAttention(EfficientKind):
    """Reformer's shared-QK LSH attention (which keys each query attends: see the module doc);
    the attention kind ``"lsh"`` (no parameters; the rotations come from ``seed``).

    Args:
        bucket_size: ``c``, the chunk length; the number of buckets follows from it.
        n_rounds: hashing rounds (more rounds, fewer missed neighbours; the paper: 1-8).
        seed: fixes the random rotations (same hashes on every call with this seed).

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; key-padding
    masks only): ``forward(q, k, v)`` with the shared query/key vectors ``q [B, H, L, d]`` (or
    ``[B, L, d]``) and ``v [B, H, L, d_v]``; ``k`` is not read (the keys are ``q`` normalised,
    so a :class:`~attnkit.MultiHeadAttention` running it leaves its key projection unused; pass
    ``None``). Returns :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> LSHAttention(bucket_size=8, n_rounds=2)(x, None, x).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "lsh"
    taxonomy = TAXONOMY

    def __init__(self, bucket_size: int = 64, n_rounds: int = 1, seed: int = 0) -> None:
        super().__init__()
        self.bucket_size = check_positive_int("bucket_size", bucket_size)
        self.n_rounds = check_positive_int("n_rounds", n_rounds)
        self.seed = seed

    def forward(
        self, q: Tensor, k: Tensor | None, v: Tensor, **options: Unpack[KindOptions]
    ) -> AttentionOutput:
        """Shared-QK LSH attention of ``q`` over itself.

        Args:
            q: the shared query/key vectors ``[B, H, L, d]`` (or ``[B, L, d]``).
            k: not read (pass ``None`` or ``q``).
            v: values ``[B, H, L, d_v]``.
            **options: :class:`~attnkit.efficient._inputs.KindOptions` (key padding only).

        Returns:
            :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.
        """
        return self.attend(check_call(self.name, q, q, v, **options))

    def attend(self, call: EfficientCall) -> AttentionOutput:
        b, h, length, d = call.q.shape
        dv = call.v.shape[-1]
        if length == 0:
            return call.output(call.q.new_zeros(b, h, 0, dv))
        keys = F.normalize(call.q, dim=-1)
        key_mask = call.key_mask(self.name)
        c = min(self.bucket_size, length)
        n_buckets = 1 if length <= c else 2 * math.ceil(math.ceil(length / c) / 2)
        generator = torch.Generator().manual_seed(self.seed)
        # one empty row at index L: what the empty slots of the sorted order read
        keep = torch.ones(b, h, length, dtype=torch.bool, device=call.q.device)
        if key_mask is not None:
            keep = keep & key_mask[..., 0, :]
        keep = F.pad(keep, (0, 1), value=False)
        q_p, k_p, v_p = (F.pad(x, (0, 0, 0, 1)) for x in (call.q, keys, call.v))

        def gather(x: Tensor, index: Tensor) -> Tensor:
            return x.gather(2, index.unsqueeze(-1).expand(*index.shape, x.shape[-1]))

        outputs, normalisers = [], []
        for _ in range(self.n_rounds):
            rotations = torch.randn(d, max(1, n_buckets // 2), generator=generator).to(
                call.q.device
            )
            buckets = lsh_buckets(keys, n_buckets, rotations)  # [B, H, L]
            position = _sorted_slots(buckets, n_buckets, c, call.causal)  # [B, H, S]
            bucket = F.pad(buckets, (0, 1), value=n_buckets).gather(2, position)
            out, lse = _attend_chunks(
                gather(q_p, position),
                gather(k_p, position),
                gather(v_p, position),
                position,
                bucket,
                keep.gather(2, position),
                c,
                call.scale,
                call.causal,
            )
            # back to positions: slot of each position (empty slots are never read)
            slot_of = torch.empty(b, h, length + 1, dtype=torch.long, device=call.q.device)
            slot_of.scatter_(
                2,
                position,
                torch.arange(position.shape[-1], device=call.q.device).expand_as(position),
            )
            slot_of = slot_of[..., :length]
            outputs.append(gather(out, slot_of))
            normalisers.append(lse.gather(2, slot_of))

        if self.n_rounds == 1:
            context = outputs[0]
        else:
            z = torch.stack(normalisers)  # [R, B, H, L]
            top = z.amax(0, keepdim=True)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top)).detach()
            share = torch.exp(z - top)
            total = share.sum(0, keepdim=True)
            share = share / torch.where(total > 0, total, torch.ones_like(total))
            context = (share.unsqueeze(-1) * torch.stack(outputs)).sum(0)
        return call.output(context)

    def extra_repr(self) -> str:
        return f"bucket_size={self.bucket_size}, n_rounds={self.n_rounds}, seed={self.seed}"


def lsh_attention(
    q: Tensor,
    k: Tensor | None,
    v: Tensor,
    *,
    bucket_size: int = 64,
    n_rounds: int = 1,
    seed: int = 0,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """:class:`LSHAttention` as a function (options: :class:`KindOptions`); ``k`` must be ``q``
    itself (the same tensor object; Reformer shares W_Q and W_K) or ``None``.

    Args:
        q: the shared query/key vectors ``[B, H, L, d]`` (or ``[B, L, d]``).
        k: ``q`` itself or ``None``.
        v: values ``[B, H, L, d_v]``.
        bucket_size: the chunk length ``c``.
        n_rounds: hashing rounds.
        seed: fixes the random rotations.
        **options: :class:`~attnkit.efficient._inputs.KindOptions` (key padding only).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(1, 2, 256, 16)
        >>> lsh_attention(x, x, x, bucket_size=32, n_rounds=2).context.shape
        torch.Size([1, 2, 256, 16])
    """
    if k is not None and k is not q:
        raise ValueError(
            "lsh attention shares queries and keys (Reformer's shared-QK): pass the same tensor "
            "as q and k (the keys are q normalised)"
        )
    return LSHAttention(bucket_size, n_rounds, seed)(q, q, v, **options)
