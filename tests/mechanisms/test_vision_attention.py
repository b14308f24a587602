"""Convolutional attention modules against float64 references written from each paper's equations.

Every reference below reads only the modules' parameters (the learned weights the equations name)
and recomputes the output by loops over positions and channels, as the paper writes it — never
calling the module's own helpers. Shapes are non-square (H != W) with B > 1.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

import attnkit as ak
from attnkit.mechanisms.vision import (
    CBAMChannelAttention,
    CBAMSpatialAttention,
    ConvolutionalBlockAttention,
    CrissCrossAttention,
    DualAttention,
    DualChannelAttention,
    DualPositionAttention,
    NonLocalBlock,
    RecurrentCrissCrossAttention,
    SqueezeExcitation,
)

B, C, H, W = 2, 8, 3, 5
TOL = {"rtol": 1e-10, "atol": 1e-12}


def feature_map(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def randomise(module: nn.Module, seed: int = 1) -> nn.Module:
    """Double precision and random values everywhere (zero-initialised scales included), so no
    term of an equation can hide behind a zero."""
    module = module.double()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.5)
    return module


def conv1x1(conv: nn.Conv2d, x: Tensor, b: int, i: int, j: int) -> Tensor:
    """A 1 x 1 convolution at one position: ``W x_ij + bias``, ``[C_out]``."""
    weight = conv.weight.detach()[:, :, 0, 0]
    return weight @ x[b, :, i, j] + conv.bias.detach()


def sigmoid(t: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-t))


def softmax(scores: list[Tensor]) -> list[Tensor]:
    exps = [torch.exp(s) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


# --- Squeeze-and-Excitation (Hu et al., eq. 2-4) ------------------------------------------------


def reference_squeeze_excitation(se: SqueezeExcitation, u: Tensor) -> Tensor:
    w1, b1 = se.reduce.weight.detach(), se.reduce.bias.detach()
    w2, b2 = se.expand.weight.detach(), se.expand.bias.detach()
    out = torch.empty_like(u)
    for b in range(u.shape[0]):
        z = torch.stack([u[b, c].sum() / (u.shape[2] * u.shape[3]) for c in range(u.shape[1])])
        hidden = torch.clamp(w1 @ z + b1, min=0.0)  # δ = ReLU
        s = sigmoid(w2 @ hidden + b2)  # eq. (3)
        for c in range(u.shape[1]):
            out[b, c] = s[c] * u[b, c]  # eq. (4)
    return out


def test_squeeze_excitation_matches_eq_2_to_4() -> None:
    se = randomise(SqueezeExcitation(C, reduction=4))
    assert se.reduce.weight.shape == (C // 4, C)
    u = feature_map(B, C, H, W)
    torch.testing.assert_close(se(u), reference_squeeze_excitation(se, u), **TOL)


# --- CBAM (Woo et al., eq. 1-3) -----------------------------------------------------------------


def reference_cbam_channel(module: CBAMChannelAttention, f: Tensor) -> Tensor:
    w0, b0 = module.mlp[0].weight.detach(), module.mlp[0].bias.detach()
    w1, b1 = module.mlp[2].weight.detach(), module.mlp[2].bias.detach()

    def mlp(v: Tensor) -> Tensor:
        return w1 @ torch.clamp(w0 @ v + b0, min=0.0) + b1

    out = torch.empty_like(f)
    for b in range(f.shape[0]):
        average = torch.stack([f[b, c].mean() for c in range(f.shape[1])])
        maximum = torch.stack([f[b, c].max() for c in range(f.shape[1])])
        m_c = sigmoid(mlp(average) + mlp(maximum))  # eq. (2)
        for c in range(f.shape[1]):
            out[b, c] = m_c[c] * f[b, c]
    return out


def reference_cbam_spatial(module: CBAMSpatialAttention, f: Tensor) -> Tensor:
    kernel, bias = module.conv.weight.detach()[0], module.conv.bias.detach()[0]  # [2, k, k]
    k = kernel.shape[-1]
    height, width = f.shape[2], f.shape[3]
    out = torch.empty_like(f)
    for b in range(f.shape[0]):
        pooled = [f[b].mean(dim=0), f[b].max(dim=0).values]  # [AvgPool; MaxPool] over channels
        for i in range(height):
            for j in range(width):
                logit = bias.clone()
                for p in range(2):
                    for di in range(k):
                        for dj in range(k):
                            y, x = i + di - k // 2, j + dj - k // 2
                            if 0 <= y < height and 0 <= x < width:  # zero padding
                                logit = logit + kernel[p, di, dj] * pooled[p][y, x]
                out[b, :, i, j] = sigmoid(logit) * f[b, :, i, j]  # eq. (3), broadcast over C
    return out


def test_cbam_channel_attention_matches_eq_2() -> None:
    module = randomise(CBAMChannelAttention(C, reduction=2))
    f = feature_map(B, C, H, W)
    torch.testing.assert_close(module(f), reference_cbam_channel(module, f), **TOL)


@pytest.mark.parametrize("kernel_size", [7, 3])
def test_cbam_spatial_attention_matches_eq_3(kernel_size: int) -> None:
    module = randomise(CBAMSpatialAttention(kernel_size))
    f = feature_map(B, C, H, W)
    torch.testing.assert_close(module(f), reference_cbam_spatial(module, f), **TOL)


def test_cbam_applies_channel_then_spatial_attention() -> None:
    module = randomise(ConvolutionalBlockAttention(C, reduction=2))
    f = feature_map(B, C, H, W)
    expected = reference_cbam_spatial(module.spatial, reference_cbam_channel(module.channel, f))
    torch.testing.assert_close(module(f), expected, **TOL)


# --- Non-local block (Wang et al., eq. 1-6) -----------------------------------------------------


def reference_max_pool(t: Tensor) -> Tensor:
    """2 x 2 max pooling, stride 2, by loops (floor for odd sizes)."""
    out = torch.empty(*t.shape[:2], t.shape[2] // 2, t.shape[3] // 2, dtype=t.dtype)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = t[:, :, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2].amax(dim=(2, 3))
    return out


def reference_non_local(block: NonLocalBlock, x: Tensor) -> Tensor:
    batch, _, height, width = x.shape

    def embed(conv: nn.Conv2d | None, pool: bool) -> Tensor:
        out = (
            x.clone()
            if conv is None
            else torch.empty(batch, conv.out_channels, height, width, dtype=x.dtype)
        )
        if conv is not None:
            for b in range(batch):
                for i in range(height):
                    for j in range(width):
                        out[b, :, i, j] = conv1x1(conv, x, b, i, j)
        return reference_max_pool(out) if pool and block.subsample else out

    theta, phi, g = embed(block.theta, False), embed(block.phi, True), embed(block.g, True)
    keys = [(i, j) for i in range(phi.shape[2]) for j in range(phi.shape[3])]
    n = len(keys)
    if block.concat_weight is not None:
        w_f = block.concat_weight.detach()
    z = torch.empty_like(x)
    for b in range(batch):
        for i in range(height):
            for j in range(width):
                if block.pairwise in ("gaussian", "embedded_gaussian"):  # eq. (2), (3)
                    f = [torch.exp(theta[b, :, i, j] @ phi[b, :, p, q]) for p, q in keys]
                    normaliser = sum(f)
                elif block.pairwise == "dot_product":  # eq. (4)
                    f = [theta[b, :, i, j] @ phi[b, :, p, q] for p, q in keys]
                    normaliser = n
                else:  # eq. (5)
                    f = [
                        torch.clamp(w_f @ torch.cat([theta[b, :, i, j], phi[b, :, p, q]]), min=0)
                        for p, q in keys
                    ]
                    normaliser = n
                y = sum(fk * g[b, :, p, q] for fk, (p, q) in zip(f, keys, strict=True))
                y = y / normaliser  # eq. (1)
                w_z = block.output.weight.detach()[:, :, 0, 0]
                wy = w_z @ y + block.output.bias.detach()
                if block.norm is not None:  # eval-mode batch norm with its running statistics
                    bn = block.norm
                    std = torch.sqrt(bn.running_var + bn.eps)
                    wy = bn.weight.detach() * (wy - bn.running_mean) / std + bn.bias.detach()
                z[b, :, i, j] = wy + x[b, :, i, j]  # eq. (6)
    return z


def randomised_non_local(**kwargs) -> NonLocalBlock:
    block = randomise(NonLocalBlock(C, **kwargs))
    if block.norm is not None:
        generator = torch.Generator().manual_seed(5)
        block.norm.running_mean.copy_(torch.randn(C, generator=generator, dtype=torch.float64))
        block.norm.running_var.copy_(torch.rand(C, generator=generator, dtype=torch.float64) + 0.5)
    return block.eval()


@pytest.mark.parametrize(
    "pairwise", ["embedded_gaussian", "gaussian", "dot_product", "concatenation"]
)
@pytest.mark.parametrize("subsample", [False, True], ids=["full", "subsample"])
def test_non_local_block_matches_eq_1_to_6(pairwise: str, subsample: bool) -> None:
    block = randomised_non_local(pairwise=pairwise, subsample=subsample, inter_channels=3)
    x = feature_map(B, C, 4, 5)  # odd W: the 2 x 2 pool floors
    torch.testing.assert_close(block(x), reference_non_local(block, x), **TOL)


def test_non_local_block_without_batch_norm_matches_eq_6() -> None:
    block = randomised_non_local(pairwise="embedded_gaussian", batch_norm=False)
    x = feature_map(B, C, H, W)
    torch.testing.assert_close(block(x), reference_non_local(block, x), **TOL)


def test_non_local_block_starts_as_the_identity() -> None:
    """§3.3: the batch norm's scale starts at zero, so a new block leaves its input unchanged."""
    x = feature_map(B, C, H, W).float()
    for pairwise in ("embedded_gaussian", "gaussian", "dot_product", "concatenation"):
        assert torch.equal(NonLocalBlock(C, pairwise=pairwise)(x), x)


