"""The ``sparse_rows`` backend (sparsemax and 1.5-entmax of dot-product scores, backward from the
saved thresholds) against the float64 formulas of ``formulas.py`` (Martins & Astudillo 2016,
Algorithm 1; Peters, Niculae & Martins 2019) and the ``entmax`` package in float64: outputs and
gradients with respect to q, k, v and a score parameter, with the error-ratio criterion of
RELIABILITY.md (forward 2x, gradients 3x the naive float32 formula's error, plus 1e-6)."""

from __future__ import annotations

import entmax
import formulas as ref
import pytest
import torch
from torch import Tensor

import attnkit as ak
import attnkit.core.sparse_rows as sparse_rows
from attnkit.core.call import prepare
from attnkit.core.engine import choose_backend

F64, F32 = torch.float64, torch.float32
ALIGNS = {"sparsemax": ref.sparsemax, "entmax15": ref.entmax15}
PACKAGE = {"sparsemax": entmax.sparsemax, "entmax15": entmax.entmax15}


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of a few query rows, so small inputs span many blocks (and causal blocks end at
    different keys)."""
    monkeypatch.setattr(sparse_rows, "ROW_BLOCK_BUDGET", 40)


def admissible(b: int, m: int, n: int, lengths: list[int] | None, causal: bool) -> Tensor:
    """``[B, 1, M, N]`` bool, built by loops from the definitions (bottom-right causal)."""
    out = torch.zeros(b, 1, m, n, dtype=torch.bool)
    for bi in range(b):
        for i in range(m):
            for j in range(n):
                ok = lengths is None or j < lengths[bi]
                out[bi, 0, i, j] = ok and (not causal or j <= i + n - m)
    return out


def max_error(x: Tensor, golden: Tensor) -> float:
    return (x.detach().to(F64) - golden).abs().max().item() if x.numel() else 0.0


def check_against_formula(
    align: str,
    m: int,
    n: int,
    *,
    lengths: list[int] | None = None,
    causal: bool = False,
    kv_heads: int = 2,
    bias: bool = False,
    seed: int = 0,
) -> None:
    """``ak.attention(score=General, align=align)`` on ``sparse_rows`` in float32: context and
    gradients (q, k, v, the general score's ``W``) within the error ratio of the float64
    formula; the call is the one the engine picks on its own."""
    torch.manual_seed(seed)
    b, h, d, dv = 2, 4, 8, 5
    score = ak.scores.General(d, d)
    q64 = torch.randn(b, h, m, d, dtype=F64) * 1.5
    k64 = torch.randn(b, kv_heads, n, d, dtype=F64)
    v64 = torch.randn(b, kv_heads, n, dv, dtype=F64)
    w64 = score.query_proj.weight.detach().to(F64)
    bias64 = torch.randn(1, 1, m, n, dtype=F64) if bias else None
    upstream = torch.randn(b, h, m, dv, dtype=F64)
    allowed = admissible(b, m, n, lengths, causal)
    user: dict = {"causal": causal}
    if lengths is not None:
        user["mask"] = ak.masks.padding(torch.tensor(lengths), n)
    if bias:
        float_mask = bias64.float()
        if lengths is not None:
            float_mask = float_mask.masked_fill(~user["mask"], float("-inf"))
        user["mask"] = float_mask

    def formula(dt: torch.dtype) -> list[Tensor]:
        q, k, v, w = (t.to(dt).requires_grad_() for t in (q64, k64, v64, w64))
        groups = h // kv_heads
        kr, vr = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        extra = None if bias64 is None else bias64.to(dt)
        c, _ = ref.attention(
            q, kr, vr, lambda x, y: ref.general(x, y, w), ALIGNS[align], allowed, bias=extra
        )
        return [c, *torch.autograd.grad(c, (q, k, v, w), upstream.to(dt))]

    q, k, v = (t.float().requires_grad_() for t in (q64, k64, v64))
    call = prepare(q, k, v, score=score, align=align, **user)
    assert choose_backend(call).name == "sparse_rows"
    out = ak.attention(q, k, v, score=score, align=align, **user)
    weight = score.query_proj.weight
    got = [out.context, *torch.autograd.grad(out.context, (q, k, v, weight), upstream.float())]
    want, naive = formula(F64), formula(F32)
    for name, x, w, nv, factor in zip(
        ("context", "dq", "dk", "dv", "dW"), got, want, naive, (2, 3, 3, 3, 3), strict=True
    ):
        assert torch.isfinite(x).all(), f"{name}: not finite"
        tol = factor * max_error(nv, w) + 1e-6
        assert max_error(x, w) <= tol, f"{name}: error {max_error(x, w):.3g} > {tol:.3g}"


@pytest.mark.parametrize("align", sorted(ALIGNS))
@pytest.mark.parametrize(("m", "n"), [(1, 17), (17, 1), (29, 37), (37, 29)])
def test_against_the_formula(align: str, m: int, n: int) -> None:
    check_against_formula(align, m, n)


@pytest.mark.parametrize("align", sorted(ALIGNS))
@pytest.mark.parametrize(("m", "n"), [(13, 31), (31, 13), (24, 24)])
def test_padding_causal_and_blocks_that_split_rows(align: str, m: int, n: int, tiny_blocks) -> None:
    """Padding (one batch element with no key at all), bottom-right causal with M != N both
    ways (rows with no admissible key when M > N), grouped-query heads, many blocks."""
    check_against_formula(align, m, n, lengths=[n, 0], causal=True, kv_heads=1)
    check_against_formula(align, m, n, lengths=[max(1, n // 3), n], causal=True, seed=1)


@pytest.mark.parametrize("align", sorted(ALIGNS))
def test_float_mask(align: str, tiny_blocks) -> None:
    """A finite float mask is added to the scores; its -inf entries remove keys."""
    check_against_formula(align, 11, 19, lengths=[7, 19], bias=True)


@pytest.mark.parametrize("align", sorted(ALIGNS))
def test_long_rows_match_the_package(align: str) -> None:
    """Rows of 700 keys (partial sorts of several sizes; rows split into groups) against the
    ``entmax`` package on the materialised float64 scores, forward and gradients."""
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 3, x, 16, dtype=F64, requires_grad=True) for x in (40, 700, 700))
    with torch.no_grad():
        q[0, 0, :5] *= 0.01  # nearly uniform rows: supports of hundreds of keys
        q[0, 1, :5] *= 10  # peaked rows: supports of one or two keys
    up = torch.randn(1, 3, 40, 16, dtype=F64)
    out = ak.attention(q, k, v, align=align, backend="sparse_rows").context
    want = PACKAGE[align](q @ k.transpose(-1, -2) / 4, dim=-1) @ v
    got_grads = torch.autograd.grad(out, (q, k, v), up)
    want_grads = torch.autograd.grad(want, (q, k, v), up)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    for got, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_ties_at_the_threshold() -> None:
    """Scores equal to the threshold get weight 0 and no gradient, as in the package (whose
    backward uses the same support); equal scores at the top share the weight."""
    rows = {
        "sparsemax": [[1.0, 0.0, 0.0, -3.0], [1.0, 1.0, 0.5, 0.0]],  # tau = 0; tau = 0.5
        "entmax15": [[2.0, 0.0, 0.0, -3.0], [1.0, 1.0, 1.0, 1.0]],  # tau = 0 (x = s/2); all tie
    }
    for align, scores in rows.items():
        s = torch.tensor(scores, dtype=F64).view(1, 1, 2, 4)
        # score "dot" of q = the scores and k = the identity: s_ij = q_i · e_j
        q = s.clone().requires_grad_()
        k = torch.eye(4, dtype=F64).view(1, 1, 4, 4).requires_grad_()
        v = torch.randn(1, 1, 4, 3, dtype=F64, requires_grad=True)
        up = torch.randn(1, 1, 2, 3, dtype=F64)
        out = ak.attention(q, k, v, score="dot", align=align, backend="sparse_rows").context
        a = PACKAGE[align](q @ k.transpose(-1, -2), dim=-1)
        want = a @ v
        torch.testing.assert_close(out, want, rtol=0, atol=1e-14)
        expected_weights = ALIGNS[align](s, torch.ones(1, 1, 2, 4, dtype=torch.bool))
        torch.testing.assert_close(a, expected_weights, rtol=0, atol=1e-14)
        for got, expected in zip(
            torch.autograd.grad(out, (q, k, v), up),
            torch.autograd.grad(want, (q, k, v), up),
            strict=True,
        ):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("align", sorted(ALIGNS))
def test_gradcheck(align: str, tiny_blocks) -> None:
    """float64 finite differences through the score's parameters, causal, GQA, padding."""
    torch.manual_seed(5)
    score = ak.scores.BiasedGeneral(6, 6).double()
    q = torch.randn(2, 2, 5, 6, dtype=F64, requires_grad=True)
    k = torch.randn(2, 1, 7, 6, dtype=F64, requires_grad=True)
    v = torch.randn(2, 1, 7, 3, dtype=F64, requires_grad=True)
    mask = ak.masks.padding(torch.tensor([7, 4]), 7)
    params = tuple(score.parameters())
    assert choose_backend(prepare(q, k, v, score=score, align=align)).name == "sparse_rows"

    def fn(q, k, v, *_):
        return ak.attention(q, k, v, score=score, align=align, mask=mask, causal=True).context

    assert torch.autograd.gradcheck(fn, (q, k, v, *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("align", sorted(ALIGNS))
def test_infinite_scores_keep_the_defined_result(align: str) -> None:
    """Finite inputs whose scores overflow to +inf, and a +inf query: the weight is shared
    equally by the +inf keys (docs/reliability.md), the gradient through the weights is 0."""
    q = torch.tensor([[1e30], [1.0], [float("inf")]]).view(1, 1, 3, 1).requires_grad_()
    k = torch.tensor([[1e30], [1e30], [-1.0], [0.5]]).view(1, 1, 4, 1).requires_grad_()
    v = torch.arange(8.0).view(1, 1, 4, 2).requires_grad_()
    with ak.backends("sparse_rows", "chunked"):
        # sparse_rows declines (the inputs are not finite); chunked, which defines them, runs
        text = ak.explain(q, k, v, score="dot", align=align)
        out = ak.attention(q, k, v, score="dot", align=align).context
    assert "runs on: chunked" in text and "passed over sparse_rows: an input holds NaN" in text
    keys = v[0, 0]
    # row 0: scores [+inf, +inf, -1e30, 5e29]; row 1: [1e30, 1e30, -1, 0.5] (finite: the
    # mappings give 1/2, 1/2); row 2: [+inf, +inf, -inf, +inf]
    torch.testing.assert_close(out[0, 0, 0], (keys[0] + keys[1]) / 2)
    torch.testing.assert_close(out[0, 0, 1], (keys[0] + keys[1]) / 2)
    torch.testing.assert_close(out[0, 0, 2], (keys[0] + keys[1] + keys[3]) / 3)
    out[0, 0, 0].sum().backward()
    assert torch.equal(q.grad[0, 0, 0], torch.zeros(1))
    torch.testing.assert_close(v.grad[0, 0, :, 0], torch.tensor([0.5, 0.5, 0.0, 0.0]))


def test_non_finite_inputs_match_chunked() -> None:
    """NaN in a query, in a masked key and an infinite value: the same as ``chunked``."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, x, 4, dtype=F64) for x in (5, 6, 6))
    q[0, 0, 1, 2] = float("nan")
    k[1, :, 5] = float("nan")  # masked for batch element 1
    v[0, 1, 3, 0] = float("inf")
    mask = ak.masks.padding(torch.tensor([6, 5]), 6)
    for align in ALIGNS:
        with ak.backends("sparse_rows", "chunked"):  # sparse_rows declines, chunked runs
            assert "runs on: chunked" in ak.explain(q, k, v, align=align, mask=mask)
            got = ak.attention(q, k, v, align=align, mask=mask).context
        want = ak.attention(q, k, v, align=align, mask=mask, backend="chunked").context
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=1e-12)


@pytest.mark.parametrize("align", sorted(ALIGNS))
def test_saves_no_quadratic_tensor(align: str) -> None:
    """What the forward keeps for the backward is O((M + N) · d): features, values and two
    numbers per query — never the [M, N] scores or weights."""
    b, h, m, n, d = 1, 2, 96, 160, 8
    q, k, v = (torch.randn(b, h, x, d, requires_grad=True) for x in (m, n, n))
    saved: list[int] = []

    def pack(t: Tensor) -> Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = ak.attention(q, k, v, align=align, backend="sparse_rows").context
    out.sum().backward()
    assert max(saved) < m * n
    assert sum(saved) <= b * h * ((m + 2 * n) * d + 2 * m)


def test_calls_it_does_not_take_stay_on_chunked() -> None:
    """Weights, dropout, summaries, a score_mod and non-dot scores go to ``chunked``."""
    q = torch.randn(1, 2, 5, 4)
    assert choose_backend(prepare(q, q, q, align="entmax15", score="cosine")).name == (
        "sparse_rows"
    )
    for options in (
        {"return_weights": True},
        {"dropout": 0.1},
        {"summary": "entropy"},
        {"score_mod": lambda s, b, h, i, j: s},
        {"score": "euclidean"},
        {"score": ak.scores.Additive(4, 4, 3)},
    ):
        assert choose_backend(prepare(q, q, q, align="sparsemax", **options)).name == "chunked"
