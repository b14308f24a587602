"""The ``dense`` backend (weights on demand) on the head views of a packed projection, the
operands ``MultiHeadAttention`` gives it: ``[N, L, 3E]`` split into ``[N, H, L, d]`` views whose
batch axes do not fold. Without autograd they are read in place, with autograd copied; both must
give the float64 formula (eq. 2-4), whichever batch axis is the shorter."""

from __future__ import annotations

import math

import formulas
import pytest
import torch

import attnkit as ak


def _head_views(batch: int, heads: int, length: int, d: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 100 + heads)
    packed = torch.randn(batch, length, 3 * heads * d, generator=g)
    return [t.unflatten(-1, (heads, d)).transpose(1, 2) for t in packed.chunk(3, -1)]


@pytest.mark.parametrize(("batch", "heads"), [(2, 4), (5, 3), (1, 1)])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_strided_head_views_match_the_float64_formula(
    batch: int, heads: int, grad: bool, causal: bool
) -> None:
    q, k, v = _head_views(batch, heads, 7, 4)
    assert not q.is_contiguous()
    q, k, v = (t.requires_grad_(grad) for t in (q, k, v))
    out = ak.attention(q, k, v, causal=causal, return_weights=True, backend="dense")
    q64, k64, v64 = (t.detach().double() for t in (q, k, v))
    allowed = torch.ones(7, 7, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    a = formulas.softmax(q64 @ k64.transpose(-1, -2) / math.sqrt(4), allowed)
    torch.testing.assert_close(out.weights.double(), a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.context.double(), a @ v64, rtol=1e-5, atol=1e-6)
    if grad:
        out.context.sum().backward()
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        a = formulas.softmax(q64 @ k64.transpose(-1, -2) / math.sqrt(4), allowed)
        (a @ v64).sum().backward()
        for ours, ref in ((q, q64), (k, k64), (v, v64)):
            torch.testing.assert_close(ours.grad.double(), ref.grad, rtol=1e-4, atol=1e-5)
