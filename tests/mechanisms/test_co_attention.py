"""Co-attention (survey §3.1.1, eq. 6-16) against literal float64 transcriptions of the survey.

The references below are written from the survey's equations alone, in its column-vector
convention where that is shorter (``K1c = K1^T [d_k, n_f]``), one example at a time and on the
real elements only (a padded element is simply absent), reading the modules' parameters as plain
tensors (``nn.Linear.weight`` is the survey's ``W [d_out, d_in]``).
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import attnkit as ak
from attnkit.mechanisms.co_attention import (
    AlternatingCoAttention,
    ConcatAffinity,
    InteractiveCoAttention,
    MultiGrainedCoAttention,
    ParallelCoAttention,
)

F64 = torch.float64
TOL = 1e-10
B, N1, N2 = 3, 5, 4
D1, D2 = 6, 4  # feature sizes of the two sets (different, to catch a swapped transpose)
MASK1 = torch.tensor(
    [[True] * 5, [True, True, True, False, False], [True, False, True, False, True]]
)
MASK2 = torch.tensor([[True] * 4, [True, True, False, False], [False] * 4])  # example 3: empty


def inputs(seed: int, d1: int = D1, d2: int = D2) -> tuple[Tensor, Tensor]:
    torch.manual_seed(seed)
    return torch.randn(B, N1, d1, dtype=F64), torch.randn(B, N2, d2, dtype=F64)


def close(x: Tensor, y: Tensor) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=TOL)


# --------------------------------------------------------------------------------------------
# literal formulas (one example, real elements only)
# --------------------------------------------------------------------------------------------


def P(t: Tensor) -> Tensor:
    return t.detach()


def project(linear: torch.nn.Module, F: Tensor) -> Tensor:
    """Eq. (1), rows are vectors: ``k_l = W_K f_l`` (identity when there is no ``W_K``)."""
    W = getattr(linear, "weight", None)
    if W is None:
        return F
    return torch.stack([P(W) @ f for f in F]) if len(F) else F.new_zeros(0, W.shape[0])


def softmax(e: Tensor) -> Tensor:
    """Eq. (25) over the real elements."""
    if e.numel() == 0:
        return e
    exp = torch.exp(e - e.max())
    return exp / exp.sum()


def weighted_sum(a: Tensor, V: Tensor) -> Tensor:
    """Eq. (4): ``c = Σ_l a_l v_l``; zero for an empty set."""
    c = V.new_zeros(V.shape[-1])
    for a_l, v_l in zip(a, V, strict=True):
        c = c + a_l * v_l
    return c


def additive(score, q: Tensor | None, K: Tensor) -> Tensor:
    """Eq. (6) ``e_l = w^T act(W1 q + W2 k_l + b)``; eq. (7) when ``q`` is None (no ``W1 q``)."""
    W1, W2 = P(score.query_proj.weight), P(score.key_proj.weight)
    b, w = P(score.key_proj.bias), P(score.out.weight[0])
    terms = [W2 @ k + b + (0 if q is None else W1 @ q) for k in K]
    return torch.stack([w @ torch.tanh(t) for t in terms]) if terms else K.new_zeros(0)


def general(score, q: Tensor, K: Tensor) -> Tensor:
    """Table 2: ``e_l = k_l^T W q``."""
    W = P(score.query_proj.weight)
    return torch.stack([k @ (W @ q) for k in K]) if len(K) else K.new_zeros(0)


def per_example(mask1: Tensor | None, mask2: Tensor | None, f1: Tensor, f2: Tensor):
    for b in range(f1.shape[0]):
        r1 = mask1[b] if mask1 is not None else torch.ones(f1.shape[1], dtype=torch.bool)
        r2 = mask2[b] if mask2 is not None else torch.ones(f2.shape[1], dtype=torch.bool)
        yield b, r1, r2, f1[b][r1], f2[b][r2]


def check_weights(weights: Tensor, real: Tensor, expected: Tensor) -> None:
    close(weights[real], expected)
    assert torch.equal(weights[~real], torch.zeros_like(weights[~real]))  # exactly zero


def alternating_ref(m: AlternatingCoAttention, F1: Tensor, F2: Tensor, score_fn=additive):
    """Eq. (7), (8), (9) on one example: ``{"0": (a, c), "2": (a, c), "1": (a, c)}``."""
    K1, V1 = project(m.key_proj1, F1), project(m.value_proj1, F1)
    K2, V2 = project(m.key_proj2, F2), project(m.value_proj2, F2)
    if m.query0 is None:
        e0 = score_fn(m.score1, None, K1)  # eq. (7)
    else:
        e0 = score_fn(m.score1, P(m.query0), K1)  # the learned query of eq. (34)
    a0 = softmax(e0)
    c0 = weighted_sum(a0, V1)
    a2 = softmax(score_fn(m.score2, c0, K2))  # eq. (8)
    c2 = weighted_sum(a2, V2)
    a1 = softmax(score_fn(m.score1, c2, K1))  # eq. (9)
    c1 = weighted_sum(a1, V1)
    return {"0": (a0, c0), "2": (a2, c2), "1": (a1, c1)}


def interactive_ref(m: InteractiveCoAttention, F1: Tensor, F2: Tensor, score_fn=additive):
    """Eq. (10)-(11) on one example."""
    K1, V1 = project(m.key_proj1, F1), project(m.value_proj1, F1)
    K2, V2 = project(m.key_proj2, F2), project(m.value_proj2, F2)
    mean1 = sum(K1) / len(K1) if len(K1) else K1.new_zeros(K1.shape[1])  # eq. (10)
    mean2 = sum(K2) / len(K2) if len(K2) else K2.new_zeros(K2.shape[1])
    a1 = softmax(score_fn(m.score1, mean2, K1))  # eq. (11)
    a2 = softmax(score_fn(m.score2, mean1, K2))
    return {"1": (a1, weighted_sum(a1, V1)), "2": (a2, weighted_sum(a2, V2))}


def affinity_bilinear(m: ParallelCoAttention, K1: Tensor, K2: Tensor) -> Tensor:
    """Eq. (12): ``A = tanh(K1^T W_A K2)``, element by element."""
    W_A = P(m.affinity.W_A)
    A = K1.new_zeros(len(K1), len(K2))
    for i in range(len(K1)):
        for j in range(len(K2)):
            A[i, j] = torch.tanh(K1[i] @ W_A @ K2[j])
    return A


def affinity_concat(m: ParallelCoAttention, K1: Tensor, K2: Tensor) -> Tensor:
    """Eq. (13): ``A_ij = w_A^T concat(k1_i, k2_j, k1_i ∘ k2_j)``."""
    w_A = P(m.affinity.w_A)
    A = K1.new_zeros(len(K1), len(K2))
    for i in range(len(K1)):
        for j in range(len(K2)):
            A[i, j] = w_A @ torch.cat([K1[i], K2[j], K1[i] * K2[j]])
    return A


def parallel_ref(m: ParallelCoAttention, F1: Tensor, F2: Tensor, affinity_fn):
    """Eq. (12)/(13), then (14)-(15) or (16), on one example."""
    K1, V1 = project(m.key_proj1, F1), project(m.value_proj1, F1)
    K2, V2 = project(m.key_proj2, F2), project(m.value_proj2, F2)
    A = affinity_fn(m, K1, K2)
    if m.aggregation == "additive":
        K1c, K2c = K1.T, K2.T  # the survey's column matrices [d_k, n_f]
        W1, W2, w1, w2 = P(m.W1.weight), P(m.W2.weight), P(m.w1), P(m.w2)
        e1 = w1 @ torch.tanh(W2 @ K2c @ A.T + W1 @ K1c)  # eq. (14)
        e2 = w2 @ torch.tanh(W1 @ K1c @ A + W2 @ K2c)  # eq. (15)
    else:  # eq. (16); a max over an empty set is 0
        e1 = A.max(1).values if A.shape[1] else A.new_zeros(A.shape[0])
        e2 = A.max(0).values if A.shape[0] else A.new_zeros(A.shape[1])
    a1, a2 = softmax(e1), softmax(e2)
    return {"1": (a1, weighted_sum(a1, V1)), "2": (a2, weighted_sum(a2, V2))}, A


def compare(out, refs_by_example, mask1, mask2, keys_to_set) -> None:
    """Every context and weight vector of ``out`` against the per-example references."""
    for b, r1, r2, refs in refs_by_example:
        for key, (a, c) in refs.items():
            close(out.contexts[key][b], c)
            real = r1 if keys_to_set[key] == 1 else r2
            check_weights(out.weights[key][b], real, a)


# --------------------------------------------------------------------------------------------
# alternating co-attention (eq. 6-9)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_alternating_additive_follows_eq_6_to_9(masked):
    """Eq. (7) query-less on set 1, (8) on set 2 with c^(0), (9) on set 1 with c^(2); the
    additive score of modules 1 and 3 is one (eq. 7 = eq. 6 without ``W1 q``)."""
    f1, f2 = inputs(0)
    m1, m2 = (MASK1, MASK2) if masked else (None, None)
    m = AlternatingCoAttention(D1, D2, d_key1=3, d_value1=5, d_value2=2, d_hidden=7).double()
    assert m.query0 is None  # additive: the query is absent
    out = m(f1, f2, m1, m2, return_weights=True)
    assert out.context.shape == (B, 5 + 2)
    close(out.context, torch.cat([out.contexts["1"], out.contexts["2"]], -1))
    refs = [
        (b, r1, r2, alternating_ref(m, x1, x2)) for b, r1, r2, x1, x2 in per_example(m1, m2, f1, f2)
    ]
    compare(out, refs, m1, m2, {"0": 1, "1": 1, "2": 2})


def test_alternating_query_less_module_with_a_score_that_needs_a_query():
    """A score with no additive ``W1 q`` term gets a learned query (eq. 34) in module 1."""
    f1, f2 = inputs(1)
    m = AlternatingCoAttention(D1, D2, score="general").double()
    assert m.query0 is not None and m.query0.shape == (D2,)
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    refs = [
        (b, r1, r2, alternating_ref(m, x1, x2, general))
        for b, r1, r2, x1, x2 in per_example(MASK1, MASK2, f1, f2)
    ]
    compare(out, refs, MASK1, MASK2, {"0": 1, "1": 1, "2": 2})


def test_alternating_per_set_scores_and_aligns():
    """``score=(set 1, set 2)``: set 1's for queries c^(2) [d_v2], set 2's for c^(0) [d_v1]."""
    m = AlternatingCoAttention(D1, D2, score=("additive", "general"), align=("softmax", "hard"))
    assert isinstance(m.score1, ak.scores.Additive) and isinstance(m.score2, ak.scores.General)
    assert m.score2.query_proj.weight.shape == (D2, D1)  # W [d_k2, d_q = d_v1]
    assert isinstance(m.align2, ak.align.Hard)
    assert str(ak.taxonomy.describe(m)).split(" | ")[3:5] == ["Additive + General", "Global + Hard"]


# --------------------------------------------------------------------------------------------
# interactive co-attention (eq. 10-11)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_interactive_follows_eq_10_11(masked):
    f1, f2 = inputs(2)
    m1, m2 = (MASK1, MASK2) if masked else (None, None)
    m = InteractiveCoAttention(D1, D2, d_key1=3, d_key2=5, d_value2=2).double()
    out = m(f1, f2, m1, m2, return_weights=True)
    assert out.context.shape == (B, D1 + 2)
    close(out.context, torch.cat([out.contexts["1"], out.contexts["2"]], -1))
    refs = [
        (b, r1, r2, interactive_ref(m, x1, x2)) for b, r1, r2, x1, x2 in per_example(m1, m2, f1, f2)
    ]
    compare(out, refs, m1, m2, {"1": 1, "2": 2})


def test_interactive_with_another_score():
    f1, f2 = inputs(3)
    m = InteractiveCoAttention(D1, D2, score="general").double()
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    refs = [
        (b, r1, r2, interactive_ref(m, x1, x2, general))
        for b, r1, r2, x1, x2 in per_example(MASK1, MASK2, f1, f2)
    ]
    compare(out, refs, MASK1, MASK2, {"1": 1, "2": 2})


# --------------------------------------------------------------------------------------------
# parallel co-attention (eq. 12-16)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("aggregation", ["additive", "max"])
@pytest.mark.parametrize("masked", [False, True])
def test_parallel_bilinear_affinity_eq_12(aggregation, masked):
    """Eq. (12), then eq. (14)-(15) or (16)."""
    f1, f2 = inputs(4)
    m1, m2 = (MASK1, MASK2) if masked else (None, None)
    m = ParallelCoAttention(D1, D2, d_value1=3, aggregation=aggregation, d_hidden=5).double()
    out = m(f1, f2, m1, m2, return_weights=True)
    assert out.context.shape == (B, 3 + D2) and out.affinity.shape == (B, N1, N2)
    refs = []
    for b, r1, r2, x1, x2 in per_example(m1, m2, f1, f2):
        ref, A = parallel_ref(m, x1, x2, affinity_bilinear)
        close(out.affinity[b][r1][:, r2], A)
        pair = r1[:, None] & r2[None, :]
        assert torch.equal(out.affinity[b][~pair], torch.zeros_like(out.affinity[b][~pair]))
        refs.append((b, r1, r2, ref))
    compare(out, refs, m1, m2, {"1": 1, "2": 2})


@pytest.mark.parametrize("aggregation", ["additive", "max"])
def test_parallel_concat_affinity_eq_13(aggregation):
    f1, f2 = inputs(5)
    m = ParallelCoAttention(D1, D2, d_key1=3, d_key2=3, score="concat", aggregation=aggregation)
    m = m.double()
    assert isinstance(m.affinity, ConcatAffinity) and m.affinity.w_A.shape == (9,)
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    refs = []
    for b, r1, r2, x1, x2 in per_example(MASK1, MASK2, f1, f2):
        ref, A = parallel_ref(m, x1, x2, affinity_concat)
        close(out.affinity[b][r1][:, r2], A)
        refs.append((b, r1, r2, ref))
    compare(out, refs, MASK1, MASK2, {"1": 1, "2": 2})


def test_parallel_any_score_as_affinity():
    """``A_ij = score(k1_i, k2_j)`` for a score of Table 2 (scaled dot, as Li et al.)."""
    f1, f2 = inputs(6, d1=4, d2=4)
    m = ParallelCoAttention(4, 4, score="scaled_dot", aggregation="max").double()
    out = m(f1, f2, MASK1, MASK2, return_weights=True)

    def scaled_dot(_, K1, K2):
        return K1 @ K2.T / 2.0  # sqrt(d_k) = 2

    refs = []
    for b, r1, r2, x1, x2 in per_example(MASK1, MASK2, f1, f2):
        ref, _ = parallel_ref(m, x1, x2, scaled_dot)
        refs.append((b, r1, r2, ref))
    compare(out, refs, MASK1, MASK2, {"1": 1, "2": 2})
    assert "Scaled-Multiplicative" in ak.taxonomy.describe(m).cells()[3]


# --------------------------------------------------------------------------------------------
# multi-grained co-attention
# --------------------------------------------------------------------------------------------


def test_multi_grained_four_contexts():
    """Coarse (interactive, eq. 10-11) + fine (parallel: concat affinity eq. 13, max eq. 16)."""
    f1, f2 = inputs(7, d1=4, d2=4)
    m = MultiGrainedCoAttention(4, 4, d_value2=3).double()
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    assert out.context.shape == (B, 4 + 3 + 4 + 3)
    keys = ["coarse1", "coarse2", "fine1", "fine2"]
    assert sorted(out.contexts) == keys
    close(out.context, torch.cat([out.contexts[k] for k in keys], -1))
    refs = []
    for b, r1, r2, x1, x2 in per_example(MASK1, MASK2, f1, f2):
        coarse = interactive_ref(m.coarse, x1, x2)
        fine, _ = parallel_ref(m.fine, x1, x2, affinity_concat)
        ref = {f"coarse{k}": v for k, v in coarse.items()}
        ref.update({f"fine{k}": v for k, v in fine.items()})
        refs.append((b, r1, r2, ref))
    compare(out, refs, MASK1, MASK2, {k: int(k[-1]) for k in keys})


def test_multi_grained_with_alternating_coarse_part():
    f1, f2 = inputs(8, d1=4, d2=4)
    m = MultiGrainedCoAttention(4, 4, coarse="alternating", aggregation="additive").double()
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    assert sorted(out.contexts) == ["coarse0", "coarse1", "coarse2", "fine1", "fine2"]
    for b, _, _, x1, x2 in per_example(MASK1, MASK2, f1, f2):
        ref = alternating_ref(m.coarse, x1, x2)
        close(out.contexts["coarse1"][b], ref["1"][1])
        fine, _ = parallel_ref(m.fine, x1, x2, affinity_concat)
        close(out.contexts["fine2"][b], fine["2"][1])


# --------------------------------------------------------------------------------------------
# padding, gradients, composability, taxonomy, bad input
# --------------------------------------------------------------------------------------------

MODULES = {
    "alternating": lambda: AlternatingCoAttention(D1, D2, d_key1=3, d_value2=2),
    "interactive": lambda: InteractiveCoAttention(D1, D2, d_key2=3),
    "parallel_additive": lambda: ParallelCoAttention(D1, D2, d_value1=2, d_hidden=3),
    "parallel_max": lambda: ParallelCoAttention(D1, D2, aggregation="max"),
    "multi_grained": lambda: MultiGrainedCoAttention(D1, D2, d_key1=4, d_key2=4),
}


@pytest.mark.parametrize("name", MODULES)
def test_padding_gets_zero_weight_and_zero_gradient(name):
    """Padded elements: weight exactly 0, gradient exactly 0, and no effect on the result."""
    torch.manual_seed(9)
    m = MODULES[name]().double()
    f1, f2 = inputs(9)
    f1.requires_grad_(True)
    f2.requires_grad_(True)
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    for key, w in out.weights.items():
        real = MASK2 if key.endswith("2") else MASK1
        assert torch.equal(w[~real], torch.zeros_like(w[~real])), key
    out.context.sum().backward()
    assert torch.equal(f1.grad[~MASK1], torch.zeros_like(f1.grad[~MASK1]))
    assert torch.equal(f2.grad[~MASK2], torch.zeros_like(f2.grad[~MASK2]))
    # changing padded elements changes nothing
    g1 = torch.where(MASK1[..., None], f1.detach(), torch.full_like(f1, 1e3))
    g2 = torch.where(MASK2[..., None], f2.detach(), torch.full_like(f2, -1e3))
    close(m(g1, g2, MASK1, MASK2).context, out.context.detach())


@pytest.mark.parametrize("name", MODULES)
def test_empty_sets_give_zeros_not_nan(name):
    torch.manual_seed(10)
    m = MODULES[name]().double()
    f1, f2 = inputs(10)
    none1, none2 = torch.zeros(B, N1, dtype=torch.bool), torch.zeros(B, N2, dtype=torch.bool)
    out = m(f1, f2, none1, none2, return_weights=True)
    assert torch.equal(out.context, torch.zeros_like(out.context))
    assert all(torch.equal(w, torch.zeros_like(w)) for w in out.weights.values())
    out = m(f1[:, :0], f2[:, :0], return_weights=True)  # zero-length sets
    assert torch.equal(out.context, torch.zeros_like(out.context))
    f1.requires_grad_(True)
    out = m(f1, f2, none1, none2)  # without weights: the engine's fast paths
    assert torch.equal(out.context, torch.zeros_like(out.context))
    out.context.sum().backward()
    assert torch.equal(f1.grad, torch.zeros_like(f1))


@pytest.mark.parametrize("name", MODULES)
def test_float32_matches_float64(name):
    torch.manual_seed(16)
    m = MODULES[name]().double()
    f1, f2 = inputs(16)
    expected = m(f1, f2, MASK1, MASK2).context
    got = m.float()(f1.float(), f2.float(), MASK1, MASK2).context
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


SMALL = {  # gradcheck perturbs every number: small sizes
    "alternating": lambda: AlternatingCoAttention(3, 2, d_key1=2, d_value2=2),
    "interactive": lambda: InteractiveCoAttention(3, 2, d_key2=3, d_hidden=2),
    "parallel_additive": lambda: ParallelCoAttention(3, 2, d_value1=2, d_hidden=2),
    "parallel_max": lambda: ParallelCoAttention(3, 2, aggregation="max"),
    "multi_grained": lambda: MultiGrainedCoAttention(3, 2, d_key1=2, d_key2=2, d_hidden=2),
}


@pytest.mark.parametrize("name", SMALL)
def test_gradcheck_inputs_and_parameters(name):
    """The module's own parameters are gradcheck's inputs (perturbed in place), not swapped in by
    ``torch.func.functional_call``: the tiled engine's backward reads them from the module."""
    torch.manual_seed(11)
    m = SMALL[name]().double()
    f1 = torch.randn(2, 3, 3, dtype=F64, requires_grad=True)
    f2 = torch.randn(2, 2, 2, dtype=F64, requires_grad=True)
    mask1 = torch.tensor([[True, True, True], [True, False, True]])
    mask2 = torch.tensor([[True, True], [False, True]])

    def run(x1, x2, *_parameters):
        return m(x1, x2, mask1, mask2).context

    assert torch.autograd.gradcheck(run, (f1, f2, *m.parameters()), eps=1e-6, atol=1e-6)


