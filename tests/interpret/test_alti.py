"""ALTI (Ferrando et al. 2022) against the paper's contribution formula, written out per query i
and key j in float64:

    T_i(x_j) = L_i(Σ_h α^h_ij f^h(x_j) + [i = j] x_i),  L_i(u) = γ ⊙ (u - mean(u)) / σ_i
    c_ij = max(0, ‖x̃_i‖₁ - ‖x̃_i - T_i(x_j)‖₁) / Σ_k max(0, ‖x̃_i‖₁ - ‖x̃_i - T_i(x_k)‖₁)

with x̃_i the block's output LN(x_i + o_i) and σ_i the layer norm's own standard deviation."""

from __future__ import annotations

import pytest
import torch
from beyond_weights_reference import attention_block, heads, layer_norm, weights
from torch import nn

import attnkit as ak
from attnkit.interpret import alti

torch.manual_seed(0)


def encoder(norm_first: bool) -> ak.layers.TransformerEncoder:
    layer = ak.layers.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    )
    return ak.layers.TransformerEncoder(layer, 2).eval()


def by_formula(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """ALTI's C [M, M] of one example ``x [1, M, E]``'s attention block."""
    mha, norm = layer.self_attn, layer.norm1
    attended = layer_norm(x, norm) if layer.norm_first else x  # the attention's input
    q, k, v = heads(mha, attended)
    alpha = weights(q, k)[0]  # [H, M, M]
    w_o = mha.out_proj.weight.double()
    d = v.shape[-1]
    f = [v[0, h] @ w_o[:, h * d : (h + 1) * d].T for h in range(alpha.shape[0])]  # f^h(x_j)
    x0 = x[0]
    block = x0 + attention_block(mha, attended)[0]  # x_i + o_i
    if layer.norm_first:
        output = block  # pre-norm: no layer norm after the residual

        def linear(u, i):
            return u
    else:
        output = layer_norm(block, norm)  # x̃_i
        sigma = (block.var(-1, unbiased=False) + norm.eps).sqrt()

        def linear(u, i):
            return norm.weight.double() * (u - u.mean()) / sigma[i]

    m = x0.shape[0]
    c = torch.zeros(m, m, dtype=torch.float64)
    for i in range(m):
        for j in range(m):
            u = sum(alpha[h, i, j] * f[h][j] for h in range(len(f)))
            if i == j:
                u = u + x0[i]
            t = linear(u, i)
            c[i, j] = max(0.0, output[i].abs().sum() - (output[i] - t).abs().sum())
        c[i] /= c[i].sum()
    return c


@pytest.mark.parametrize("norm_first", [False, True])
def test_each_layer_matches_the_papers_contribution_formula(norm_first: bool) -> None:
    model = encoder(norm_first)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    result = alti(model, x)
    assert list(result) == ["layers.0.self_attn", "layers.1.self_attn"]
    c0 = by_formula(model.layers[0], x)
    assert torch.allclose(result["layers.0.self_attn"][0], c0, atol=1e-12)
    x1 = model.layers[0](x)
    c1 = by_formula(model.layers[1], x1)
    assert torch.allclose(result["layers.1.self_attn"][0], c1, atol=1e-12)
    # the rollout is the plain product, bottom layer first
    assert torch.allclose(result.rollout["layers.0.self_attn"][0], c0, atol=1e-12)
    assert torch.allclose(result.rollout["layers.1.self_attn"][0], c1 @ c0, atol=1e-12)


def test_a_batch_with_padding_gives_each_example_its_own_rows() -> None:
    model = encoder(False)
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    padding = torch.tensor([[False] * 4, [False] * 3 + [True]])
    result = alti(model, x, src_key_padding_mask=padding)
    first = result["layers.0.self_attn"]
    assert first.shape == (2, 4, 4)
    assert torch.allclose(first[0], by_formula(model.layers[0], x[:1]), atol=1e-12)
    # no real token draws on the padding key (the padding query draws on itself, its residual)
    assert torch.equal(first[1, :3, 3], torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(first.sum(-1), torch.ones(2, 4, dtype=torch.float64), atol=1e-12)


class Stack(nn.Module):
    """Attention layers without a residual block around them."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ak.MultiHeadAttention(8, 2, batch_first=True) for _ in "ab")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x, x, x)[0]
        return x


def test_refuses_blocks_it_cannot_decompose() -> None:
    x = torch.randn(1, 3, 8)
    with pytest.raises(
        ValueError, match=r"needs the residual block around attention module 'layers\.0'"
    ):
        alti(Stack().eval(), x)
    with pytest.raises(ValueError, match="eval mode"):
        alti(encoder(False).train(), x.double())
    decoder = ak.layers.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    memory = torch.randn(1, 5, 8)
    with pytest.raises(ValueError, match="'multihead_attn'"):  # cross-attention
        alti(decoder, x, memory)
    only_self = alti(decoder, x, memory, modules=["self_attn"])  # its self-attention decomposes
    assert only_self["self_attn"].shape == (1, 3, 3)
