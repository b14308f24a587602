"""Capsule-based attention (survey §3.3.2, eq. 43-45, Fig. 11; Wang et al. [89]) against the
survey's formulas.

The expected values are the capsules written out in float64 loops over the batch, the classes and
the feature vectors: eq. (43) ``e_{c,l} = q_c^T k_l``, a softmax (eq. 25) over the real feature
vectors, ``c_c = Σ_l a_{c,l} v_l`` (eq. 4), eq. (44) ``p_c = sigmoid(w_c^T c_c + b_c)``, eq. (45)
``r_c = p_c c_c``, the mean feature vector ``f``, and the joint hinge loss of [89]. Parameters are
read from the module as plain tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.capsule import CapsuleAttention, CapsuleOutput, capsule_loss

F64 = torch.float64
TOL = 1e-10
B, N, D_F, D_K, C = 3, 5, 4, 3, 3
# Example 0 is full, example 1 has 2 real vectors, example 2 has none.
PADDING = torch.tensor([[True] * N, [True, True] + [False] * 3, [False] * N])

ScoreFn = Callable[[Tensor, Tensor], Tensor]  # (one query, one key) -> scalar


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def randn(seed: int, *shape: int) -> Tensor:
    torch.manual_seed(seed)
    return torch.randn(*shape, dtype=F64)


def softmax_list(e: list[Tensor]) -> list[Tensor]:
    """Eq. (25) over a list of scalar scores."""
    peak = max(float(x) for x in e)
    exp = [torch.exp(x - peak) for x in e]
    total = sum(exp)
    return [x / total for x in exp]


def dot(q: Tensor, k: Tensor) -> Tensor:
    return sum(q[j] * k[j] for j in range(k.shape[0]))


def weight(module: nn.Module) -> Tensor | None:
    w = getattr(module, "weight", None)
    return None if w is None else w.detach()


def project(W: Tensor | None, x: Tensor) -> Tensor:
    return x if W is None else W @ x


def capsules_literal(
    module: CapsuleAttention, F: Tensor, mask: Tensor, score: ScoreFn = dot
) -> dict[str, Tensor]:
    """Eq. (43)-(45) in loops."""
    W_K, W_V = weight(module.key_proj), weight(module.value_proj)
    q = module.query.detach()  # q_c, one row per class
    w, bias = module.probability_weight.detach(), module.probability_bias.detach()
    b_size, n, d_f = F.shape
    n_classes, d_v = q.shape[0], module.d_value
    context = torch.zeros(b_size, n_classes, d_v, dtype=F64)
    weights = torch.zeros(b_size, n_classes, n, dtype=F64)
    p = torch.zeros(b_size, n_classes, dtype=F64)
    r = torch.zeros(b_size, n_classes, d_v, dtype=F64)
    f = torch.zeros(b_size, d_f, dtype=F64)
    for b in range(b_size):
        real = [l for l in range(n) if mask[b, l]]
        if real:
            f[b] = sum(F[b, l] for l in real) / len(real)
        for c in range(n_classes):
            if real:
                e = [score(q[c], project(W_K, F[b, l])) for l in real]  # eq. (43)
                for a_l, l in zip(softmax_list(e), real, strict=True):
                    weights[b, c, l] = a_l
                    context[b, c] += a_l * project(W_V, F[b, l])
            logit = sum(w[c, j] * context[b, c, j] for j in range(d_v)) + bias[c]
            p[b, c] = 1.0 / (1.0 + math.exp(-float(logit)))  # eq. (44)
            r[b, c] = p[b, c] * context[b, c]  # eq. (45)
    return {"context": context, "weights": weights, "p": p, "r": r, "f": f}


def loss_literal(p: Tensor, r: Tensor, f: Tensor, target: Tensor, lam: float, margin: float):
    """[89]'s joint loss: multi-class hinge on ``p`` plus ``lam`` times hinge on ``f^T r_c``."""
    total = 0.0
    b_size, n_classes = p.shape
    for b in range(b_size):
        y = int(target[b])
        s = [dot(f[b], r[b, c]) for c in range(n_classes)]
        J = sum(
            max(0.0, margin - float(p[b, y]) + float(p[b, c])) for c in range(n_classes) if c != y
        )
        U = sum(max(0.0, margin - float(s[y]) + float(s[c])) for c in range(n_classes) if c != y)
        total += (J + lam * U) / n_classes
    return total / b_size


