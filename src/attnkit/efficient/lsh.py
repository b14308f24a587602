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
  least ``r - c``: itself and its bucket's ``c`` latest earlier keys, a sliding window along the
  bucket. The sorted positions are laid out with each bucket's run starting a new chunk, so a
  query's keys are in its chunk and the previous one, each in a column fixed by its rank: the
  computation of every output is the same, to the bit, whatever the later positions hash to (no
  output depends on a later input, not even through which keys share its chunk or through
  rounding; Reformer's plain sort lets a later position of a lower bucket shift where a chunk
  boundary falls).

``attend_across_buckets=True`` (reformer-pytorch's option, its default) lets a query attend the
keys of other buckets that its chunks hold too:

* non-causal: every key of its own and the previous chunk;
* causal: the chunks hold one bucket each, and the first chunk of bucket ``b``'s run (its
  first ``c`` positions) also looks back at a
  chunk of the previous bucket ``b - 1`` (cyclically): the chunk of ``c`` that held that bucket's
  latest position when ``b``'s first position arrived (no look-back if it had none), of which a
  query attends the positions ``j <= i``. Reformer looks back at the previous bucket's last chunk
  overall, which depends on how many later positions hash there; this choice depends only on the
  past, so causal attention still never reads the future.

Per round the scores held are ``[B, H, S/c, c, 2c]`` with ``S`` the sorted length (``L`` rounded
up to chunks; causal adds at most one partial chunk per non-empty bucket, about ``c/2`` slots per
bucket on average, so ``S`` is about ``1.5 L`` and always ``< 2L + 2c``): O(L·c) memory. With one round the chunks run in torch's fused
``scaled_dot_product_attention`` with a boolean mask (the scores never leave the kernel); with
several, the log-normalisers are needed and the chunks are computed explicitly.
``n_buckets = 2·ceil(L / (2c))`` (the paper: about ``L / c`` buckets), and one bucket
(``bucket_size >= L``) is exact softmax attention over the sequence with the self rule (causal:
over the earlier positions).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.kinds import KINDS
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


def _rows(x: Tensor, index: Tensor) -> Tensor:
    """``x [B, H, L, e]`` at positions ``index [B, H, ...]`` (``L``, an empty slot, reads row
    ``L - 1``: its key is masked and its query's output never read): ``[B, H, ..., e]``. One
    row-wise ``index_select`` (backward: one ``index_add_``), cheaper than an element-wise
    ``gather`` with an expanded index."""
    b, h, length, e = x.shape
    base = torch.arange(b * h, device=x.device).view(b, h, *[1] * (index.dim() - 2)) * length
    flat = (index.clamp(max=length - 1) + base).flatten()
    return x.reshape(b * h * length, e).index_select(0, flat).view(*index.shape, e)


def _with_previous(x: Tensor, chunk: int, previous: Tensor | None) -> Tensor:
    """``x [B, H, (nc+1)·c, ...]`` (the last chunk empty) → each of the first ``nc`` chunks
    followed by the chunk ``previous`` names, ``[B, H, nc, 2c, ...]``. ``previous``: ``[nc]``
    (the same for every head) or ``[B, H, nc]``; ``None``: no previous chunk (one chunk)."""
    b, h = x.shape[:2]
    xc = x.view(b, h, -1, chunk, *x.shape[3:])
    own = xc[:, :, :-1]
    if previous is None:
        return own
    if previous.dim() == 1:
        back = xc.index_select(2, previous)
    else:
        index = previous.view(b, h, -1, *[1] * (xc.dim() - 3)).expand(-1, -1, -1, *xc.shape[3:])
        back = xc.gather(2, index)
    return torch.cat([own, back], 3)


def _plain_slots(buckets: Tensor, chunk: int) -> Tensor:
    """Positions by (bucket, position), then empty slots (``L``) up to whole chunks and one more
    empty chunk: ``[B, H, (nc+1)·c]``."""
    length = buckets.shape[-1]
    positions = torch.arange(length, device=buckets.device)
    order = (buckets * length + positions).argsort(-1)
    slots = (math.ceil(length / chunk) + 1) * chunk
    return F.pad(order, (0, slots - length), value=length)


