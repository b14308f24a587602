"""Performer (FAVOR+, Choromanski et al. 2021): the estimate approaches exact softmax attention as
the number of random features grows; causal variant; feature redraw."""

from __future__ import annotations

import math

import efficient_formulas as ref
import pytest
import torch

from attnkit.efficient import PerformerAttention, orthogonal_gaussian, performer_attention


def _mean_squared_error(features: int, causal: bool) -> float:
    """Mean over 5 seeds of the output MSE against float64 softmax attention, unit-variance
    inputs, L = 128, d = 16."""
    errors = []
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(2, 4, 128, 16, generator=g) for _ in range(3))
        omega = orthogonal_gaussian(features, 16, generator=g)
        out = performer_attention(q, k, v, projection=omega, causal=causal).context
        allowed = ref.causal(128, 128) if causal else None
        exact = ref.softmax_attention(q.double(), k.double(), v.double(), allowed, 1 / 4)
        errors.append(((out.double() - exact) ** 2).mean().item())
    return sum(errors) / len(errors)


@pytest.mark.parametrize("causal", [False, True])
def test_error_falls_as_features_grow(causal: bool) -> None:
    errors = [_mean_squared_error(m, causal) for m in (16, 64, 256)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] <= 0.1


def test_unbiased_kernel_estimate_converges() -> None:
    """Lemma 1: E[φ(x)·φ(y)] = exp(x·y); with many features the estimate is close."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (0.5 * torch.randn(1, 1, 32, 8, generator=g, dtype=torch.float64) for _ in range(3))
    omega = orthogonal_gaussian(8192, 8, generator=g, dtype=torch.float64)
    out = performer_attention(q, k, v, projection=omega).context
    exact = ref.softmax_attention(q, k, v, None, 1 / math.sqrt(8))
    assert (out - exact).abs().max().item() < 0.02


def test_orthogonal_blocks() -> None:
    omega = orthogonal_gaussian(32, 16, generator=torch.Generator().manual_seed(0))
    assert omega.shape == (32, 16)
    block = omega[:16] / omega[:16].norm(dim=-1, keepdim=True)
    assert torch.allclose(block @ block.T, torch.eye(16), atol=1e-5)


def test_redraw_on_demand_and_by_interval() -> None:
    module = PerformerAttention(
        8, 32, redraw_interval=2, generator=torch.Generator().manual_seed(0)
    )
    first = module.projection.clone()
    module.eval()
    x = torch.randn(1, 1, 10, 8)
    for _ in range(3):
        module(x, x, x)
    assert torch.equal(module.projection, first)  # eval: never redrawn
    module.redraw_features(torch.Generator().manual_seed(1))
    second = module.projection.clone()
    assert not torch.equal(second, first)
    module.train()
    module(x, x, x)
    module(x, x, x)
    assert torch.equal(module.projection, second)
    module(x, x, x)  # the third training call redraws
    assert not torch.equal(module.projection, second)
    assert "projection" in module.state_dict()


def test_projection_shape_is_checked() -> None:
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="d=8"):
        performer_attention(x, x, x, projection=torch.randn(16, 4))


def test_a_masked_key_is_as_if_absent() -> None:
    """However large a masked-out key is, it neither enters the estimate nor its stabiliser."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 20, 8, generator=g) for _ in range(3))
    omega = orthogonal_gaussian(64, 8, generator=g)
    k_big = k.clone()
    k_big[:, :, -1] = 50.0
    keep = torch.ones(1, 1, 1, 20, dtype=torch.bool)
    keep[..., -1] = False
    masked = performer_attention(q, k_big, v, projection=omega, mask=keep).context
    absent = performer_attention(q, k[:, :, :-1], v[:, :, :-1], projection=omega).context
    assert (masked - absent).abs().max().item() <= 1e-5