SCORES = ["additive", "dot", "scaled_dot", "general", "biased_general", "activated_general"]
SCORES += ["cosine", "euclidean"]


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("cls", [AlternatingCoAttention, InteractiveCoAttention])
def test_coarse_grained_compose_with_every_score(cls, score):
    torch.manual_seed(12)
    m = cls(4, 4, score=score).double()
    f1, f2 = inputs(12, d1=4, d2=4)
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    assert torch.isfinite(out.context).all() and out.context.shape == (B, 8)
    for key, w in out.weights.items():
        real = MASK2 if key == "2" else MASK1
        assert torch.equal(w[~real], torch.zeros_like(w[~real]))
        close(w.sum(-1), real.any(-1).to(F64))  # each non-empty set's weights sum to 1


@pytest.mark.parametrize("align", ["sparsemax", "entmax15", "hard", "topk", "local_monotonic"])
@pytest.mark.parametrize("name", MODULES)
def test_compose_with_every_alignment(name, align):
    torch.manual_seed(13)
    kwargs = {"align": align}
    m = {
        "alternating": lambda: AlternatingCoAttention(D1, D2, **kwargs),
        "interactive": lambda: InteractiveCoAttention(D1, D2, **kwargs),
        "parallel_additive": lambda: ParallelCoAttention(D1, D2, **kwargs),
        "parallel_max": lambda: ParallelCoAttention(D1, D2, aggregation="max", **kwargs),
        "multi_grained": lambda: MultiGrainedCoAttention(D1, D2, d_key1=4, d_key2=4, **kwargs),
    }[name]().double()
    m.eval()  # hard alignment: the argmax
    f1, f2 = inputs(13)
    out = m(f1, f2, MASK1, MASK2, return_weights=True)
    assert torch.isfinite(out.context).all()
    for key, w in out.weights.items():
        real = MASK2 if key.endswith("2") else MASK1
        assert torch.equal(w[~real], torch.zeros_like(w[~real])), key
        assert (w >= 0).all()


