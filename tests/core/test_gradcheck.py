"""Gradients: ``torch.autograd.gradcheck`` in float64 for every differentiable piece.

Every score × every alignment (stochastic ones in eval mode, where they are deterministic) is
checked with respect to the queries, keys, values and the parameters of the score and the
alignment, with and without a mask that leaves a query with no admissible key. Every backend's
backward (the tiled backend has its own) is checked on the softmax family. Inputs are random
with fixed seeds, so no point of non-differentiability (sparsemax support boundaries, top-k or
argmax ties, local windows' edges) lies within the finite-difference step.
"""

from __future__ import annotations

import pytest
import torch
from attention_cases import with_backends
from test_reference import (
    ALIGN_NAMES,
    SCORE_NAMES,
    allowed_keys,
    check_runs,
    make_align,
    make_score,
    padding_mask,
    query_size,
)
from torch import Tensor

import attnkit as ak
from attnkit.core.call import prepare
from attnkit.core.engine import BACKENDS

F64 = torch.float64
D_K, D_V = 3, 2


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread is faster than OpenMP's parallel regions. Restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def setup(score_name: str, align_name: str, masked: bool, seed: int = 0):
    """Float64 modules and inputs: unmasked B=1, H=2, M=3, N=4; masked B=2, H=2, M=4, N=3 with
    key padding (3, 2) and a causal mask, under which query 0 sees no key."""
    torch.manual_seed(seed)
    b, h, m, n = (2, 2, 4, 3) if masked else (1, 2, 3, 4)
    d_q = query_size(score_name, D_K)
    score = make_score(score_name, d_q, D_K, n_max=n).double()
    align = make_align(align_name, d_q, D_K).double()
    q = torch.randn(b, h, m, d_q, dtype=F64, requires_grad=True)
    k = torch.randn(b, h, n, D_K, dtype=F64, requires_grad=True)
    v = torch.randn(b, h, n, D_V, dtype=F64, requires_grad=True)
    user = {"mask": padding_mask((3, 2), n, False), "causal": True} if masked else {}
    return score, align, (q, k, v), user


def parameters(*modules: torch.nn.Module) -> list[Tensor]:
    return [p for module in modules for p in module.parameters() if p.requires_grad]


def attention_fn(score, align, user: dict, backend: str | None, return_weights: bool):
    """``(q, k, v, *params) -> outputs`` for gradcheck. The parameters are the modules' own
    tensors, which gradcheck perturbs in place, so the modules see the perturbation."""

    def fn(q: Tensor, k: Tensor, v: Tensor, *params: Tensor) -> tuple[Tensor, ...]:
        out = ak.attention(
            q,
            k,
            v,
            score=score,
            align=align,
            return_weights=return_weights,
            backend=backend,
            **user,
        )
        outputs = [out.context]
        if out.weights is not None:
            outputs.append(out.weights)
        if out.log_prob is not None:
            outputs.append(out.log_prob)  # REINFORCE's log-probability (hard, reinforced)
        return tuple(outputs)

    return fn


def differentiable(fn, inputs):
    """``fn`` restricted to the outputs that depend differentiably on the inputs (hard
    alignment's one-hot weights are constants by design; gradcheck's fast mode needs them out).
    """
    keep = [i for i, out in enumerate(fn(*inputs)) if out.requires_grad]
    assert keep, "no output is differentiable"

    def restricted(*args: Tensor) -> tuple[Tensor, ...]:
        outputs = fn(*args)
        return tuple(outputs[i] for i in keep)

    return restricted


def entmax_eps(align_name: str) -> float:
    return 1e-5 if align_name == "entmax15" else 1e-6  # entmax's own tests use 1e-5


@pytest.mark.parametrize("align_name", ALIGN_NAMES)
@pytest.mark.parametrize("score_name", SCORE_NAMES)
def test_gradcheck_every_score_and_alignment(score_name: str, align_name: str):
    """Through the backend ``ak.attention`` chooses, w.r.t. q, k, v and all parameters, with
    key padding and a causal mask that leaves a query without keys (unmasked calls: below)."""
    score, align, inputs, user = setup(score_name, align_name, masked=True)
    params = parameters(score, align)
    fn = differentiable(attention_fn(score, align, user, None, True), (*inputs, *params))
    assert torch.autograd.gradcheck(
        fn, (*inputs, *params), eps=entmax_eps(align_name), fast_mode=True
    )


