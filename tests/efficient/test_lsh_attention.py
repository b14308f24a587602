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
