"""Reformer's LSH attention (Kitaev et al. 2020): with a single bucket it is exact shared-QK
attention (keys = normalised queries, no attending to oneself unless alone), causal too."""

from __future__ import annotations

import math

import efficient_formulas as ref
import pytest
import torch
import torch.nn.functional as F

from attnkit.efficient import LSHAttention, lsh_attention
from attnkit.efficient.lsh import lsh_buckets


def _shared_qk_reference(q, v, allowed):
    """Reformer §2: keys are the normalised queries; self excluded unless it is the only key."""
    q, v = q.double(), v.double()
    n = q.shape[-2]
    itself = torch.eye(n, dtype=torch.bool)
    others = allowed & ~itself
    allowed = torch.where(others.any(-1, keepdim=True), others, allowed)
    return ref.softmax_attention(q, F.normalize(q, dim=-1), v, allowed, 1 / math.sqrt(q.shape[-1]))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 2, 17, 64])
def test_single_bucket_is_exact(n: int, causal: bool) -> None:
    g = torch.Generator().manual_seed(0)
    q, v = torch.randn(2, 3, n, 8, generator=g), torch.randn(2, 3, n, 5, generator=g)
    keep = torch.rand(2, 1, 1, n, generator=g) < 0.7
    out = lsh_attention(q, q, v, bucket_size=64, causal=causal, mask=keep).context
    allowed = torch.ones(n, n, dtype=torch.bool) & keep
    if causal:
        allowed = allowed & ref.causal(n, n)
    assert (out.double() - _shared_qk_reference(q, v, allowed)).abs().max().item() <= 1e-5


def test_hash_is_angular() -> None:
    """Scaling a vector does not change its bucket; opposite vectors differ."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 20, 8, generator=g)
    rotations = torch.randn(8, 4, generator=g)
    assert torch.equal(lsh_buckets(x, 8, rotations), lsh_buckets(3 * x, 8, rotations))
    assert not torch.equal(lsh_buckets(x, 8, rotations), lsh_buckets(-x, 8, rotations))


def test_multi_round_attends_only_admissible_keys() -> None:
    """Several buckets and rounds: every output is a convex mix of values of earlier positions."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 256, 16, generator=g, requires_grad=True)
    v = torch.randn(1, 2, 256, 16, generator=g)
    out = LSHAttention(bucket_size=16, n_rounds=4)(q, None, v, causal=True).context
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert torch.equal(out[:, :, 0], v[:, :, 0])  # the first position has only itself
    assert (out.abs() <= v.abs().amax(-2, keepdim=True) + 1e-5).all()


def test_separate_keys_are_refused() -> None:
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="shared-QK"):
        lsh_attention(x, x.clone(), x)