@pytest.mark.parametrize("align_name", ALIGN_NAMES)
def test_gradcheck_every_alignment_element_by_element(align_name: str):
    """The full (slow-mode) Jacobian, unmasked, for the additive score (the most parameters)."""
    score, align, inputs, user = setup("additive", align_name, masked=False, seed=1)
    params = parameters(score, align)
    fn = differentiable(attention_fn(score, align, user, None, True), (*inputs, *params))
    assert torch.autograd.gradcheck(fn, (*inputs, *params), eps=entmax_eps(align_name))


def with_weights(backend: str, inputs, score, align, user) -> bool:
    """Whether ``backend`` runs the call with weights (the harder backward), else without
    (the test is collected only for backends that take one of the two: ``check_runs``)."""
    runner = {b.name: b for b in BACKENDS}[backend]
    call = prepare(*inputs, score=score, align=align, return_weights=True, **user)
    return not runner.reasons(call)


@pytest.mark.parametrize(
    ("score_name", "masked", "backend"),
    with_backends(
        ((score, masked) for score in SCORE_NAMES for masked in (False, True)),
        lambda score, masked, backend: check_runs(backend, score, "softmax", (F64,)),
    ),
)
def test_gradcheck_every_backend_softmax(score_name: str, masked: bool, backend: str):
    """Each backend's own backward (the tiled one recomputes from the log-sum-exp)."""
    score, align, inputs, user = setup(score_name, "softmax", masked, seed=2)
    return_weights = with_weights(backend, inputs, score, align, user)
    fn = attention_fn(score, align, user, backend, return_weights)
    assert torch.autograd.gradcheck(fn, (*inputs, *parameters(score, align)), fast_mode=True)


