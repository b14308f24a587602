"""``MultiRepresentationalAttention`` against the survey's eq. (21)-(22) (§3.1.3; Kiela et al.).

The expected values are the equations written out in float64 loops per token: eq. (21)
``x^(t_i) = W_ei x^(e_i) + b_ei``, scores of the learned query against each ``x^(t_i)`` (additive,
Table 2; or Kiela et al.'s ``a · x^(t_i) + b``), a softmax over the real representations (eq. 25)
and eq. (22) ``x^(e) = Σ_i a_i x^(t_i)``. Parameters are read from the module as plain tensors.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.hierarchical import RecurrentEncoder
from attnkit.mechanisms.multi_representational import MultiRepresentationalAttention

F64 = torch.float64
TOL = 1e-10
SIZES = (5, 3, 4)  # d_e1, d_e2, d_e3
B, L, D_T = 2, 4, 3
TOKENS = torch.tensor([[True, True, True, False], [True, False, True, True]])


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def additive(q: Tensor, k: Tensor, score: nn.Module) -> Tensor:
    """Table 2, one query/key pair: ``w^T tanh(W_1 q + W_2 k + b)``."""
    W1 = score.query_proj.weight.detach()
    W2 = score.key_proj.weight.detach()
    b = score.key_proj.bias.detach()
    w = score.out.weight.detach()[0]
    return w @ torch.tanh(W1 @ q + W2 @ k + b)


def eq21(model: MultiRepresentationalAttention, embeddings: list[Tensor]) -> list[Tensor]:
    """``x^(t_i) = W_ei x^(e_i) + b_ei`` for every token, in a loop: E tensors ``[B, L, d_t]``."""
    out = []
    for proj, x in zip(model.projections, embeddings, strict=True):
        W, b = proj.weight.detach(), proj.bias.detach()
        t = torch.zeros(*x.shape[:-1], W.shape[0], dtype=F64)
        for idx in itertools.product(*map(range, x.shape[:-1])):
            t[idx] = W @ x[idx] + b
        out.append(t)
    return out


def eq22(
    transformed: list[Tensor], keys: list[Tensor], allowed: Tensor, score_fn
) -> tuple[Tensor, Tensor]:
    """``x^(e) = Σ_i a_i x^(t_i)`` with ``a = softmax_i(score(k_i))`` over the allowed ``i``."""
    lead = transformed[0].shape[:-1]
    meta = torch.zeros(*lead, transformed[0].shape[-1], dtype=F64)
    weights = torch.zeros(*lead, len(transformed), dtype=F64)
    for idx in itertools.product(*map(range, lead)):
        real = [i for i in range(len(transformed)) if allowed[idx][i]]
        if not real:
            continue
        e = torch.stack([score_fn(keys[i][idx]) for i in real])
        a = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
        for j, i in enumerate(real):
            weights[idx][i] = a[j]
            meta[idx] += a[j] * transformed[i][idx]
    return meta, weights


def embeddings(seed: int, lead: tuple[int, ...] = (B, L)) -> list[Tensor]:
    torch.manual_seed(seed)
    return [torch.randn(*lead, d, dtype=F64) for d in SIZES]


def test_eq21_size_normalised_embeddings():
    model = MultiRepresentationalAttention(SIZES, D_T).double()
    xs = embeddings(0)
    assert [tuple(p.weight.shape) for p in model.projections] == [(D_T, d) for d in SIZES]
    transformed = model.transform(xs)  # [B, L, E, d_t]
    assert transformed.shape == (B, L, 3, D_T)
    for i, t in enumerate(eq21(model, xs)):
        close(transformed[..., i, :], t)


def test_eq22_meta_embedding_with_the_additive_score():
    model = MultiRepresentationalAttention(SIZES, D_T, d_hidden=4).double()
    xs = embeddings(1)
    out = model(xs, TOKENS, return_weights=True)
    t = eq21(model, xs)
    u = model.query.detach()
    allowed = TOKENS.unsqueeze(-1).expand(B, L, 3)
    meta, weights = eq22(t, t, allowed, lambda k: additive(u, k, model.score))
    assert out.context.shape == (B, L, D_T) and out.weights.shape == (B, L, 3)
    close(out.context, meta)
    close(out.weights, weights)


def test_kiela_dme_is_the_dot_score_with_the_learned_query():
    """Kiela et al.: ``a_i = softmax_i(a · x^(t_i) + b)``; ``b`` cancels, ``a`` is the query."""
    model = MultiRepresentationalAttention(SIZES, D_T, score="dot").double()
    xs = embeddings(2)
    out = model(xs, return_weights=True)
    t = eq21(model, xs)
    a, b = model.query.detach(), 0.7
    meta, weights = eq22(t, t, torch.ones(B, L, 3, dtype=torch.bool), lambda k: a @ k + b)
    close(out.context, meta)
    close(out.weights, weights)


def test_contextual_variant_scores_bilstm_states_and_averages_the_embeddings():
    """CDME: keys = BiLSTM states along each embedding's (real) token sequence; values x^(t_i)."""
    torch.manual_seed(3)
    lstm = nn.LSTM(D_T, 2, batch_first=True, bidirectional=True).double()
    model = MultiRepresentationalAttention(
        SIZES, D_T, context_encoder=RecurrentEncoder(lstm), d_context=4
    ).double()
    xs = embeddings(3)
    out = model(xs, TOKENS, return_weights=True)
    t = eq21(model, xs)
    keys = []
    for t_i in t:  # the same BiLSTM over each embedding's sequence of real tokens
        h = torch.zeros(B, L, 4, dtype=F64)
        for b in range(B):
            real = TOKENS[b].nonzero().flatten()
            h[b, real] = lstm(t_i[b, real].unsqueeze(0))[0][0].detach()
        keys.append(h)
    u = model.query.detach()
    allowed = TOKENS.unsqueeze(-1).expand(B, L, 3)
    meta, weights = eq22(t, keys, allowed, lambda k: additive(u, k, model.score))
    close(out.context, meta)
    close(out.weights, weights)


