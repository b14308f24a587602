"""Set Transformer blocks (Lee et al. 2019) against the paper's equations and set symmetries.

The reference is eq. (6-7) written out in float64 from plain tensors read off the modules:
``Multihead(Q, K, V) = concat(softmax(Q_j K_j^T / sqrt(d_h)) V_j) W_O`` per head over the real
elements, ``H = LayerNorm(X + Multihead(X, Y, Y))``, ``MAB = LayerNorm(H + rFF(H))``; SAB, ISAB
and PMA are then eq. (8-11) composed from that reference. The symmetry tests permute the set
(and its padding mask) at random and check equivariance (SAB, ISAB) or invariance (PMA).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import attnkit as ak
from attnkit.mechanisms.sets import (
    MAB,
    PMA,
    InducedSetAttentionBlock,
    MultiheadAttentionBlock,
    PoolingByMultiheadAttention,
    SetAttentionBlock,
)

F64 = torch.float64
TOL = 1e-10
# example 0 is full, example 1 has 4 real elements of 7
MASK = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def linear(x: Tensor, layer: torch.nn.Module) -> Tensor:
    return x @ layer.weight.T + layer.bias


def layer_norm(x: Tensor, norm: torch.nn.Module) -> Tensor:
    if isinstance(norm, torch.nn.Identity):
        return x
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def reference_mab(
    mab: MultiheadAttentionBlock, x: Tensor, y: Tensor, mask: Tensor | None
) -> Tensor:
    """Lee et al. eq. (6-7), one example, one head and one query at a time."""
    mha = mab.attention
    if isinstance(mab.query_projection, torch.nn.Linear):
        x = linear(x, mab.query_projection)
    d, h = mha.embed_dim, mha.num_heads
    if mha.in_proj_weight is not None:
        w_q, w_k, w_v = mha.in_proj_weight.split(d)
    else:
        w_q, w_k, w_v = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    b_q, b_k, b_v = mha.in_proj_bias.split(d)
    dh = d // h
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        q, k, v = x[b] @ w_q.T + b_q, y[b] @ w_k.T + b_k, y[b] @ w_v.T + b_v
        real = [j for j in range(y.shape[1]) if mask is None or bool(mask[b, j])]
        heads = []
        for j in range(h):
            part = slice(j * dh, (j + 1) * dh)
            rows = []
            for i in range(x.shape[1]):
                if not real:
                    rows.append(torch.zeros(dh, dtype=x.dtype))
                    continue
                scores = torch.stack([q[i, part] @ k[n, part] / math.sqrt(dh) for n in real])
                weights = torch.softmax(scores, 0)
                rows.append(sum(w * v[n, part] for w, n in zip(weights, real, strict=True)))
            heads.append(torch.stack(rows))
        attended = linear(torch.cat(heads, -1), mha.out_proj)
        hidden = layer_norm(x[b] + attended, mab.norm_attention)  # eq. (7)
        ff = mab.feedforward.net
        rff = linear(torch.relu(linear(hidden, ff[0])), ff[2])
        out[b] = layer_norm(hidden + rff, mab.norm_feedforward)  # eq. (6)
    return out


def randn(*shape: int, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64)


def permute(x: Tensor, mask: Tensor, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """A different random permutation of each example's elements (mask permuted alike)."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.stack([torch.randperm(x.shape[1], generator=g) for _ in range(x.shape[0])])
    gather = perm.unsqueeze(-1).expand(-1, -1, x.shape[-1])
    return x.gather(1, gather), mask.gather(1, perm), perm


@pytest.mark.parametrize("layer_norm_on", [True, False])
def test_mab_matches_equations_with_other_sizes_and_padding(layer_norm_on: bool) -> None:
    torch.manual_seed(0)
    mab = MAB(8, 2, d_query=5, d_key=3, d_feedforward=6, layer_norm=layer_norm_on).double()
    x, y = randn(2, 4, 5, seed=1), randn(2, 7, 3, seed=2)
    close(mab(x, y, MASK), reference_mab(mab, x, y, MASK))


def test_sab_matches_equations_and_is_equivariant_with_padding() -> None:
    torch.manual_seed(1)
    sab = SetAttentionBlock(8, 4, d_input=3).double()
    x = randn(2, 7, 3, seed=3)
    out = sab(x, MASK)
    close(out, reference_mab(sab.block, x, x, MASK))  # eq. (8)
    for seed in range(3):
        px, pmask, perm = permute(x, MASK, seed)
        expected = out.gather(1, perm.unsqueeze(-1).expand(-1, -1, out.shape[-1]))
        close(sab(px, pmask), expected)


