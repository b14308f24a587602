"""Modern Hopfield networks (Ramsauer et al. 2021) against the paper's equations.

References are written in the paper's column convention, in float64: stored patterns are the
columns of ``X [d, N]``, a state is a column ``ξ [d]``, the update is ``X softmax(β X^T ξ)`` and
the energy ``E(ξ) = -β^{-1} log Σ_i exp(β x_i^T ξ) + ½ ξ^T ξ`` (constants dropped). The Hopfield
layer is ``Z = softmax(β R W_Q W_K^T Y^T) Y W_K W_V`` per head, then ``W_O``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import attnkit as ak
from attnkit.mechanisms.hopfield import Hopfield, HopfieldLayer, HopfieldPooling, hopfield_update

F64 = torch.float64
TOL = 1e-10


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def update_reference(xi: Tensor, patterns: Tensor, beta: float) -> Tensor:
    """``X softmax(β X^T ξ)`` with ``X = patterns.T`` (columns), one state column ``ξ``."""
    big_x = patterns.T  # [d, N]
    return big_x @ torch.softmax(beta * big_x.T @ xi, 0)


def energy(xi: Tensor, patterns: Tensor, beta: float) -> Tensor:
    return -torch.logsumexp(beta * patterns @ xi, 0) / beta + 0.5 * xi @ xi


def test_update_matches_the_update_rule() -> None:
    state, stored = randn(2, 3, 6, seed=1), randn(2, 5, 6, seed=2)
    out = hopfield_update(state, stored, beta=0.7).context
    for b in range(2):
        for m in range(3):
            close(out[b, m], update_reference(state[b, m], stored[b], 0.7))


def test_one_step_retrieves_a_stored_pattern_from_a_noisy_query() -> None:
    """Well-separated patterns (random unit vectors in 64-d) are retrieved in one update from a
    query with noise of a third of the pattern's norm (Ramsauer et al., Theorem 4)."""
    patterns = F.normalize(randn(1, 20, 64, seed=3), dim=-1)
    noise = 0.3 * F.normalize(randn(1, 20, 64, seed=4), dim=-1)
    noisy = patterns + noise
    assert (noisy - patterns).norm(dim=-1).min() > 0.29
    out = hopfield_update(noisy, patterns, beta=32.0, return_weights=True)
    close(out.context, patterns, tol=1e-4)
    assert torch.equal(out.weights.argmax(-1), torch.arange(20).unsqueeze(0))
    # at a tiny β every pattern weighs alike: the update returns their mean (a metastable state)
    mean = hopfield_update(noisy, patterns, beta=1e-9).context
    close(mean, patterns.mean(1, keepdim=True).expand(-1, 20, -1), tol=1e-8)


def test_update_never_increases_the_energy() -> None:
    """The update is the CCCP step on the energy (Ramsauer et al., Theorem 1)."""
    patterns = randn(12, 8, seed=5)
    for seed, beta in [(6, 0.5), (7, 2.0), (8, 8.0)]:
        xi = randn(8, seed=seed)
        for _ in range(3):
            new = hopfield_update(xi[None, None], patterns[None], beta).context[0, 0]
            close(new, update_reference(xi, patterns, beta))
            assert energy(new, patterns, beta) <= energy(xi, patterns, beta) + 1e-12
            xi = new


def test_masked_patterns_are_never_retrieved() -> None:
    patterns = F.normalize(randn(1, 6, 16, seed=9), dim=-1)
    mask = torch.tensor([[True, True, False, True, True, True]])
    out = hopfield_update(patterns[:, 2:3], patterns, 32.0, mask=mask, return_weights=True)
    assert out.weights[0, 0, 2] == 0
    close(out.context[0, 0], update_reference(patterns[0, 2], patterns[0, mask[0]], 32.0))