def test_stochastic_alignment_returns_the_summed_log_prob():
    torch.manual_seed(14)
    m = InteractiveCoAttention(D1, D2, align="hard").double().train()
    out = m(*inputs(14))
    assert out.log_prob is not None and out.log_prob.shape == (B,)
    assert torch.isfinite(out.log_prob).all()


@pytest.mark.parametrize(("name", "calls"), list(zip(MODULES, [3, 2, 2, 2, 4], strict=True)))
def test_every_attention_step_runs_on_the_engine(name, calls):
    seen = []

    def counting(call, module, run):
        seen.append(call.shape)
        return run(call)

    with ak.attention_hooks(counting):
        MODULES[name]().double()(*inputs(15))
    assert len(seen) == calls


ROWS = {
    "alternating": "Alternating Co-attention | Single-Level | Single-Representational | Additive"
    " | Global | Single-Dimensional | Specialized + Self-Attentive | Singular",
    "interactive": "Interactive Co-attention | Single-Level | Single-Representational | Additive"
    " | Global | Single-Dimensional | Specialized | Singular",
    "parallel_additive": "Parallel Co-attention | Single-Level | Single-Representational"
    " | Additive | Global | Single-Dimensional | Specialized | Singular",
    "parallel_max": "Parallel Co-attention | Single-Level | Single-Representational"
    " | Similarity | Global | Single-Dimensional | Specialized | Singular",
    "multi_grained": "Multi-grained Co-attention | Single-Level | Single-Representational"
    " | Additive + Similarity | Global | Single-Dimensional | Specialized | Singular",
}


