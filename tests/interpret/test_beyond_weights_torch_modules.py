"""The maps beyond the weights on torch's own Transformer layer (its ``nn.MultiheadAttention``
computed alongside by attnkit's engine, see attnkit.mechanisms.torch_modules) and in torch's
sequence-first layout: equal to the same maps of the attnkit layer holding the same weights,
which the formula tests of this directory cover; every result is batch-first."""

from __future__ import annotations

import pytest
import torch

import attnkit as ak
from attnkit.interpret import alti, patch, value_norm, value_zeroing


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_torch_layers_give_the_attnkit_layers_maps(norm_first: bool, batch_first: bool) -> None:
    torch.manual_seed(0)
    options = {"dropout": 0.0, "batch_first": batch_first, "norm_first": norm_first}
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, dtype=torch.float64, **options).eval()
    ours = ak.layers.TransformerEncoderLayer(8, 2, 16, dtype=torch.float64, **options).eval()
    ours.load_state_dict(theirs.state_dict())
    # the batch-first layer of the formula tests, with the same weights
    tested = ak.layers.TransformerEncoderLayer(
        8, 2, 16, dtype=torch.float64, **{**options, "batch_first": True}
    ).eval()
    tested.load_state_dict(theirs.state_dict())
    x_batch, y_batch = torch.randn(2, 3, 5, 8, dtype=torch.float64)  # [B, L, E] each
    x, y = x_batch, y_batch
    if not batch_first:
        x, y = x_batch.transpose(0, 1), y_batch.transpose(0, 1)  # torch's [L, B, E]
    for tool in (value_norm, alti, value_zeroing):
        got, expected = tool(theirs, x)["self_attn"], tool(ours, x)["self_attn"]
        assert got.shape[:2] == (3, 2 if tool is value_norm else 5)  # [B, ...] either way
        assert (got - expected).abs().max() <= 1e-12, tool.__name__
        assert (got - tool(tested, x_batch)["self_attn"]).abs().max() <= 1e-12, tool.__name__

    def metric(out: torch.Tensor) -> torch.Tensor:
        return out.sum()

    assert torch.allclose(
        patch(theirs, x, y, metric)["self_attn"], patch(ours, x, y, metric)["self_attn"], atol=1e-12
    )
