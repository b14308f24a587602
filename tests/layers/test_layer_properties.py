"""Properties of self-attention layers (docs/layers.md and docs/reliability.md).

- without position information a self-attention layer is permutation-equivariant:
  ``layer(x[π]) = layer(x)[π]``; with any position scheme it is not;
- with a causal mask the output at ``t`` does not depend on inputs after ``t``: perturbing them
  leaves it bitwise equal, and its gradient with respect to them is exactly zero.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.layers import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TransformerEncoderLayer,
)

E, H, L = 16, 4, 8


def layer_with(scheme: str | None, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    options: dict = {}
    if scheme == "rotary":
        options["rotary"] = RotaryEmbedding(E // H)
    elif scheme == "alibi":
        options["position_bias"] = ALiBi(H, bidirectional=True)
    elif scheme == "t5":
        options["position_bias"] = RelativePositionBias(H, num_buckets=8, max_distance=16)
    layer = TransformerEncoderLayer(E, H, 32, batch_first=True, **options).double().eval()
    with torch.no_grad():  # T5's table and the norms start constant: make everything matter
        for p in layer.parameters():
            p.add_(0.2 * torch.randn_like(p))
    if scheme == "sinusoidal":
        return nn.Sequential(SinusoidalPositionalEncoding(E, 64).double(), layer)
    if scheme == "learned":
        return nn.Sequential(LearnedPositionalEmbedding(E, 64).double(), layer)
    return layer


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
def test_without_positions_self_attention_is_permutation_equivariant(score: str) -> None:
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(E, H, 32, batch_first=True, score=score).double().eval()
    x = torch.randn(2, L, E, dtype=torch.float64)
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm], atol=1e-12, rtol=0)


@pytest.mark.parametrize("scheme", ["rotary", "alibi", "t5", "sinusoidal", "learned"])
def test_with_positions_it_is_not(scheme: str) -> None:
    layer = layer_with(scheme)
    x = torch.randn(2, L, E, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (layer(x[:, perm]) - layer(x)[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("scheme", [None, "rotary", "alibi", "t5"])
def test_causal_output_at_t_ignores_inputs_after_t(scheme: str | None) -> None:
    layer = layer_with(scheme)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, L, E, dtype=torch.float64, generator=g)
    t = 4
    y = x.clone()
    y[:, t + 1 :] = 100 * torch.randn(2, L - t - 1, E, dtype=torch.float64, generator=g)
    with torch.no_grad():
        assert torch.equal(
            layer(x, is_causal=True)[:, : t + 1], layer(y, is_causal=True)[:, : t + 1]
        )
    x.requires_grad_(True)
    layer(x, is_causal=True)[:, : t + 1].sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad[:, t + 1 :], torch.zeros_like(x.grad[:, t + 1 :]))
    assert x.grad[:, : t + 1].abs().sum() > 0