def test_padding_gets_exactly_zero_weight_and_zero_gradient():
    model = MultiRepresentationalAttention(SIZES, D_T).double()
    xs = [x.requires_grad_() for x in embeddings(4)]
    present = torch.tensor([[[True, False, True]] * L, [[False, True, False]] * L])
    out = model(xs, TOKENS, present, return_weights=True)
    allowed = TOKENS.unsqueeze(-1) & present
    assert torch.all(out.weights[~allowed] == 0)
    assert torch.all(out.weights[~TOKENS] == 0) and torch.all(out.context[~TOKENS] == 0)
    close(out.weights.sum(-1)[TOKENS], torch.ones(int(TOKENS.sum()), dtype=F64), 1e-12)
    out.context.square().sum().backward()
    for i, x in enumerate(xs):
        assert torch.all(x.grad[~allowed[..., i]] == 0)
        assert x.grad[allowed[..., i]].abs().sum() > 0
    # eq. (22) over the allowed representations only.
    t = eq21(model, [x.detach() for x in xs])
    u = model.query.detach()
    meta, weights = eq22(t, t, allowed, lambda k: additive(u, k, model.score))
    close(out.context, meta)
    close(out.weights, weights)


def test_a_token_with_no_representation_gives_zeros_never_nan():
    model = MultiRepresentationalAttention(SIZES, D_T).double()
    xs = [x.requires_grad_() for x in embeddings(5)]
    out = model(xs, representation_mask=torch.zeros(3, dtype=torch.bool), return_weights=True)
    assert torch.all(out.context == 0) and torch.all(out.weights == 0)
    out.context.sum().backward()
    assert all(torch.all(x.grad == 0) for x in xs)