def test_non_local_softmax_forms_go_through_the_engine() -> None:
    block = randomised_non_local(pairwise="embedded_gaussian")
    x = feature_map(B, C, H, W)
    with ak.interpret.record(block) as rec:
        block(x)
    (weights,) = rec.weights[""]
    assert weights.shape == (B, 1, H * W, H * W)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, 1, H * W, dtype=torch.float64))


# --- Criss-cross attention (Huang et al., §3.2-3.3) ---------------------------------------------


def cross(i: int, j: int, height: int, width: int) -> list[tuple[int, int]]:
    """The positions in (i, j)'s row and column, (i, j) once: h + w - 1 of them."""
    return [(i, q) for q in range(width)] + [(p, j) for p in range(height) if p != i]


def reference_criss_cross(module: CrissCrossAttention, x: Tensor) -> tuple[Tensor, Tensor]:
    """Output ``H'`` and the weights over each cross, in ``attention_weights``' layout."""
    batch, _, height, width = x.shape
    weights = torch.zeros(batch, height, width, width + height, dtype=x.dtype)
    out = torch.empty_like(x)
    for b in range(batch):
        q = {(i, j): conv1x1(module.query, x, b, i, j) for i in range(height) for j in range(width)}
        k = {(i, j): conv1x1(module.key, x, b, i, j) for i in range(height) for j in range(width)}
        v = {(i, j): conv1x1(module.value, x, b, i, j) for i in range(height) for j in range(width)}
        for i in range(height):
            for j in range(width):
                omega = cross(i, j, height, width)
                assert len(omega) == height + width - 1
                a = softmax([q[i, j] @ k[p] for p in omega])  # d_{i,u} = Q_u Ω_{i,u}^T
                out[b, :, i, j] = (
                    sum(ai * v[p] for ai, p in zip(a, omega, strict=True)) + x[b, :, i, j]
                )
                for ai, (p, r) in zip(a, omega, strict=True):
                    weights[b, i, j, r if p == i else width + p] = ai
    return out, weights


