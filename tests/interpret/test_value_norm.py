"""value_norm (Kobayashi et al. 2020) against ‖α^h_ij f^h(x_j)‖ written out in float64 from the
modules' parameters: f^h(x) = (x W_V^h + b_V^h) W_O^h, W_O^h the head's columns of out_proj."""

from __future__ import annotations

import pytest
import torch
from beyond_weights_reference import heads, weights
from torch import nn

import attnkit as ak
from attnkit.interpret import value_norm

torch.manual_seed(0)


def encoder(norm_first: bool = False) -> ak.layers.TransformerEncoder:
    layer = ak.layers.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    )
    return ak.layers.TransformerEncoder(layer, 2).eval()


def by_formula(mha: nn.Module, x: torch.Tensor, allowed=None) -> torch.Tensor:
    """[B, H, M, N]: ‖α_ij (v_j W_O^hᵀ)‖ for each head h, query i, key j."""
    q, k, v = heads(mha, x)
    alpha = weights(q, k, allowed)
    w_o = mha.out_proj.weight.double()  # [E, H·d]
    d = v.shape[-1]
    out = torch.empty_like(alpha)
    for h in range(alpha.shape[1]):
        f = v[:, h] @ w_o[:, h * d : (h + 1) * d].T  # [B, N, E]
        summand = alpha[:, h, :, :, None] * f[:, None, :, :]  # α_ij f(x_j): [B, M, N, E]
        out[:, h] = summand.norm(dim=-1)
    return out


def test_each_layer_is_the_norm_of_the_weighted_transformed_values() -> None:
    model = encoder()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    maps = value_norm(model, x)
    assert list(maps) == ["layers.0.self_attn", "layers.1.self_attn"]
    first = model.layers[0]
    assert torch.allclose(maps["layers.0.self_attn"], by_formula(first.self_attn, x), atol=1e-12)
    x1 = model.layers[0](x)  # the second layer's input
    expected = by_formula(model.layers[1].self_attn, x1)
    assert maps["layers.1.self_attn"].shape == (2, 2, 5, 5)
    assert torch.allclose(maps["layers.1.self_attn"], expected, atol=1e-12)


def test_summed_heads_are_the_norm_of_the_layer_summand() -> None:
    model = encoder(norm_first=True).layers[0]
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    mha = model.self_attn
    q, k, v = heads(mha, model.norm1(x))
    alpha = weights(q, k)
    w_o = mha.out_proj.weight.double()
    d = v.shape[-1]
    total = sum(
        alpha[:, h, :, :, None] * (v[:, h] @ w_o[:, h * d : (h + 1) * d].T)[:, None]
        for h in range(2)
    )  # Σ_h α^h_ij f^h(x_j): [B, M, N, E]
    got = value_norm(model, x, heads="sum")["self_attn"]
    assert got.shape == (1, 1, 4, 4)
    assert torch.allclose(got[:, 0], total.norm(dim=-1), atol=1e-12)


def test_padding_keys_get_zero_and_cross_attention_and_grouped_heads() -> None:
    mha = ak.MultiHeadAttention(8, 4, batch_first=True, num_kv_heads=2, dtype=torch.float64).eval()
    query, memory = (
        torch.randn(2, 3, 8, dtype=torch.float64),
        torch.randn(2, 6, 8, dtype=torch.float64),
    )
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])  # torch's: True = ignore
    got = value_norm(mha, query, memory, memory, key_padding_mask=padding)[""]
    assert got.shape == (2, 4, 3, 6)
    assert torch.equal(got[1, :, :, 4:], torch.zeros(4, 3, 2, dtype=torch.float64))
    # the formula, with key/value head g serving query heads 2g and 2g + 1
    w_q, w_k, w_v = (
        mha.q_proj_weight.double(),
        mha.k_proj_weight.double(),
        mha.v_proj_weight.double(),
    )
    b_q, b_k, b_v = mha.in_proj_bias.double().split([8, 4, 4])
    q = (query @ w_q.T + b_q).unflatten(-1, (4, 2)).transpose(1, 2)
    k = (memory @ w_k.T + b_k).unflatten(-1, (2, 2)).transpose(1, 2).repeat_interleave(2, 1)
    v = (memory @ w_v.T + b_v).unflatten(-1, (2, 2)).transpose(1, 2).repeat_interleave(2, 1)
    alpha = weights(q, k, ~padding[:, None, None, :])
    w_o = mha.out_proj.weight.double()
    for h in range(4):
        f = v[:, h] @ w_o[:, 2 * h : 2 * h + 2].T
        expected = (alpha[:, h, :, :, None] * f[:, None]).norm(dim=-1)
        assert torch.allclose(got[:, h], expected, atol=1e-12)


class Bare(nn.Module):
    """Attention with no output projection anywhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ak.attention(x, x, x).context


def test_refuses_without_an_output_projection_and_takes_one_given() -> None:
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="output projection of the attention module ''"):
        value_norm(Bare(), x)
    identity = nn.Linear(4, 4, bias=False, dtype=torch.float64)
    nn.init.eye_(identity.weight)
    got = value_norm(Bare(), x, output_projections={"": identity})[""]  # f(x_j) = x_j
    alpha = weights(x[:, None], x[:, None])
    assert torch.allclose(got, alpha * x.norm(dim=-1)[:, None, None, :], atol=1e-12)
    with pytest.raises(ValueError, match="heads must be one of"):
        value_norm(Bare(), x, heads="mean")
