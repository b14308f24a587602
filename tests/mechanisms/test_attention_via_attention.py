"""``AttentionViaAttention`` against the survey's attention-via-attention (§3.1.2, Fig. 7).

The expected values are the survey's description written out in float64 loops: the query ``q^(c)``
attends the word-level features (keys/values of eq. 1, additive score of Table 2, softmax eq. 25,
context eq. 4) giving ``c^(w)``; ``concat(q^(c), c^(w))`` attends the character-level features
giving ``c^(c)``; the output is ``concat(c^(w), c^(c))``. Parameters are read from the module.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.attention_via_attention import AttentionViaAttention

F64 = torch.float64
TOL = 1e-10


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def additive(q: Tensor, k: Tensor, score: nn.Module) -> Tensor:
    """Table 2, one query/key pair: ``w^T tanh(W_1 q + W_2 k + b)``."""
    W1 = score.query_proj.weight.detach()
    W2 = score.key_proj.weight.detach()
    b = score.key_proj.bias.detach()
    w = score.out.weight.detach()[0]
    return w @ torch.tanh(W1 @ q + W2 @ k + b)


def projection(layer: nn.Module, d: int) -> Tensor:
    """``W`` of eq. (1) as a plain matrix (the identity when the module keeps the features)."""
    weight = getattr(layer, "weight", None)
    return torch.eye(d, dtype=F64) if weight is None else weight.detach()


def module_literal(q: Tensor, F: Tensor, real: Tensor, module: nn.Module) -> tuple[Tensor, Tensor]:
    """One general attention module (eq. 1-4, 25) for one query: ``(context, weights [N])``."""
    W_K = projection(module.key_proj, F.shape[-1])
    W_V = projection(module.value_proj, F.shape[-1])
    keys = [W_K @ F[l] for l in range(F.shape[0])]
    values = [W_V @ F[l] for l in range(F.shape[0])]
    weights = torch.zeros(F.shape[0], dtype=F64)
    idx = [l for l in range(F.shape[0]) if real[l]]
    if not idx:
        return torch.zeros(W_V.shape[0], dtype=F64), weights
    e = torch.stack([additive(q, keys[l], module.score) for l in idx])
    a = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
    weights[idx] = a
    return sum(a[j] * values[l] for j, l in enumerate(idx)), weights


def ava_literal(
    model: AttentionViaAttention, q: Tensor, Fw: Tensor, Fc: Tensor, mw: Tensor, mc: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Fig. 7 for ``q [B, M, d_q]``: ``(context, word weights, character weights)``."""
    contexts, weights_w, weights_c = [], [], []
    for b in range(q.shape[0]):
        for m in range(q.shape[1]):
            c_w, a_w = module_literal(q[b, m], Fw[b], mw[b], model.high_attention)
            query_c = torch.cat([q[b, m], c_w])  # concat(q^(c), c^(w))
            c_c, a_c = module_literal(query_c, Fc[b], mc[b], model.low_attention)
            contexts.append(torch.cat([c_w, c_c]))  # concat(c^(w), c^(c))
            weights_w.append(a_w)
            weights_c.append(a_c)
    shape = (q.shape[0], q.shape[1])
    return (
        torch.stack(contexts).reshape(*shape, -1),
        torch.stack(weights_w).reshape(*shape, -1),
        torch.stack(weights_c).reshape(*shape, -1),
    )


B, M, D_Q, D_W, D_C, N_W, N_C = 3, 2, 4, 5, 3, 4, 7
HIGH_MASK = torch.tensor([[True] * 4, [True, True, False, False], [False] * 4])
LOW_MASK = torch.tensor(
    [[True] * 7, [False, True, True, True, False, True, False], [True] + [False] * 6]
)


def inputs(seed: int) -> tuple[Tensor, Tensor, Tensor]:
    torch.manual_seed(seed)
    q = torch.randn(B, M, D_Q, dtype=F64)
    return q, torch.randn(B, N_W, D_W, dtype=F64), torch.randn(B, N_C, D_C, dtype=F64)


