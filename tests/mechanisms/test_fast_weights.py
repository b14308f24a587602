"""Fast weights (Schlag et al. 2021) against their update rules, and their equivalence with causal
linear attention (Katharopoulos et al. 2020, ``attnkit.efficient.linear``).

References are float64 loops over time written from the papers: the sum rule
``W_t = W_{t-1} + v_t φ(k_t)^T``, ``y_t = W_t φ(q_t)`` (optionally ``/ z_t^T φ(q_t)``), the delta
rule ``W_t = W_{t-1} + β_t (v_t − W_{t-1} φ(k_t)) φ(k_t)^T`` with sum-normalised ``φ``, and causal
linear attention ``y_t = Σ_{j<=t} φ(q_t)^T φ(k_j) v_j / Σ_{j<=t} φ(q_t)^T φ(k_j)``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import attnkit as ak
from attnkit.efficient.linear import linear_attention
from attnkit.mechanisms.fast_weights import (
    FastWeightProgrammer,
    delta_update_step,
    sum_update_step,
)

F64 = torch.float64
TOL = 1e-10


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def phi(x: Tensor) -> Tensor:
    return F.elu(x) + 1


def causal_linear_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Katharopoulos et al. eq. (9) as a double sum, one head ``[T, d]``."""
    out = []
    for t in range(q.shape[0]):
        sims = [phi(q[t]) @ phi(k[j]) for j in range(t + 1)]
        out.append(sum(s * v[j] for s, j in zip(sims, range(t + 1), strict=True)) / sum(sims))
    return torch.stack(out)


def sum_rule(q: Tensor, k: Tensor, v: Tensor, normalise: bool) -> Tensor:
    """Schlag et al.: ``W_t = W_{t-1} + v_t φ(k_t)^T``, ``y_t = W_t φ(q_t)``, one head."""
    w = torch.zeros(v.shape[-1], q.shape[-1], dtype=F64)
    z = torch.zeros(q.shape[-1], dtype=F64)
    out = []
    for t in range(q.shape[0]):
        w = w + torch.outer(v[t], phi(k[t]))
        z = z + phi(k[t])
        y = w @ phi(q[t])
        out.append(y / (z @ phi(q[t])) if normalise else y)
    return torch.stack(out)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, rate: Tensor) -> Tensor:
    w = torch.zeros(v.shape[-1], q.shape[-1], dtype=F64)
    out = []
    for t in range(q.shape[0]):
        pk, pq = phi(k[t]) / phi(k[t]).sum(), phi(q[t]) / phi(q[t]).sum()
        w = w + rate[t] * torch.outer(v[t] - w @ pk, pk)
        out.append(w @ pq)
    return torch.stack(out)


@pytest.mark.parametrize("normalise", [True, False])
def test_sum_rule_steps_match_the_update_rule(normalise: bool) -> None:
    q, k, v = randn(2, 3, 6, 4, seed=1), randn(2, 3, 6, 4, seed=2), randn(2, 3, 6, 5, seed=3)
    state, ys = None, []
    for t in range(6):
        y, state = sum_update_step(q[:, :, t], k[:, :, t], v[:, :, t], state, normalise=normalise)
        ys.append(y)
    got = torch.stack(ys, 2)
    for b in range(2):
        for h in range(3):
            close(got[b, h], sum_rule(q[b, h], k[b, h], v[b, h], normalise))


def test_normalised_sum_rule_is_causal_linear_attention() -> None:
    """The fast weight programme and attnkit's chunked causal linear attention agree, and both
    match the double sum of Katharopoulos et al. eq. (9)."""
    q, k, v = randn(2, 2, 11, 4, seed=4), randn(2, 2, 11, 4, seed=5), randn(2, 2, 11, 3, seed=6)
    state, ys = None, []
    for t in range(11):
        y, state = sum_update_step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        ys.append(y)
    programmed = torch.stack(ys, 2)
    linear = linear_attention(q, k, v, causal=True, chunk=4).context
    close(programmed, linear)
    close(linear[1, 0], causal_linear_attention(q[1, 0], k[1, 0], v[1, 0]))
    # the fast weights are the transposed state of linear attention: W_T = S_T^T
    s_t = sum(torch.outer(phi(k[0, 0, j]), v[0, 0, j]) for j in range(11))
    close(state.weights[0, 0], s_t.T)


