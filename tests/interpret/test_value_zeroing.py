"""value_zeroing (Mohebbi et al. 2023) against the layer recomputed in float64 with the value row
of token j zeroed: C_ij = 1 - cos(y_i^{¬j}, y_i)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from beyond_weights_reference import encoder_layer
from torch import nn

import attnkit as ak
from attnkit.interpret import attention_rollout, value_zeroing

torch.manual_seed(0)


def encoder(norm_first: bool) -> ak.layers.TransformerEncoder:
    layer = ak.layers.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    )
    return ak.layers.TransformerEncoder(layer, 2).eval()


def by_formula(layer: nn.Module, x: torch.Tensor, allowed=None) -> torch.Tensor:
    """[B, M, N]: the cosine distance of the layer's outputs when v_j is zeroed."""
    reference = encoder_layer(layer, x, allowed)
    columns = [
        1 - F.cosine_similarity(encoder_layer(layer, x, allowed, zero_value=j), reference, dim=-1)
        for j in range(x.shape[1])
    ]
    return torch.stack(columns, -1)


@pytest.mark.parametrize("norm_first", [False, True])
def test_each_layer_equals_recomputing_it_with_one_value_row_zeroed(norm_first: bool) -> None:
    model = encoder(norm_first)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    scores = value_zeroing(model, x)
    assert list(scores) == ["layers.0.self_attn", "layers.1.self_attn"]
    assert scores["layers.0.self_attn"].shape == (2, 5, 5)
    expected = by_formula(model.layers[0], x)
    assert torch.allclose(scores["layers.0.self_attn"], expected, atol=1e-12)
    x1 = encoder_layer(model.layers[0], x)  # the second layer recomputed from its own input
    assert torch.allclose(scores["layers.1.self_attn"], by_formula(model.layers[1], x1), atol=1e-12)


def test_keys_a_query_cannot_see_change_nothing() -> None:
    model = encoder(False)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    scores = value_zeroing(model, x, is_causal=True)["layers.0.self_attn"][0]
    causal = torch.ones(4, 4).tril().bool()
    assert torch.equal(scores[~causal], torch.zeros(6, dtype=torch.float64))  # exactly
    assert torch.allclose(scores, by_formula(model.layers[0], x, causal)[0], atol=1e-12)
    # padding (torch's convention: True = ignore) is another key no query sees
    padded = value_zeroing(model, x, src_key_padding_mask=torch.tensor([[False] * 3 + [True]]))
    assert torch.equal(padded["layers.1.self_attn"][0, :, 3], torch.zeros(4, dtype=torch.float64))


def test_the_papers_rollout_is_attention_rollout_without_residual() -> None:
    model = encoder(False)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    first, second = value_zeroing(model, x).values()
    rows = [m / m.sum(-1, keepdim=True) for m in (first, second)]  # each row sums to 1
    rolled = attention_rollout([first.unsqueeze(1), second.unsqueeze(1)], residual=0.0)
    assert torch.allclose(rolled, rows[1] @ rows[0], atol=1e-12)


class Pooled(nn.Module):
    """Attention whose layer (the model) returns one vector per example."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = ak.MultiHeadAttention(4, 1, batch_first=True, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x)[0].mean(1)  # [B, E]


def test_refusals() -> None:
    model = encoder(False)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="eval mode"):
        value_zeroing(model.train(), x)
    model.eval()
    with pytest.raises(ValueError, match="no module of the model"):
        value_zeroing(model, x, layers={"layers.0.self_attn": "layers.9"})
    pooled = Pooled().eval()
    with pytest.raises(ValueError, match=r"as \[B = 2, M, E\], got \(1, 2, 4\)"):
        value_zeroing(pooled, x[..., :4])
    # naming the attention module itself as the layer reads its own output [B, M, E]
    got = value_zeroing(pooled, x[..., :4], layers={"attn": "attn"})["attn"]
    assert got.shape == (2, 3, 3)