def test_fig7_word_context_joins_the_character_query():
    q, Fw, Fc = inputs(0)
    model = AttentionViaAttention(
        D_Q, D_W, D_C, d_high_key=6, d_high_value=3, d_low_key=4, d_low_value=2, d_hidden=5
    ).double()
    assert model.low_attention.d_query == D_Q + 3  # concat(q^(c), c^(w))
    out = model(q, Fw, Fc, high_mask=HIGH_MASK, low_mask=LOW_MASK, return_weights=True)
    context, a_w, a_c = ava_literal(model, q, Fw, Fc, HIGH_MASK, LOW_MASK)
    assert out.context.shape == (B, M, 3 + 2)
    close(out.context, context)
    close(out.high_weights, a_w)
    close(out.low_weights, a_c)
    close(out.high_context, context[..., :3])
    close(out.low_context, context[..., 3:])


def test_features_are_keys_and_values_by_default_and_single_queries_drop_the_axis():
    q, Fw, Fc = inputs(1)
    model = AttentionViaAttention(D_Q, D_W, D_C).double()
    out = model(q[:, 0], Fw, Fc, return_weights=True)
    assert out.context.shape == (B, D_W + D_C)
    assert out.high_weights.shape == (B, N_W) and out.low_weights.shape == (B, N_C)
    everything = torch.ones(B, N_W, dtype=torch.bool), torch.ones(B, N_C, dtype=torch.bool)
    context, a_w, a_c = ava_literal(model, q[:, :1], Fw, Fc, *everything)
    close(out.context, context[:, 0])
    close(out.high_weights, a_w[:, 0])
    close(out.low_weights, a_c[:, 0])


def test_the_word_level_steers_the_character_level():
    """Changing only the word features changes the character weights (through ``c^(w)``)."""
    q, Fw, Fc = inputs(2)
    model = AttentionViaAttention(D_Q, D_W, D_C).double()
    a = model(q, Fw, Fc, return_weights=True).low_weights
    b = model(q, Fw + 1.0, Fc, return_weights=True).low_weights
    assert (a - b).abs().max() > 1e-6


def test_padding_gets_exactly_zero_weight_and_zero_gradient():
    q, Fw, Fc = inputs(3)
    Fw.requires_grad_(True)
    Fc.requires_grad_(True)
    model = AttentionViaAttention(D_Q, D_W, D_C, d_high_value=3).double()
    out = model(q, Fw, Fc, high_mask=HIGH_MASK, low_mask=LOW_MASK, return_weights=True)
    assert torch.all(out.high_weights.transpose(0, 1)[:, ~HIGH_MASK] == 0)
    assert torch.all(out.low_weights.transpose(0, 1)[:, ~LOW_MASK] == 0)
    out.context.square().sum().backward()
    assert torch.all(Fw.grad[~HIGH_MASK] == 0) and torch.all(Fc.grad[~LOW_MASK] == 0)
    assert Fw.grad[HIGH_MASK].abs().sum() > 0 and Fc.grad[LOW_MASK].abs().sum() > 0
    # Example 2 has no real word: c^(w) = 0, and the characters are attended with concat(q, 0).
    assert torch.all(out.high_context[2] == 0) and torch.all(out.high_weights[2] == 0)
    assert not torch.isnan(out.context).any()
    alone = model.low_attention(
        torch.cat([q[2:], torch.zeros(1, M, 3, dtype=F64)], -1), Fc[2:], LOW_MASK[2:].unsqueeze(1)
    )
    close(out.low_context[2:], alone.context)


def test_no_real_character_gives_zeros_never_nan():
    q, Fw, Fc = inputs(4)
    Fc.requires_grad_(True)
    model = AttentionViaAttention(D_Q, D_W, D_C).double()
    none = torch.zeros(B, N_C, dtype=torch.bool)
    out = model(q, Fw, Fc, low_mask=none, return_weights=True)
    assert torch.all(out.low_context == 0) and torch.all(out.low_weights == 0)
    out.context.sum().backward()
    assert torch.all(Fc.grad == 0)