def alibi(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return s - 0.5 * (i - j).abs()


def soft_cap(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return 30 * torch.tanh(s / 30)


@pytest.mark.parametrize(
    ("score_name", "score_mod", "backend"),
    with_backends(
        ((score, mod) for score in ["scaled_dot", "additive"] for mod in [alibi, soft_cap]),
        lambda score, mod, backend: check_runs(backend, score, "softmax", (F64,), score_mod=True),
    ),
)
def test_gradcheck_score_mod(score_name: str, score_mod, backend: str):
    score, align, inputs, user = setup(score_name, "softmax", masked=True, seed=3)
    user = {**user, "score_mod": score_mod}
    return_weights = with_weights(backend, inputs, score, align, user)
    fn = attention_fn(score, align, user, backend, return_weights)
    assert torch.autograd.gradcheck(fn, (*inputs, *parameters(score, align)), fast_mode=True)


@pytest.mark.parametrize("align_name", ALIGN_NAMES)
def test_gradcheck_multi_dimensional(align_name: str):
    """Eq. (30)-(32): the additive score with one score per value feature."""
    torch.manual_seed(4)
    score = ak.scores.Additive(4, D_K, d_hidden=3, value_features=D_V).double()
    align = make_align(align_name, 4, D_K).double()
    q = torch.randn(2, 2, 4, 4, dtype=F64, requires_grad=True)
    k = torch.randn(2, 2, 3, D_K, dtype=F64, requires_grad=True)
    v = torch.randn(2, 2, 3, D_V, dtype=F64, requires_grad=True)
    user = {"mask": padding_mask((3, 2), 3, False), "causal": True}
    params = parameters(score, align)
    fn = differentiable(attention_fn(score, align, user, None, True), (q, k, v, *params))
    assert torch.autograd.gradcheck(
        fn, (q, k, v, *params), eps=entmax_eps(align_name), fast_mode=True
    )


# --------------------------------------------------------------------------------------------
# A query with no admissible key: zero gradient, never NaN
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("score_name", "align_name", "backend"),
    with_backends(
        (
            (score, align)
            for score in ["scaled_dot", "additive", "euclidean"]
            for align in ALIGN_NAMES
        ),
        lambda score, align, backend: check_runs(backend, score, align, (F64,)),
    ),
)
def test_fully_masked_rows_have_exactly_zero_gradient(
    score_name: str, align_name: str, backend: str
):
    score, align, inputs, user = setup(score_name, align_name, masked=True, seed=5)
    return_weights = with_weights(backend, inputs, score, align, user)
    params = parameters(score, align)
    outputs = attention_fn(score, align, user, backend, return_weights)(*inputs)
    outputs = [t for t in outputs if t.requires_grad]  # hard alignment's weights are constants
    upstream = [torch.randn_like(t) for t in outputs]
    grads = torch.autograd.grad(
        outputs, [*inputs, *params], upstream, allow_unused=True, retain_graph=True
    )
    for g in grads:
        assert g is None or torch.isfinite(g).all(), "gradients must never be NaN"
    q_grad = grads[0]
    empty = ~allowed_keys(2, 4, 3, (3, 2), causal=True).any(-1)  # [B, 1, M]
    assert empty[:, 0, 0].all(), "the mask must leave query 0 without keys"
    assert (outputs[0][empty.expand(2, 2, 4)] == 0).all(), "zero context"
    if q_grad is not None:
        assert (q_grad[empty.expand(2, 2, 4)] == 0).all(), "zero gradient for a key-less query"
    # Nothing flows into keys/values from a key-less query: perturb only its upstream gradient.
    only_empty = [torch.zeros_like(t) for t in outputs]
    only_empty[0][:, :, 0] = 1.0
    grads = torch.autograd.grad(outputs, [*inputs, *params], only_empty, allow_unused=True)
    for g in grads:
        assert g is None or (g == 0).all(), "a key-less query must not send gradient anywhere"


def test_local_predictive_position_gets_a_gradient_through_the_gaussian():
    """Eq. (29): the Gaussian ``exp(-(l - p)^2 / (2 sigma^2))`` makes ``p`` (eq. 28) — hence
    ``W_p`` and ``w_p`` — differentiable, although the window itself is not."""
    score, align, (q, k, v), _ = setup("scaled_dot", "local_predictive", masked=False, seed=6)
    out = ak.attention(q, k, v, score=score, align=align)
    grads = torch.autograd.grad(out.context.square().sum(), [align.W_p.weight, align.w_p.weight])
    for g in grads:
        assert torch.isfinite(g).all() and g.abs().max() > 1e-6


# --------------------------------------------------------------------------------------------
# Hard alignment's straight-through estimator
# --------------------------------------------------------------------------------------------


def softmax_from_jacobian(J: Tensor, temperature: float) -> Tensor:
    """The ``y`` of a softmax Jacobian ``J = (diag(y) - y y^T) / T``, from its off-diagonal
    entries ``-T J_ij = y_i y_j``: ``y_i = sqrt(P_ij P_ik / P_jk)`` for distinct ``i, j, k``
    (the median over all pairs ``j, k``)."""
    P = -temperature * J
    n = J.shape[-1]
    y = torch.empty(n, dtype=J.dtype)
    for i in range(n):
        estimates = [
            (P[i, j] * P[i, kk] / P[j, kk]).sqrt()
            for j in range(n)
            for kk in range(n)
            if len({i, j, kk}) == 3
        ]
        y[i] = torch.stack(estimates).median()
    return y


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_straight_through_gradient_is_the_relaxed_softmax_gradient(temperature: float):
    """Forward one-hot, backward the Jacobian of the relaxed softmax ``softmax((e + g) / T)``
    (Jang et al. 2017) for the Gumbel noise ``g`` drawn in that forward pass, whose argmax is
    the one-hot choice. Checked without knowing ``g``: the Jacobian must have the softmax form
    ``(diag(y) - y y^T) / T`` for some ``y`` on the simplex with ``argmax y`` = the choice."""
    torch.manual_seed(7)
    m, n = 3, 5
    e = (0.5 * torch.randn(m, n, dtype=F64)).requires_grad_()
    hard = ak.align.Hard(estimator="straight_through", temperature=temperature).train()
    weights = hard(e)  # one forward pass: one draw of the noise
    assert torch.isfinite(weights).all(), "straight-through weights must be finite"
    choice = weights.detach().argmax(-1)
    one_hot = torch.nn.functional.one_hot(choice, n).to(F64)
    torch.testing.assert_close(weights.detach(), one_hot, rtol=0, atol=1e-15)
    rows = []
    for r in range(m):
        for c in range(n):
            (g,) = torch.autograd.grad(weights[r, c], e, retain_graph=True)
            rows.append(g)
    J = torch.stack(rows).view(m, n, m, n)  # d weights[r, c] / d e[r', c']
    for r in range(m):
        off_rows = torch.cat([J[r, :, :r], J[r, :, r + 1 :]], dim=1)
        assert (off_rows == 0).all(), "rows are independent"
        block = J[r, :, r]
        y = softmax_from_jacobian(block, temperature)
        torch.testing.assert_close(y.sum(), torch.tensor(1.0, dtype=F64), rtol=0, atol=1e-8)
        expected = (torch.diag(y) - torch.outer(y, y)) / temperature
        torch.testing.assert_close(block, expected, rtol=0, atol=1e-10)
        assert y.argmax() == choice[r], "the one-hot choice is the relaxed sample's argmax"


def test_straight_through_masked_keys_get_no_gradient():
    torch.manual_seed(8)
    e = torch.randn(4, 5, dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1, 0]] * 3 + [[0, 0, 0, 0, 0]], dtype=torch.bool)
    weights = ak.align.Hard(estimator="straight_through").train()(e, mask)
    assert torch.isfinite(weights).all()
    assert (weights[~mask] == 0).all() and (weights[3] == 0).all()
    (g,) = torch.autograd.grad(weights, e, torch.randn(4, 5, dtype=F64))
    assert torch.isfinite(g).all()
    assert (g[~mask] == 0).all(), "masked keys and key-less rows get exactly zero gradient"


