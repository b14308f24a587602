"""NaN, infinities and zero sizes: attnkit's numerical semantics (docs/reliability.md, "Numerical
semantics"), the same on every backend, for every score and every alignment.

The rules under test:

- NaN in an admissible input reaches exactly what the formula (eq. 2-4) computes from it: NaN in
  ``q_i`` makes row ``i`` NaN (context, every weight of the row, lse); NaN in an admissible key
  ``k_j`` makes the rows that admit ``j`` NaN (for scores that read keys); NaN in ``v_jf`` makes
  feature ``f`` of the rows that admit ``j`` NaN (even at a zero weight: ``0 · NaN = NaN``).
- Masked-out keys are absent: NaN or infinities in their keys and values reach no output; a key no
  query may attend (padding) reaches no gradient either.
- A ``+inf`` admissible score: the row's weight is shared equally by its ``+inf`` keys (the limit
  as those scores grow together), ``lse = +inf``; it is tested as exactly that limit: the same call
  with the ``+inf`` scores replaced by one large finite score.
- A query with no admissible key gets zeros, whatever its query holds.
- ``d_q = 0`` or ``d_k = 0`` is refused by validation (``attention`` and ``explain`` alike).

Inputs are float64 so "equal to the clean call" can be tight (1e-12) across backends.
"""

from __future__ import annotations

import pytest
import torch
from attention_cases import (
    BACKEND_NAMES,
    NONFINITE_BACKENDS,
    POSITIONAL_ALIGNS,
    SCORE_NAMES,
    AlignCase,
    admits,
    align_cases,
    backend_reasons,
    make_score,
    on_meta,
    qkv,
    with_backends,
)
from torch import Tensor

import attnkit as ak
from attnkit.core.engine import BACKENDS, backend_named

EVAL_CASES = align_cases(training=False)
# backends that run softmax (sparse_rows takes only sparsemax and 1.5-entmax; its non-finite
# calls go to chunked, tests/core/test_sparse_rows.py)
SOFTMAX_BACKENDS = [b.name for b in BACKENDS if b.aligns is None or ak.align.Softmax in b.aligns]
NAN = float("nan")
INF = float("inf")
F64 = torch.float64
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
# Scores whose value depends on the key vectors (the location score reads positions only).
READS_KEYS = [name for name in SCORE_NAMES if name != "location"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(backend: str, q: Tensor, k: Tensor, v: Tensor, **kwargs) -> ak.AttentionOutput:
    """``ak.attention`` on ``backend`` alone, with the weights when it can give them (and then
    also the lse for softmax)."""
    for extra in ({"return_weights": True}, {}):
        if not backend_reasons(backend, q, k, v, **kwargs, **extra):
            return ak.attention(q, k, v, backend=backend, **kwargs, **extra)
    pytest.fail(  # collected only for backends that take the call (see ``takes``)
        f"{backend!r} cannot run: " + "; ".join(backend_reasons(backend, q, k, v, **kwargs))
    )


def takes(score_name: str, case: AlignCase, backend: str, **options) -> bool:
    """Whether ``backend``'s declaration takes the clean call of :func:`setup` (with or without
    weights) with ``options``: judged on ``meta`` tensors at collection time."""
    score = on_meta(lambda: make_score(score_name, 4, F64))
    align = on_meta(lambda: case.build(4, F64))
    shapes = ((1, 1, 4, 4), (1, 1, 6, 4), (1, 1, 6, 3))
    return any(
        admits(backend, shapes, dtype=F64, score=score, align=align, return_weights=w, **options)
        for w in (True, False)
    )


def nonfinite_params(scores: list[str], **options) -> list:
    """``(case, score, backend)`` for the backends that define results for NaN and infinities
    (the others decline such calls: tests/core/test_dispatch.py) and take the call."""
    return with_backends(
        ((case, score) for score in scores for case in EVAL_CASES),
        lambda case, score, backend: takes(score, case, backend, **options),
        NONFINITE_BACKENDS,
    )


def setup(score_name: str, case: AlignCase, m: int = 4, n: int = 6, seed: int = 0):
    q, k, v = qkv(b=1, h=1, m=m, n=n, d=4, dv=3, seed=seed, dtype=F64)
    torch.manual_seed(seed)  # parametric alignments/scores: the same draw whatever ran before
    return q, k, v, make_score(score_name, 4, F64), case.build(4, F64)


def rows_only(t: Tensor, rows: list[int]) -> Tensor:
    keep = torch.zeros(t.shape[2], dtype=torch.bool)
    keep[rows] = True
    return t[:, :, keep]


def assert_nan_rows(out: ak.AttentionOutput, clean: ak.AttentionOutput, nan_rows: list[int]):
    """Rows ``nan_rows`` are NaN everywhere (context, weights, lse); the others equal ``clean``."""
    m = out.context.shape[2]
    others = [i for i in range(m) if i not in nan_rows]
    assert torch.isnan(rows_only(out.context, nan_rows)).all()
    torch.testing.assert_close(
        rows_only(out.context, others), rows_only(clean.context, others), **TIGHT
    )
    if out.weights is not None:
        assert torch.isnan(rows_only(out.weights, nan_rows)).all(), "a NaN row is NaN at every key"
        torch.testing.assert_close(
            rows_only(out.weights, others), rows_only(clean.weights, others), **TIGHT
        )
    if out.lse is not None:
        assert torch.isnan(out.lse[0, 0, nan_rows]).all()
        assert not torch.isnan(out.lse[0, 0, others]).any()


# --- NaN in admissible inputs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "score_name", "backend"), nonfinite_params(SCORE_NAMES, causal=True)
)
def test_nan_in_a_query_makes_its_row_nan(backend: str, score_name: str, case: AlignCase) -> None:
    """Issue 20: sdpa returned a zero row for some NaN queries (its kernel's lanes decide)."""
    q, k, v, score, align = setup(score_name, case)
    clean = run(backend, q, k, v, score=score, align=align, causal=True)
    for row in range(4):
        bad = q.clone()
        bad[0, 0, row, row % 4] = NAN
        out = run(backend, bad, k, v, score=score, align=align, causal=True)
        assert_nan_rows(out, clean, [row])