def _aligned_slots(
    buckets: Tensor, n_buckets: int, chunk: int, across: bool
) -> tuple[Tensor, Tensor]:
    """The causal layout: positions by (bucket, position) with each bucket's run starting at a
    chunk boundary (empty slots ``L`` fill its last chunk), as many chunks as the longest layout
    of a head needs, and one empty chunk at the end. Returns the position at each slot
    ``[B, H, (nc+1)·c]`` and each chunk's look-back chunk: ``[nc]``, the chunk before it (the
    empty one for the first chunk), or with ``across`` ``[B, H, nc]``, where a bucket's first
    chunk looks back at a chunk of the previous bucket (module doc)."""
    b, h, length = buckets.shape
    device = buckets.device
    positions = torch.arange(length, device=device)
    keys, order = (buckets * length + positions).sort(-1)  # by bucket, then by position
    counts = torch.zeros(b, h, n_buckets, dtype=torch.long, device=device)
    counts.scatter_add_(2, buckets, torch.ones_like(buckets))
    run_start = counts.cumsum(-1) - counts  # where each bucket's run starts in ``order``
    padded_runs = (counts + chunk - 1) // chunk * chunk
    slot_start = padded_runs.cumsum(-1) - padded_runs  # ... and in the chunk-aligned order
    # the chunks actually used (between L/c and L/c + n_buckets - 1), not that bound: fewer slots
    n_chunks = int(padded_runs.sum(-1).max()) // chunk
    sorted_buckets = buckets.gather(2, order)
    rank_sorted = positions - run_start.gather(2, sorted_buckets)
    target = slot_start.gather(2, sorted_buckets) + rank_sorted
    slot_position = torch.full(
        (b, h, (n_chunks + 1) * chunk), length, dtype=torch.long, device=device
    )
    slot_position.scatter_(2, target, order)
    index = torch.arange(n_chunks, device=device)
    if not across:
        return slot_position, (index - 1) % (n_chunks + 1)

    # look-back of each bucket's first chunk: the chunk of bucket b - 1 holding its latest
    # position before b's first position i0 (R of its positions come before i0)
    first = order.gather(2, run_start.clamp(max=length - 1))  # i0 of each bucket [B, H, nb]
    before = (torch.arange(n_buckets, device=device) - 1) % n_buckets
    found = torch.searchsorted(keys, before * length + first)  # in the (bucket, position) order
    earlier = found - run_start.index_select(2, before)  # R
    latest_chunk = (earlier - 1).clamp_min(0) // chunk
    back_of_bucket = torch.where(
        earlier > 0, slot_start.index_select(2, before) // chunk + latest_chunk, n_chunks
    )  # n_chunks: the empty chunk
    chunk_bucket = F.pad(buckets, (0, 1), value=n_buckets).gather(
        2, slot_position[..., :-chunk].view(b, h, n_chunks, chunk)[..., 0]
    )  # bucket of each chunk (n_buckets: an unused chunk)
    first_chunk = F.pad(slot_start // chunk, (0, 1), value=0).gather(2, chunk_bucket)
    back = F.pad(back_of_bucket, (0, 1), value=n_chunks).gather(2, chunk_bucket)
    return slot_position, torch.where(index > first_chunk, index - 1, back)


def _fused_chunks(sq: Tensor, wk: Tensor, wv: Tensor, bias: Tensor, scale: float) -> Tensor:
    """Each chunk's queries ``sq [B, H, nc, c, d]`` over its keys ``wk [B, H, nc, w, d]``
    (values ``wv``) in torch's fused kernel, with the additive ``bias`` (0, -inf, or the self
    penalty; broadcastable to ``[B, H, nc, c, w]``; no row all -inf): context ``[B, H, nc·c, d_v]``.
    """
    b, h, nc, c, d = sq.shape
    out = F.scaled_dot_product_attention(
        sq.view(b * h, nc, c, d),
        wk.view(b * h, nc, -1, d),
        wv.view(b * h, nc, -1, wv.shape[-1]),
        attn_mask=bias.expand(b, h, nc, c, -1).reshape(b * h, nc, c, -1),
        scale=scale,
    )
    return out.view(b, h, nc * c, -1)


def _explicit_chunks(
    sq: Tensor, wk: Tensor, wv: Tensor, allowed: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """As :func:`_fused_chunks` with ``allowed [B, H, nc, c, w]`` bool (the self rule applied),
    scores formed: returns the context ``[B, H, nc·c, d_v]`` and the log-normaliser
    ``[B, H, nc·c]`` (``-inf`` for a query with no key) that multi-round hashing combines; a
    query with no key gets zeros, never NaN."""
    has_key = allowed.any(-1, keepdim=True)
    scores = ((sq * scale) @ wk.transpose(-1, -2)).masked_fill(~allowed, -math.inf)
    # the row maximum, detached and finite, instead of logsumexp: an empty row then gives zeros
    # and a -inf normaliser with zero (not NaN) gradients
    top = scores.amax(-1, keepdim=True).detach()
    top = torch.where(has_key, top, 0.0)
    e = torch.exp(scores - top)  # masked entries: exp(-inf) = 0
    total = torch.where(has_key, e.sum(-1, keepdim=True), 1.0)
    lse = torch.where(has_key, top + torch.log(total), -math.inf)
    return (e / total @ wv).flatten(2, 3), lse.squeeze(-1).flatten(2, 3)


def _self_penalty(dtype: torch.dtype) -> float:
    """Added to a query's score with itself in the fused path: its weight is then exactly 0
    beside any other admissible key (exp underflows) and 1 when it is alone, the self rule
    without a pass over the mask."""
    return -torch.finfo(dtype).max / 2


def _self_rule(allowed: Tensor, chunk: int) -> Tensor:
    """A query attends its own position only when it has no other key: itself is slot ``t`` of
    its own chunk, the diagonal of the first ``c`` window columns."""
    width = allowed.shape[-1]
    itself = torch.eye(chunk, width, dtype=torch.bool, device=allowed.device)
    others = allowed & ~itself
    return torch.where(others.any(-1, keepdim=True), others, allowed)


@KINDS.register("lsh")
class LSHAttention(EfficientKind):
    """Reformer's shared-QK LSH attention (which keys each query attends: see the module doc);
    the attention kind ``"lsh"`` (no parameters; the rotations come from ``seed``).

    Args:
        bucket_size: ``c``, the chunk length; the number of buckets follows from it.
        n_rounds: hashing rounds (more rounds, fewer missed neighbours; the paper: 1-8).
        seed: fixes the random rotations (same hashes on every call with this seed).
        attend_across_buckets: also attend keys of other buckets that the query's chunks hold
            (reformer-pytorch's option, default True there; False, the paper's rule: only keys of
            its own bucket). Causal: see the module doc.

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; key-padding
    masks only): ``forward(q, k, v)`` with the shared query/key vectors ``q [B, H, L, d]`` (or
    ``[B, L, d]``) and ``v [B, H, L, d_v]``; ``k`` is not read (the keys are ``q`` normalised,
    so a :class:`~attnkit.MultiHeadAttention` running it leaves its key projection unused; pass
    ``None``). Returns :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> LSHAttention(bucket_size=8, n_rounds=2)(x, None, x).context.shape
        torch.Size([2, 4, 64, 8])
        >>> across = LSHAttention(bucket_size=8, attend_across_buckets=True)
        >>> across(x, None, x, causal=True).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "lsh"
    taxonomy = TAXONOMY

    def __init__(
        self,
        bucket_size: int = 64,
        n_rounds: int = 1,
        seed: int = 0,
        *,
        attend_across_buckets: bool = False,
    ) -> None:
        super().__init__()
        self.bucket_size = check_positive_int("bucket_size", bucket_size)
        self.n_rounds = check_positive_int("n_rounds", n_rounds)
        self.seed = seed
        if not isinstance(attend_across_buckets, bool):
            raise TypeError(
                f"attend_across_buckets must be a bool, got {type(attend_across_buckets).__name__}"
            )
        self.attend_across_buckets = attend_across_buckets

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
        device = call.q.device
        keys = F.normalize(call.q, dim=-1)
        key_mask = call.key_mask(self.name)
        c = min(self.bucket_size, length)
        n_buckets = 1 if length <= c else 2 * math.ceil(math.ceil(length / c) / 2)
        generator = torch.Generator().manual_seed(self.seed)
        across = self.attend_across_buckets
        keep = torch.ones(b, h, length, dtype=torch.bool, device=device)
        if key_mask is not None:
            keep = keep & key_mask[..., 0, :]
        keep = F.pad(keep, (0, 1), value=False)  # position L: an empty slot
        # causal, own bucket: the query of rank r = t·c + a (row a of its chunk) attends ranks
        # r - c … r: columns s <= a of its chunk and s >= a of the previous one (rank (t-1)·c +
        # s), which holds the same bucket when t > 0. One [c, 2c] pattern for every chunk.
        t_in = torch.arange(c, device=device)[:, None]
        s_in = torch.arange(2 * c, device=device)[None, :]
        band = torch.where(s_in < c, s_in <= t_in, s_in - c >= t_in)

        fused = self.n_rounds == 1
        band_bias = torch.zeros(c, 2 * c, dtype=call.q.dtype, device=device)
        band_bias = band_bias.masked_fill(~band, -math.inf)
        band_bias[:, :c].fill_diagonal_(_self_penalty(call.q.dtype))

        outputs, normalisers = [], []
        for _ in range(self.n_rounds):
            rotations = torch.randn(d, max(1, n_buckets // 2), generator=generator).to(device)
            buckets = lsh_buckets(keys, n_buckets, rotations)  # [B, H, L]
            previous: Tensor | None = None
            if n_buckets == 1:  # one chunk: no look-back
                position, n_chunks = _plain_slots(buckets, c), 1
            elif call.causal:
                position, previous = _aligned_slots(buckets, n_buckets, c, across)
                n_chunks = position.shape[-1] // c - 1
            else:  # the first chunk looks back at the last
                position, n_chunks = _plain_slots(buckets, c), math.ceil(length / c)
                previous = torch.arange(-1, n_chunks - 1, device=device) % n_chunks
            own = position[..., : n_chunks * c].view(b, h, n_chunks, c)
            window = _with_previous(position, c, previous)  # [B, H, nc, w] positions
            sq = _rows(call.q, own)
            wk, wv = _rows(keys, window), _rows(call.v, window)
            # each slot's bucket (n_buckets: empty)
            slot_bucket = F.pad(buckets, (0, 1), value=n_buckets).gather(2, position)
            simple = fused and call.causal and not across and key_mask is None
            if simple and previous is not None and previous.dim() == 1:
                # chunks hold one bucket, a query's keys are all real: the band, and the
                # previous chunk only when it holds the same bucket; one broadcast add
                firsts = slot_bucket.view(b, h, n_chunks + 1, c)[..., 0]  # [B, H, nc + 1]
                prev_same = firsts[..., :n_chunks] == firsts.index_select(2, previous)
                back_bias = torch.where(prev_same, 0.0, -math.inf).to(call.q.dtype)
                column_bias = F.pad(back_bias[..., None, None].expand(-1, -1, -1, 1, c), (c, 0))
                out = _fused_chunks(sq, wk, wv, band_bias + column_bias, call.scale)
                lse = None
            else:
                allowed = self._allowed(
                    slot_bucket, keep, position, previous, band, c, n_chunks, call.causal
                )
                if fused:
                    has_key = allowed.any(-1, keepdim=True)
                    bias = torch.where(allowed | ~has_key, 0.0, -math.inf).to(call.q.dtype)
                    bias[..., :c].diagonal(dim1=-2, dim2=-1).add_(_self_penalty(call.q.dtype))
                    out = _fused_chunks(sq, wk, wv, bias, call.scale)
                    out = torch.where(has_key.flatten(2, 3), out, 0.0)
                    lse = None
                else:
                    out, lse = _explicit_chunks(sq, wk, wv, _self_rule(allowed, c), call.scale)
            # back to positions: slot of each position (empty slots are never read)
            slot_of = torch.empty(b, h, length + 1, dtype=torch.long, device=device)
            slot_of.scatter_(
                2, position, torch.arange(position.shape[-1], device=device).expand_as(position)
            )
            slot_of = slot_of[..., :length]
            outputs.append(_rows(out, slot_of))
            if lse is not None:
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

    def _allowed(
        self,
        slot_bucket: Tensor,
        keep: Tensor,
        position: Tensor,
        previous: Tensor | None,
        band: Tensor,
        c: int,
        n_chunks: int,
        causal: bool,
    ) -> Tensor:
        """Which window keys each chunk's queries may attend, ``[B, H, nc, c, w]`` bool, before
        the self rule (module doc)."""
        b, h = slot_bucket.shape[:2]
        key_bucket = torch.where(keep.gather(2, position), slot_bucket, -1)  # -1: masked, empty
        q_bucket = slot_bucket[..., : n_chunks * c].view(b, h, n_chunks, c, 1)
        k_bucket = _with_previous(key_bucket, c, previous).unsqueeze(-2)  # [B, H, nc, 1, w]
        window = band[:, : k_bucket.shape[-1]]
        if not self.attend_across_buckets:
            same = k_bucket == q_bucket
            return same & window if causal else same
        if not causal or previous is None:  # every real key of the window
            valid = (k_bucket >= 0).expand(-1, -1, -1, c, -1)
            return valid & window if causal else valid
        # own bucket: the band; another bucket (a first chunk's look-back): j <= i
        same = k_bucket == q_bucket
        pos_k = _with_previous(position, c, previous).unsqueeze(-2)
        pos_q = position[..., : n_chunks * c].view(b, h, n_chunks, c, 1)
        return (same & window) | ((k_bucket >= 0) & ~same & (pos_k <= pos_q))

    def extra_repr(self) -> str:
        across = ", attend_across_buckets=True" if self.attend_across_buckets else ""
        return (
            f"bucket_size={self.bucket_size}, n_rounds={self.n_rounds}, seed={self.seed}" + across
        )


def lsh_attention(
    q: Tensor,
    k: Tensor | None,
    v: Tensor,
    *,
    bucket_size: int = 64,
    n_rounds: int = 1,
    seed: int = 0,
    attend_across_buckets: bool = False,
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
        attend_across_buckets: also attend keys of other buckets in the query's chunks (see
            :class:`LSHAttention`).
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
    kind = LSHAttention(bucket_size, n_rounds, seed, attend_across_buckets=attend_across_buckets)
    return kind(q, q, v, **options)