@pytest.mark.parametrize("name", MODULES)
def test_taxonomy_row(name):
    assert str(ak.taxonomy.describe(MODULES[name]())) == ROWS[name]


def test_bad_input_is_refused_with_shapes():
    m = AlternatingCoAttention(D1, D2)
    f1, f2 = torch.randn(B, N1, D1), torch.randn(B, N2, D2)
    with pytest.raises(ValueError, match=r"features1 must have shape \[B, N, 6\], got \(3, 5, 4\)"):
        m(torch.randn(B, N1, 4), f2)
    with pytest.raises(ValueError, match="features2"):
        m(f1, torch.randn(N2, D2))
    with pytest.raises(ValueError, match="batch size"):
        m(f1, f2[:2])
    with pytest.raises(TypeError, match="mask1 must be a bool tensor"):
        m(f1, f2, MASK1.long())
    with pytest.raises(
        ValueError, match=r"mask2 must have shape \[B, N\] = \(3, 4\), got \(3, 5\)"
    ):
        m(f1, f2, MASK1, MASK1)
    with pytest.raises(TypeError, match=r"features1 must be a torch\.Tensor"):
        m(f1.numpy(), f2)
    with pytest.raises(ValueError, match="one spec or 2 specs"):
        InteractiveCoAttention(D1, D2, score=("additive",) * 3)
    with pytest.raises(ValueError, match="aggregation"):
        ParallelCoAttention(D1, D2, aggregation="mean")
    with pytest.raises(ValueError, match=r"d_k1=6 and d_k2=4"):
        ParallelCoAttention(D1, D2, score="concat")
    with pytest.raises(ValueError, match="coarse"):
        MultiGrainedCoAttention(4, 4, coarse="parallel")
    with pytest.raises(ValueError, match="same size"):  # dot product of c^(2) [4] with k1 [6]
        AlternatingCoAttention(D1, D2, score="dot")(f1, f2)
