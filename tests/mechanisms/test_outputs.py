"""Mechanisms return one documented output type: :class:`attnkit.AttentionOutput` or a
dataclass extending it with keyword-only fields."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import attnkit as ak
from attnkit import mechanisms as m

OUTPUTS = [
    m.AttentionViaAttentionOutput,
    m.CapsuleOutput,
    m.CoAttentionOutput,
    m.GraphAttentionOutput,
    m.HierarchicalAttentionOutput,
    m.MultiHopOutput,
    m.RotatoryOutput,
]


@pytest.mark.parametrize("cls", OUTPUTS, ids=lambda c: c.__name__)
def test_every_output_extends_attention_output(cls) -> None:
    assert issubclass(cls, ak.AttentionOutput)
    names = [f.name for f in dataclasses.fields(cls)]
    assert names[:6] == ["context", "weights", "lse", "log_prob", "output", "summary"]
    assert all(f.kw_only for f in dataclasses.fields(cls)[6:])


def test_graph_output_context_is_the_node_features() -> None:
    torch.manual_seed(0)
    layer = m.GraphAttention(4, 3, num_heads=2)
    x = torch.randn(5, 4)
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    out = layer(x, edges)
    assert isinstance(out, ak.AttentionOutput) and out.nodes is out.context
    assert out.context.shape == (5, 6) and out.weights.shape[1] == 2