def test_delta_rule_matches_the_update_rule_and_overwrites() -> None:
    q, k, v = randn(1, 2, 7, 4, seed=7), randn(1, 2, 7, 4, seed=8), randn(1, 2, 7, 3, seed=9)
    rate = torch.sigmoid(randn(1, 2, 7, seed=10))
    state, ys = None, []
    for t in range(7):
        y, state = delta_update_step(q[:, :, t], k[:, :, t], v[:, :, t], rate[:, :, t], state)
        ys.append(y)
    got = torch.stack(ys, 2)
    for h in range(2):
        close(got[0, h], delta_rule(q[0, h], k[0, h], v[0, h], rate[0, h]))
    # Overwriting: each write of v under k with rate 1 shrinks the gap v − W φ(k) by the factor
    # 1 − |φ(k)|² (the read before the write is subtracted); the sum rule instead adds v again.
    key, value, one = k[:, :, 0], v[:, :, 0], torch.ones(1, 2, dtype=F64)
    pk = phi(key) / phi(key).sum(-1, keepdim=True)
    shrink = 1 - (pk * pk).sum(-1, keepdim=True)
    state = None
    gap = value
    for _ in range(3):
        _, state = delta_update_step(key, key, value, one, state)
        read = (state.weights @ pk.unsqueeze(-1)).squeeze(-1)
        close(value - read, gap * shrink)
        gap = value - read
    _, once = sum_update_step(key, key, value)
    _, twice = sum_update_step(key, key, value, once)
    close(twice.weights, 2 * once.weights)


@pytest.mark.parametrize("rule", ["sum", "delta"])
def test_module_forward_equals_its_steps_and_is_causal(rule: str) -> None:
    torch.manual_seed(0)
    fwp = FastWeightProgrammer(8, num_heads=2, update_rule=rule).double()
    x = randn(2, 9, 8, seed=11)
    out = fwp(x)
    state, steps = None, []
    for t in range(9):
        y, state = fwp.step(x[:, t], state)
        steps.append(y)
    close(out, torch.stack(steps, 1))
    changed = x.clone()
    changed[:, 5:] = randn(2, 4, 8, seed=12)
    close(fwp(changed)[:, :5], out[:, :5])  # output t sees inputs <= t only


def test_sum_module_matches_written_out_programme() -> None:
    torch.manual_seed(1)
    fwp = FastWeightProgrammer(6, num_heads=2).double()
    x = randn(1, 5, 6, seed=13)
    w = fwp.projection.weight.T.unflatten(1, (3, 2, 3))  # [d_model, (q, k, v), H, d_k]
    heads = [
        sum_rule(x[0] @ w[:, 0, h], x[0] @ w[:, 1, h], x[0] @ w[:, 2, h], normalise=True)
        for h in range(2)
    ]
    close(fwp(x)[0], torch.cat(heads, -1) @ fwp.out_projection.weight.T)


def test_taxonomy_and_bad_input() -> None:
    row = ak.taxonomy.describe(FastWeightProgrammer(8, num_heads=2)).names()
    assert row["scoring"] == {"Multiplicative"} and row["query_multiplicity"] == {"Multi-Head"}
    with pytest.raises(ValueError, match="update_rule must be 'sum' or 'delta', got 'max'"):
        FastWeightProgrammer(8, update_rule="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"x \[B, T, 8\], got \(2, 8\)"):
        FastWeightProgrammer(8)(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"x \[B, 8\], got \(2, 3, 8\)"):
        FastWeightProgrammer(8).step(torch.randn(2, 3, 8))