@pytest.mark.parametrize("shape", [(B, C, H, W), (B, C, W, H), (1, C, 1, 4), (1, C, 4, 1)])
def test_criss_cross_attention_matches_its_equations(shape: tuple[int, ...]) -> None:
    module = randomise(CrissCrossAttention(C, key_channels=3))
    x = feature_map(*shape)
    out, weights = reference_criss_cross(module, x)
    torch.testing.assert_close(module(x), out, **TOL)
    torch.testing.assert_close(module.attention_weights(x), weights, **TOL)


def test_recurrent_criss_cross_attention_shares_one_module() -> None:
    module = randomise(RecurrentCrissCrossAttention(C, key_channels=3, recurrence=2))
    x = feature_map(B, C, H, W)
    once, _ = reference_criss_cross(module.attention, x)
    twice, _ = reference_criss_cross(module.attention, once)
    torch.testing.assert_close(module(x), twice, **TOL)


def test_two_criss_cross_passes_connect_every_position() -> None:
    """CCNet §3.3: one pass reaches the cross only; two passes (R = 2) reach the whole image."""
    height, width, (pi, pj) = 4, 6, (1, 4)
    x = feature_map(1, C, height, width)
    perturbed = x.clone()
    perturbed[0, :, pi, pj] += 1.0
    for recurrence in (1, 2):
        module = randomise(RecurrentCrissCrossAttention(C, 3, recurrence=recurrence), seed=3)
        change = (module(perturbed) - module(x)).abs().amax(dim=1)[0]  # [h, w]
        for i in range(height):
            for j in range(width):
                in_cross = i == pi or j == pj
                if recurrence == 2 or in_cross:
                    assert change[i, j] > 1e-8, (recurrence, i, j)
                else:
                    assert change[i, j] == 0, (recurrence, i, j)


