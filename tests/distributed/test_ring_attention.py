"""Ring attention on 2 and 4 CPU processes (gloo) against the float64 attention formula.

The reference is eq. (2)-(4) written out over the whole sequence in float64 (softmax of the
scores over admissible keys, times the values); its gradients come from autograd through that
formula. Each rank compares its own positions' outputs and gradients; a worker runs every case
in one process group so the processes start once.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

import attnkit.distributed as akd
from attnkit.core.scores import General, Location
from attnkit.distributed.layout import local_chunks
from attnkit.distributed.ring_attention import plan_segments

TOLERANCE = 1e-5  # max abs error, fp32 ring vs float64 formula


def formula(q, k, v, *, causal, score_matrix=None):
    """Softmax attention over the whole sequence: ``(context [B, H, n, d_v], lse [B, H, n])``."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    if score_matrix is None:  # scaled dot product, eq. (2) with 1/sqrt(d_k)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    else:  # general score k^T W q (Luong et al. 2015), with score_matrix = W^T
        s = q @ score_matrix @ k.transpose(-2, -1)
    n = q.shape[-2]
    if causal:
        above = torch.ones(n, n, dtype=torch.bool).triu(1)
        s = s.masked_fill(above, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


CASES = [  # (length n, causal, layout, query heads, key/value heads, score)
    (16, False, "zigzag", 2, 2, "scaled_dot"),
    (16, True, "zigzag", 2, 2, "scaled_dot"),
    (13, True, "zigzag", 2, 1, "scaled_dot"),  # n not divisible: padded; grouped-query heads
    (11, False, "zigzag", 2, 2, "scaled_dot"),
    (14, True, "contiguous", 2, 2, "scaled_dot"),
    (12, True, "zigzag", 2, 2, "general"),  # a score with parameters
]


def _worker(rank: int, world: int) -> list[list[float]]:
    errors = []
    for case, (n, causal, layout, heads, kv_heads, score_name) in enumerate(CASES):
        g = torch.Generator().manual_seed(case)
        d = 8
        q = torch.randn(2, heads, n, d, generator=g, dtype=torch.float64)
        k = torch.randn(2, kv_heads, n, d, generator=g, dtype=torch.float64)
        v = torch.randn(2, kv_heads, n, d, generator=g, dtype=torch.float64)
        d_out = torch.randn(2, heads, n, d, generator=g, dtype=torch.float64)
        d_lse = torch.randn(2, heads, n, generator=g, dtype=torch.float64)
        score, matrix = "scaled_dot", None
        if score_name == "general":
            score = General(d, d)
            with torch.no_grad():
                score.query_proj.weight.copy_(torch.randn(d, d, generator=g) / d)
            matrix = score.query_proj.weight.detach().double().T.clone().requires_grad_(True)
        full = [t.clone().requires_grad_(True) for t in (q, k, v)]
        # The loss reaches the inputs through the context and through the lse.
        context, lse = formula(*full, causal=causal, score_matrix=matrix)
        ((context * d_out).sum() + (lse * d_lse).sum()).backward()
        expected_out, expected_lse = formula(q, k, v, causal=causal, score_matrix=matrix)

        def mine(t, layout=layout, dim=-2):
            return akd.shard_sequence(
                t.float(), rank=rank, world_size=world, layout=layout, dim=dim
            )

        local = [mine(t).requires_grad_(True) for t in (q, k, v)]
        result = akd.ring_attention(*local, causal=causal, score=score, length=n, layout=layout)
        out, lse = result.context, result.lse
        real = torch.isfinite(lse)  # padding positions: lse = -inf, no keys
        lse_term = (torch.where(real, lse, 0.0) * mine(d_lse, dim=-1)).sum()
        ((out * mine(d_out)).sum() + lse_term).backward()
        case_errors = [(out - mine(expected_out)).abs().max().item()]
        case_errors.append((lse[real] - mine(expected_lse, dim=-1)[real]).abs().max().item())
        assert int(real.sum()) == 2 * heads * sum(  # exactly the padding positions are empty
            int(p < n) for p in akd.local_positions(rank, world, out.shape[-2], layout)
        )
        case_errors += [
            (t.grad - mine(f.grad)).abs().max().item() for t, f in zip(local, full, strict=True)
        ]
        if matrix is not None:  # each rank holds its positions' share of dW: sum over ranks
            akd.all_reduce_gradients(score)
            case_errors.append((score.query_proj.weight.grad - matrix.grad.T).abs().max().item())
        errors.append(case_errors)
    # The whole sequence back from the shards, on every rank.
    x = torch.arange(2 * 13 * 3, dtype=torch.float32).reshape(2, 13, 3)
    shard = akd.shard_sequence(x, rank=rank, world_size=world, dim=1)
    gathered = akd.gather_sequence(shard, length=13, dim=1)
    errors.append([float((gathered - x).abs().max())])
    dist.barrier()
    return errors


@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_attention_matches_the_formula(world_size):
    results = akd.launch_local(_worker, world_size, timeout=30)
    for r in results:
        assert r.error is None, f"rank {r.rank}: {r.error}"
        assert len(r.value) == len(CASES) + 1
        for case, errors in zip([*CASES, "gather"], r.value, strict=True):
            assert max(errors) <= TOLERANCE, (r.rank, case, errors)


def test_one_process_without_torch_distributed_is_plain_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out = akd.ring_attention(
        q.float(), k.float(), v.float(), causal=True, layout="contiguous"
    ).context  # 3-D inputs
    expected = formula(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), causal=True)[0].squeeze(1)
    assert (out - expected).abs().max() <= TOLERANCE


