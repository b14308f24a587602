"""Performer (FAVOR+, Choromanski et al. 2021): the estimate approaches exact softmax attention as
the number of random features grows; causal variant; feature redraw."""

from __future__ import annotations

import itertools
import math

import efficient_formulas as ref
import pytest
import torch

import attnkit as ak
from attnkit.efficient import (
    PerformerAttention,
    orthogonal_gaussian,
    performer_attention,
    redraw_performer_features,
)


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


@pytest.mark.parametrize("causal", [False, True])
def test_equals_favor_formula_with_the_same_features(causal: bool) -> None:
    """The chunked, stabilised computation equals FAVOR+ written out in float64 (same ω), with
    key padding: its error is at most 2x that of the same formula run naively in float32."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 50, 8, generator=g) for _ in range(3))
    keep = torch.rand(2, 1, 1, 50, generator=g) < 0.8
    omega = orthogonal_gaussian(40, 8, generator=g)
    out = performer_attention(q, k, v, projection=omega, causal=causal, mask=keep, chunk=16)
    allowed = keep & ref.causal(50, 50) if causal else keep
    args = (allowed, 1 / math.sqrt(8))
    exact = ref.favor_attention(q.double(), k.double(), v.double(), omega.double(), *args)
    naive = ref.favor_attention(q, k, v, omega, *args)
    floor = 1e-6
    error = (out.context.double() - exact).abs().max().item()
    assert error <= 2 * (naive.double() - exact).abs().max().item() + floor


def _heads(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, heads: int) -> torch.Tensor:
    """``x [B, L, E]`` projected and split into heads: ``[B, H, L, E/H]`` (float64)."""
    y = x.double() @ weight.double().T + bias.double()
    return y.view(*x.shape[:2], heads, -1).transpose(1, 2)


def test_multi_head_performer_owns_and_redraws_its_features() -> None:
    """``MultiHeadAttention(attention="performer")`` runs FAVOR+ with features of its own (saved in
    its state_dict); redrawing them changes the features and the output; with every draw the
    output is FAVOR+ with that draw, and close to exact attention (unit-variance heads:
    MSE <= 0.1, the bound the issue sets for L = 128, d = 16, 256 features)."""
    torch.manual_seed(0)
    exact = ak.MultiHeadAttention(64, 4, batch_first=True)
    fast = ak.MultiHeadAttention(64, 4, batch_first=True, attention="performer")
    fast.load_state_dict(exact.state_dict(), strict=False)  # same weights, its own features
    torch.manual_seed(1)
    other = ak.MultiHeadAttention(64, 4, batch_first=True, attention="performer")
    features = fast.state_dict()["_attend.projection"]
    assert features.shape == (256, 16)
    assert not torch.equal(features, other.state_dict()["_attend.projection"])

    # xavier init gives each projected entry variance E·x_var·2/(E + 3E); x_var = 2: unit heads
    x = 2**0.5 * torch.randn(2, 128, 64, generator=torch.Generator().manual_seed(2))
    expected, _ = exact(x, x, x, need_weights=False)
    w, b = fast.in_proj_weight.detach(), fast.in_proj_bias.detach()
    q, k, v = (_heads(x, w[i * 64 : (i + 1) * 64], b[i * 64 : (i + 1) * 64], 4) for i in range(3))
    seen = []
    for draw in range(3):
        out, _ = fast(x, x, x)
        omega = fast.state_dict()["_attend.projection"].double()
        heads = ref.favor_attention(q, k, v, omega, None, 1 / 4)  # [B, H, L, 16]
        merged = heads.transpose(1, 2).reshape(2, 128, 64)
        formula = merged @ fast.out_proj.weight.double().T + fast.out_proj.bias.double()
        assert (out.double() - formula).abs().max().item() <= 1e-4
        assert ((out - expected) ** 2).mean().item() <= 0.1
        seen.append((omega, out.detach()))
        assert redraw_performer_features(fast, torch.Generator().manual_seed(draw)) == 1
    for (omega_a, out_a), (omega_b, out_b) in itertools.pairwise(seen):
        assert not torch.equal(omega_a, omega_b)
        assert (out_a - out_b).abs().max().item() > 1e-3


def test_redraw_needs_a_module() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module, got Tensor"):
        redraw_performer_features(torch.randn(3))


@pytest.mark.parametrize("kernel", ["relu", "softplus"])
@pytest.mark.parametrize("causal", [False, True])
def test_generalized_kernel_equals_the_materialised_formula(causal: bool, kernel: str) -> None:
    """``kernel_fn`` (generalized attention, φ(x) = f(ωx) + ε) equals φ(Q)φ(K)ᵀ normalised,
    materialised in float64, with key padding (a fully padded batch row: zeros), causal and not:
    float32 error at most 2x the naive float32 formula's; float64 gradients agree."""
    fn = torch.nn.ReLU() if kernel == "relu" else torch.nn.functional.softplus
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 40, 8, generator=g) for _ in range(3))
    keep = torch.rand(3, 1, 1, 40, generator=g) < 0.8
    keep[2] = False
    omega = orthogonal_gaussian(32, 8, generator=g)
    options = {"kernel_fn": fn, "kernel_epsilon": 1e-3, "causal": causal, "mask": keep}
    out = performer_attention(q, k, v, projection=omega, chunk=16, **options).context
    allowed = keep & ref.causal(40, 40) if causal else keep
    args = (fn, 1e-3, allowed, 8**-0.5)
    exact = ref.generalized_attention(q.double(), k.double(), v.double(), omega.double(), *args)
    naive = ref.generalized_attention(q, k, v, omega, *args)
    error = (out.double() - exact).abs().max().item()
    assert error <= 2 * (naive.double() - exact).abs().max().item() + 1e-6
    assert torch.equal(out[2], torch.zeros_like(out[2]))

    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out64 = performer_attention(*leaves, projection=omega.double(), chunk=16, **options).context
    formula = ref.generalized_attention(*leaves, omega.double(), *args)
    probe = torch.randn(out64.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out64 * probe).sum(), leaves)
    want = torch.autograd.grad((formula * probe).sum(), leaves)
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max().item() <= 1e-10 * (1 + b.abs().max().item())


