"""patch (activation patching) against the encoder recomputed in float64 with one head's
activation swapped for the clean run's: the effect is metric(patched) - metric(corrupt)."""

from __future__ import annotations

import pytest
import torch
from beyond_weights_reference import encoder_layer, heads
from torch import nn

import attnkit as ak
from attnkit.interpret import patch

torch.manual_seed(0)
READOUT = torch.randn(8, dtype=torch.float64)


def metric(output: torch.Tensor) -> torch.Tensor:
    """A scalar read from the output: the last token of the first example, projected."""
    return output[0, -1] @ READOUT


@pytest.fixture
def model() -> ak.layers.TransformerEncoder:
    layer = ak.layers.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64
    )
    return ak.layers.TransformerEncoder(layer, 2).eval()


def clean_and_corrupt() -> tuple[torch.Tensor, torch.Tensor]:
    clean = torch.randn(2, 4, 8, dtype=torch.float64)
    corrupt = clean.clone()
    corrupt[:, 1] = torch.randn(2, 8, dtype=torch.float64)  # one token differs
    return clean, corrupt


@torch.no_grad()
def stack(model: nn.Module, x: torch.Tensor, changes: dict[int, dict]) -> torch.Tensor:
    for i, layer in enumerate(model.layers):
        x = encoder_layer(layer, x, **changes.get(i, {}))
    return x


@pytest.mark.parametrize("activation", ["context", "q", "k", "v"])
@pytest.mark.parametrize("where", ["heads", "positions"])
def test_patching_with_the_runs_own_activations_changes_nothing(model, activation, where) -> None:
    x, _ = clean_and_corrupt()
    effects = patch(model, x, x, metric, where, activation=activation)
    assert list(effects) == ["layers.0.self_attn", "layers.1.self_attn"]
    for effect in effects.values():
        assert effect.shape == ((2,) if where == "heads" else (2, 4))
        assert effect.abs().max() <= 1e-12


def test_patching_one_head_changes_what_swapping_its_context_changes(model) -> None:
    clean, corrupt = clean_and_corrupt()
    effects = patch(model, clean, corrupt, metric)
    baseline = metric(stack(model, corrupt, {}))
    for layer in (0, 1):
        # the clean run's context of every head in this layer: c = a v from the clean input
        clean_input = clean if layer == 0 else encoder_layer(model.layers[0], clean)
        q, k, v = heads(model.layers[layer].self_attn, clean_input)
        clean_context = (q @ k.transpose(-1, -2) / 2.0).softmax(-1) @ v  # d = 4: √d = 2
        for h in range(2):

            def swap(c, h=h, source=clean_context):
                c = c.clone()
                c[:, h] = source[:, h]
                return c

            expected = metric(stack(model, corrupt, {layer: {"context": swap}})) - baseline
            got = effects[f"layers.{layer}.self_attn"][h]
            assert abs(float(got - expected)) <= 1e-12


def test_patching_one_query_position(model) -> None:
    clean, corrupt = clean_and_corrupt()
    effects = patch(model, clean, corrupt, metric, "positions", activation="q")
    baseline = metric(stack(model, corrupt, {}))
    q_clean, _, _ = heads(model.layers[0].self_attn, clean)
    for h in range(2):
        for p in range(4):

            def swap(q, k, v, h=h, p=p):
                q = q.clone()
                q[:, h, p] = q_clean[:, h, p]
                return q, k, v

            expected = metric(stack(model, corrupt, {0: {"qkv": swap}})) - baseline
            assert abs(float(effects["layers.0.self_attn"][h, p] - expected)) <= 1e-12
    # tokens other than the changed one have the same keys and values, but queries at position 1
    # differ: patching there matters, while a key position equal in both runs cannot
    by_key = patch(model, clean, corrupt, metric, "positions", activation="k")
    assert by_key["layers.0.self_attn"][:, [0, 2, 3]].abs().max() <= 1e-12
    assert by_key["layers.0.self_attn"][:, 1].abs().max() > 1e-6


def test_refusals(model) -> None:
    clean, corrupt = clean_and_corrupt()
    with pytest.raises(ValueError, match="same shapes"):
        patch(model, clean, corrupt[:, :3], metric)
    with pytest.raises(ValueError, match="where must be one of"):
        patch(model, clean, corrupt, metric, "layers")
    with pytest.raises(ValueError, match="activation must be one of"):
        patch(model, clean, corrupt, metric, activation="weights")
    with pytest.raises(ValueError, match="metric must return a scalar"):
        patch(model, clean, corrupt, lambda y: y[0, -1])
    with pytest.raises(ValueError, match="eval mode"):
        patch(model.train(), clean, corrupt, metric)
