"""Multi-hop attention (survey §3.3.2, eq. 41-42, Fig. 10) against the survey's formulas.

The expected values are the hops written out in float64 loops over the batch, the queries, the hops
and the feature vectors: ``c^(0)`` the mean of the real value vectors, then per hop
``q^(s+1) = transform(q^(s), c^(s))`` (eq. 41), ``e_l = score(concat(q^(s+1), c^(s)), k_l)``
(eq. 42), a softmax (eq. 25) over the real feature vectors and ``c^(s+1) = Σ_l a_l v_l`` (eq. 4).
Parameters are read from the module as plain tensors.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.multi_hop import (
    AttentiveQueryTransform,
    LinearQueryTransform,
    MultiHopAttention,
)

F64 = torch.float64
TOL = 1e-10
B, M, N, N_Q = 3, 2, 5, 4
D_Q, D_F, D_K, D_V = 3, 4, 5, 2
# Example 0 is full, example 1 has 3 real vectors, example 2 has none.
PADDING = torch.tensor([[True] * N, [True] * 3 + [False] * 2, [False] * N])
QUERY_PADDING = torch.tensor([[True] * N_Q, [True, True, False, False], [True] + [False] * 3])

ScoreFn = Callable[[Tensor, Tensor], Tensor]  # (one query, one key) -> scalar
TransformFn = Callable[[Tensor, Tensor, int], Tensor]  # (q^(s), c^(s), example b) -> q^(s+1)


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


def weight(module: nn.Module) -> Tensor | None:
    w = getattr(module, "weight", None)
    return None if w is None else w.detach()


def project(W: Tensor | None, x: Tensor) -> Tensor:
    return x if W is None else W @ x


def additive(score: nn.Module) -> ScoreFn:
    """Table 2: ``w^T tanh(W_1 q + W_2 k + b)`` with the score module's parameters."""
    W1, W2 = score.query_proj.weight.detach(), score.key_proj.weight.detach()
    b, w = score.key_proj.bias.detach(), score.out.weight.detach()[0]
    return lambda q, k: w @ torch.tanh(W1 @ q + W2 @ k + b)


def dot(q: Tensor, k: Tensor) -> Tensor:
    return sum(q[j] * k[j] for j in range(k.shape[0]))


def general(score: nn.Module) -> ScoreFn:
    """Table 2: ``k^T W q``."""
    W = score.query_proj.weight.detach()
    return lambda q, k: dot(W @ q, k)


def pick(source: str, q: Tensor, c: Tensor) -> Tensor:
    return {"query": q, "context": c, "concat": torch.cat([q, c])}[source]


def linear_transform(t: LinearQueryTransform) -> TransformFn:
    """Eq. (41) with a learned layer: ``tanh(W x + b)``, ``x`` the query, context or both."""
    W, b = t.linear.weight.detach(), t.linear.bias.detach()
    return lambda q, c, _: torch.tanh(W @ pick(t.source, q, c) + b)


def attentive_transform(
    t: AttentiveQueryTransform, score: ScoreFn, qf: Tensor, q_mask: Tensor
) -> TransformFn:
    """Eq. (41) as [85]: attention over the query's feature vectors; its context is the query."""

    def fn(q: Tensor, c: Tensor, b: int) -> Tensor:
        x = pick(t.source, q, c)
        real = [j for j in range(qf.shape[1]) if q_mask[b, j]]
        if not real:
            return torch.zeros(qf.shape[-1], dtype=F64)
        a = softmax_list([score(x, qf[b, j]) for j in real])
        return sum(a_j * qf[b, j] for a_j, j in zip(a, real, strict=True))

    return fn


