"""Synthesizer (Tay et al. 2021): dense and random, factorized, against their formulas."""

from __future__ import annotations

import pytest
import torch

from attnkit.efficient import SynthesizerAttention


def _softmax_rows(scores, allowed=None):
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, -1), nan=0.0)


def test_random_is_softmax_of_the_matrix() -> None:
    torch.manual_seed(0)
    module = SynthesizerAttention("random", max_length=16, num_heads=2)
    q, v = torch.randn(3, 2, 10, 4), torch.randn(3, 2, 10, 5)
    out = module(q, q, v, causal=True, return_weights=True)
    r = module.r.detach().double()[:, :10, :10]
    allowed = torch.ones(10, 10, dtype=torch.bool).tril()
    expected = _softmax_rows(r, allowed) @ v.double()
    assert (out.context.double() - expected).abs().max().item() <= 1e-5
    assert out.weights.shape == (3, 2, 10, 10)


def test_dense_is_an_mlp_of_each_query() -> None:
    """B_i = W2 relu(W1 X_i + b1) + b2 (eq. 1), Y = softmax(B) V (eq. 2)."""
    torch.manual_seed(0)
    module = SynthesizerAttention("dense", max_length=12, num_heads=2, head_dim=4, hidden=6)
    q, v = torch.randn(3, 2, 9, 4), torch.randn(3, 2, 9, 5)
    out = module(q, q, v).context
    p = {name: t.detach().double() for name, t in module.named_parameters()}
    for h in range(2):
        hidden = torch.relu(q[:, h].double() @ p["w1"][h] + p["b1"][h])
        scores = (hidden @ p["w2"][h] + p["b2"][h])[..., :9]
        expected = _softmax_rows(scores) @ v[:, h].double()
        assert (out[:, h].double() - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_factorized_dense_is_the_outer_product_of_two_projections(causal: bool) -> None:
    """Tay et al. 2021 §3, "Factorized Dense Synthesizer": ``A = F_A(X_i) ∈ R^a``,
    ``B = F_B(X_i) ∈ R^b`` with ``a·b = l``; ``C = H_A(A) * H_B(B)`` where ``H_A`` repeats ``A``
    ``b`` times and ``H_B`` tiles ``B`` ``a`` times, so ``C_i[p·b + r] = A_p B_r``: each pair of
    entries once (the flattened outer product ``A ⊗ B``). ``F_A``, ``F_B`` here: the two output
    groups of the module's two-layer MLP. ``Y = softmax(C[:N]) V``, 10 of ``l = 12`` keys."""
    torch.manual_seed(0)
    module = SynthesizerAttention("dense", 12, 2, 4, hidden=5, factorized=3)  # a = 3, b = 4
    q, v = torch.randn(2, 2, 10, 4), torch.randn(2, 2, 10, 5)
    out = module(q, q, v, causal=causal).context
    p = {name: t.detach().double() for name, t in module.named_parameters()}
    for h in range(2):
        hidden = torch.relu(q[:, h].double() @ p["w1"][h] + p["b1"][h])
        projected = hidden @ p["w2"][h] + p["b2"][h]  # [B, M, a + b]
        a_part, b_part = projected[..., :3], projected[..., 3:]
        c = torch.zeros(2, 10, 12, dtype=torch.float64)
        for i in range(3):
            for r in range(4):
                c[..., i * 4 + r] = a_part[..., i] * b_part[..., r]
        allowed = torch.ones(10, 10, dtype=torch.bool).tril() if causal else None
        expected = _softmax_rows(c[..., :10], allowed) @ v[:, h].double()
        assert (out[:, h].double() - expected).abs().max().item() <= 1e-5


def test_factorized_random_is_low_rank() -> None:
    """Tay et al. 2021 §3, "Factorized Random Synthesizer": ``R = R_1 R_2^T``, ``R_1, R_2 ∈ R^{l×k}``."""
    torch.manual_seed(0)
    q, v = torch.randn(2, 2, 12, 4), torch.randn(2, 2, 12, 5)
    random = SynthesizerAttention("random", 12, 2, factorized=2)
    r1, r2 = random.r1.detach().double(), random.r2.detach().double()
    expected = _softmax_rows(r1[:, :9] @ r2[:, :11].transpose(-1, -2)) @ v[:, :, :11].double()
    out = random(q[:, :, :9], q[:, :, :11], v[:, :, :11]).context
    assert (out.double() - expected).abs().max().item() <= 1e-5
    assert torch.linalg.matrix_rank(random.scores(q, 12, 12)[0, 0].detach()) == 2


def test_bad_configuration() -> None:
    with pytest.raises(ValueError, match="kind"):
        SynthesizerAttention("sparse", 8, 1)
    with pytest.raises(ValueError, match="head_dim"):
        SynthesizerAttention("dense", 8, 1)
    with pytest.raises(ValueError, match="dividing"):
        SynthesizerAttention("dense", 8, 1, 4, factorized=3)
    module = SynthesizerAttention("random", 8, 1, trainable=False)
    assert not module.r.requires_grad
    x = torch.randn(1, 1, 9, 4)
    with pytest.raises(ValueError, match="at most 8"):
        module(x, x, x)
