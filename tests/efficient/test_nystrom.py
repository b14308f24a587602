"""Nyströmformer (Xiong et al. 2021): with as many landmarks as keys it is exact attention."""

from __future__ import annotations

import math

import efficient_formulas as ref
import pytest
import torch

from attnkit.efficient import NystromAttention, nystrom_attention
from attnkit.efficient.nystrom import iterative_pinv, segment_means


def _inputs(n: int):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, n, 16, generator=g) for _ in range(3))


def test_as_many_landmarks_as_keys_is_exact() -> None:
    q, k, v = _inputs(32)
    out = nystrom_attention(q, k, v, landmarks=32, pinv_iterations=20).context
    exact = ref.softmax_attention(q.double(), k.double(), v.double(), None, 1 / 4)
    assert (out.double() - exact).abs().max().item() <= 1e-3


def test_fewer_landmarks_approximate() -> None:
    q, k, v = _inputs(64)
    exact = ref.softmax_attention(q.double(), k.double(), v.double(), None, 1 / 4)
    module = NystromAttention(landmarks=16)
    out = module(q, k, v).context
    assert torch.isfinite(out).all()
    assert ((out.double() - exact) ** 2).mean().item() < (exact**2).mean().item()


def test_segment_means_uneven() -> None:
    x = torch.arange(10.0).view(1, 1, 10, 1)
    means, nonempty = segment_means(x, 3)
    # segments floor(j·3/10): {0..3}, {4..6}, {7..9}
    assert means.flatten().tolist() == [1.5, 5.0, 8.0] and nonempty.all()


def test_iterative_pinv_inverts() -> None:
    a = torch.softmax(torch.randn(6, 6, generator=torch.Generator().manual_seed(0)), -1).double()
    assert torch.allclose(iterative_pinv(a, 30), torch.linalg.pinv(a), atol=1e-6)


def test_causal_is_refused() -> None:
    q, k, v = _inputs(8)
    with pytest.raises(ValueError, match="cannot be causal"):
        nystrom_attention(q, k, v, causal=True)
    assert math.isfinite(nystrom_attention(q, k, v, landmarks=4).context.sum().item())