def _causal_pairs(rank, world, n_pad, layout):
    """Admissible (query, key) pairs of a rank's queries, counted one by one."""
    mine = [c.start + i for c in local_chunks(rank, world, n_pad // world, layout)
            for i in range(c.size)]  # fmt: skip
    return sum(q + 1 for q in mine)


@pytest.mark.parametrize("world", [2, 4])
def test_zigzag_balances_causal_work_and_plans_every_admissible_pair(world):
    n = 8 * world
    m = n // world
    zigzag = [_causal_pairs(r, world, n, "zigzag") for r in range(world)]
    contiguous = [_causal_pairs(r, world, n, "contiguous") for r in range(world)]
    assert len(set(zigzag)) == 1  # every rank does the same causal work
    assert max(contiguous) > 2 * min(contiguous)
    for layout, pairs in (("zigzag", zigzag), ("contiguous", contiguous)):
        for r in range(world):
            planned = 0
            for source in range(world):
                segments = plan_segments(
                    local_chunks(r, world, m, layout), local_chunks(source, world, m, layout),
                    causal=True, length=n,
                )  # fmt: skip
                for s in segments:
                    rows, cols = s.q1 - s.q0, s.k1 - s.k0
                    planned += rows * (rows + 1) // 2 if s.causal else rows * cols
            assert planned == pairs[r]  # the plan covers exactly the causal pairs


def test_shard_and_unshard_round_trip_with_padding():
    x = torch.arange(2 * 11 * 3).reshape(2, 11, 3)
    for layout in ("zigzag", "contiguous"):
        shards = [akd.shard_sequence(x, rank=r, world_size=3, dim=1, layout=layout)
                  for r in range(3)]  # fmt: skip
        assert all(s.shape == (2, akd.padded_length(11, 3, layout) // 3, 3) for s in shards)
        assert torch.equal(akd.unshard_sequence(shards, length=11, dim=1, layout=layout), x)
        positions = [akd.local_positions(r, 3, shards[0].shape[1], layout) for r in range(3)]
        for r in range(3):  # a shard's rows are the positions local_positions names
            real = positions[r] < 11
            assert torch.equal(shards[r][:, real], x[:, positions[r][real]])


def test_bad_input_is_refused_with_what_was_expected():
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="zigzag layout splits each rank's 5 positions"):
        akd.ring_attention(q, q, q)
    q = torch.randn(1, 2, 6, 4)
    with pytest.raises(ValueError, match=r"length must be an int in \(0, 6\]"):
        akd.ring_attention(q, q, q, length=7)
    with pytest.raises(ValueError, match="same local positions"):
        akd.ring_attention(q, q[..., :4, :], q[..., :4, :])
    with pytest.raises(ValueError, match="'location'"):
        akd.ring_attention(q, q, q, score=Location(4, 6))
    with pytest.raises(ValueError, match="layout must be one of"):
        akd.ring_attention(q, q, q, layout="striped")
