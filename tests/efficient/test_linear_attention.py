"""Linear attention (Katharopoulos et al. 2020) against its float64 formula; the causal parallel
form (chunked prefix sums) equals the recurrent form (eq. 18-20)."""

from __future__ import annotations

import efficient_formulas as ref
import pytest
import torch

from attnkit.efficient import LinearAttention, linear_attention, linear_attention_step


def _inputs(m: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, m, 8, generator=g),
        torch.randn(2, 3, n, 8, generator=g),
        torch.randn(2, 3, n, 5, generator=g),
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("m", "n"), [(1, 1), (17, 17), (130, 130), (5, 40), (40, 5)])
def test_equals_formula(m: int, n: int, causal: bool) -> None:
    q, k, v = _inputs(m, n)
    keep = torch.rand(2, 1, 1, n, generator=torch.Generator().manual_seed(1)) < 0.7
    out = linear_attention(q, k, v, causal=causal, mask=keep, chunk=16).context
    allowed = keep & ref.causal(m, n) if causal else keep
    expected = ref.linear_attention(q.double(), k.double(), v.double(), allowed)
    assert (out.double() - expected).abs().max().item() <= 1e-5


def test_chunk_size_does_not_change_the_result() -> None:
    q, k, v = _inputs(100, 100)
    outs = [linear_attention(q, k, v, causal=True, chunk=c).context for c in (1, 7, 64, 512)]
    for other in outs[1:]:
        assert (other - outs[0]).abs().max().item() <= 1e-5


def test_causal_parallel_equals_recurrent() -> None:
    q, k, v = _inputs(50, 50)
    parallel = linear_attention(q, k, v, causal=True, chunk=16).context
    state, steps = None, []
    for t in range(50):
        out, state = linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        steps.append(out)
    assert (torch.stack(steps, 2) - parallel).abs().max().item() <= 1e-5
    # Decoding after a prefix: M < N causal (bottom-right) equals the recurrent tail.
    tail = linear_attention(q[:, :, 40:], k, v, causal=True).context
    assert (tail - parallel[:, :, 40:]).abs().max().item() <= 1e-5


def test_module_and_3d_inputs() -> None:
    q, k, v = _inputs(9, 9)
    module = LinearAttention(chunk=4)
    out = module(q[:, 0], k[:, 0], v[:, 0], causal=True).context
    assert out.shape == (2, 9, 5)
    assert torch.allclose(out, linear_attention(q, k, v, causal=True).context[:, 0], atol=1e-6)
    assert module.taxonomy["alignment"] == "Global"


def test_per_query_mask_is_refused() -> None:
    q, k, v = _inputs(6, 6)
    with pytest.raises(ValueError, match="same for every query"):
        linear_attention(q, k, v, mask=torch.ones(6, 6, dtype=torch.bool).tril())