# --------------------------------------------------------------------------------------------
# Eq. (43)-(45)
# --------------------------------------------------------------------------------------------


def test_eq43_eq44_eq45_as_in_89():
    """Features as keys and values (as [89]), the dot score of eq. (43)."""
    torch.manual_seed(1)
    module = CapsuleAttention(D_F, num_classes=C).double()
    assert module.query.shape == (C, D_F)  # one learned query per class
    assert module.probability_weight.shape == (C, D_F) and module.probability_bias.shape == (C,)
    F = randn(11, B, N, D_F)
    out = module(F, PADDING, return_weights=True)
    expected = capsules_literal(module, F, PADDING)
    assert out.context.shape == (B, C, D_F) and out.weights.shape == (B, C, N)
    close(out.context, expected["context"])
    close(out.weights, expected["weights"])  # the per-class attention maps
    close(out.probabilities, expected["p"])
    close(out.reconstructions, expected["r"])
    close(out.feature_mean, expected["f"])


def test_learned_key_and_value_projections():
    torch.manual_seed(2)
    module = CapsuleAttention(D_F, num_classes=C, d_key=D_K, d_value=2).double()
    assert module.query.shape == (C, D_K)
    F = randn(12, B, N, D_F)
    out = module(F, PADDING, return_weights=True)
    expected = capsules_literal(module, F, PADDING)
    close(out.context, expected["context"])
    close(out.probabilities, expected["p"])
    close(out.reconstructions, expected["r"])


def test_any_score_additive_with_its_own_query_size():
    torch.manual_seed(3)
    module = CapsuleAttention(D_F, C, d_query=2, d_key=D_K, score="additive").double()
    s = module.score
    W1, W2 = s.query_proj.weight.detach(), s.key_proj.weight.detach()
    b, w = s.key_proj.bias.detach(), s.out.weight.detach()[0]
    F = randn(13, B, N, D_F)
    out = module(F, PADDING, return_weights=True)
    expected = capsules_literal(
        module, F, PADDING, lambda q, k: w @ torch.tanh(W1 @ q + W2 @ k + b)
    )
    close(out.weights, expected["weights"])
    close(out.probabilities, expected["p"])


@pytest.mark.parametrize("lam,margin", [(1.0, 1.0), (0.3, 0.5)])
def test_joint_loss(lam: float, margin: float):
    """The probability loss plus the reconstruction loss against the mean feature vector."""
    torch.manual_seed(4)
    module = CapsuleAttention(D_F, num_classes=C).double()
    F = randn(14, B, N, D_F) * 3  # large enough that some hinges are active and some are not
    target = torch.tensor([2, 0, 1])
    out = module(F, PADDING)
    loss = capsule_loss(out, target, reconstruction_weight=lam, margin=margin)
    e = capsules_literal(module, F, PADDING)
    close(loss, torch.tensor(loss_literal(e["p"], e["r"], e["f"], target, lam, margin), dtype=F64))


def test_training_reduces_the_loss_and_finds_the_class():
    """A toy task: the class is which of three directions the real feature vectors share."""
    torch.manual_seed(5)
    directions = torch.eye(D_F)[:C] * 2
    target = torch.randint(0, C, (32,))
    F = torch.randn(32, N, D_F) * 0.3 + directions[target].unsqueeze(1)
    mask = torch.rand(32, N) < 0.8
    module = CapsuleAttention(D_F, num_classes=C)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.05)
    losses = []
    for _ in range(40):
        optimizer.zero_grad()
        loss = capsule_loss(module(F, mask), target)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    accuracy = (module(F, mask).probabilities.argmax(-1) == target).float().mean()
    assert losses[-1] < 0.5 * losses[0] and accuracy > 0.9