def _reference_lsh(q, v, keep, bucket_size, n_rounds, seed, causal, across=False):
    """Reformer's LSH attention one query at a time, in float64 (Kitaev et al. 2020 §2).

    Per round: angular hash ``argmax([xR; -xR])`` of the normalised vectors with the rotations
    drawn from ``seed`` (``randn(d, n_buckets/2)`` per round); candidate keys of query ``i``:
    non-causal, the keys of its chunk and the previous chunk (first chunk: the last) of the
    positions sorted by (bucket, position), of its bucket unless ``across``; causal, the keys
    ``j <= i`` of its bucket whose rank in the bucket is at least ``rank_i - c``, and with
    ``across``, when ``rank_i < c``, the keys ``j <= i`` of bucket ``b - 1`` (cyclic) in its
    chunk of ``c`` (by rank) that held the latest of its ``R`` positions before bucket ``b``'s
    first position (none if ``R = 0``). Self only if it is the only admissible candidate. Rounds
    combined by ``softmax_r(log Σ exp)``.
    """
    _, length, d = q.shape
    qd, vd = q.double(), v.double()
    kd = qd / qd.norm(dim=-1, keepdim=True)
    c = min(bucket_size, length)
    n_chunks = -(-length // c)
    n_buckets = 1 if n_chunks == 1 else 2 * (-(-n_chunks // 2))
    g = torch.Generator().manual_seed(seed)
    rotations = [
        torch.randn(d, max(1, n_buckets // 2), generator=g).double() for _ in range(n_rounds)
    ]
    out = torch.zeros(q.shape[0], length, v.shape[-1], dtype=torch.float64)
    for batch in range(q.shape[0]):
        rounds = []  # per round: (context [L, dv], log-normaliser [L])
        for rotation in rotations:  # one per round, shared by the batch
            rotated = kd[batch] @ rotation
            both = torch.cat([rotated, -rotated], -1)
            if n_buckets == 1:
                bucket = [0] * length
            else:
                top2 = both.topk(2, -1).values
                assert (top2[:, 0] - top2[:, 1]).min() > 1e-5  # no near-tie float32 could flip
                bucket = both.argmax(-1).tolist()
            ordered = sorted(range(length), key=lambda i: (bucket[i], i))
            chunk_of = {p: s // c for s, p in enumerate(ordered)}
            rank = {i: sum(bucket[j] == bucket[i] for j in range(i)) for i in range(length)}
            first_of = {}
            for i in range(length):
                first_of.setdefault(bucket[i], i)
            context = torch.zeros(length, v.shape[-1], dtype=torch.float64)
            lse = torch.full((length,), -math.inf, dtype=torch.float64)
            for i in range(length):
                if causal:
                    low = rank[i] - c
                    cand = [j for j in range(i + 1) if bucket[j] == bucket[i] and rank[j] >= low]
                    if across and n_buckets > 1 and rank[i] < c:
                        before = (bucket[i] - 1) % n_buckets
                        start = first_of[bucket[i]]
                        count = sum(bucket[j] == before for j in range(start))
                        cand += [
                            j
                            for j in range(i + 1)
                            if count > 0
                            and bucket[j] == before
                            and rank[j] // c == (count - 1) // c
                        ]
                else:
                    near = {chunk_of[i], (chunk_of[i] - 1) % n_chunks}
                    cand = [
                        j
                        for j in range(length)
                        if chunk_of[j] in near and (across or bucket[j] == bucket[i])
                    ]
                cand = [j for j in cand if keep[batch, j]]
                if [j for j in cand if j != i]:
                    cand = [j for j in cand if j != i]
                if not cand:
                    continue
                e = torch.stack([qd[batch, i] @ kd[batch, j] for j in cand]) / math.sqrt(d)
                lse[i] = torch.logsumexp(e, 0)
                context[i] = torch.softmax(e, 0) @ vd[batch, cand]
            rounds.append((context, lse))
        z = torch.stack([r[1] for r in rounds])  # [R, L]
        share = torch.softmax(z, 0).nan_to_num(nan=0.0)  # a query with no key in any round
        out[batch] = (share.unsqueeze(-1) * torch.stack([r[0] for r in rounds])).sum(0)
    return out


@pytest.mark.parametrize("across", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("length", "bucket_size", "n_rounds"),
    [(45, 8, 3), (64, 16, 2), (7, 2, 2), (40, 4, 1), (96, 8, 1)],
)
def test_equals_per_query_reference(
    length: int, bucket_size: int, n_rounds: int, causal: bool, across: bool
) -> None:
    """Several buckets and rounds (one round: the fused path), with key padding, with and without
    ``attend_across_buckets``: the chunked computation equals the loop, and so do the gradients
    (float64 inputs)."""
    g = torch.Generator().manual_seed(3)
    q, v = torch.randn(2, length, 8, generator=g), torch.randn(2, length, 5, generator=g)
    keep = torch.rand(2, length, generator=g) < 0.85
    out = lsh_attention(
        q,
        q,
        v,
        bucket_size=bucket_size,
        n_rounds=n_rounds,
        seed=7,
        causal=causal,
        mask=keep[:, None, :],
        attend_across_buckets=across,
    ).context
    expected = _reference_lsh(q, v, keep, bucket_size, n_rounds, 7, causal, across)
    assert (out.double() - expected).abs().max().item() <= 1e-5
    # gradients, float64 (the hashes of q.double() are those of q: the reference checks ties)
    qd, vd = q.double().requires_grad_(), v.double().requires_grad_()
    got = lsh_attention(
        qd, qd, vd, bucket_size=bucket_size, n_rounds=n_rounds, seed=7, causal=causal,
        mask=keep[:, None, :], attend_across_buckets=across,
    ).context  # fmt: skip
    probe = torch.randn(got.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((got * probe).sum(), (qd, vd))
    qr, vr = q.double().requires_grad_(), v.double().requires_grad_()
    want = _reference_lsh(qr, vr, keep, bucket_size, n_rounds, 7, causal, across)
    expected_grads = torch.autograd.grad((want * probe).sum(), (qr, vr))
    for a, b in zip(grads, expected_grads, strict=True):
        assert (a - b).abs().max().item() <= 1e-9


@pytest.mark.parametrize(("n_rounds", "across"), [(2, False), (1, False), (1, True), (2, True)])
def test_causal_with_buckets_does_not_leak_the_future(n_rounds: int, across: bool) -> None:
    """The audit's case (L = 256, chunks of 16, 2 rounds, future = positions >= 128): with the
    plain sort, a later position could move an earlier one's chunk boundary (past outputs moved
    by up to 0.1); now past outputs are bitwise equal and future gradients exactly zero. Also
    with one round (the fused kernel) and with ``attend_across_buckets``."""
    options = {"n_rounds": n_rounds, "attend_across_buckets": across}
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 256, 16, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 256, 16, generator=g, requires_grad=True)
    out = lsh_attention(q, q, v, bucket_size=16, causal=True, **options).context
    out[:, :, :128].sum().backward()
    assert torch.equal(q.grad[:, :, 128:], torch.zeros_like(q.grad[:, :, 128:]))
    assert torch.equal(v.grad[:, :, 128:], torch.zeros_like(v.grad[:, :, 128:]))
    for seed in range(3):
        new = torch.Generator().manual_seed(100 + seed)
        q2, v2 = q.detach().clone(), v.detach().clone()
        q2[:, :, 128:] = 10 * torch.randn(2, 2, 128, 16, generator=new)
        v2[:, :, 128:] = torch.randn(2, 2, 128, 16, generator=new)
        again = lsh_attention(q2, q2, v2, bucket_size=16, causal=True, **options).context
        assert torch.equal(again[:, :, :128], out[:, :, :128].detach())


@pytest.mark.parametrize("across", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "bucket_size"), [(96, 8), (45, 4), (64, 16)])
def test_one_round_without_mask_equals_reference(
    length: int, bucket_size: int, causal: bool, across: bool
) -> None:
    """No key mask, one round: the fused paths (causal own-bucket: the band and a per-chunk
    look-back bias, no mask pass) equal the per-query loop, gradients included."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, length, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, length, 5, generator=g, dtype=torch.float64, requires_grad=True)
    options = {"bucket_size": bucket_size, "seed": 3, "causal": causal}
    out = lsh_attention(q, q, v, attend_across_buckets=across, **options).context
    keep = torch.ones(2, length, dtype=torch.bool)
    expected = _reference_lsh(q, v, keep, bucket_size, 1, 3, causal, across)
    assert (out - expected).abs().max().item() <= 1e-10
    probe = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out * probe).sum(), (q, v))
    want = torch.autograd.grad((expected * probe).sum(), (q, v))
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max().item() <= 1e-9