def test_nan_query_that_the_fused_kernel_dropped_to_zeros() -> None:
    """The exact input of issue 20: torch's CPU kernel returns zeros for row 1."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, m, 8, generator=g) for m in (4, 6, 6))
    q[0, 0, 1, 0] = NAN
    for backend in SOFTMAX_BACKENDS:
        if backend_reasons(backend, q, k, v):
            continue  # flex: too small a call to compile for
        rows = torch.isnan(ak.attention(q, k, v, backend=backend).context[0, 0]).any(-1)
        assert rows.tolist() == [False, True, False, False], backend


@pytest.mark.parametrize(
    ("case", "score_name", "backend"), nonfinite_params(READS_KEYS, causal=True)
)
def test_nan_in_an_admissible_key_makes_the_rows_that_admit_it_nan(
    backend: str, score_name: str, case: AlignCase
) -> None:
    """Local alignments read only the scores inside their window: a row whose window leaves
    key 4 out does not see it (the reference backend says which; every backend must agree)."""
    q, k, v, score, align = setup(score_name, case)
    clean = run(backend, q, k, v, score=score, align=align, causal=True)
    bad = k.clone()
    bad[0, 0, 4, 1] = NAN  # causal, M=4, N=6: key 4 is admitted by queries 2 and 3
    out = run(backend, q, bad, v, score=score, align=align, causal=True)
    reference = ak.attention(q, bad, v, score=score, align=align, causal=True, backend="reference")
    rows = torch.isnan(reference.context[0, 0]).any(-1).nonzero().flatten().tolist()
    if case.name in POSITIONAL_ALIGNS:
        assert set(rows) <= {2, 3}
    else:
        assert rows == [2, 3]
    assert_nan_rows(out, clean, rows)


@pytest.mark.parametrize(
    ("case", "score_name", "backend"), nonfinite_params(SCORE_NAMES, causal=True)
)
def test_nan_in_an_admissible_value_makes_that_feature_nan(
    backend: str, score_name: str, case: AlignCase
) -> None:
    """Feature 1 of the rows that admit key 4 is NaN, even where the weight is 0 (sparse, hard,
    local alignments): the formula sums over the admissible keys. Weights are untouched."""
    q, k, v, score, align = setup(score_name, case)
    clean = run(backend, q, k, v, score=score, align=align, causal=True)
    bad = v.clone()
    bad[0, 0, 4, 1] = NAN
    out = run(backend, q, k, bad, score=score, align=align, causal=True)
    expected = clean.context.clone()
    expected[0, 0, 2:, 1] = NAN
    torch.testing.assert_close(out.context, expected, equal_nan=True, **TIGHT)
    if out.weights is not None:
        torch.testing.assert_close(out.weights, clean.weights, **TIGHT)


# --- Masked-out keys are absent -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "score_name", "backend"),
    with_backends(
        ((case, score) for score in SCORE_NAMES for case in EVAL_CASES),
        lambda case, score, backend: takes(score, case, backend, mask=torch.ones(6, dtype=bool)),
    ),
)
def test_non_finite_padding_keys_reach_no_output_and_no_gradient(
    backend: str, score_name: str, case: AlignCase
) -> None:
    """Keys 4 and 5 are padding (masked for every query): NaN and infinities there change
    nothing, forward or backward (PyTorch lets them poison every row, pytorch/pytorch#101967).
    Such keys are zeroed before any backend sees them, so every backend runs this call (the
    fused ones too: no input it reads is non-finite)."""
    q, k, v, score, align = setup(score_name, case)
    mask = torch.tensor([True] * 4 + [False] * 2)
    bad_k, bad_v = k.clone(), v.clone()
    bad_k[0, 0, 4], bad_v[0, 0, 4] = NAN, INF
    bad_k[0, 0, 5], bad_v[0, 0, 5] = -INF, NAN
    results = []
    for keys, values in ((k, v), (bad_k, bad_v)):
        inputs = [t.clone().requires_grad_(True) for t in (q, keys, values)]
        out = run(backend, *inputs, score=score, align=align, mask=mask)
        loss = out.context.sum() + (0 if out.weights is None else out.weights.sum())
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        grads = [
            torch.zeros_like(t) if g is None else g for t, g in zip(inputs, grads, strict=True)
        ]
        results.append((out, grads))
    (clean, clean_grads), (out, out_grads) = results
    torch.testing.assert_close(out.context, clean.context, **TIGHT)
    if out.weights is not None:
        torch.testing.assert_close(out.weights, clean.weights, **TIGHT)
    for got, want in zip(out_grads, clean_grads, strict=True):
        got, want = (
            got[..., :4, :] if got.shape[2] == 6 else got,
            want[..., :4, :] if want.shape[2] == 6 else want,
        )
        torch.testing.assert_close(got, want, **TIGHT)
    assert all(torch.isfinite(g).all() for g in out_grads)


@pytest.mark.parametrize(
    ("case", "backend"),
    with_backends(
        EVAL_CASES,
        lambda case, backend: takes("scaled_dot", case, backend, causal=True),
        NONFINITE_BACKENDS,
    ),
)
def test_non_finite_key_masked_for_some_queries_reaches_only_the_others(
    backend: str, case: AlignCase
) -> None:
    """Causal, M=4, N=6: key 4 is masked for queries 0 and 1 and admitted by 2 and 3."""
    q, k, v, score, align = setup("scaled_dot", case)
    clean = run(backend, q, k, v, score=score, align=align, causal=True)
    bad_k, bad_v = k.clone(), v.clone()
    bad_k[0, 0, 4, 0], bad_v[0, 0, 4, :] = NAN, INF
    out = run(backend, q, bad_k, bad_v, score=score, align=align, causal=True)
    assert_nan_rows(out, clean, [2, 3])


def test_nan_at_a_masked_position_of_a_float_mask_is_ignored() -> None:
    q, k, v = qkv(b=1, h=1, m=4, n=6, d=4, dv=3, dtype=F64)
    bias = torch.zeros(4, 6, dtype=F64)
    bias[:, 5] = -INF  # key 5 removed ...
    names = [b for b in SOFTMAX_BACKENDS if not backend_reasons(b, q, k, v, mask=bias)]
    clean = [ak.attention(q, k, v, mask=bias, backend=b).context for b in names]
    bad_v = v.clone()
    bad_v[0, 0, 5] = NAN  # ... so its value is never read
    for backend, want in zip(names, clean, strict=True):
        got = ak.attention(q, k, bad_v, mask=bias, backend=backend).context
        torch.testing.assert_close(got, want, **TIGHT)


def test_a_row_with_no_admissible_key_is_zero_even_with_a_nan_query() -> None:
    q, k, v = qkv(b=1, h=1, m=5, n=3, d=4, dv=3, dtype=F64)
    q[0, 0, 0, 0] = NAN  # causal with M > N: queries 0 and 1 see no key
    for backend in SOFTMAX_BACKENDS:
        if backend_reasons(backend, q, k, v, causal=True):
            continue  # flex: too small a call to compile for
        out = ak.attention(q, k, v, causal=True, backend=backend).context[0, 0]
        assert (out[:2] == 0).all() and torch.isfinite(out).all(), backend


# --- +inf scores ----------------------------------------------------------------------------------

LARGE = 1e4  # exp(-LARGE) == 0 in float64: the finite stand-in for +inf has reached the limit


def _inf_positions() -> Tensor:
    """Rows 0 and 1 get two +inf keys, row 3 one; row 2 none (M=4, N=6)."""
    where = torch.zeros(4, 6, dtype=torch.bool)
    where[0, [0, 2]] = True
    where[1, [1, 2]] = True
    where[3, 4] = True
    return where


@pytest.mark.parametrize(
    ("case", "score_name", "backend"), nonfinite_params(SCORE_NAMES, mask=torch.zeros(4, 6))
)
def test_inf_score_is_the_limit_of_growing_scores(
    backend: str, score_name: str, case: AlignCase
) -> None:
    """A +inf in the float mask makes those scores +inf. The result must be the limit: the same
    call whose scores at those positions are one large finite number (tied), computed by the
    reference backend. Issue 20: sparsemax/entmax raised "index -1 is out of bounds", softmax
    gave weights [nan, nan, inf, nan]."""
    q, k, v, score, align = setup(score_name, case)
    where = _inf_positions()
    bias = torch.zeros(4, 6, dtype=F64).masked_fill(where, INF)
    out = run(backend, q, k, v, score=score, align=align, mask=bias)

    def to_large(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
        return torch.where(where[i, j], torch.full_like(s, LARGE), s)

    want = ak.attention(
        q,
        k,
        v,
        score=score,
        align=align,
        score_mod=to_large,
        backend="reference",
        return_weights=True,
    )
    torch.testing.assert_close(out.context, want.context, **TIGHT)
    if out.weights is not None:
        torch.testing.assert_close(out.weights, want.weights, **TIGHT)
    if out.lse is not None:
        assert torch.isposinf(out.lse[0, 0, [0, 1, 3]]).all()
        assert torch.isfinite(out.lse[0, 0, 2])


def test_inf_score_shares_the_weight_equally() -> None:
    """The example of issue 20, and a tie of two +inf keys."""
    e = torch.tensor([[1.0, 2.0, INF, 0.0], [INF, 5.0, INF, -INF]])
    want = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.5, 0.0, 0.5, 0.0]])
    for align in (ak.align.Softmax(), ak.align.Sparsemax(), ak.align.Entmax15(), ak.align.TopK(2)):
        torch.testing.assert_close(align(e), want, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["tiled", "chunked", "reference"])
def test_inf_from_a_score_mod_with_gradients(backend: str) -> None:
    """+inf produced by a score_mod: same limit; gradients are finite, and equal across
    backends (the weights of an infinite row are constant in its scores)."""
    q, k, v = qkv(b=1, h=2, m=4, n=6, d=4, dv=3, dtype=F64, requires_grad=True)
    where = _inf_positions()

    def mod(s, b, h, i, j):
        return torch.where(where[i, j] & (h == 0), torch.full_like(s, INF), s)

    out = ak.attention(q, k, v, score_mod=mod, backend=backend)
    got = torch.autograd.grad(out.context.sum(), (q, k, v))
    ref = ak.attention(q, k, v, score_mod=mod, backend="reference")
    want = torch.autograd.grad(ref.context.sum(), (q, k, v))
    torch.testing.assert_close(out.context, ref.context, **TIGHT)
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, **TIGHT)
    # head 0, row 0: mean of values 0 and 2
    torch.testing.assert_close(out.context[0, 0, 0], v[0, 0, [0, 2]].mean(0), **TIGHT)


def test_overflowing_scores_from_finite_inputs_agree_on_every_backend() -> None:
    """Finite float32 inputs whose dot products overflow to +inf (keys 0 and 1) or to NaN
    (inf - inf, row 3): the fused kernel defines nothing there; every backend gives the limit."""
    q, k, v = qkv(b=1, h=1, m=4, n=6, d=4, dv=3)
    q, k = q.abs() * 1e20, k.abs()
    k[..., :2, :] *= 1e20
    q[0, 0, 3, 0] = -q[0, 0, 3, 0]  # row 3: +inf and -inf products in one dot product
    k[0, 0, 0, 0] *= 1e10
    for backend in SOFTMAX_BACKENDS:
        if backend_reasons(backend, q, k, v):
            continue  # flex: too small a call to compile for
        got = ak.attention(q, k, v, backend=backend).context[0, 0]
        torch.testing.assert_close(got[:3], v[0, 0, :2].mean(0).expand(3, 3), msg=backend)
        assert torch.isnan(got[3]).all(), backend


def test_finite_inputs_keep_the_fused_kernel() -> None:
    """The NaN/inf handling costs the sdpa path a check of its inputs, never a detour: the
    backend that computes finite calls (seen by a hook) is sdpa; NaN confined to padding keys
    is zeroed before any backend sees it, so it keeps sdpa too."""
    ran: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        out = run(call)
        ran.append(run.chosen.name)
        return out

    q, k, v = qkv(b=2, h=2, m=17, n=33, d=8, dv=5)
    bad_k = k.clone()
    bad_k[..., 30:, :] = NAN
    padding = torch.arange(33) < 30
    with ak.attention_hooks(spy):
        ak.attention(q, k, v, causal=True)
        ak.attention(q, k, v, mask=torch.zeros(17, 33))
        clean = ak.attention(q, k, v, mask=padding).context
        padded = ak.attention(q, bad_k, v, mask=padding).context
    assert ran == ["sdpa"] * 4
    torch.testing.assert_close(padded, clean, rtol=0, atol=0)


# --- zero sizes and dtypes ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["q", "k", "both"])
def test_zero_feature_size_is_refused_by_attention_and_explain(which: str) -> None:
    """Issue 20: a raw ZeroDivisionError from attention while explain said it would run."""
    q = torch.randn(1, 2, 4, 0 if which in ("q", "both") else 3)
    k = torch.randn(1, 2, 5, 0 if which in ("k", "both") else 3)
    v = torch.randn(1, 2, 5, 3)
    name = "k" if which == "k" else "q"
    for entry in (ak.attention, ak.explain):
        with pytest.raises(
            ValueError, match=rf"^{name} needs at least one feature.*\(1, 2, \d, 0\)"
        ):
            entry(q, k, v)


def declared_align(backend: str) -> ak.align.Align:
    """An alignment ``backend`` runs (softmax where it can)."""
    declared = backend_named(backend).aligns
    return ak.align.Softmax() if declared is None or ak.align.Softmax in declared else declared[0]()


ZERO_VALUE_SHAPES = ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 0))


@pytest.mark.parametrize(
    "backend",
    [b for b in BACKEND_NAMES if admits(b, ZERO_VALUE_SHAPES, align=declared_align(b))],
)
def test_zero_value_features_give_an_empty_context(backend: str) -> None:
    """(sparse_rows declines empty calls: the engine computes them on the next backend.)"""
    q, k, v = (torch.randn(shape) for shape in ZERO_VALUE_SHAPES)
    out = ak.attention(q, k, v, align=declared_align(backend), backend=backend)
    assert out.context.shape == (2, 3, 4, 0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64])
def test_multi_head_attention_names_the_expected_dtype(dtype: torch.dtype) -> None:
    """Issue 20: int64 inputs raised torch's "mat1 and mat2 must have the same dtype"."""
    mha = ak.MultiHeadAttention(8, 2, batch_first=True)
    x = torch.ones(1, 3, 8, dtype=dtype)
    with pytest.raises(
        TypeError, match=rf"query must have this module's dtype torch.float32, got {dtype}"
    ):
        mha(x, x, x)
    good = torch.ones(1, 3, 8)
    with pytest.raises(TypeError, match=r"^value must"):
        mha(good, good, x)