@pytest.mark.parametrize("causal", [False, True])
def test_generalized_kind_module_and_performer_pytorch(causal: bool) -> None:
    """``PerformerAttention(kernel_fn=nn.ReLU())`` is the function with its features; and it
    equals performer-pytorch's ``FastAttention(generalized_attention=True, kernel_fn=ReLU())``
    with the same ω (the peer's causal path adds 1e-6 to its running key sums: a small gap)."""
    kind = PerformerAttention(
        8, 32, kernel_fn=torch.nn.ReLU(), generator=torch.Generator().manual_seed(0)
    )
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 64, 8, generator=g) for _ in range(3))
    out = kind(q, k, v, causal=causal).context
    function = performer_attention(
        q, k, v, projection=kind.projection, kernel_fn=torch.relu, causal=causal
    ).context
    assert torch.equal(out, function)
    assert "kernel_epsilon=0.001" in repr(kind)
    package = pytest.importorskip(
        "performer_pytorch", reason="optional: the peer package performer-pytorch is not installed"
    )
    peer = package.FastAttention(
        8, nb_features=32, causal=causal, generalized_attention=True, kernel_fn=torch.nn.ReLU()
    )
    peer.projection_matrix.copy_(kind.projection)
    assert (out - peer(q, k, v)).abs().max().item() <= (1e-4 if causal else 1e-5)


def test_kernel_fn_is_checked() -> None:
    x = torch.randn(1, 1, 4, 8)
    omega = torch.randn(16, 8)
    with pytest.raises(TypeError, match="kernel_fn must be a callable"):
        performer_attention(x, x, x, projection=omega, kernel_fn="relu")
    with pytest.raises(ValueError, match="kernel_epsilon must be >= 0"):
        PerformerAttention(8, kernel_fn=torch.relu, kernel_epsilon=-1.0)
