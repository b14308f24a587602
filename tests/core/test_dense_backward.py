"""The ``dense`` backend under autograd keeps one ``[B, H, M, N]`` tensor and computes its own
backward by blocks of heads and query rows: its gradients equal autograd through the float64
formula ``c = softmax(scale · q kᵀ + bias, masked) v`` (survey eq. 2-4) written here, whatever the
block size, with the weights and the lse used in the loss or not, for masked and keyless rows,
and broadcast (grouped) keys."""

from __future__ import annotations

import math

import pytest
import torch

import attnkit as ak
import attnkit.core.dense as dense

F64 = torch.float64


def formula(q, k, v, mask=None, bias=None):  # type: ignore[no-untyped-def]
    """Context, weights and lse of softmax attention, in float64 autograd; keyless rows: 0."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    keyless = torch.isneginf(s).all(-1, keepdim=True)
    a = torch.softmax(s.masked_fill(keyless, 0.0), -1).masked_fill(keyless, 0.0)
    lse = torch.logsumexp(s.masked_fill(keyless, 0.0), -1).masked_fill(keyless[..., 0], -math.inf)
    return a @ v, a, lse


def loss_of(context, weights, lse, use_weights, use_lse):  # type: ignore[no-untyped-def]
    loss = (context * torch.linspace(-1, 2, context.shape[-1], dtype=F64)).sum()
    if use_weights:
        loss = loss + (weights**2 * torch.linspace(0, 1, weights.shape[-1], dtype=F64)).sum()
    if use_lse:
        loss = loss + 0.3 * lse.masked_fill(torch.isinf(lse), 0.0).sum()
    return loss


@pytest.mark.parametrize("block", [None, "heads", "rows"])
@pytest.mark.parametrize("use_weights", [False, True])
@pytest.mark.parametrize("use_lse", [False, True])
@pytest.mark.parametrize("masking", ["none", "causal", "keyless"])
def test_gradients_equal_the_float64_formula(monkeypatch, block, use_weights, use_lse, masking):
    b, h, m, n, d = 2, 3, 5, 7, 4
    if block == "heads":  # one head per step
        monkeypatch.setattr(dense, "BACKWARD_BLOCK", m * n * 8)
    elif block == "rows":  # two query rows per step
        monkeypatch.setattr(dense, "BACKWARD_BLOCK", 2 * n * 8)
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, x, d, dtype=F64, requires_grad=True) for x in (m, n, n))
    mask, causal = None, masking == "causal"
    if masking == "keyless":
        mask = torch.rand(b, 1, m, n) > 0.4
        mask[0, 0, 2] = False  # a query with no admissible key
    out = ak.attention(q, k, v, mask=mask, causal=causal, return_weights=True,
                       return_lse=True, backend="dense")  # fmt: skip
    got = torch.autograd.grad(loss_of(out.context, out.weights, out.lse, use_weights, use_lse),
                              (q, k, v))  # fmt: skip
    if causal:
        mask = torch.ones(m, n, dtype=torch.bool).tril(n - m)
    ref = formula(q, k, v, mask)
    gold = torch.autograd.grad(loss_of(*ref, use_weights, use_lse), (q, k, v))
    torch.testing.assert_close(out.context, ref[0], rtol=0, atol=1e-12)
    for g, r in zip(got, gold, strict=True):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-12)


def test_a_frozen_float_mask_and_grouped_keys() -> None:
    torch.manual_seed(1)
    q = torch.randn(2, 4, 6, 3, dtype=F64, requires_grad=True)
    k = torch.randn(2, 1, 6, 3, dtype=F64, requires_grad=True)  # one key head for four queries'
    v = torch.randn(2, 1, 6, 5, dtype=F64, requires_grad=True)
    bias = torch.randn(1, 4, 6, 6, dtype=F64)
    out = ak.attention(q, k, v, mask=bias, return_weights=True, backend="dense")
    got = torch.autograd.grad(out.context.square().sum(), (q, k, v))
    context, _, _ = formula(q, k, v, bias=bias)
    gold = torch.autograd.grad(context.square().sum(), (q, k, v))
    for g, r in zip(got, gold, strict=True):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("m", "n"), [(0, 5), (4, 0), (0, 0)])
def test_empty_query_or_key_sets(m: int, n: int) -> None:
    q = torch.randn(1, 2, m, 3, dtype=F64, requires_grad=True)
    k = torch.randn(1, 2, n, 3, dtype=F64, requires_grad=True)
    v = torch.randn(1, 2, n, 4, dtype=F64, requires_grad=True)
    out = ak.attention(q, k, v, return_weights=True, backend="dense")
    assert out.context.shape == (1, 2, m, 4) and not out.context.abs().sum()  # zeros, not NaN
    grads = torch.autograd.grad(out.context.sum(), (q, k, v), allow_unused=True)
    assert all(g is None or not g.abs().sum() for g in grads)