def test_one_token_per_example():
    model = MultiRepresentationalAttention(SIZES, D_T).double()
    xs = embeddings(6, lead=(B,))
    out = model(xs, representation_mask=torch.tensor([True, True, False]), return_weights=True)
    assert out.context.shape == (B, D_T) and out.weights.shape == (B, 3)
    t = eq21(model, xs)
    u = model.query.detach()
    allowed = torch.tensor([[True, True, False]] * B)
    meta, weights = eq22(t, t, allowed, lambda k: additive(u, k, model.score))
    close(out.context, meta)
    close(out.weights, weights)


def test_gradcheck_inputs_and_parameters():
    torch.manual_seed(7)
    lstm = nn.LSTM(2, 1, batch_first=True, bidirectional=True).double()
    for encoder in (None, RecurrentEncoder(lstm)):
        model = MultiRepresentationalAttention(
            (3, 2), 2, d_hidden=2, context_encoder=encoder, d_context=2
        ).double()
        xs = [torch.randn(2, 3, d, dtype=F64, requires_grad=True) for d in (3, 2)]
        tokens = torch.tensor([[True, True, False], [True, True, True]])

        def f(x1: Tensor, x2: Tensor, *_: Tensor, model=model, tokens=tokens) -> tuple[Tensor, ...]:
            # gradcheck perturbs the parameters in place; the module reads them directly.
            out = model([x1, x2], tokens, return_weights=True)
            return out.context, out.weights

        assert gradcheck(f, (*xs, *model.parameters()), eps=1e-6, atol=1e-6)


SCORES = ["additive", "dot", "scaled_dot", "general", "biased_general", "activated_general"]
SCORES += ["cosine", "euclidean"]


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("align", ["softmax", "sparsemax", "entmax15", "topk", "hard"])
def test_any_score_and_alignment(score: str, align: str):
    model = MultiRepresentationalAttention(SIZES, D_T, score=score, align=align).double()
    xs = embeddings(8)
    present = torch.tensor([True, False, True])
    out = model(xs, TOKENS, present, return_weights=True)
    assert torch.all(out.weights[..., 1] == 0) and torch.all(out.weights[~TOKENS] == 0)
    close(out.weights.sum(-1)[TOKENS], torch.ones(int(TOKENS.sum()), dtype=F64), 1e-12)
    # eq. (22) with whatever weights the alignment gave.
    expected = torch.einsum("ble,bled->bld", out.weights, model.transform(xs))
    close(out.context, expected, 1e-12)


def test_taxonomy_is_kiela_et_al_row_of_table3():
    row = ak.taxonomy.describe(MultiRepresentationalAttention(SIZES, D_T))
    assert str(row) == (
        "Singular | Single-Level | Multi-Representational | Additive | Global | "
        "Single-Dimensional | Self-Attentive | Singular"
    )


def test_bad_input_names_the_shapes():
    model = MultiRepresentationalAttention(SIZES, D_T)
    xs = [torch.randn(B, L, d) for d in SIZES]
    with pytest.raises(ValueError, match=r"expected 3 embeddings \[\.\.\., 5\]"):
        model(xs[:2])
    with pytest.raises(ValueError, match="same leading shape"):
        model([xs[0], xs[1], torch.randn(B, L + 1, 4)])
    with pytest.raises(TypeError, match="sequence of 3 tensors"):
        model(torch.randn(B, L, 5))
    with pytest.raises(ValueError, match=r"mask must have the tokens' shape \(2, 4\)"):
        model(xs, torch.ones(B, L + 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        model(xs, torch.ones(B, L))
    with pytest.raises(ValueError, match=r"does not broadcast to \[\*tokens, E\]"):
        model(xs, representation_mask=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="positive ints"):
        MultiRepresentationalAttention([], D_T)
    contextual = MultiRepresentationalAttention(
        SIZES, D_T, context_encoder=RecurrentEncoder(nn.GRU(D_T, 2, batch_first=True))
    )
    with pytest.raises(ValueError, match=r"context_encoder must return \(6, 4, 3\)"):
        contextual(xs)
    with pytest.raises(ValueError, match="token sequences"):
        contextual([x[:, 0] for x in xs])
