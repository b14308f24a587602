"""Synthesizer (Tay et al. 2021): dense and random, factorized, against their formulas."""

from __future__ import annotations

import pytest
import torch

from attnkit.efficient import SynthesizerAttention


def _softmax_rows(scores, allowed=None):
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, -1), nan=0.0)


def test_random_is_softmax_of_the_matrix() -> None:
    torch.manual_seed(0)
    module = SynthesizerAttention("random", max_length=16, num_heads=2)
    q, v = torch.randn(3, 2, 10, 4), torch.randn(3, 2, 10, 5)
    out = module(q, q, v, causal=True, return_weights=True)
    r = module.r.detach().double()[:, :10, :10]
    allowed = torch.ones(10, 10, dtype=torch.bool).tril()
    expected = _softmax_rows(r, allowed) @ v.double()
    assert (out.context.double() - expected).abs().max().item() <= 1e-5
    assert out.weights.shape == (3, 2, 10, 10)


def test_dense_is_an_mlp_of_each_query() -> None:
    """B_i = W2 relu(W1 X_i + b1) + b2 (eq. 1), Y = softmax(B) V (eq. 2)."""
    torch.manual_seed(0)
    module = SynthesizerAttention("dense", max_length=12, num_heads=2, head_dim=4, hidden=6)
    q, v = torch.randn(3, 2, 9, 4), torch.randn(3, 2, 9, 5)
    out = module(q, q, v).context
    p = {name: t.detach().double() for name, t in module.named_parameters()}
    for h in range(2):
        hidden = torch.relu(q[:, h].double() @ p["w1"][h] + p["b1"][h])
        scores = (hidden @ p["w2"][h] + p["b2"][h])[..., :9]
        expected = _softmax_rows(scores) @ v[:, h].double()
        assert (out[:, h].double() - expected).abs().max().item() <= 1e-5


def test_factorized_variants() -> None:
    torch.manual_seed(0)
    q, v = torch.randn(2, 2, 12, 4), torch.randn(2, 2, 12, 5)
    dense = SynthesizerAttention("dense", 12, 2, 4, factorized=3)
    scores = dense.scores(q, 12, 12)
    a, b = scores[..., 0], scores[..., 1]  # a·b = l: columns share A's entry for b-blocks
    assert scores.shape == (2, 2, 12, 12) and torch.isfinite(a).all() and torch.isfinite(b).all()
    random = SynthesizerAttention("random", 12, 2, factorized=2)
    r = random.r1 @ random.r2.transpose(-1, -2)
    assert torch.allclose(random.scores(q, 12, 12)[0], r)
    assert random(q, q, v).context.shape == (2, 2, 12, 5)


def test_bad_configuration() -> None:
    with pytest.raises(ValueError, match="kind"):
        SynthesizerAttention("sparse", 8, 1)
    with pytest.raises(ValueError, match="head_dim"):
        SynthesizerAttention("dense", 8, 1)
    with pytest.raises(ValueError, match="dividing"):
        SynthesizerAttention("dense", 8, 1, 4, factorized=3)
    module = SynthesizerAttention("random", 8, 1, trainable=False)
    assert not module.r.requires_grad
    x = torch.randn(1, 1, 9, 4)
    with pytest.raises(ValueError, match="at most 8"):
        module(x, x, x)
