"""adversarial_attention with masked keys and with one problem per example (per_example=True),
against the JSD and TVD formulas written here."""

import math

import torch
from torch import nn

import attnkit as ak
from attnkit.evaluate import ablate, adversarial_attention
from attnkit.evaluate.adversarial import jensen_shannon


class Attend(nn.Module):
    def forward(self, q: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return ak.attention(q, x, x, mask=mask).context


class MaskedClassifier(nn.Module):
    """One query over 4 keys (the last one padding); output ``softmax(scale_b · c[:2])``."""

    def __init__(self, scale: torch.Tensor) -> None:
        super().__init__()
        self.attn = Attend()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.tensor([True, True, True, False]).view(1, 1, 4)
        context = self.attn(x.mean(1, keepdim=True), x, mask)
        return (context[:, 0, :2] * self.scale[:, None]).softmax(-1)


def jsd(p: torch.Tensor, q: torch.Tensor) -> float:
    m = 0.5 * (p + q)
    total = 0.0
    for x in (p, q):
        keep = x > 0
        total += 0.5 * float((x[keep] * (x[keep] / m[keep]).log()).sum())
    return total


def test_jensen_shannon_with_zeros_has_finite_gradients():
    p = torch.tensor([0.2, 0.8, 0.0], dtype=torch.float64)
    scores = torch.tensor([0.3, -0.1, float("-inf")], dtype=torch.float64, requires_grad=True)
    q = scores.softmax(-1)
    value = jensen_shannon(p, q)
    assert math.isclose(value.item(), jsd(p, q.detach()), abs_tol=1e-12)
    value.backward()
    assert torch.isfinite(scores.grad).all()


def test_masked_keys_do_not_stop_the_search():
    # an output that ignores the attention: the search must reach a large JSD, with no weight on
    # the padded key (with NaN gradients it stayed at its random start)
    torch.manual_seed(0)
    x = torch.randn(1, 4, 3, dtype=torch.float64)
    model = MaskedClassifier(torch.zeros(1, dtype=torch.float64))
    result = adversarial_attention(model, lambda: model(x), "attn", steps=60, seed=0)
    # the JSD is convex in ã: unconstrained ascent ends at a vertex of the simplex of the
    # admissible keys, e_k, whose JSD from a is jsd(a, e_k)
    weights, original = result.weights[0, 0, 0], result.original[0, 0, 0]
    assert result.found and float(weights.max()) > 0.99
    vertex = torch.zeros(4, dtype=torch.float64)
    vertex[int(weights.argmax())] = 1.0
    assert abs(result.jsd - jsd(original, vertex)) < 1e-2 and result.jsd > 0.1
    assert float(weights[3]) == 0  # the padded key


def test_one_problem_per_example():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    # example 0's output ignores the attention; example 1's moves with any change (epsilon 0)
    model = MaskedClassifier(torch.tensor([0.0, 1e4], dtype=torch.float64))
    result = adversarial_attention(
        model, lambda: model(x), "attn", epsilon=0.0, steps=60, seed=0, per_example=True
    )
    assert result.example_found.tolist() == [True, False]
    assert torch.equal(result.weights[1], result.original[1])  # nothing feasible: a kept
    fixed = result.weights
    with torch.no_grad(), ablate(model, lambda w, a: fixed, modules=["attn"]):
        adversarial = model(x)
    reference = model(x)
    assert float(0.5 * (adversarial[0] - reference[0]).abs().sum()) <= 1e-12
    expected = jsd(result.original[0, 0, 0], result.weights[0, 0, 0])
    assert math.isclose(float(result.example_jsd[0]), expected, abs_tol=1e-9)
    assert float(result.weights[0].max()) > 0.99  # a vertex, as without the batch
    assert result.example_jsd[1] == 0 and result.jsd == float(result.example_jsd.mean())
