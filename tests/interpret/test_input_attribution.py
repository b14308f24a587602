"""input_x_gradient and integrated_gradients (through captum) against their formulas on models
whose gradients are known: for logits = Σ_n e_n W_cᵀ + b (linear in the embeddings e_n),
input×gradient of token n is e_n · W_c and Integrated Gradients is (e_n - e'_n) · W_c exactly
(Sundararajan et al. 2017: the gradient is constant along the path)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.interpret import input_x_gradient, integrated_gradients

pytest.importorskip(
    "captum",
    reason="optional: captum is not installed, so the gradient attribution tests are skipped "
    "(pip install 'attnkit[captum]'; `make test` tries it)",
)

torch.manual_seed(0)


class Bag(nn.Module):
    """logits = Σ_n mask_n e_n Wᵀ + b."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 3, dtype=torch.float64)
        self.out = nn.Linear(3, 2, dtype=torch.float64)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        e = self.embed(ids)
        if attention_mask is not None:
            e = e * attention_mask[..., None]
        return self.out(e.sum(1))


def test_input_x_gradient_of_token_ids_is_the_embedding_times_the_class_row() -> None:
    model = Bag().eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    maps = input_x_gradient(model, ids, target=1)
    e, w = model.embed.weight[ids], model.out.weight[1]
    assert list(maps) == ["embed"]
    assert torch.allclose(maps["embed"], (e * w).sum(-1).detach(), atol=1e-12)
    # the predicted class by default; keyword tensors reach the model at every step
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    predicted = model(ids, attention_mask=mask).argmax(-1)
    got = input_x_gradient(model, ids, attention_mask=mask, reduce=None)["embed"]
    expected = e * model.out.weight[predicted][:, None, :] * mask[..., None]
    assert torch.allclose(got, expected.detach(), atol=1e-12)


def test_integrated_gradients_of_a_linear_model_is_exact() -> None:
    model = Bag().eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    maps = integrated_gradients(model, ids, mask, target=0, baseline=0, steps=4)
    e, e0 = model.embed.weight[ids], model.embed.weight[0]
    expected = ((e - e0) * model.out.weight[0]).sum(-1) * mask
    assert torch.allclose(maps["embed"], expected.detach(), atol=1e-10)
    # completeness: each row adds up to y_c(x) - y_c(baseline)
    baseline = torch.zeros_like(ids)
    gap = model(ids, mask)[:, 0] - model(baseline, mask)[:, 0]
    assert torch.allclose(maps["embed"].sum(-1), gap.detach(), atol=1e-10)


def test_float_inputs_are_attributed_themselves() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 2, dtype=torch.float64)).eval()
    x = torch.randn(2, 3, 2, dtype=torch.float64)
    w = model[1].weight[1].view(3, 2)
    got = input_x_gradient(model, x, target=1)[""]
    assert torch.allclose(got, (x * w).sum(-1).detach(), atol=1e-12)
    got = integrated_gradients(model, x, target=1, steps=3)[""]  # zero baseline
    assert torch.allclose(got, (x * w).sum(-1).detach(), atol=1e-12)


def test_refusals() -> None:
    model = Bag().eval()
    ids = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="reduce must be one of"):
        input_x_gradient(model, ids, reduce="mean")
    with pytest.raises(ValueError, match="no module of the model"):
        integrated_gradients(model, ids, layer="embedding")
    with pytest.raises(ValueError, match=r"no nn\.Embedding"):
        input_x_gradient(nn.Sequential(nn.Flatten()).eval(), ids)
    with pytest.raises(ValueError, match="eval mode"):
        input_x_gradient(model.train(), ids)
