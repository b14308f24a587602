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


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("size", [5, 33])
def test_value_residual_equals_the_formula(size: int, masked: bool) -> None:
    """As many landmarks as keys (exact attention) plus the depthwise-convolution residual on the
    values, written tap by tap in float64 (masked keys' values read as zeros); the gradients of
    q, k, v and the convolution weight agree too."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 24, 8, generator=g, dtype=torch.float64) for _ in range(3))
    weight = torch.randn(3, 1, size, 1, generator=g, dtype=torch.float64) / size
    keep = torch.rand(2, 24, generator=g) < 0.75 if masked else None
    leaves = [t.requires_grad_() for t in (q, k, v, weight)]
    out = nystrom_attention(
        q, k, v, landmarks=24, pinv_iterations=30, residual_weight=weight,
        mask=None if keep is None else keep[:, None, None, :],
    ).context  # fmt: skip
    allowed = None if keep is None else keep[:, None, None, :]
    expected = ref.softmax_attention(q, k, v, allowed, 8**-0.5)
    expected = expected + ref.value_conv_residual(v, weight, keep)
    assert (out - expected).abs().max().item() <= 1e-7
    probe = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out * probe).sum(), leaves)
    want = torch.autograd.grad((expected * probe).sum(), leaves)
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max().item() <= 1e-6 * (1 + b.abs().max().item())


def test_value_residual_matches_nystrom_attention_package() -> None:
    """The package's ``NystromAttention`` (residual on, its default) with its weights copied
    around ``nystrom_attention(residual_weight=res_conv.weight)``: one head, so its pseudo-inverse
    starts from the same scaling as attnkit's (the package scales by the maximum over all heads);
    length a multiple of the landmarks (the package pads in front otherwise)."""
    package = pytest.importorskip(
        "nystrom_attention", reason="optional: the peer package nystrom-attention is not installed"
    )
    torch.manual_seed(0)
    peer = package.NystromAttention(dim=16, dim_head=16, heads=1, num_landmarks=32).double()
    x = torch.randn(1, 256, 16, dtype=torch.float64)
    q, k, v = (t.unsqueeze(1) for t in peer.to_qkv(x).chunk(3, -1))
    out = nystrom_attention(q, k, v, landmarks=32, residual_weight=peer.res_conv.weight).context
    ours = peer.to_out(out.squeeze(1))
    assert (ours - peer(x)).abs().max().item() <= 1e-10


def test_residual_kind_owns_a_convolution() -> None:
    """``NystromAttention(residual=True)`` in a module: a ``res_conv`` parameter built for the
    module's heads (the package's state_dict key), used as the function's ``residual_weight``."""
    import attnkit as ak

    mha = ak.MultiHeadAttention(
        32, 4, batch_first=True, attention=NystromAttention(8, residual=True)
    )
    weight = mha.state_dict()["_attend.res_conv.weight"]
    assert weight.shape == (4, 1, 33, 1)
    kind = NystromAttention(8, residual=True, residual_conv_kernel=7, num_heads=2)
    x = torch.randn(1, 2, 40, 8)
    expected = nystrom_attention(x, x, x, landmarks=8, residual_weight=kind.res_conv.weight)
    assert torch.equal(kind(x, x, x).context, expected.context)
    with pytest.raises(ValueError, match="num_heads=2"):
        kind.bind(3, 8, 8)
    with pytest.raises(ValueError, match="odd"):
        NystromAttention(residual=True, residual_conv_kernel=4)
    with pytest.raises(ValueError, match="self-attention"):
        kind(x, x[:, :, :30], x[:, :, :30])
    with pytest.raises(ValueError, match=r"\[H=2, 1, K, 1\]"):
        nystrom_attention(x, x, x, residual_weight=torch.randn(2, 1, 4, 1))


def _eq15(q, k, v, landmarks: int, scale: float):
    """Eq. 15 in float64 with equal segments and the exact pseudo-inverse (torch.linalg.pinv)."""
    b, h, m, d = q.shape
    n = k.shape[-2]
    q_land = q.reshape(b, h, landmarks, m // landmarks, d).mean(-2)
    k_land = k.reshape(b, h, landmarks, n // landmarks, d).mean(-2)
    kernel_1 = torch.softmax(q @ k_land.transpose(-1, -2) * scale, -1)
    kernel_2 = torch.softmax(q_land @ k_land.transpose(-1, -2) * scale, -1)
    kernel_3 = torch.softmax(q_land @ k.transpose(-1, -2) * scale, -1)
    return kernel_1 @ (torch.linalg.pinv(kernel_2) @ (kernel_3 @ v))


@pytest.mark.parametrize("shape", [(2, 3, 64, 48, 8), (1, 2, 40, 40, 5), (2, 1, 24, 24, 24)])
def test_fewer_landmarks_equal_eq15_with_gradients(shape) -> None:
    """With fewer landmarks than keys (equal segments, no mask: the path with its own backward),
    the context and the gradients of q, k and v equal eq. 15 written out in float64."""
    b, h, m, n, landmarks = shape
    g = torch.Generator().manual_seed(2)
    q = torch.randn(b, h, m, 16, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, h, n, 16, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, h, n, 8, generator=g, dtype=torch.float64, requires_grad=True)
    out = nystrom_attention(q, k, v, landmarks=landmarks, pinv_iterations=40).context
    expected = _eq15(q, k, v, landmarks, 0.25)
    assert (out - expected).abs().max().item() <= 1e-9
    probe = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((out * probe).sum(), (q, k, v))
    want = torch.autograd.grad((expected * probe).sum(), (q, k, v))
    for a, b_ in zip(got, want, strict=True):
        assert (a - b_).abs().max().item() <= 1e-8 * (1 + b_.abs().max().item())


def test_head_views_of_one_projection_get_their_gradients() -> None:
    """q, k, v as strided head views of one packed projection (as a multi-head module splits
    them): the gradient of the projection equals eq. 15's in float64."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 32, 3 * 4 * 8, generator=g, dtype=torch.float64, requires_grad=True)
    q, k, v = (p.unflatten(-1, (4, 8)).transpose(1, 2) for p in x.chunk(3, -1))
    out = nystrom_attention(q, k, v, landmarks=8, pinv_iterations=40).context
    expected = _eq15(q, k, v, 8, 8**-0.5)
    probe = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad((out * probe).sum(), x)
    (want,) = torch.autograd.grad((expected * probe).sum(), x)
    assert (grad - want).abs().max().item() <= 1e-8 * (1 + want.abs().max().item())


def test_float32_error_no_larger_than_autograds() -> None:
    """Error-ratio criterion: in float32, the path with its own backward is as close to eq. 15 in
    float64 as the same call through autograd (an all-True key mask takes that path), for the
    context and the gradients."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 128, 16, generator=g) for _ in range(3))
    probe = torch.randn(2, 4, 128, 16, generator=g)
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    expected = _eq15(*exact, 16, 0.25)
    want = torch.autograd.grad((expected * probe.double()).sum(), exact)

    def errors(mask):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = nystrom_attention(*leaves, landmarks=16, pinv_iterations=30, mask=mask).context
        grads = torch.autograd.grad((out * probe).sum(), leaves)
        return [
            (a.double() - b).abs().max().item()
            for a, b in zip((out, *grads), (expected, *want), strict=True)
        ]

    own, autograd = errors(None), errors(torch.ones(2, 1, 1, 128, dtype=torch.bool))
    for ours, theirs in zip(own, autograd, strict=True):
        assert ours <= 2 * theirs + 1e-6