def reference_layer(layer: Hopfield, r: Tensor, y: Tensor, mask: Tensor | None) -> Tensor:
    """``Z = softmax(β R W_Q W_K^T Y^T) Y W_K W_V`` per head (``update_steps - 1`` retrievals of
    ``Q`` in the key space first), heads concatenated, times ``W_O``."""
    h, dk = layer.num_heads, layer.d_association
    w_q = layer.state_projection.weight.T  # [d_state, H·d_k]
    w_k = layer.stored_projection.weight.T
    w_v = layer.value_projection.weight.T
    out = []
    for b in range(r.shape[0]):
        real = [n for n in range(y.shape[1]) if mask is None or bool(mask[b, n])]
        heads = []
        for j in range(h):
            cols = slice(j * dk, (j + 1) * dk)
            q = r[b] @ w_q[:, cols]
            k = y[b, real] @ w_k[:, cols]
            for _ in range(layer.update_steps - 1):
                q = torch.softmax(layer.beta * q @ k.T, -1) @ k
            heads.append(torch.softmax(layer.beta * q @ k.T, -1) @ k @ w_v)
        out.append(torch.cat(heads, -1) @ layer.out_projection.weight.T)
    return torch.stack(out)


@pytest.mark.parametrize(("heads", "steps"), [(1, 1), (2, 1), (2, 3)])
def test_hopfield_layer_matches_equation(heads: int, steps: int) -> None:
    torch.manual_seed(0)
    layer = Hopfield(6, 5, num_heads=heads, update_steps=steps, beta=0.8).double()
    r, y = randn(2, 3, 6, seed=10), randn(2, 7, 5, seed=11)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    close(layer(r, y, mask), reference_layer(layer, r, y, mask))


def test_pooling_is_order_free_and_lookup_reads_learned_patterns() -> None:
    torch.manual_seed(1)
    pool = HopfieldPooling(6, num_queries=2, num_heads=2).double()
    y = randn(2, 7, 6, seed=12)
    perm = torch.randperm(7)
    close(pool(y[:, perm]), pool(y))
    close(pool(y), reference_layer(pool.hopfield, pool.queries.expand(2, -1, -1), y, None))
    lookup = HopfieldLayer(6, num_stored_patterns=9).double()
    r = randn(2, 3, 6, seed=13)
    stored = lookup.stored_patterns.expand(2, -1, -1)
    close(lookup(r), reference_layer(lookup.hopfield, r, stored, None))


def test_taxonomy_and_recorded_retrieval() -> None:
    single = ak.taxonomy.describe(Hopfield(8)).names()
    assert single["scoring"] == {"Multiplicative"} and single["query_type"] == {"Basic"}
    assert single["query_multiplicity"] == {"Singular"}
    multi = ak.taxonomy.describe(Hopfield(8, num_heads=2, update_steps=2)).names()
    assert multi["query_multiplicity"] == {"Multi-Head", "Multi-Hop"}
    assert ak.taxonomy.describe(HopfieldPooling(8)).names()["query_type"] == {"Self-Attentive"}
    layer = Hopfield(8, num_heads=2)
    with ak.interpret.record(layer) as rec:
        _, weights = layer(torch.randn(1, 3, 8), torch.randn(1, 5, 8), return_weights=True)
    close(rec.weights[""][0], weights, tol=0)


def test_bad_input_names_expected_and_given() -> None:
    with pytest.raises(
        ValueError, match=r"beta \(the inverse temperature\) must be a number > 0, got 0"
    ):
        hopfield_update(torch.randn(1, 2, 4), torch.randn(1, 3, 4), beta=0)
    with pytest.raises(ValueError, match=r"mask \[B, N\] = \(1, 3\), got torch.bool \(1, 4\)"):
        hopfield_update(
            torch.randn(1, 2, 4), torch.randn(1, 3, 4), 1.0, mask=torch.ones(1, 4, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match=r"\[B, n, d=5\], got shape \(1, 3, 4\)"):
        Hopfield(8, 5)(torch.randn(1, 2, 8), torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match=r"d_state \(6\) must be divisible by num_heads \(4\)"):
        Hopfield(6, num_heads=4)