# --- Dual attention (Fu et al., eq. 1-4) --------------------------------------------------------


def reference_position_attention(module: DualPositionAttention, a: Tensor) -> Tensor:
    batch, _, height, width = a.shape
    positions = [(i, j) for i in range(height) for j in range(width)]
    alpha = module.alpha.detach()
    out = torch.empty_like(a)
    for b in range(batch):
        key = {p: conv1x1(module.key, a, b, *p) for p in positions}  # B_i
        query = {p: conv1x1(module.query, a, b, *p) for p in positions}  # C_j
        value = {p: conv1x1(module.value, a, b, *p) for p in positions}  # D_i
        for j in positions:
            s = softmax([key[i] @ query[j] for i in positions])  # s_ji, eq. (1): sum over i
            total = sum(s_ji * value[i] for s_ji, i in zip(s, positions, strict=True))
            out[b, :, j[0], j[1]] = alpha * total + a[b, :, j[0], j[1]]  # eq. (2)
    return out


def reference_channel_attention(module: DualChannelAttention, a: Tensor) -> Tensor:
    batch, channels = a.shape[:2]
    beta = module.beta.detach()
    out = torch.empty_like(a)
    for b in range(batch):
        rows = [a[b, c].reshape(-1) for c in range(channels)]  # A_i ∈ R^N
        for j in range(channels):
            x = softmax([rows[i] @ rows[j] for i in range(channels)])  # x_ji, eq. (3)
            total = sum(x[i] * a[b, i] for i in range(channels))
            out[b, j] = beta * total + a[b, j]  # eq. (4)
    return out


def test_position_attention_matches_eq_1_2() -> None:
    module = randomise(DualPositionAttention(C, key_channels=3))
    a = feature_map(B, C, H, W)
    torch.testing.assert_close(module(a), reference_position_attention(module, a), **TOL)


def test_channel_attention_matches_eq_3_4() -> None:
    module = randomise(DualChannelAttention(C))
    a = feature_map(B, C, H, W) * 0.3  # moderate energies: every x_ji matters
    torch.testing.assert_close(module(a), reference_channel_attention(module, a), **TOL)


def test_channel_attention_weighs_similar_channels_most() -> None:
    """Eq. (3), not the released code's softmax(max - energy): a channel equal to channel 0 gets
    more of channel 0's weight than a channel orthogonal to it."""
    a = torch.zeros(1, 3, 2, 2, dtype=torch.float64)
    a[0, 0] = a[0, 1] = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    a[0, 2] = torch.tensor([[0.0, 1.0], [1.0, 0.0]]) * 3
    module = DualChannelAttention(3).double()
    with torch.no_grad():
        module.beta.fill_(1.0)
    # x_0i ∝ exp(A_i · A_0) = (e^2, e^2, e^0): channel 2 (large, dissimilar) gets the least
    expected = (math.e**2 * (a[0, 0] + a[0, 1]) + a[0, 2]) / (2 * math.e**2 + 1) + a[0, 0]
    torch.testing.assert_close(module(a)[0, 0], expected, **TOL)


def test_dual_attention_sums_both_modules_and_starts_at_the_identities() -> None:
    a = feature_map(B, C, H, W)
    fresh = DualAttention(C).double()
    torch.testing.assert_close(fresh(a), 2 * a, rtol=0, atol=0)  # α = β = 0 (Fu et al. §3.2)
    module = randomise(DualAttention(C, key_channels=3))
    position, channel = module.position, module.channel
    expected = reference_position_attention(position, a) + reference_channel_attention(channel, a)
    torch.testing.assert_close(module(a), expected, **TOL)


