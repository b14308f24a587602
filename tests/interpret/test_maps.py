"""Rollout, flow, gradient-weighted attention and head importance on hand-computed examples:
two layers, three tokens."""

import pytest
import torch
from torch import nn

import attnkit as ak
from attnkit.interpret import (
    attention_flow,
    attention_rollout,
    fuse_heads,
    gradient_weighted_attention,
    head_importance,
)

# layer 1 attends to the next token (a cyclic shift), layer 2 uniformly
A1 = torch.tensor([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=torch.float64)
A2 = torch.full((3, 3), 1 / 3, dtype=torch.float64)
# with the residual: Ã1 = 0.5 A1 + 0.5 I = [[.5,.5,0],[0,.5,.5],[.5,0,.5]],
# Ã2 = 0.5 A2 + 0.5 I: 2/3 on the diagonal, 1/6 elsewhere (rows already sum to 1)


def test_rollout_by_hand():
    # R = Ã2 Ã1; row 0 = 2/3·[.5,.5,0] + 1/6·[0,.5,.5] + 1/6·[.5,0,.5] = [5/12, 5/12, 1/6]
    expected = torch.tensor(
        [[5 / 12, 5 / 12, 1 / 6], [1 / 6, 5 / 12, 5 / 12], [5 / 12, 1 / 6, 5 / 12]],
        dtype=torch.float64,
    )
    got = attention_rollout([A1, A2])
    assert torch.allclose(got, expected, atol=1e-12)
    # per-head, batched input: two equal heads fuse to the same map
    batched = attention_rollout([A1.expand(2, 2, 3, 3), A2.expand(2, 2, 3, 3)])
    assert torch.allclose(batched, expected.expand(2, 3, 3), atol=1e-12)


def test_rollout_without_residual_is_the_plain_product():
    assert torch.allclose(attention_rollout([A1, A2], residual=0.0), A2 @ A1)


def test_head_fusion():
    heads = torch.stack([A1, A2])
    assert torch.allclose(fuse_heads(heads, "mean"), (A1 + A2) / 2)
    assert torch.allclose(fuse_heads(heads, "max"), torch.maximum(A1, A2))
    with pytest.raises(ValueError, match="head_fusion"):
        fuse_heads(heads, "median")


def test_flow_by_hand():
    # two edges per path: flow(i -> j) = Σ_k min(Ã2[i,k], Ã1[k,j]);
    # row 0: j=0: min(2/3,.5) + min(1/6,0) + min(1/6,.5) = 2/3; j=1: .5 + 1/6 + 0 = 2/3;
    #        j=2: 0 + 1/6 + 1/6 = 1/3
    expected = torch.tensor(
        [[2 / 3, 2 / 3, 1 / 3], [1 / 3, 2 / 3, 2 / 3], [2 / 3, 1 / 3, 2 / 3]],
        dtype=torch.float64,
    )
    assert torch.allclose(attention_flow([A1, A2]), expected, atol=1e-9)
    assert torch.allclose(attention_flow([A1[None, None], A2[None, None]])[0], expected, atol=1e-9)


class UniformLayer(nn.Module):
    """Attention with zero queries: every score is 0, so the weights are uniform (1/3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ak.attention(torch.zeros_like(x), x, x).context


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = UniformLayer(), UniformLayer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))[..., 0]  # [B, 3]: one "class" per token


def test_gradient_weighted_attention_by_hand():
    model = TwoLayers()
    x = torch.tensor([[[1.0], [2.0], [3.0]]], dtype=torch.float64)
    maps = gradient_weighted_attention(model, lambda: model(x), target=0)
    # y = c2[0] = Σ_i A2[0,i] h_i with h = A1 x = [2, 2, 2]: ∂y/∂A2[0,i] = h_i = 2, other rows 0
    # → G2 = A2 ⊙ ∂y/∂A2 = 2/3 in row 0
    g2 = torch.zeros(3, 3, dtype=torch.float64)
    g2[0] = 2 / 3
    # ∂y/∂A1[i,j] = A2[0,i] x_j = x_j / 3 → G1[i,j] = x_j / 9
    g1 = torch.tensor([1 / 9, 2 / 9, 3 / 9], dtype=torch.float64).expand(3, 3)
    assert torch.allclose(maps["second"][0, 0], g2, atol=1e-12)
    assert torch.allclose(maps["first"][0, 0], g1, atol=1e-12)
    # class-discriminative: target class 2 moves the evidence to row 2 of the top layer
    other = gradient_weighted_attention(model, lambda: model(x), target=2)
    assert torch.allclose(other["second"][0, 0, 2], torch.full((3,), 2 / 3, dtype=torch.float64))
    assert torch.equal(other["second"][0, 0, 0], torch.zeros(3, dtype=torch.float64))


class TwoHeadLayer(nn.Module):
    """Two heads with uniform attention; the layer's output sums the heads' contexts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [1, 2, 3, 1]
        context = ak.attention(torch.zeros_like(x), x, x).context
        return context.sum(1, keepdim=True).expand_as(x)


def test_head_importance_by_hand():
    model = nn.Sequential(TwoHeadLayer(), TwoHeadLayer())
    x = torch.tensor([[1.0, 2, 3], [3, 3, 3]]).reshape(1, 2, 3, 1)

    def loss() -> torch.Tensor:
        return model(x)[:, 0].sum()

    # base: layer 1 heads give 2 and 3 → 5 per token; layer 2: 5 + 5 = 10 per token → loss 30
    # mask layer 1 head 0: 3 → 6 per token → 18; head 1: 2 → 4 → 12
    # mask layer 2 head 0 or 1: 5 per token → 15
    importance = head_importance(model, loss)
    assert torch.allclose(importance["0"], torch.tensor([-12.0, -18.0], dtype=torch.float64))
    assert torch.allclose(importance["1"], torch.tensor([-15.0, -15.0], dtype=torch.float64))