def multi_hop_literal(
    module: MultiHopAttention,
    query: Tensor,
    F: Tensor,
    mask: Tensor,
    transforms: list[TransformFn],
    scores: list[ScoreFn],
) -> dict[str, Tensor]:
    """Eq. (41)-(42) in loops for ``query [B, M, d_q]``; ``transforms[s]``/``scores[s]`` is hop
    ``s``'s (the same function for every hop when weights are shared)."""
    W_K, W_V = weight(module.key_proj), weight(module.value_proj)
    b_size, m_size, _ = query.shape
    n, hops, d_v = F.shape[1], module.num_hops, module.d_value
    c0 = torch.zeros(b_size, d_v, dtype=F64)
    contexts = torch.zeros(b_size, hops, m_size, d_v, dtype=F64)
    queries = torch.zeros(b_size, hops, m_size, module.d_query, dtype=F64)
    weights = torch.zeros(b_size, hops, m_size, n, dtype=F64)
    for b in range(b_size):
        real = [l for l in range(n) if mask[b, l]]
        keys = {l: project(W_K, F[b, l]) for l in real}
        values = {l: project(W_V, F[b, l]) for l in real}
        if real:
            c0[b] = sum(values[l] for l in real) / len(real)  # c^(0): the unweighted mean
        for i in range(m_size):
            q, c = query[b, i], c0[b]
            for s in range(hops):
                q = transforms[s](q, c, b)  # eq. (41)
                queries[b, s, i] = q
                if not real:
                    c = torch.zeros(d_v, dtype=F64)
                    continue
                a = softmax_list([scores[s](torch.cat([q, c]), keys[l]) for l in real])  # (42)
                c = sum(a_l * values[l] for a_l, l in zip(a, real, strict=True))
                for a_l, l in zip(a, real, strict=True):
                    weights[b, s, i, l] = a_l
                contexts[b, s, i] = c
    return {"initial_context": c0, "contexts": contexts, "queries": queries, "weights": weights}


def check(out, expected: dict[str, Tensor], single: bool = False) -> None:
    squeeze = (lambda t: t.squeeze(2)) if single else (lambda t: t)
    close(out.initial_context, expected["initial_context"])
    close(out.contexts, squeeze(expected["contexts"]))
    close(out.queries, squeeze(expected["queries"]))
    close(out.weights, squeeze(expected["weights"]))
    close(out.context, out.contexts[:, -1])


# --------------------------------------------------------------------------------------------
# Eq. (41)-(42)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["query", "context", "concat"])
def test_eq41_eq42_shared_weights(source: str):
    """The transform reads the query, the context or both; one set of weights for all hops."""
    torch.manual_seed(1)
    module = MultiHopAttention(
        D_Q, D_F, num_hops=3, d_key=D_K, d_value=D_V, transform=source
    ).double()
    assert len(module.transforms) == len(module.scores) == 1
    query, F = randn(11, B, M, D_Q), randn(12, B, N, D_F)
    out = module(query, F, PADDING, return_weights=True)
    transform, score = linear_transform(module.transforms[0]), additive(module.scores[0])
    expected = multi_hop_literal(module, query, F, PADDING, [transform] * 3, [score] * 3)
    assert out.contexts.shape == (B, 3, M, D_V) and out.weights.shape == (B, 3, M, N)
    assert out.context.shape == (B, M, D_V) and out.queries.shape == (B, 3, M, D_Q)
    check(out, expected)
    close(out.initial_query, query)


def test_per_hop_weights():
    """``share_weights=False``: hop ``s`` uses its own transform and score."""
    torch.manual_seed(2)
    module = MultiHopAttention(
        D_Q, D_F, num_hops=3, d_value=D_V, transform="concat", share_weights=False
    ).double()
    assert len(module.transforms) == len(module.scores) == 3
    assert not torch.equal(module.scores[0].out.weight, module.scores[1].out.weight)
    query, F = randn(13, B, M, D_Q), randn(14, B, N, D_F)
    out = module(query, F, PADDING, return_weights=True)
    transforms = [linear_transform(t) for t in module.transforms]
    scores = [additive(s) for s in module.scores]
    check(out, multi_hop_literal(module, query, F, PADDING, transforms, scores))


def test_parameters_grow_with_hops_only_when_not_shared():
    def count(**kwargs) -> int:
        return sum(p.numel() for p in MultiHopAttention(D_Q, D_F, **kwargs).parameters())

    assert count(num_hops=1) == count(num_hops=5)
    assert count(num_hops=5, share_weights=False) > count(num_hops=1, share_weights=False)


def test_per_hop_copies_of_a_given_object():
    """Objects given with shared weights are used as they are; with per-hop weights each hop gets
    its own copy, so no parameter is shared between hops or with the given object."""
    score, transform = ak.scores.General(D_Q + D_F, D_F), LinearQueryTransform(D_Q, D_F)
    shared = MultiHopAttention(D_Q, D_F, 2, score=score, transform=transform)
    assert shared.scores[0] is score and shared.transforms[0] is transform
    per_hop = MultiHopAttention(D_Q, D_F, 2, score=score, transform=transform, share_weights=False)
    ids = {id(p) for hop in (*per_hop.scores, *per_hop.transforms) for p in hop.parameters()}
    given = {id(p) for p in (*score.parameters(), *transform.parameters())}
    assert len(ids) == 2 * (1 + 2) and not ids & given