def test_gradcheck_inputs_and_parameters():
    torch.manual_seed(5)
    model = AttentionViaAttention(2, 3, 2, d_high_key=2, d_high_value=2, d_hidden=2).double()
    q = torch.randn(2, 2, 2, dtype=F64, requires_grad=True)
    Fw = torch.randn(2, 3, 3, dtype=F64, requires_grad=True)
    Fc = torch.randn(2, 4, 2, dtype=F64, requires_grad=True)
    mw = torch.tensor([[True, True, False], [True, True, True]])
    mc = torch.tensor([[True, False, True, True], [True, True, False, False]])

    def f(q: Tensor, Fw: Tensor, Fc: Tensor, *_: Tensor) -> tuple[Tensor, ...]:
        # gradcheck perturbs the parameters in place; the module reads them directly.
        out = model(q, Fw, Fc, high_mask=mw, low_mask=mc, return_weights=True)
        return out.context, out.high_weights, out.low_weights

    assert gradcheck(f, (q, Fw, Fc, *model.parameters()), eps=1e-6, atol=1e-6)


SCORES = ["additive", "dot", "scaled_dot", "general", "biased_general", "activated_general"]
SCORES += ["cosine", "euclidean"]


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("align", ["softmax", "sparsemax", "entmax15", "topk", "hard"])
def test_any_score_and_alignment(score: str, align: str):
    """Same-size scores need ``d_k^(w) = d_q`` and ``d_k^(c) = d_q + d_v^(w)``: set by projections."""
    q, Fw, Fc = inputs(6)
    model = AttentionViaAttention(
        D_Q, D_W, D_C, d_high_key=D_Q, d_low_key=D_Q + D_W, score=score, align=align
    ).double()
    out = model(q, Fw, Fc, high_mask=HIGH_MASK, low_mask=LOW_MASK, return_weights=True)
    assert out.context.shape == (B, M, D_W + D_C)
    assert torch.all(out.high_weights.transpose(0, 1)[:, ~HIGH_MASK] == 0)
    assert torch.all(out.low_weights.transpose(0, 1)[:, ~LOW_MASK] == 0)
    close(out.high_weights.sum(-1)[:2], torch.ones(2, M, dtype=F64), 1e-12)
    close(out.low_weights.sum(-1), torch.ones(B, M, dtype=F64), 1e-12)
    close(out.high_context, out.high_weights @ Fw, 1e-12)  # eq. (4), W_V = I
    close(out.low_context, out.low_weights @ Fc, 1e-12)


def test_one_score_and_alignment_per_level():
    model = AttentionViaAttention(4, 4, 3, score=("dot", "additive"), align=("softmax", "topk"))
    assert isinstance(model.high_attention.score, ak.scores.Dot)
    assert isinstance(model.low_attention.score, ak.scores.Additive)
    assert model.low_attention.score.d_query == 8
    assert isinstance(model.low_attention.align, ak.align.TopK)


def test_taxonomy_row():
    row = ak.taxonomy.describe(AttentionViaAttention(4, 4, 3))
    assert str(row) == (
        "Singular | Attention-via-Attention | Single-Representational | Additive | Global | "
        "Single-Dimensional | Basic | Singular"
    )
    assert row.names()["feature_levels"] == {"Attention-via-Attention"}


def test_bad_input_names_the_shapes():
    model = AttentionViaAttention(4, 5, 3)
    Fw, Fc = torch.randn(2, 6, 5), torch.randn(2, 9, 3)
    with pytest.raises(ValueError, match=r"query must be \[B, M, 4\]"):
        model(torch.randn(2, 3), Fw, Fc)
    with pytest.raises(ValueError, match=r"high_mask must have shape \(2, 6\)"):
        model(torch.randn(2, 4), Fw, Fc, high_mask=torch.ones(2, 9, dtype=torch.bool))
    with pytest.raises(TypeError, match="low_mask must be a bool"):
        model(torch.randn(2, 4), Fw, Fc, low_mask=torch.ones(2, 9))
    with pytest.raises(ValueError, match="d_f=3"):
        model(torch.randn(2, 4), Fw, torch.randn(2, 9, 4))
    with pytest.raises(ValueError, match="batch"):
        model(torch.randn(3, 4), Fw, Fc)
