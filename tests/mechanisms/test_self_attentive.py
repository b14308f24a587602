"""Self-attentive queries (survey §3.3.1, eq. 33-37) against the survey's formulas.

The expected values are the equations written out in float64 loops over the batch, the queries and
the feature vectors: eq. (33) ``w^T act(W k_l + b)``, eq. (34) ``q^T k_l`` with a learned ``q``,
eq. (35) ``q_i = W_Q f_i``, eq. (36) ``f_i^(new) = c_i`` and eq. (37)
``f_i^(new) = LayerNorm(f_i + c_i)``, each with a softmax (eq. 25) over the real feature vectors
and ``c = Σ_l a_l v_l`` (eq. 4). Parameters are read from the modules as plain tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.self_attentive import (
    ConstantQueryAttention,
    LearnedQueryAttention,
    SelfAttention,
)

F64 = torch.float64
TOL = 1e-10
B, N, D_F, D_K, D_V = 3, 6, 5, 4, 3
# Example 0 is full, example 1 has 4 real vectors, example 2 has none.
ScoreFn = Callable[[Tensor, Tensor], Tensor]  # (one query, one key) -> scalar score
PADDING = torch.tensor([[True] * N, [True] * 4 + [False] * 2, [False] * N])


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def features(seed: int, b: int = B, n: int = N, d: int = D_F) -> Tensor:
    torch.manual_seed(seed)
    return torch.randn(b, n, d, dtype=F64)


def weight(module: nn.Module) -> Tensor | None:
    """``W`` of an ``nn.Linear`` (the survey's orientation ``[out, in]``); None for identity."""
    w = getattr(module, "weight", None)
    return None if w is None else w.detach()


def project(W: Tensor | None, x: Tensor) -> Tensor:
    """``W x`` for one vector (``x`` itself when ``W`` is the identity)."""
    return x if W is None else W @ x


def softmax_list(e: list[Tensor]) -> list[Tensor]:
    """Eq. (25) over a list of scalar scores."""
    peak = max(float(x) for x in e)
    exp = [torch.exp(x - peak) for x in e]
    total = sum(exp)
    return [x / total for x in exp]


def pool_literal(
    score: ScoreFn, queries: Tensor, F: Tensor, mask: Tensor, W_K: Tensor | None, W_V: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Eq. (1)-(4) in loops: ``(context [B, r, d_v], weights [B, r, N])`` for queries ``[r, d_q]``."""
    b_size, n, _ = F.shape
    d_v = F.shape[-1] if W_V is None else W_V.shape[0]
    r = queries.shape[0]
    context = torch.zeros(b_size, r, d_v, dtype=F64)
    weights = torch.zeros(b_size, r, n, dtype=F64)
    for b in range(b_size):
        real = [l for l in range(n) if mask[b, l]]
        if not real:
            continue  # no feature vector: zero context, zero weights
        keys = {l: project(W_K, F[b, l]) for l in real}
        values = {l: project(W_V, F[b, l]) for l in real}
        for i in range(r):
            a = softmax_list([score(queries[i], keys[l]) for l in real])
            for a_l, l in zip(a, real, strict=True):
                weights[b, i, l] = a_l
                context[b, i] += a_l * values[l]
    return context, weights


def additive_parts(score: nn.Module) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(W_1, W_2, b, w)`` of Table 2's additive score as plain tensors."""
    return (
        score.query_proj.weight.detach(),
        score.key_proj.weight.detach(),
        score.key_proj.bias.detach(),
        score.out.weight.detach()[0],
    )


# --------------------------------------------------------------------------------------------
# Eq. (33): a constant query
# --------------------------------------------------------------------------------------------


def test_eq33_zero_constant_query_removes_the_query():
    """Additive score with the zero query is eq. (33): ``e_l = w^T tanh(W k_l + b)``."""
    torch.manual_seed(1)
    module = ConstantQueryAttention(D_F, query=torch.zeros(7), d_key=D_K, d_value=D_V).double()
    F = features(11)
    out = module(F, PADDING, return_weights=True)
    _, W, b, w = additive_parts(module.attend.score)

    def eq33(q: Tensor, k: Tensor) -> Tensor:
        return w @ torch.tanh(W @ k + b)  # the query does not appear

    W_K, W_V = weight(module.attend.key_proj), weight(module.attend.value_proj)
    context, weights = pool_literal(eq33, torch.zeros(1, 7, dtype=F64), F, PADDING, W_K, W_V)
    assert out.context.shape == (B, D_V) and out.weights.shape == (B, N)
    close(out.context, context[:, 0])
    close(out.weights, weights[:, 0])


def test_eq33_constant_query_is_the_bias():
    """The default all-ones query: eq. (33) with ``b' = W_1 1 + b`` (the survey: ``b`` read as
    the query)."""
    torch.manual_seed(2)
    module = ConstantQueryAttention(D_F).double()
    assert torch.equal(module.query, torch.ones(1, D_F, dtype=F64))
    F = features(12)
    out = module(F, PADDING, return_weights=True)
    W1, W, b, w = additive_parts(module.attend.score)
    b_prime = W1 @ torch.ones(D_F, dtype=F64) + b

    def eq33(q: Tensor, k: Tensor) -> Tensor:
        return w @ torch.tanh(W @ k + b_prime)

    context, weights = pool_literal(eq33, module.query, F, PADDING, None, None)
    close(out.context, context[:, 0])
    close(out.weights, weights[:, 0])


def test_constant_query_is_a_buffer_not_a_parameter():
    given = torch.tensor([[1.0, -1.0, 0.5, 2.0], [0.0, 1.0, 0.0, 1.0]])
    module = ConstantQueryAttention(D_F, query=given, d_key=D_K, score="dot")
    assert "query" in module.state_dict()
    assert all(p is not module.query for p in module.parameters())
    assert torch.equal(module.query, given)
    given.mul_(0)  # the module keeps its own copy
    assert module.query.abs().sum() > 0
    out = module(features(13).float(), return_weights=True)
    assert out.context.shape == (B, 2, D_F) and out.weights.shape == (B, 2, N)


# --------------------------------------------------------------------------------------------
# Eq. (34): learned queries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_queries", [None, 1, 3])
def test_eq34_learned_queries_with_the_dot_score(num_queries: int | None):
    """``e_l = q^T k_l`` with a trainable ``q [d_k]`` (eq. 34), ``k_l = W_K f_l`` (eq. 1)."""
    torch.manual_seed(3)
    module = LearnedQueryAttention(D_F, num_queries=num_queries, d_key=D_K, d_value=D_V).double()
    assert isinstance(module.query, nn.Parameter)
    assert module.query.shape == (num_queries or 1, D_K)
    F = features(14)
    out = module(F, PADDING, return_weights=True)

    def eq34(q: Tensor, k: Tensor) -> Tensor:
        return sum(q[j] * k[j] for j in range(k.shape[0]))

    W_K, W_V = weight(module.attend.key_proj), weight(module.attend.value_proj)
    context, weights = pool_literal(eq34, module.query.detach(), F, PADDING, W_K, W_V)
    if num_queries is None:
        context, weights = context[:, 0], weights[:, 0]
    assert out.context.shape == context.shape and out.weights.shape == weights.shape
    close(out.context, context)
    close(out.weights, weights)


def test_learned_queries_with_the_additive_score():
    """Any score: the additive score of Table 2 with the learned query as ``q``."""
    torch.manual_seed(4)
    module = LearnedQueryAttention(D_F, num_queries=2, d_query=3, score="additive").double()
    F = features(15)
    out = module(F, PADDING, return_weights=True)
    W1, W2, b, w = additive_parts(module.attend.score)

    def additive(q: Tensor, k: Tensor) -> Tensor:
        return w @ torch.tanh(W1 @ q + W2 @ k + b)

    context, weights = pool_literal(additive, module.query.detach(), F, PADDING, None, None)
    close(out.context, context)
    close(out.weights, weights)


def test_learned_queries_are_trained():
    torch.manual_seed(5)
    module = LearnedQueryAttention(D_F, d_key=D_K)
    out = module(features(16).float(), PADDING)
    out.context.pow(2).sum().backward()
    assert module.query.grad is not None and module.query.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------
# Eq. (35)-(37): QKV self-attention and new representations
# --------------------------------------------------------------------------------------------


def self_attention_literal(
    module: SelfAttention, F: Tensor, mask: Tensor, score: ScoreFn, causal: bool = False
) -> tuple[Tensor, Tensor]:
    """Eq. (35) and (1)-(4) in loops: ``(C [B, N, d_v], a [B, N, N])``, padded rows zero."""
    W_Q, W_K, W_V = (weight(p) for p in (module.query_proj, module.key_proj, module.value_proj))
    b_size, n, _ = F.shape
    C = torch.zeros(b_size, n, module.d_value, dtype=F64)
    a = torch.zeros(b_size, n, n, dtype=F64)
    for b in range(b_size):
        for i in range(n):
            if not mask[b, i]:
                continue
            q_i = W_Q @ F[b, i]  # eq. (35): a column of Q = W_Q F
            real = [l for l in range(n) if mask[b, l] and (not causal or l <= i)]
            weights = softmax_list([score(q_i, W_K @ F[b, l]) for l in real])
            for a_l, l in zip(weights, real, strict=True):
                a[b, i, l] = a_l
                C[b, i] += a_l * (W_V @ F[b, l])
    return C, a


def scaled_dot(q: Tensor, k: Tensor) -> Tensor:
    return sum(q[j] * k[j] for j in range(k.shape[0])) / math.sqrt(k.shape[0])


def test_eq35_eq36_every_feature_vector_is_a_query():
    """``Q = W_Q F`` (eq. 35), new representations ``f_i^(new) = c_i`` (eq. 36)."""
    torch.manual_seed(6)
    module = SelfAttention(D_F, d_key=D_K, d_value=D_V).double()
    assert module.query_proj.weight.shape == (D_K, D_F)  # W_Q [d_q, d_f]
    F = features(17)
    out = module(F, PADDING, return_weights=True)
    C, a = self_attention_literal(module, F, PADDING, scaled_dot)
    assert out.context.shape == (B, N, D_V) and out.weights.shape == (B, N, N)
    close(out.context, C)
    close(out.weights, a)
    close(out.output, C)  # eq. (36)


def test_eq37_residual_connection_and_layer_normalisation():
    """``f_i^(new) = Normalize(f_i^(old) + c_i)``, the normalisation layer being LayerNorm."""
    torch.manual_seed(7)
    module = SelfAttention(D_F, d_key=D_K, new_representation="residual_norm").double()
    with torch.no_grad():  # non-trivial gain and shift, so they are tested too
        module.norm.weight.uniform_(0.5, 1.5)
        module.norm.bias.uniform_(-0.5, 0.5)
    F = features(18)
    out = module(F, PADDING, return_weights=True)
    C, _ = self_attention_literal(module, F, PADDING, scaled_dot)
    gamma, beta, eps = module.norm.weight.detach(), module.norm.bias.detach(), module.norm.eps
    expected = torch.zeros(B, N, D_F, dtype=F64)
    for b in range(B):
        for i in range(N):
            if not PADDING[b, i]:
                continue  # padded rows stay zero
            x = F[b, i] + C[b, i]
            mean = sum(x) / D_F
            var = sum((x_j - mean) ** 2 for x_j in x) / D_F
            expected[b, i] = (x - mean) / torch.sqrt(var + eps) * gamma + beta
    assert out.output.shape == (B, N, D_F)
    close(out.context, C)
    close(out.output, expected)


def test_self_attention_with_the_additive_score_and_causal_mask():
    """Any score (additive, ``d_q != d_k``) and the decoder's causal mask."""
    torch.manual_seed(8)
    module = SelfAttention(D_F, d_query=3, d_key=D_K, d_value=D_V, score="additive").double()
    W1, W2, b, w = additive_parts(module.score)

    def additive(q: Tensor, k: Tensor) -> Tensor:
        return w @ torch.tanh(W1 @ q + W2 @ k + b)

    F = features(19)
    out = module(F, PADDING, causal=True, return_weights=True)
    C, a = self_attention_literal(module, F, PADDING, additive, causal=True)
    close(out.context, C)
    close(out.weights, a)
    assert torch.all(out.weights.triu(1) == 0)


# --------------------------------------------------------------------------------------------
# Any score and alignment; padding; gradients
# --------------------------------------------------------------------------------------------

SCORES = ["additive", "dot", "scaled_dot", "general", "biased_general", "cosine", "euclidean"]
ALIGNS = ["softmax", "sparsemax", "entmax15", "topk"]
SCORING = {
    "additive": "Additive",
    "dot": "Multiplicative",
    "scaled_dot": "Scaled-Multiplicative",
    "general": "General",
    "biased_general": "Biased General",
    "cosine": "Similarity",
    "euclidean": "Similarity",
}
ALIGNMENT = {"softmax": "Global", "sparsemax": "Sparse", "entmax15": "Sparse", "topk": "Top-k"}


def modules(score: str, align: str) -> list[nn.Module]:
    return [
        ConstantQueryAttention(D_F, query=torch.ones(2, D_K), d_key=D_K, score=score, align=align),
        LearnedQueryAttention(D_F, num_queries=2, d_key=D_K, score=score, align=align),
        SelfAttention(D_F, d_key=D_K, score=score, align=align),
    ]


@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("score", SCORES)
def test_any_score_and_alignment_respects_padding(score: str, align: str):
    """Every module with every score/alignment: padded vectors get exactly zero weight, an
    example with no real vector gives zeros (never NaN), and the taxonomy names both."""
    torch.manual_seed(9)
    F = features(20)
    for module in modules(score, align):
        module = module.double()
        out = module(F, PADDING, return_weights=True)
        assert torch.isfinite(out.context).all() and torch.isfinite(out.weights).all()
        keys_padded = ~PADDING.unsqueeze(1).expand_as(out.weights)
        assert torch.all(out.weights[keys_padded] == 0)
        assert torch.all(out.context[2] == 0)
        row = ak.taxonomy.describe(module).names()
        assert row["query_type"] == {"Self-Attentive"}
        assert row["scoring"] == {SCORING[score]} and row["alignment"] == {ALIGNMENT[align]}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_padded_vectors_get_no_gradient(index: int):
    torch.manual_seed(10)
    module = modules("additive", "softmax")[index].double()
    F = features(21).requires_grad_(True)
    out = module(F, PADDING)
    value = out.context if out.output is None else out.output
    (value * torch.randn_like(value)).sum().backward()
    assert torch.all(F.grad[~PADDING] == 0)
    assert F.grad[PADDING].abs().sum() > 0


def gradcheck_module(module: nn.Module, F: Tensor, mask: Tensor | None) -> None:
    """``gradcheck`` with respect to the features and every parameter of ``module``.

    The parameters themselves are gradcheck's inputs (it perturbs them in place), as in
    ``tests/core/test_gradcheck.py``, so the module is called exactly as users call it.
    """
    params = [p for p in module.parameters() if p.requires_grad]

    def fn(features: Tensor, *_: Tensor) -> tuple[Tensor, ...]:
        out = module(features, mask)
        extra = () if out.output is None else (out.output,)
        return (out.context, *extra)

    assert gradcheck(fn, (F.requires_grad_(True), *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("score", ["additive", "scaled_dot", "general"])
@pytest.mark.parametrize("kind", ["constant", "learned", "context", "residual_norm"])
def test_gradcheck(kind: str, score: str):
    torch.manual_seed(11)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    if kind == "constant":
        module = ConstantQueryAttention(3, query=torch.randn(2, 2), d_key=2, score=score)
    elif kind == "learned":
        module = LearnedQueryAttention(3, d_key=2, d_value=2, score=score)
    else:
        module = SelfAttention(3, d_key=2, score=score, new_representation=kind)
    gradcheck_module(module.double(), features(22, b=2, n=3, d=3), mask)


# --------------------------------------------------------------------------------------------
# Taxonomy and bad input
# --------------------------------------------------------------------------------------------


def test_taxonomy_rows():
    """Yang et al. [5]'s attention (per level) and the Transformer's self-attention, as Table 3
    names their dimensions (single level here)."""
    yang = ConstantQueryAttention(8, d_key=8)  # eq. (33): additive, self-attentive
    assert str(ak.taxonomy.describe(yang)) == (
        "Singular | Single-Level | Single-Representational | Additive | Global | "
        "Single-Dimensional | Self-Attentive | Singular"
    )
    assert str(ak.taxonomy.describe(LearnedQueryAttention(8))) == (
        "Singular | Single-Level | Single-Representational | Multiplicative | Global | "
        "Single-Dimensional | Self-Attentive | Singular"
    )
    transformer = SelfAttention(8, new_representation="residual_norm")
    assert str(ak.taxonomy.describe(transformer)) == (
        "Singular | Single-Level | Single-Representational | Scaled-Multiplicative | Global | "
        "Single-Dimensional | Self-Attentive | Singular"
    )


def test_bad_input():
    module = LearnedQueryAttention(D_F)
    F = features(23).float()
    with pytest.raises(ValueError, match=r"features \[B, N, d_f=5\], got \(3, 6, 4\)"):
        module(F[..., :4])
    with pytest.raises(ValueError, match="features"):
        module(F[0])
    with pytest.raises(ValueError, match=r"mask \[B, N\] = \(3, 6\), got \(3, 5\)"):
        module(F, PADDING[:, :5])
    with pytest.raises(ValueError, match="bool mask"):
        module(F, PADDING.long())
    with pytest.raises(ValueError, match="num_queries"):
        LearnedQueryAttention(D_F, num_queries=0)
    with pytest.raises(ValueError, match=r"query must be a tensor \[d_q\] or \[r, d_q\]"):
        ConstantQueryAttention(D_F, query=torch.ones(1, 2, 3))
    with pytest.raises(ValueError, match="same size"):
        ConstantQueryAttention(D_F, query=torch.ones(3), score="dot")  # d_q=3 vs d_k=5
    with pytest.raises(ValueError, match="d_v = d_f"):
        SelfAttention(D_F, d_value=3, new_representation="residual_norm")
    with pytest.raises(ValueError, match="new_representation"):
        SelfAttention(D_F, new_representation="sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same size"):
        SelfAttention(D_F, d_query=3, d_key=4)
    with pytest.raises(ValueError, match=r"features \[B, N, d_f=5\]"):
        SelfAttention(D_F)(F[..., :4])