@pytest.mark.parametrize("source", ["query", "context", "concat"])
def test_attentive_transform_and_mean_initial_query(source: str):
    """[85]: ``q^(0)`` is the mean of the query's feature vectors, and each next query is the
    context of attention over them (asked by the query, the context or both)."""
    torch.manual_seed(3)
    transform = AttentiveQueryTransform(D_Q, D_V, source, score="general")
    module = MultiHopAttention(
        D_Q, D_F, num_hops=2, d_key=D_Q + D_V, d_value=D_V, score="dot", transform=transform
    ).double()
    qf, F = randn(15, B, N_Q, D_Q), randn(16, B, N, D_F)
    out = module(None, F, PADDING, query_features=qf, query_mask=QUERY_PADDING, return_weights=True)
    q0 = torch.zeros(B, D_Q, dtype=F64)
    for b in range(B):
        real = [qf[b, j] for j in range(N_Q) if QUERY_PADDING[b, j]]
        q0[b] = sum(real) / len(real)
    close(out.initial_query, q0)
    t = module.transforms[0]
    fn = attentive_transform(t, general(t.score), qf, QUERY_PADDING)
    expected = multi_hop_literal(module, q0.unsqueeze(1), F, PADDING, [fn] * 2, [dot] * 2)
    check(out, expected, single=True)


def test_single_query_equals_a_length_one_sequence():
    torch.manual_seed(4)
    module = MultiHopAttention(D_Q, D_F, num_hops=2).double()
    query, F = randn(17, B, D_Q), randn(18, B, N, D_F)
    single = module(query, F, PADDING, return_weights=True)
    sequence = module(query.unsqueeze(1), F, PADDING, return_weights=True)
    assert single.context.shape == (B, D_F) and single.weights.shape == (B, 2, N)
    close(single.context, sequence.context[:, 0])
    close(single.contexts, sequence.contexts[:, :, 0])
    close(single.weights, sequence.weights[:, :, 0])
    assert module(query, F).weights is None  # only when asked


def test_initial_context_is_the_mean_of_the_real_values():
    """``c^(0)``: the unweighted mean of the real value vectors (zeros when there is none)."""
    module = MultiHopAttention(D_Q, D_F, num_hops=1).double()  # W_V = I: values = features
    query, F = randn(19, B, D_Q), randn(20, B, N, D_F)
    close(module(query, F).initial_context, F.mean(1))
    c0 = module(query, F, PADDING).initial_context
    close(c0[0], F[0].mean(0))
    close(c0[1], F[1, :3].mean(0))
    assert torch.equal(c0[2], torch.zeros(D_F, dtype=F64))


# --------------------------------------------------------------------------------------------
# Any score and alignment; padding; gradients
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "score,align",
    [
        ("additive", "softmax"),
        ("general", "sparsemax"),
        ("biased_general", "entmax15"),
        ("activated_general", "topk"),
        ("scaled_dot", "softmax"),
        ("cosine", "sparsemax"),
        ("euclidean", "softmax"),
    ],
)
def test_any_score_and_alignment_respects_padding(score: str, align: str):
    torch.manual_seed(5)
    d_key = D_Q + D_V  # dot products and similarities need d_k = d_q + d_v
    module = MultiHopAttention(
        D_Q, D_F, num_hops=3, d_key=d_key, d_value=D_V, score=score, align=align
    ).double()
    F = randn(20, B, N, D_F).requires_grad_(True)
    out = module(randn(21, B, M, D_Q), F, PADDING, return_weights=True)
    assert torch.isfinite(out.contexts).all() and torch.isfinite(out.weights).all()
    padded = ~PADDING[:, None, None, :].expand_as(out.weights)
    assert torch.all(out.weights[padded] == 0)  # every hop
    assert torch.all(out.contexts[2] == 0) and torch.all(out.initial_context[2] == 0)
    out.context.sum().backward()
    assert torch.all(F.grad[~PADDING] == 0)
    row = ak.taxonomy.describe(module).names()
    assert row["query_multiplicity"] == {"Multi-Hop"}
    assert len(row["scoring"]) == 1 and len(row["alignment"]) == 1