def test_isab_matches_equations_and_is_equivariant_with_padding() -> None:
    torch.manual_seed(2)
    isab = InducedSetAttentionBlock(8, 2, num_inducing_points=3, d_input=5).double()
    x = randn(2, 7, 5, seed=4)
    out = isab(x, MASK)
    inducing = isab.inducing_points.expand(2, -1, -1)
    summaries = reference_mab(isab.summarise, inducing, x, MASK)  # eq. (10)
    close(out, reference_mab(isab.broadcast, x, summaries, None))  # eq. (9)
    for seed in range(3):
        px, pmask, perm = permute(x, MASK, seed)
        expected = out.gather(1, perm.unsqueeze(-1).expand(-1, -1, out.shape[-1]))
        close(isab(px, pmask), expected)


def test_pma_matches_equations_and_is_invariant_with_padding() -> None:
    torch.manual_seed(3)
    pma = PoolingByMultiheadAttention(8, 2, num_seeds=2).double()
    z = randn(2, 7, 8, seed=5)
    out = pma(z, MASK)
    ff = pma.feedforward.net
    rff = linear(torch.relu(linear(z, ff[0])), ff[2])
    close(out, reference_mab(pma.block, pma.seeds.expand(2, -1, -1), rff, MASK))  # eq. (11)
    assert out.shape == (2, 2, 8)
    for seed in range(3):
        pz, pmask, _ = permute(z, MASK, seed)
        close(pma(pz, pmask), out)


@pytest.mark.parametrize(
    "block",
    [
        lambda: SetAttentionBlock(8, 2),
        lambda: InducedSetAttentionBlock(8, 2, num_inducing_points=2),
        lambda: PoolingByMultiheadAttention(8, 2),
    ],
    ids=["SAB", "ISAB", "PMA"],
)
def test_padding_changes_nothing_real(block) -> None:
    """A padded set gives, at its real elements, what the unpadded set gives; padded content
    (even huge values) is never read."""
    torch.manual_seed(4)
    module = block().double()
    x = randn(2, 7, 8, seed=6)
    noisy = x.clone()
    noisy[1, 4:] = 1e6 * randn(3, 8, seed=7)
    out, out_noisy = module(x, MASK), module(noisy, MASK)
    alone = module(x[1:, :4])
    rows = slice(None) if isinstance(module, PoolingByMultiheadAttention) else slice(0, 4)
    close(out_noisy[1, rows], out[1, rows])
    close(out[1, rows], alone[0])


def test_any_score_and_alignment_and_recorded_weights() -> None:
    torch.manual_seed(5)
    sab = SetAttentionBlock(8, 2, score="additive", align="sparsemax").double()
    x = randn(2, 7, 8, seed=8)
    px, pmask, perm = permute(x, MASK, 0)
    out = sab(x, MASK)
    expected = out.gather(1, perm.unsqueeze(-1).expand(-1, -1, 8))
    close(sab(px, pmask), expected)
    with ak.interpret.record(sab) as rec:
        sab(x, MASK)
    (weights,) = rec.weights["block.attention"]
    assert weights.shape == (2, 2, 7, 7)
    assert torch.all(weights[1, :, :, 4:] == 0)  # padded elements get no weight


def test_taxonomy_rows() -> None:
    row = ak.taxonomy.describe(SetAttentionBlock(8, 2)).names()
    assert row["query_type"] == {"Self-Attentive"}
    assert row["query_multiplicity"] == {"Multi-Head"}
    assert row["scoring"] == {"Scaled-Multiplicative"}
    pma_row = ak.taxonomy.describe(PMA(8, 2, score="additive")).names()
    assert pma_row["scoring"] == {"Additive"}


def test_bad_input_names_expected_and_given() -> None:
    sab = SetAttentionBlock(8, 2)
    with pytest.raises(ValueError, match=r"\[B, n, d=8\], got shape \(2, 7, 5\)"):
        sab(torch.randn(2, 7, 5))
    with pytest.raises(ValueError, match=r"mask \[B, n\] = \(2, 7\), got \(2, 6\)"):
        sab(torch.randn(2, 7, 8), torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool mask"):
        sab(torch.randn(2, 7, 8), torch.ones(2, 7))
    with pytest.raises(ValueError, match="num_inducing_points must be a positive int, got 0"):
        InducedSetAttentionBlock(8, 2, num_inducing_points=0)
    with pytest.raises(ValueError, match="one batch size"):
        MAB(8, 2)(torch.randn(2, 3, 8), torch.randn(3, 4, 8))


def test_gradients_flow_to_inducing_points_and_seeds() -> None:
    torch.manual_seed(6)
    isab = InducedSetAttentionBlock(8, 2, num_inducing_points=3)
    pma = PoolingByMultiheadAttention(8, 2)
    out = pma(isab(torch.randn(2, 5, 8)))
    F.mse_loss(out, torch.zeros_like(out)).backward()
    assert isab.inducing_points.grad is not None and isab.inducing_points.grad.abs().sum() > 0
    assert pma.seeds.grad is not None and pma.seeds.grad.abs().sum() > 0