# --------------------------------------------------------------------------------------------
# Any score and alignment; padding; gradients
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "score,align",
    [
        ("dot", "softmax"),
        ("scaled_dot", "sparsemax"),
        ("general", "entmax15"),
        ("biased_general", "topk"),
        ("additive", "softmax"),
        ("cosine", "softmax"),
        ("euclidean", "sparsemax"),
    ],
)
def test_any_score_and_alignment_respects_padding(score: str, align: str):
    torch.manual_seed(6)
    module = CapsuleAttention(D_F, C, d_key=D_K, score=score, align=align).double()
    F = randn(15, B, N, D_F).requires_grad_(True)
    out = module(F, PADDING, return_weights=True)
    assert all(torch.isfinite(t).all() for t in (out.context, out.weights, out.probabilities))
    padded = ~PADDING.unsqueeze(1).expand_as(out.weights)
    assert torch.all(out.weights[padded] == 0)  # every class's map
    # No real vector: zero contexts and reconstructions, f = 0, p_c = sigmoid(b_c).
    assert torch.all(out.context[2] == 0) and torch.all(out.reconstructions[2] == 0)
    assert torch.all(out.feature_mean[2] == 0)
    close(out.probabilities[2], torch.sigmoid(module.probability_bias.detach()))
    capsule_loss(out, torch.tensor([0, 1, 2])).backward()
    assert torch.all(F.grad[~PADDING] == 0) and F.grad[PADDING].abs().sum() > 0
    row = ak.taxonomy.describe(module).names()
    assert row["query_multiplicity"] == {"Capsule-Based"} and row["query_type"] == {
        "Self-Attentive"
    }


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_gradcheck(score: str):
    """Gradients of every output and of the loss, with respect to the features and every
    parameter (the parameters themselves: gradcheck perturbs them in place)."""
    torch.manual_seed(7)
    module = CapsuleAttention(3, num_classes=2, d_key=2, score=score).double()
    mask = torch.tensor([[True, True, True], [True, True, False]])
    target = torch.tensor([1, 0])
    params = [p for p in module.parameters() if p.requires_grad]

    def fn(features: Tensor, *_: Tensor) -> tuple[Tensor, ...]:
        out = module(features, mask, return_weights=True)
        loss = capsule_loss(out, target, margin=5.0)  # a wide margin keeps every hinge active
        return out.context, out.weights, out.probabilities, out.reconstructions, loss

    F = randn(16, 2, 3, 3).requires_grad_(True)
    assert gradcheck(fn, (F, *params), eps=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Taxonomy and bad input
# --------------------------------------------------------------------------------------------


def test_taxonomy_row_of_wang_et_al():
    """Table 3's row for Wang et al. [89]."""
    assert str(ak.taxonomy.describe(CapsuleAttention(D_F, num_classes=2))) == (
        "Singular | Single-Level | Single-Representational | Multiplicative | Global | "
        "Single-Dimensional | Self-Attentive | Capsule-Based"
    )


def test_bad_input():
    module = CapsuleAttention(D_F, num_classes=C)
    F = randn(17, B, N, D_F).float()
    out = module(F)
    with pytest.raises(ValueError, match=r"features \[B, N, d_f=4\], got \(3, 5, 3\)"):
        module(F[..., :3])
    with pytest.raises(ValueError, match=r"mask must be \[B, N\] = \(3, 5\), got \(3, 4\)"):
        module(F, PADDING[:, :4])
    with pytest.raises(ValueError, match="bool"):
        module(F, PADDING.int())
    with pytest.raises(ValueError, match="num_classes"):
        CapsuleAttention(D_F, num_classes=0)
    with pytest.raises(ValueError, match="same size"):
        CapsuleAttention(D_F, C, d_query=2, score="dot")
    with pytest.raises(ValueError, match=r"target must be \[B\] = \(3,\), got \(2,\)"):
        capsule_loss(out, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        capsule_loss(out, torch.tensor([0, 1, 3]))
    with pytest.raises(TypeError, match="integer class indices"):
        capsule_loss(out, torch.tensor([0.0, 1.0, 2.0]))
    other = CapsuleAttention(D_F, C, d_value=2)(F)
    with pytest.raises(ValueError, match="d_v = d_f"):
        capsule_loss(other, torch.tensor([0, 1, 2]))
    empty = CapsuleOutput(
        context=out.context[:0],
        probabilities=out.probabilities[:0],
        reconstructions=out.reconstructions[:0],
        feature_mean=out.feature_mean[:0],
    )
    assert float(capsule_loss(empty, torch.zeros(0, dtype=torch.long)).detach()) == 0.0