def gradcheck_module(module: nn.Module, inputs: tuple[Tensor, ...], call) -> None:
    """``gradcheck`` with respect to ``inputs`` and every parameter of ``module`` (the parameters
    themselves, which gradcheck perturbs in place, so the module is called as users call it)."""
    params = [p for p in module.parameters() if p.requires_grad]
    n = len(inputs)

    def fn(*args: Tensor) -> tuple[Tensor, ...]:
        out = call(*args[:n])
        return out.context, out.contexts, out.queries

    inputs = tuple(x.requires_grad_(True) for x in inputs)
    assert gradcheck(fn, (*inputs, *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("share_weights", [True, False])
@pytest.mark.parametrize("score", ["additive", "general"])
def test_gradcheck_linear_transform(score: str, share_weights: bool):
    torch.manual_seed(6)
    module = MultiHopAttention(
        2, 3, num_hops=2, d_value=2, score=score, share_weights=share_weights
    ).double()
    mask = torch.tensor([[True, True, True], [True, True, False]])
    gradcheck_module(
        module,
        (randn(22, 2, 2), randn(23, 2, 3, 3)),
        lambda q, F: module(q, F, mask),
    )


def test_gradcheck_attentive_transform():
    torch.manual_seed(7)
    transform = AttentiveQueryTransform(2, 2, "concat", score="general")
    module = MultiHopAttention(
        2, 3, num_hops=2, d_value=2, score="general", transform=transform
    ).double()
    mask = torch.tensor([[True, True, True], [True, False, False]])
    q_mask = torch.tensor([[True, True], [True, False]])
    gradcheck_module(
        module,
        (randn(24, 2, 3, 3), randn(25, 2, 2, 2)),
        lambda F, qf: module(None, F, mask, query_features=qf, query_mask=q_mask),
    )


# --------------------------------------------------------------------------------------------
# Taxonomy and bad input
# --------------------------------------------------------------------------------------------


def test_taxonomy_rows():
    basic = MultiHopAttention(D_Q, D_F, num_hops=2)
    assert str(ak.taxonomy.describe(basic)) == (
        "Singular | Single-Level | Single-Representational | Additive | Global | "
        "Single-Dimensional | Basic | Multi-Hop"
    )
    # LCR-Rot-hop's hop structure (Table 3, Wallaart and Frasincar [43], without the rotation).
    specialized = MultiHopAttention(
        D_Q, D_F, num_hops=3, score="activated_general", query_type="Specialized"
    )
    assert str(ak.taxonomy.describe(specialized)) == (
        "Singular | Single-Level | Single-Representational | Activated General | Global | "
        "Single-Dimensional | Specialized | Multi-Hop"
    )


def test_bad_input():
    module = MultiHopAttention(D_Q, D_F, num_hops=2)
    query, F = randn(26, B, D_Q).float(), randn(27, B, N, D_F).float()
    with pytest.raises(ValueError, match=r"query \[B, d_q=3\] or \[B, M, d_q\], got \(3, 4\)"):
        module(torch.zeros(B, 4), F)
    with pytest.raises(ValueError, match=r"features \[B, N, 4\], got \(3, 5, 3\)"):
        module(query, F[..., :3])
    with pytest.raises(ValueError, match=r"mask \[B, N\] = \(3, 5\), got \(3, 4\)"):
        module(query, F, PADDING[:, :4])
    with pytest.raises(ValueError, match="bool features mask"):
        module(query, F, PADDING.float())
    with pytest.raises(ValueError, match="different batch sizes"):
        module(query[:2], F)
    with pytest.raises(ValueError, match="needs a query"):
        module(None, F)
    with pytest.raises(ValueError, match="query_features"):
        MultiHopAttention(D_Q, D_F, 2, transform=AttentiveQueryTransform(D_Q, D_F))(query, F)
    with pytest.raises(ValueError, match="num_hops"):
        MultiHopAttention(D_Q, D_F, num_hops=0)
    with pytest.raises(ValueError, match="transform source"):
        MultiHopAttention(D_Q, D_F, 2, transform="both")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transform must be"):
        MultiHopAttention(D_Q, D_F, 2, transform=copy.copy)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same size"):
        MultiHopAttention(D_Q, D_F, 2, score="dot")  # d_q + d_v = 7 but d_k = 4
    wrong = MultiHopAttention(D_Q, D_F, 2, transform=LinearQueryTransform(D_Q + 1, D_F, "context"))
    with pytest.raises(ValueError, match=r"hop 0's transform must return the next query"):
        wrong(query, F)