# --- Gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: NonLocalBlock(4, 2, pairwise="embedded_gaussian", batch_norm=False),
        lambda: NonLocalBlock(4, 2, pairwise="gaussian", subsample=True, batch_norm=False),
        lambda: NonLocalBlock(4, 2, pairwise="dot_product", batch_norm=False),
        lambda: NonLocalBlock(4, 2, pairwise="concatenation", batch_norm=False),
        lambda: CrissCrossAttention(4, 2),
        lambda: RecurrentCrissCrossAttention(4, 2),
        lambda: DualAttention(4, 2),
        lambda: ConvolutionalBlockAttention(4, 2, kernel_size=3),
        lambda: SqueezeExcitation(4, 2),
    ],
    ids=[
        "non_local_embedded_gaussian",
        "non_local_gaussian_subsample",
        "non_local_dot_product",
        "non_local_concatenation",
        "criss_cross",
        "recurrent_criss_cross",
        "dual",
        "cbam",
        "squeeze_excitation",
    ],
)
def test_gradients_match_finite_differences(build) -> None:
    module = randomise(build(), seed=7)
    x = feature_map(2, 4, 2, 3, seed=8).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,), eps=1e-6, atol=1e-6)
    module(x).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters())


# --- Taxonomy and bad input ---------------------------------------------------------------------

SELF = "Singular | Single-Level | Single-Representational"


@pytest.mark.parametrize(
    ("module", "row"),
    [
        (SqueezeExcitation(C), f"{SELF} | — | — | Single-Dimensional | Self-Attentive | Singular"),
        (
            ConvolutionalBlockAttention(C),
            f"{SELF} | — | — | Single-Dimensional | Self-Attentive | Singular",
        ),
        (
            NonLocalBlock(C),
            f"{SELF} | Multiplicative | Global | Single-Dimensional | Self-Attentive | Singular",
        ),
        (
            NonLocalBlock(C, pairwise="concatenation"),
            f"{SELF} | Additive | — | Single-Dimensional | Self-Attentive | Singular",
        ),
        (
            RecurrentCrissCrossAttention(C),
            f"{SELF} | Multiplicative | Local | Single-Dimensional | Self-Attentive | Multi-Hop",
        ),
        (
            DualAttention(C),
            f"{SELF} | Multiplicative | Global | Single-Dimensional | Self-Attentive | Singular",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else "",
)
def test_taxonomy_rows(module: nn.Module, row: str) -> None:
    assert str(ak.taxonomy.describe(module)) == row


MODULES = [
    SqueezeExcitation(C),
    CBAMChannelAttention(C),
    ConvolutionalBlockAttention(C),
    NonLocalBlock(C),
    CrissCrossAttention(C),
    RecurrentCrissCrossAttention(C),
    DualPositionAttention(C),
    DualChannelAttention(C),
    DualAttention(C),
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: type(m).__name__)
def test_bad_input_names_expected_and_given(module: nn.Module) -> None:
    with pytest.raises(ValueError, match=r"expects x \[B, C=8, h, w\], got \(2, 4, 3, 5\)"):
        module(torch.randn(2, 4, 3, 5))
    with pytest.raises(ValueError, match=r"expects x \[B, C=8, h, w\], got \(2, 8, 15\)"):
        module(torch.randn(2, 8, 15))
    with pytest.raises(TypeError, match="floating-point"):
        module(torch.ones(2, 8, 3, 5, dtype=torch.long))


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match=r"expects x \[B, C, h, w\], got \(8, 3, 5\)"):
        CBAMSpatialAttention()(torch.randn(8, 3, 5))
    with pytest.raises(ValueError, match="h, w >= 2, got h=1, w=5"):
        NonLocalBlock(C, subsample=True)(torch.randn(2, C, 1, 5))
    with pytest.raises(ValueError, match=r"pairwise must be one of .* got 'cosine'"):
        NonLocalBlock(C, pairwise="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        CBAMSpatialAttention(4)
    with pytest.raises(ValueError, match="reduction must be an int >= 1, got 0"):
        SqueezeExcitation(C, reduction=0)
    with pytest.raises(ValueError, match="recurrence must be an int >= 1, got 0"):
        RecurrentCrissCrossAttention(C, recurrence=0)
    with pytest.raises(TypeError, match="expects a tensor"):
        DualAttention(C)([[1.0]])  # type: ignore[arg-type]
