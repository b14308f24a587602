"""Rotatory attention (survey §3.1.1, eq. 17-20) and LCR-Rot-hop against literal float64 formulas.

The references are the survey's equations written out one example at a time on the real words
only (a padded word is simply absent), reading the modules' parameters as plain tensors.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import attnkit as ak
from attnkit.mechanisms.rotatory import MultiHopRotatoryAttention, RotatoryAttention

F64 = torch.float64
TOL = 1e-10
B, NL, NT, NR = 3, 5, 3, 4
DL, DT, DR = 6, 4, 5  # left, target, right feature sizes (all different: catches swaps)
MASK_L = torch.tensor([[True] * 5, [True, True, False, False, False], [False] * 5])  # 3: none
MASK_T = torch.tensor([[True] * 3, [True, False, False], [True, True, False]])
MASK_R = torch.tensor([[True, True, True, False], [True] * 4, [False, True, False, True]])


def inputs(seed: int, dl: int = DL, dt: int = DT, dr: int = DR) -> tuple[Tensor, Tensor, Tensor]:
    torch.manual_seed(seed)
    return (
        torch.randn(B, NL, dl, dtype=F64),
        torch.randn(B, NT, dt, dtype=F64),
        torch.randn(B, NR, dr, dtype=F64),
    )


def close(x: Tensor, y: Tensor) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=TOL)


# --------------------------------------------------------------------------------------------
# literal formulas (one example, real words only)
# --------------------------------------------------------------------------------------------


def P(t: Tensor) -> Tensor:
    return t.detach()


def project(linear: torch.nn.Module, F: Tensor) -> Tensor:
    """Eq. (1), rows are vectors; identity when there is no ``W``."""
    W = getattr(linear, "weight", None)
    if W is None:
        return F
    return torch.stack([P(W) @ f for f in F]) if len(F) else F.new_zeros(0, W.shape[0])


def activated_general(score, q: Tensor, K: Tensor) -> Tensor:
    """Table 2: ``e_i = tanh(k_i^T W q + b)`` (Zheng & Xia's score)."""
    W, b = P(score.query_proj.weight), P(score.bias)
    return torch.stack([torch.tanh(k @ W @ q + b) for k in K]) if len(K) else K.new_zeros(0)


def additive(score, q: Tensor, K: Tensor) -> Tensor:
    """Table 2: ``e_i = w^T tanh(W1 q + W2 k_i + b)``."""
    W1, W2 = P(score.query_proj.weight), P(score.key_proj.weight)
    b, w = P(score.key_proj.bias), P(score.out.weight[0])
    terms = [w @ torch.tanh(W1 @ q + W2 @ k + b) for k in K]
    return torch.stack(terms) if terms else K.new_zeros(0)


def softmax(e: Tensor) -> Tensor:
    if e.numel() == 0:
        return e
    exp = torch.exp(e - e.max())
    return exp / exp.sum()


def weighted_sum(a: Tensor, V: Tensor) -> Tensor:
    c = V.new_zeros(V.shape[-1])
    for a_i, v_i in zip(a, V, strict=True):
        c = c + a_i * v_i
    return c


def rotation_ref(m: RotatoryAttention, Fl, Ft, Fr, queries=None, score_fn=activated_general):
    """Eq. (17)-(20) on one example: ``(r, {part: (weights, representation)})``."""
    F = {"l": Fl, "t": Ft, "r": Fr}
    K = {s: project(m.key_proj[s], x) for s, x in F.items()}
    V = {s: project(m.value_proj[s], x) for s, x in F.items()}
    out = {}
    if queries is None:
        r_t = sum(Ft) / len(Ft) if len(Ft) else Ft.new_zeros(Ft.shape[1])  # eq. (17)
        q_l = q_r = r_t
    else:
        q_l, q_r = queries
    for part, query, s in (("l", q_l, "l"), ("r", q_r, "r")):  # eq. (18)
        a = softmax(score_fn(m.scores[part], query, K[s]))
        out[part] = (a, weighted_sum(a, V[s]))
    for part, ctx in (("lt", "l"), ("rt", "r")):  # eq. (19)
        a = softmax(score_fn(m.scores[part], out[ctx][1], K["t"]))
        out[part] = (a, weighted_sum(a, V["t"]))
    r = torch.cat([out["l"][1], out["r"][1], out["lt"][1], out["rt"][1]])  # eq. (20)
    return r, out


def hops_ref(m: MultiHopRotatoryAttention, Fl, Ft, Fr, score_fn=activated_general):
    """LCR-Rot-hop: hop s > 1 queried by hop s-1's ``(r^lt, r^rt)``; every hop's result."""
    results, queries = [], None
    for hop in range(m.hops):
        rotation = m.rotations[0 if m.share_weights else hop]
        r, parts = rotation_ref(rotation, Fl, Ft, Fr, queries, score_fn)
        results.append((r, parts))
        queries = (parts["lt"][1], parts["rt"][1])
    return results


def examples(masks, sets):
    for b in range(B):
        reals = [
            m[b] if m is not None else torch.ones(x.shape[1], dtype=torch.bool)
            for m, x in zip(masks, sets, strict=True)
        ]
        yield b, reals, [x[b][r] for x, r in zip(sets, reals, strict=True)]


def compare(out, b, reals, r, parts) -> None:
    close(out.context[b], r)
    real_of = {"l": reals[0], "r": reals[2], "lt": reals[1], "rt": reals[1]}
    for part, (a, c) in parts.items():
        close(out.contexts[part][b], c)
        w, real = out.weights[part][b], real_of[part]
        close(w[real], a)
        assert torch.equal(w[~real], torch.zeros_like(w[~real]))  # exactly zero


# --------------------------------------------------------------------------------------------
# the equations
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_rotation_follows_eq_17_to_20(masked):
    sets = inputs(0)
    masks = (MASK_L, MASK_T, MASK_R) if masked else (None, None, None)
    m = RotatoryAttention(DL, DT, DR).double()
    out = m(*sets, *masks, return_weights=True)
    assert out.context.shape == (B, DL + DR + 2 * DT) == (B, m.d_output)
    for b, reals, real_sets in examples(masks, sets):
        r, parts = rotation_ref(m, *real_sets)
        compare(out, b, reals, r, parts)
        close(out.contexts["t"][b], real_sets[1].mean(0))  # eq. (17)


def test_rotation_with_key_value_projections_and_another_score():
    sets = inputs(1)
    m = RotatoryAttention(DL, DT, DR, d_key=3, d_value=2, score="additive").double()
    assert m.key_proj["l"].weight.shape == (3, DL) and m.value_proj["t"].weight.shape == (2, DT)
    out = m(*sets, MASK_L, MASK_T, MASK_R, return_weights=True)
    assert out.context.shape == (B, 8)
    for b, reals, real_sets in examples((MASK_L, MASK_T, MASK_R), sets):
        r, parts = rotation_ref(m, *real_sets, score_fn=additive)
        compare(out, b, reals, r, parts)


def test_rotation_with_given_queries():
    """``queries`` replace the pooled target of eq. (17) (as in the hops of LCR-Rot-hop)."""
    sets = inputs(2)
    m = RotatoryAttention(DL, DT, DR, d_query=7).double()
    torch.manual_seed(2)
    q_l, q_r = torch.randn(B, 7, dtype=F64), torch.randn(B, 7, dtype=F64)
    out = m(*sets, MASK_L, MASK_T, MASK_R, queries=(q_l, q_r), return_weights=True)
    assert "t" not in out.contexts
    for b, reals, real_sets in examples((MASK_L, MASK_T, MASK_R), sets):
        r, parts = rotation_ref(m, *real_sets, queries=(q_l[b], q_r[b]))
        compare(out, b, reals, r, parts)


@pytest.mark.parametrize("share_weights", [False, True])
def test_multi_hop_repeats_the_rotation(share_weights):
    """LCR-Rot-hop: each hop after the first queries the contexts with (r^lt, r^rt)."""
    sets = inputs(3)
    m = MultiHopRotatoryAttention(DL, DT, DR, hops=3, share_weights=share_weights).double()
    assert len(m.rotations) == (1 if share_weights else 3)
    out = m(*sets, MASK_L, MASK_T, MASK_R, return_weights=True)
    assert len(out.hops) == 3
    masks = (MASK_L, MASK_T, MASK_R)
    for b, reals, real_sets in examples(masks, sets):
        results = hops_ref(m, *real_sets)
        for hop_out, (r, parts) in zip(out.hops, results, strict=True):
            compare(hop_out, b, reals, r, parts)
        compare(out, b, reals, *results[-1])


def test_multi_hop_with_projections_gives_each_hop_its_own_query_size():
    sets = inputs(4)
    m = MultiHopRotatoryAttention(DL, DT, DR, d_value=3, hops=2).double()
    assert m.rotations[0].d_query == DT and m.rotations[1].d_query == 3
    out = m(*sets, MASK_L, MASK_T, MASK_R, return_weights=True)
    for b, reals, real_sets in examples((MASK_L, MASK_T, MASK_R), sets):
        compare(out, b, reals, *hops_ref(m, *real_sets)[-1])


# --------------------------------------------------------------------------------------------
# padding, gradients, composability, taxonomy, bad input
# --------------------------------------------------------------------------------------------

MODULES = {
    "rotatory": lambda: RotatoryAttention(DL, DT, DR, d_key=3),
    "multi_hop": lambda: MultiHopRotatoryAttention(DL, DT, DR, d_value=2, hops=2),
}


@pytest.mark.parametrize("name", MODULES)
def test_padding_gets_zero_weight_and_zero_gradient(name):
    m = MODULES[name]().double()
    sets = [x.requires_grad_(True) for x in inputs(5)]
    masks = (MASK_L, MASK_T, MASK_R)
    out = m(*sets, *masks, return_weights=True)
    real_of = {"l": MASK_L, "r": MASK_R, "lt": MASK_T, "rt": MASK_T}
    for part, w in out.weights.items():
        assert torch.equal(w[~real_of[part]], torch.zeros_like(w[~real_of[part]]))
    out.context.sum().backward()
    for x, mask in zip(sets, masks, strict=True):
        assert torch.equal(x.grad[~mask], torch.zeros_like(x.grad[~mask]))
    moved = [
        torch.where(mask[..., None], x.detach(), torch.full_like(x, 1e3))
        for x, mask in zip(sets, masks, strict=True)
    ]
    close(m(*moved, *masks).context, out.context.detach())


@pytest.mark.parametrize("name", MODULES)
def test_empty_sets_give_zeros_not_nan(name):
    m = MODULES[name]().double()
    sets = inputs(6)
    none = [torch.zeros(x.shape[:2], dtype=torch.bool) for x in sets]
    out = m(*sets, *none, return_weights=True)
    assert torch.equal(out.context, torch.zeros_like(out.context))
    out = m(*(x[:, :0] for x in sets))  # zero-length sets
    assert torch.equal(out.context, torch.zeros_like(out.context))
    target = sets[1].clone().requires_grad_(True)
    out = m(sets[0], target, sets[2], *none)  # without weights: the engine's fast paths
    out.context.sum().backward()
    assert torch.equal(target.grad, torch.zeros_like(target))
    # no left context at all (a target at the start of a sentence): r^l = 0, the rest is finite
    out = m(*sets, none[0], MASK_T, MASK_R)
    assert torch.equal(out.contexts["l"], torch.zeros_like(out.contexts["l"]))
    assert torch.isfinite(out.context).all()


@pytest.mark.parametrize("name", MODULES)
def test_float32_matches_float64(name):
    m = MODULES[name]().double()
    sets = inputs(13)
    expected = m(*sets, MASK_L, MASK_T, MASK_R).context
    got = m.float()(*(x.float() for x in sets), MASK_L, MASK_T, MASK_R).context
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


SMALL = {  # gradcheck perturbs every number: small sizes
    "rotatory": lambda: RotatoryAttention(3, 2, 2, d_key=2),
    "multi_hop": lambda: MultiHopRotatoryAttention(3, 2, 2, d_value=2, hops=2),
}


@pytest.mark.parametrize("name", SMALL)
def test_gradcheck_inputs_and_parameters(name):
    """The module's own parameters are gradcheck's inputs (perturbed in place)."""
    torch.manual_seed(7)
    m = SMALL[name]().double()
    sets = (
        torch.randn(2, 3, 3, dtype=F64, requires_grad=True),
        torch.randn(2, 2, 2, dtype=F64, requires_grad=True),
        torch.randn(2, 2, 2, dtype=F64, requires_grad=True),
    )
    masks = (
        torch.tensor([[True, True, False], [True, True, True]]),
        torch.tensor([[True, True], [False, True]]),
        torch.tensor([[True, False], [True, True]]),
    )

    def run(left, target, right, *_parameters):
        return m(left, target, right, *masks).context

    assert torch.autograd.gradcheck(run, (*sets, *m.parameters()), eps=1e-6, atol=1e-6)


SCORES = ["additive", "dot", "scaled_dot", "general", "biased_general", "activated_general"]
SCORES += ["cosine", "euclidean"]


@pytest.mark.parametrize("score", SCORES)
def test_composes_with_every_score(score):
    m = MultiHopRotatoryAttention(4, 4, hops=2, score=score).double()
    sets = inputs(8, 4, 4, 4)
    out = m(*sets, MASK_L, MASK_T, MASK_R, return_weights=True)
    assert out.context.shape == (B, 16) and torch.isfinite(out.context).all()
    real_of = {"l": MASK_L, "r": MASK_R, "lt": MASK_T, "rt": MASK_T}
    for part, w in out.weights.items():
        real = real_of[part]
        assert torch.equal(w[~real], torch.zeros_like(w[~real]))
        close(w.sum(-1), real.any(-1).to(F64))


@pytest.mark.parametrize("align", ["sparsemax", "entmax15", "hard", "topk", "local_monotonic"])
def test_composes_with_every_alignment(align):
    m = MultiHopRotatoryAttention(DL, DT, DR, hops=2, align=align).double().eval()
    out = m(*inputs(9), MASK_L, MASK_T, MASK_R, return_weights=True)
    assert torch.isfinite(out.context).all()
    real_of = {"l": MASK_L, "r": MASK_R, "lt": MASK_T, "rt": MASK_T}
    for part, w in out.weights.items():
        assert torch.equal(w[~real_of[part]], torch.zeros_like(w[~real_of[part]]))
        assert (w >= 0).all()


def test_per_part_scores_and_stochastic_log_prob():
    m = RotatoryAttention(DL, DT, DR, score=("general", "additive", "dot", "activated_general"))
    assert isinstance(m.scores["l"], ak.scores.General)
    assert isinstance(m.scores["r"], ak.scores.Additive)
    m = MultiHopRotatoryAttention(DL, DT, DR, hops=2, align="hard").double().train()
    out = m(*inputs(10), MASK_L, MASK_T, MASK_R)
    assert out.log_prob is not None and out.log_prob.shape == (B,)
    close(out.log_prob, sum(h.log_prob for h in out.hops))


@pytest.mark.parametrize(("name", "calls"), [("rotatory", 4), ("multi_hop", 8)])
def test_every_attention_step_runs_on_the_engine(name, calls):
    seen = []

    def counting(call, module, run):
        seen.append(call.shape)
        return run(call)

    with ak.attention_hooks(counting):
        MODULES[name]().double()(*inputs(11))
    assert len(seen) == calls


def test_taxonomy_rows():
    """Table 3's row of Wallaart & Frasincar's LCR-Rot-hop, and LCR-Rot's."""
    assert str(ak.taxonomy.describe(MultiHopRotatoryAttention(DL, DT))) == (
        "Rotatory | Single-Level | Single-Representational | Activated General | Global"
        " | Single-Dimensional | Specialized | Multi-Hop"
    )
    assert str(ak.taxonomy.describe(RotatoryAttention(DL, DT))) == (
        "Rotatory | Single-Level | Single-Representational | Activated General | Global"
        " | Single-Dimensional | Specialized | Singular"
    )


def test_bad_input_is_refused_with_shapes():
    m = RotatoryAttention(DL, DT, DR)
    left, target, right = (x.float() for x in inputs(12))
    with pytest.raises(ValueError, match=r"target must have shape \[B, N, 4\], got \(3, 5, 6\)"):
        m(left, left, right)
    with pytest.raises(ValueError, match="one batch size"):
        m(left, target[:2], right)
    with pytest.raises(TypeError, match="left_mask must be a bool tensor"):
        m(left, target, right, MASK_L.float())
    with pytest.raises(ValueError, match=r"right_mask must have shape \[B, N\] = \(3, 4\)"):
        m(left, target, right, None, None, MASK_L)
    with pytest.raises(ValueError, match=r"queries must be two tensors of shape \(3, 4\)"):
        m(left, target, right, queries=(target[:, 0],))
    with pytest.raises(ValueError, match="four"):
        RotatoryAttention(DL, DT, score=("dot", "dot"))
    with pytest.raises(ValueError, match="hops must be a positive int"):
        MultiHopRotatoryAttention(DL, DT, hops=0)
    with pytest.raises(ValueError, match="share_weights=True needs"):
        MultiHopRotatoryAttention(DL, DT, d_value=3, share_weights=True)
    with pytest.raises(ValueError, match="same size"):  # dot product of r^t [4] with k^l [6]
        RotatoryAttention(DL, DT, DR, score="dot")(left, target, right)
