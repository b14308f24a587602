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

Per round the scores held are ``[B, H, L/c, c, 2c]`` for chunks of ``c = bucket_size``:
O(L·c) memory. ``n_buckets = 2·ceil(L / (2c))`` (the paper: about ``L / c`` buckets), and one
bucket (``bucket_size >= L``) is exact softmax attention over the sequence with the self rule.
Causal: a query attends no later position (positions are kept through the sort).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.call import AttentionOutput
from attnkit.core.scores import Score
from attnkit.efficient._inputs import check_call, check_positive_int

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


def lsh_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    bucket_size: int = 64,
    n_rounds: int = 1,
    seed: int = 0,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    score: str | Score | None = None,
    align: str | Align | None = None,
    dropout: float = 0.0,
    return_weights: bool = False,
) -> AttentionOutput:
    """Reformer's shared-QK LSH attention.

    Args:
        q: the shared query/key vectors ``[B, H, L, d]`` (or ``[B, L, d]``).
        k: must be ``q`` itself (the same tensor object; Reformer shares W_Q and W_K), or ``None``.
        v: ``[B, H, L, d_v]``.
        bucket_size: ``c``, the chunk length; the number of buckets follows from it.
        n_rounds: hashing rounds (more rounds, fewer missed neighbours; the paper: 1-8).
        seed: fixes the random rotations (same hashes on every call with this seed).
        mask: key-padding only: bool (True = may attend) broadcastable to ``[B, H, 1, L]``.
        causal: no query attends a later position.
        scale, score, align, dropout: ``scaled_dot``/``dot``, ``softmax``, 0 only.
        return_weights: ignored (``weights`` is ``None``).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(1, 2, 1024, 16)
        >>> lsh_attention(x, x, x, bucket_size=32, n_rounds=2).context.shape
        torch.Size([1, 2, 1024, 16])
    """
    bucket_size = check_positive_int("bucket_size", bucket_size)
    n_rounds = check_positive_int("n_rounds", n_rounds)
    if k is not None and k is not q:
        raise ValueError(
            "lsh attention shares queries and keys (Reformer's shared-QK): pass the same tensor "
            "as q and k (the keys are q normalised)"
        )
    call = check_call(
        "lsh",
        q,
        q,
        v,
        score=score,
        align=align,
        mask=mask,
        causal=causal,
        scale=scale,
        dropout=dropout,
    )
    b, h, length, d = call.q.shape
    dv = call.v.shape[-1]
    if length == 0:
        return call.output(call.q.new_zeros(b, h, 0, dv))
    keys = F.normalize(call.q, dim=-1)
    keep = call.key_mask("lsh")
    c = min(bucket_size, length)
    n_chunks = math.ceil(length / c)
    n_buckets = 1 if n_chunks == 1 else 2 * math.ceil(n_chunks / 2)
    padded = n_chunks * c
    generator = torch.Generator().manual_seed(seed)
    positions = torch.arange(padded, device=call.q.device)
    real = positions < length  # padding positions sort last and are never attended
    keep_padded = real.expand(b, h, padded)
    if keep is not None:
        keep_padded = keep_padded & F.pad(keep[..., 0, :], (0, padded - length)).expand(b, h, -1)

    pad = (0, 0, 0, padded - length)
    q_p, k_p, v_p = F.pad(call.q, pad), F.pad(keys, pad), F.pad(call.v, pad)
    outputs, normalisers = [], []
    for _ in range(n_rounds):
        rotations = torch.randn(d, max(1, n_buckets // 2), generator=generator).to(call.q.device)
        buckets = lsh_buckets(k_p, n_buckets, rotations)
        buckets = torch.where(real, buckets, torch.full_like(buckets, n_buckets))
        order = (buckets * padded + positions).argsort(-1)  # by bucket, then by position
        undo = order.argsort(-1)

        def sort(x: Tensor, order: Tensor = order) -> Tensor:
            return x.gather(2, order.unsqueeze(-1).expand(*order.shape, x.shape[-1]))

        sq = sort(q_p).view(b, h, n_chunks, c, d)
        sk = _chunks_with_previous(sort(k_p), c)  # [B, H, nc, 2c, d]
        sv = _chunks_with_previous(sort(v_p), c)
        q_pos = order.view(b, h, n_chunks, c)
        k_pos = _chunks_with_previous(order.unsqueeze(-1), c).squeeze(-1)  # [B, H, nc, 2c]
        q_bucket = buckets.gather(2, order).view(b, h, n_chunks, c)
        k_bucket = _chunks_with_previous(buckets.gather(2, order).unsqueeze(-1), c).squeeze(-1)
        k_keep = _chunks_with_previous(keep_padded.gather(2, order).unsqueeze(-1), c).squeeze(-1)

        scores = (sq @ sk.transpose(-1, -2)) * call.scale  # [B, H, nc, c, 2c]
        allowed = (q_bucket.unsqueeze(-1) == k_bucket.unsqueeze(-2)) & k_keep.unsqueeze(-2)
        if call.causal:
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
        weights = e / torch.where(some, total, torch.ones_like(total))
        ones = torch.ones_like(total)
        lse = torch.where(some, top + torch.log(torch.where(some, total, ones)), -math.inf)
        out = (weights @ sv).view(b, h, padded, dv)
        outputs.append(out.gather(2, undo.unsqueeze(-1).expand(b, h, padded, dv)))
        normalisers.append(lse.view(b, h, padded).gather(2, undo))

    if n_rounds == 1:
        context = outputs[0]
    else:
        z = torch.stack(normalisers)  # [R, B, H, L]
        top = z.amax(0, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top)).detach()
        share = torch.exp(z - top)
        total = share.sum(0, keepdim=True)
        share = share / torch.where(total > 0, total, torch.ones_like(total))
        context = (share.unsqueeze(-1) * torch.stack(outputs)).sum(0)
    return call.output(context[:, :, :length])


lsh_attention.taxonomy = TAXONOMY  # type: ignore[attr-defined]


def lsh_kind(q: Tensor, k: Tensor, v: Tensor, **options: object) -> AttentionOutput:
    """:func:`lsh_attention` as an attention kind: the queries are the shared query/keys (a
    :class:`~attnkit.MultiHeadAttention` running it leaves its key projection unused)."""
    return lsh_attention(q, q, v, **options)  # type: ignore[arg-type]


class LSHAttention(nn.Module):
    """Module form of :func:`lsh_attention` (shared-QK: ``forward(qk, v)`` or ``(q, q, v)``)."""

    taxonomy = TAXONOMY

    def __init__(self, bucket_size: int = 64, n_rounds: int = 1, seed: int = 0) -> None:
        super().__init__()
        self.bucket_size = check_positive_int("bucket_size", bucket_size)
        self.n_rounds = check_positive_int("n_rounds", n_rounds)
        self.seed = seed

    def forward(self, q: Tensor, k: Tensor | None, v: Tensor, **options: object) -> AttentionOutput:
        return lsh_attention(
            q,
            q if k is None else k,
            v,
            bucket_size=self.bucket_size,
            n_rounds=self.n_rounds,
            seed=self.seed,
            **options,  # type: ignore[arg-type]
        )

    def extra_repr(self) -> str:
        return f"bucket_size={self.bucket_size}, n_rounds={self.n_rounds}, seed={self.seed}"