def test_hard_reinforce_weights_carry_no_gradient_but_log_prob_does():
    """REINFORCE (eq. 26): the one-hot weights are constants; ``log a_m`` is differentiable."""
    torch.manual_seed(9)
    e = torch.randn(3, 5, dtype=F64, requires_grad=True)
    weights, log_prob = ak.align.Hard(estimator="reinforce").train().sample(e)
    assert not weights.requires_grad
    assert torch.autograd.gradcheck(lambda x: ak.align.Hard().eval().sample(x)[1], (e,), eps=1e-6)
    choice = weights.argmax(-1)
    want = torch.log_softmax(e, -1).gather(-1, choice[:, None]).squeeze(-1)
    torch.testing.assert_close(log_prob, want, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# GeneralAttention: w.r.t. the query, the features and every parameter
# --------------------------------------------------------------------------------------------


def general_attention(score_name: str, multi_dimensional: bool = False) -> ak.GeneralAttention:
    n = 4
    score = ak.scores.Location(3, n) if score_name == "location" else score_name
    return ak.GeneralAttention(
        d_query=3,
        d_feature=4,
        d_key=3,
        d_value=2,
        score=score,
        multi_dimensional=multi_dimensional,
        d_output=3,
    ).double()


GENERAL_CASES = [(s, False) for s in SCORE_NAMES] + [("additive", True)]


@pytest.mark.parametrize("single_query", [False, True], ids=["queries", "single_query"])
@pytest.mark.parametrize(
    ("score_name", "multi_dimensional"),
    GENERAL_CASES,
    ids=[f"{s}{'-multi' if md else ''}" for s, md in GENERAL_CASES],
)
def test_gradcheck_general_attention(score_name: str, multi_dimensional: bool, single_query):
    torch.manual_seed(10)
    module = general_attention(score_name, multi_dimensional)
    query = torch.randn(*((2, 3) if single_query else (2, 3, 3)), dtype=F64, requires_grad=True)
    features = torch.randn(2, 4, 4, dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    params = parameters(module)
    assert len(params) >= 3, "W_K, W_V and the output model at least"

    def fn(query: Tensor, features: Tensor, *ps: Tensor) -> tuple[Tensor, Tensor]:
        out = module(query, features, mask)
        return out.context, out.output

    assert torch.autograd.gradcheck(fn, (query, features, *params), fast_mode=True)
