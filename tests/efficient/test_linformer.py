"""Linformer (Wang et al. 2020): identity projections at n = k are exact attention; a fixed
maximum length; causal refused."""

from __future__ import annotations

import math

import efficient_formulas as ref
import pytest
import torch

from attnkit.efficient import LinformerAttention, linformer_attention


def _inputs(n: int):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, n, 8, generator=g) for _ in range(3))


def test_identity_projection_equals_exact() -> None:
    q, k, v = _inputs(32)
    out = linformer_attention(q, k, v, key_projection=torch.eye(32)).context
    exact = ref.softmax_attention(q.double(), k.double(), v.double(), None, 1 / math.sqrt(8))
    assert (out.double() - exact).abs().max().item() <= 1e-5


def test_projection_formula_eq7() -> None:
    """head = softmax(Q (E K)^T / sqrt(d)) (F V), with the first N columns of E, F."""
    q, k, v = _inputs(20)
    module = LinformerAttention(max_length=50, projected_length=6)
    out = module(q, k, v).context
    e = module.key_projection.detach().double()[:, :20]
    f = module.value_projection.detach().double()[:, :20]
    exact = ref.softmax_attention(
        q.double(), e @ k.double(), f @ v.double(), None, 1 / math.sqrt(8)
    )
    assert (out.double() - exact).abs().max().item() <= 1e-5
    assert module(q, k, v, return_weights=True).weights.shape == (2, 3, 20, 6)


@pytest.mark.parametrize("batch", [1, 2])
def test_head_views_of_one_projection_equal_eq7_with_gradients(batch: int) -> None:
    """k and v as strided head views of one packed projection (as a multi-head module splits
    them, the layout projected in one product over all heads): the context and the gradients of
    the projection and of E, F equal eq. 7 written out in float64 on contiguous heads."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(batch, 24, 3 * 4 * 8, generator=g, dtype=torch.float64, requires_grad=True)
    e = torch.randn(6, 30, generator=g, dtype=torch.float64, requires_grad=True)
    f = torch.randn(6, 30, generator=g, dtype=torch.float64, requires_grad=True)
    q, k, v = (p.unflatten(-1, (4, 8)).transpose(1, 2) for p in x.chunk(3, -1))
    assert k.stride(1) == 8  # the heads side by side
    out = linformer_attention(q, k, v, key_projection=e, value_projection=f).context
    heads = [t.contiguous() for t in (q, k, v)]
    expected = ref.softmax_attention(
        heads[0], e[:, :24] @ heads[1], f[:, :24] @ heads[2], None, 1 / math.sqrt(8)
    )
    assert (out - expected).abs().max().item() <= 1e-12
    probe = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out * probe).sum(), (x, e, f))
    want = torch.autograd.grad((expected * probe).sum(), (x, e, f))
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max().item() <= 1e-10 * (1 + b.abs().max().item())


def test_longer_than_max_length_is_refused() -> None:
    q, k, v = _inputs(40)
    with pytest.raises(ValueError, match="at most 32 keys"):
        LinformerAttention(max_length=32, projected_length=4)(q, k, v)


def test_causal_is_refused() -> None:
    q, k, v = _inputs(8)
    with pytest.raises(ValueError, match="cannot be causal"):
        linformer_attention(q, k, v, key_projection=torch.eye(8), causal=True)


def test_shared_key_value_has_one_projection() -> None:
    module = LinformerAttention(16, 4, share_key_value=True)
    assert [name for name, _ in module.named_parameters()] == ["key_projection"]
