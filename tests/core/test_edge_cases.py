"""Edge cases of RELIABILITY.md, for every alignment and every backend that accepts the call.

Empty rows, empty tensors, single queries/keys, half precision, non-contiguous and out-of-bounds
inputs, determinism, dropout, NaN propagation, bottom-right causal and sliding windows.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from attention_cases import (
    BACKEND_NAMES,
    NONFINITE_BACKENDS,
    AlignCase,
    admits,
    align_cases,
    attend,
    backend_reasons,
    grads,
    make_score,
    on_meta,
    qkv,
    randn,
    with_backends,
)
from torch import Tensor

import attnkit as ak
from attnkit.core.call import prepare
from attnkit.core.reference import reference_attention

ALL_CASES = align_cases(training=True)
EVAL_CASES = align_cases(training=False)
F64 = torch.float64
SHAPES = ((2, 2, 4, 4), (2, 2, 5, 4), (2, 2, 5, 3))  # qkv()'s, unless a test changes them


def takes(
    backend: str,
    case: AlignCase | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    shapes=SHAPES,
    score: str | None = None,
    **options,
) -> bool:
    """Whether ``backend``'s declaration takes the test's call: ``case``'s alignment (default
    softmax), ``score`` (a name; default scaled dot), ``dtype``, ``shapes`` and ``options``
    (judged on ``meta`` tensors at collection time)."""
    d = shapes[0][-1]
    if case is not None:
        options["align"] = on_meta(lambda: case.build(d, dtype))
    if score is not None:
        options["score"] = on_meta(lambda: make_score(score, d))
    return admits(backend, shapes, dtype=dtype, **options)


def case_params(cases, backends=BACKEND_NAMES, **options) -> list:
    """``(case, backend)`` for each backend that takes the call with ``case``'s alignment."""
    return with_backends(cases, lambda case, backend: takes(backend, case, **options), backends)


def backend_params(**options) -> list[str]:
    """The backends that take the call (softmax of the scaled dot product) with ``options``."""
    return [b for b in BACKEND_NAMES if takes(b, **options)]


def attend_with_weights(
    backend: str, q, k, v, **kwargs
) -> tuple[ak.AttentionOutput, Tensor | None]:
    """Run without weights; when the backend can also return the weights, run again with them
    (same seed) and return them too."""
    state = torch.random.get_rng_state()
    out = attend(backend, q, k, v, **kwargs)
    weights = None
    if not backend_reasons(backend, q, k, v, return_weights=True, **kwargs):
        torch.random.set_rng_state(state)
        again = ak.attention(q, k, v, backend=backend, return_weights=True, **kwargs)
        torch.testing.assert_close(again.context, out.context, equal_nan=True)
        weights = again.weights
    return out, weights


def naive_softmax(q, k, v, mask=None) -> Tensor:
    """Scaled dot-product softmax attention, materialised in the inputs' dtype."""
    e = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    a = torch.softmax(e, dim=-1)
    if mask is not None:
        a = a.nan_to_num(0.0)
    return a @ v


# --- a query with no admissible key ---------------------------------------------------------------


def _empty_row_setups():
    """label -> (M, N, options, the query rows with no admissible key; None: all of batch 0)."""
    allowed = torch.rand(4, 5, generator=torch.Generator().manual_seed(3)) < 0.7
    allowed[:, 0] = True
    allowed[1] = False
    as_float = torch.zeros(4, 5).masked_fill(~allowed, float("-inf"))
    return {
        "bool_mask": (4, 5, {"mask": allowed}, [1]),
        "float_mask": (4, 5, {"mask": as_float}, [1]),
        "causal_m_gt_n": (4, 2, {"causal": True}, [0, 1]),
        "padding_zero": (4, 5, {"mask": ak.masks.padding([0, 5], 5)}, None),
    }


@pytest.mark.parametrize(
    ("setup", "case", "backend"),
    with_backends(
        (
            (setup, case)
            for case in ALL_CASES
            for setup in ["bool_mask", "float_mask", "causal_m_gt_n", "padding_zero"]
        ),
        lambda setup, case, backend: takes(backend, case, **_empty_row_setups()[setup][2]),
    ),
)
def test_query_without_admissible_key(backend: str, case: AlignCase, setup: str) -> None:
    """Zero context, zero weights, zero gradients, lse = -inf; never NaN (RELIABILITY.md)."""
    d = 4
    m, n, kwargs, empty = _empty_row_setups()[setup]
    q, k, v = qkv(m=m, n=n, d=d, requires_grad=True)
    torch.manual_seed(0)
    align = case.build(d)
    out, weights = attend_with_weights(backend, q, k, v, align=align, **kwargs)

    if empty is None:  # padding length 0: every row of batch element 0
        rows = (slice(0, 1), slice(None), slice(None))
    else:
        rows = (slice(None), slice(None), empty)
    assert torch.equal(out.context[rows], torch.zeros_like(out.context[rows]))
    assert not torch.isnan(out.context).any()
    if weights is not None:
        assert torch.equal(weights[rows], torch.zeros_like(weights[rows]))
        assert not torch.isnan(weights).any()
    if out.lse is not None:
        assert torch.isneginf(out.lse[rows]).all()
        assert not torch.isnan(out.lse).any()
    if out.log_prob is not None:
        assert torch.isfinite(out.log_prob).all()

    g = randn(*out.context.shape, seed=5)
    empty_rows_only = (out.context[rows] * g[rows]).sum()
    for grad in grads(empty_rows_only, (q, k, v)):
        assert torch.equal(grad, torch.zeros_like(grad))
    for grad in grads((out.context * g).sum(), (q, k, v)):
        assert not torch.isnan(grad).any()


# --- tiny and empty shapes ------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "backend"), case_params(EVAL_CASES, dtype=F64))
def test_single_query(backend: str, case: AlignCase) -> None:
    """M = 1: the query is row 0 of a longer query block; causal lets it see every key."""
    q, k, v = qkv(m=5, n=6, dtype=torch.float64)
    align = case.build(4, torch.float64)
    one = attend(backend, q[:, :, :1], k, v, align=align)
    assert one.context.shape == (2, 2, 1, 3)
    many = attend(backend, q, k, v, align=align)
    torch.testing.assert_close(one.context, many.context[:, :, :1], rtol=1e-12, atol=1e-12)
    causal = attend(backend, q[:, :, :1], k, v, align=align, causal=True)
    torch.testing.assert_close(causal.context, one.context, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("case", "backend"), case_params(EVAL_CASES, dtype=F64))
def test_single_key(backend: str, case: AlignCase) -> None:
    """N = 1: a normalized alignment puts weight 1 on the only key, so the context is that value;
    causally only the last query sees it."""
    q, k, v = qkv(m=3, n=1, dtype=torch.float64)
    align = case.build(4, torch.float64)
    out, weights = attend_with_weights(backend, q, k, v, align=align)
    assert out.context.shape == (2, 2, 3, 3)
    assert torch.isfinite(out.context).all()
    if case.cls.normalized:
        torch.testing.assert_close(out.context, v.expand(2, 2, 3, 3), rtol=1e-12, atol=1e-12)
        if weights is not None:
            torch.testing.assert_close(weights, torch.ones(2, 2, 3, 1, dtype=torch.float64))
    elif weights is not None:
        assert ((weights >= 0) & (weights <= 1)).all()
    causal = attend(backend, q, k, v, align=align, causal=True)
    assert torch.equal(causal.context[:, :, :2], torch.zeros(2, 2, 2, 3, dtype=torch.float64))
    torch.testing.assert_close(causal.context[:, :, 2], out.context[:, :, 2], rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("case", "backend"),
    case_params(EVAL_CASES, shapes=((0, 2, 3, 4), (0, 2, 5, 4), (0, 2, 5, 3)), causal=True),
)
def test_empty_batch(backend: str, case: AlignCase) -> None:
    q, k, v = qkv(b=0, m=3, n=5, requires_grad=True)
    out = attend(backend, q, k, v, align=case.build(4), causal=True)
    assert out.context.shape == (0, 2, 3, 3)
    for grad in grads(out.context.sum(), (q, k, v)):
        assert grad.shape[0] == 0


@pytest.mark.parametrize(
    ("case", "backend"), case_params(EVAL_CASES, shapes=((2, 2, 0, 4), (2, 2, 5, 4), (2, 2, 5, 3)))
)
def test_zero_length_queries(backend: str, case: AlignCase) -> None:
    q, k, v = qkv(m=0, n=5, requires_grad=True)
    out, weights = attend_with_weights(backend, q, k, v, align=case.build(4))
    assert out.context.shape == (2, 2, 0, 3)
    if weights is not None:
        assert weights.shape == (2, 2, 0, 5)
    for grad in grads(out.context.sum(), (q, k, v)):
        assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize(
    ("case", "backend"), case_params(EVAL_CASES, shapes=((2, 2, 3, 4), (2, 2, 0, 4), (2, 2, 0, 3)))
)
def test_zero_length_keys(backend: str, case: AlignCase) -> None:
    """No keys at all: every row is a row without admissible key, so zeros (RELIABILITY.md)."""
    q, k, v = qkv(m=3, n=0, requires_grad=True)
    out, weights = attend_with_weights(backend, q, k, v, align=case.build(4))
    assert torch.equal(out.context, torch.zeros(2, 2, 3, 3))
    if weights is not None:
        assert weights.shape == (2, 2, 3, 0)
    if out.lse is not None:
        assert torch.isneginf(out.lse).all()
    for grad in grads(out.context.sum(), (q, k, v)):
        assert torch.equal(grad, torch.zeros_like(grad))


def test_zero_length_keys_3d_input() -> None:
    q, k, v = randn(2, 3, 4), randn(2, 0, 4, seed=1), randn(2, 0, 6, seed=2)
    out = ak.attention(q, k, v)
    assert torch.equal(out.context, torch.zeros(2, 3, 6))


# --- half precision -------------------------------------------------------------------------------

HALF = [torch.float16, torch.bfloat16]
# (alignment, score): every score family with softmax; the other continuous alignments once.
HALF_COMBINATIONS = [
    ("softmax", "scaled_dot"),
    ("softmax", "cosine"),
    ("softmax", "euclidean"),
    ("softmax", "additive"),
    ("sparsemax", "dot"),
    ("entmax15", "scaled_dot"),
    ("local_monotonic", "scaled_dot"),
]


def _naive_scores(name: str, score: ak.scores.Score, q: Tensor, k: Tensor) -> Tensor:
    """Table 2's formula for ``name`` written out in the inputs' dtype."""
    if name == "dot":
        return q @ k.transpose(-2, -1)
    if name == "scaled_dot":
        return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if name == "cosine":  # temperature 1
        return F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    if name == "euclidean":
        return -(q.unsqueeze(-2) - k.unsqueeze(-3)).pow(2).sum(-1).sqrt()
    if name == "additive":  # w^T tanh(W1 q + W2 k + b), with the module's parameters
        W1, W2 = score.query_proj.weight.to(q.dtype), score.key_proj.weight.to(q.dtype)
        b, w = score.key_proj.bias.to(q.dtype), score.out.weight[0].to(q.dtype)
        hidden = (q @ W1.T).unsqueeze(-2) + (k @ W2.T + b).unsqueeze(-3)
        return torch.tanh(hidden) @ w
    raise AssertionError(f"no naive formula for score {name!r}")


def _naive(score_name: str, q, k, v, score, align) -> Tensor:
    """The formula computed entirely in the inputs' dtype (the yardstick of RELIABILITY.md)."""
    with torch.no_grad():
        e = _naive_scores(score_name, score, q, k)
        return copy.deepcopy(align).to(q.dtype)(e, None, query=q, key=k) @ v


HALF_SHAPES = ((2, 2, 17, 8), (2, 2, 33, 8), (2, 2, 33, 8))


@pytest.mark.parametrize(
    ("align_name", "score_name", "dtype", "backend"),
    with_backends(
        ((align, score, dtype) for align, score in HALF_COMBINATIONS for dtype in HALF),
        lambda align, score, dtype, backend: takes(
            backend,
            next(c for c in EVAL_CASES if c.id == align),
            dtype=dtype,
            shapes=HALF_SHAPES,
            score=score,
        ),
    ),
)
def test_half_precision_close_to_float64(
    backend: str, dtype: torch.dtype, align_name: str, score_name: str
) -> None:
    """Error against the float64 formula at most 2x the naive same-dtype error (+ a floor)."""
    torch.manual_seed(0)
    d = 8
    score = make_score(score_name, d)
    align = next(c for c in EVAL_CASES if c.id == align_name).build(d)
    q, k, v = (t.to(dtype) for t in qkv(b=2, h=2, m=17, n=33, d=d, dv=8, seed=1))
    out = attend(backend, q, k, v, score=score, align=align)
    assert out.context.dtype == dtype
    assert torch.isfinite(out.context).all()

    golden_call = prepare(
        q.double(),
        k.double(),
        v.double(),
        score=copy.deepcopy(score).double(),
        align=copy.deepcopy(align).double(),
    )
    golden = reference_attention(golden_call).context
    naive = _naive(score_name, q, k, v, score, align)
    naive_error = (naive.double() - golden).abs().max().item()
    error = (out.context.double() - golden).abs().max().item()
    floor = torch.finfo(dtype).eps * v.double().abs().max().item()
    assert error <= 2 * naive_error + floor, (error, naive_error, floor)


@pytest.mark.parametrize(
    ("case", "dtype", "backend"),
    with_backends(
        ((case, dtype) for case in EVAL_CASES for dtype in HALF),
        lambda case, dtype, backend: takes(
            backend,
            case,
            dtype=dtype,
            shapes=((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3)),
            mask=ak.masks.padding([7, 4], 7),
        ),
    ),
)
def test_half_precision_inputs(backend: str, dtype: torch.dtype, case: AlignCase) -> None:
    """Half inputs with a float32 module (as a user leaves it, and as parametric scores already
    allow) give a finite result of the input dtype, close to the float32 result."""
    torch.manual_seed(0)
    align = case.build(4)  # float32 parameters, like a parametric score's
    q, k, v = qkv(m=5, n=7, seed=2)
    mask = ak.masks.padding([7, 4], 7)
    out = attend(backend, q.to(dtype), k.to(dtype), v.to(dtype), align=align, mask=mask)
    assert out.context.dtype == dtype
    assert torch.isfinite(out.context).all()
    full = attend(
        backend,
        q.to(dtype).float(),
        k.to(dtype).float(),
        v.to(dtype).float(),
        align=align,
        mask=mask,
    )
    if case.name not in ("hard", "topk", "reinforced"):  # discontinuous in the scores
        tolerance = 8 * torch.finfo(dtype).eps * v.abs().max().item()
        torch.testing.assert_close(out.context.float(), full.context, rtol=0, atol=tolerance)


@pytest.mark.parametrize(
    ("dtype", "backend"),
    with_backends(
        HALF,
        lambda dtype, backend: takes(
            backend,
            dtype=dtype,
            shapes=((2, 2, 4, 8), (2, 2, 6, 8), (2, 2, 6, 3)),
            score="dot",
            mask=ak.masks.causal(4, 6),
        ),
    ),
)
def test_half_precision_large_scores_do_not_overflow(backend: str, dtype: torch.dtype) -> None:
    """Scores beyond the half range (|e| > 65504) and a mask: still finite (softmax in float32)."""
    q, k, v = qkv(m=4, n=6, d=8, seed=4)
    q, k = q * 200, k * 200
    mask = ak.masks.causal(4, 6)
    out = attend(backend, q.to(dtype), k.to(dtype), v.to(dtype), score="dot", mask=mask)
    assert torch.isfinite(out.context).all()
    expected = naive_softmax(
        q.to(dtype).double() * 8**0.5, k.to(dtype).double(), v.to(dtype).double(), mask
    )
    tolerance = 4 * torch.finfo(dtype).eps * v.abs().max().item()
    torch.testing.assert_close(out.context.double(), expected, rtol=0, atol=tolerance)


# --- strides, views and the out-of-bounds detector ------------------------------------------------


@pytest.mark.parametrize(
    ("case", "backend"), case_params(EVAL_CASES, dtype=F64, mask=torch.ones(1, 5, dtype=bool))
)
def test_non_contiguous_inputs(backend: str, case: AlignCase) -> None:
    """Transposed views, slices of a packed qkv tensor, a stride-0 mask and a non-contiguous
    upstream gradient give the contiguous result."""
    b, h, length, d = 2, 3, 6, 4
    align = case.build(d, torch.float64)
    packed = randn(b, length, 3, h, d, seed=7, dtype=torch.float64).requires_grad_()
    q, k, v = (packed[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, L, d] views
    assert not q.is_contiguous()
    mask = ak.masks.sliding_window(length, length, 4)[None, None].expand(b, h, length, length)
    assert mask.stride()[:2] == (0, 0)
    upstream = randn(b, length, h, d, seed=8, dtype=torch.float64).transpose(1, 2)
    out = attend(backend, q, k, v, align=align, mask=mask)
    (grad_packed,) = grads((out.context * upstream).sum(), (packed,))

    leaves = [t.detach().contiguous().requires_grad_() for t in (q, k, v)]
    dense = attend(backend, *leaves, align=align, mask=mask.contiguous())
    dense_grads = grads((dense.context * upstream.contiguous()).sum(), leaves)
    torch.testing.assert_close(out.context, dense.context, rtol=1e-12, atol=1e-12)
    for i in range(3):
        torch.testing.assert_close(
            grad_packed[:, :, i].transpose(1, 2), dense_grads[i], rtol=1e-12, atol=1e-12
        )


def _nan_padded(t: Tensor, pad: int = 3) -> tuple[Tensor, Tensor]:
    """A leaf buffer bigger than ``t`` in every dim, NaN outside, and the view of ``t`` in it."""
    buffer = torch.full([s + pad for s in t.shape], float("nan"), dtype=t.dtype)
    index = tuple(slice(1, 1 + s) for s in t.shape)
    buffer[index] = t
    buffer.requires_grad_()
    return buffer, buffer[index]


@pytest.mark.parametrize(
    ("case", "backend"), case_params(EVAL_CASES, dtype=F64, mask=torch.zeros(4, 5))
)
def test_out_of_bounds_detector(backend: str, case: AlignCase) -> None:
    """xFormers' trick: views into NaN-padded buffers must give the unpadded outputs and
    gradients; any read outside the view would bring a NaN in."""
    d = 4
    align = case.build(d, torch.float64)
    q, k, v = qkv(m=5, n=7, d=d, dtype=torch.float64)
    bias = torch.zeros(1, 1, 5, 7, dtype=torch.float64).masked_fill(
        ~ak.masks.causal(5, 7), float("-inf")
    )
    bias = bias + randn(1, 1, 5, 7, seed=9, dtype=torch.float64).clamp(-1, 1)
    upstream = randn(2, 2, 5, 3, seed=10, dtype=torch.float64)

    buffers, views = zip(*(_nan_padded(t) for t in (q, k, v)), strict=True)
    _, bias_view = _nan_padded(bias)
    out = attend(backend, *views, align=align, mask=bias_view.detach())
    buffer_grads = grads((out.context * upstream).sum(), buffers)

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    plain = attend(backend, *leaves, align=align, mask=bias)
    plain_grads = grads((plain.context * upstream).sum(), leaves)

    assert not torch.isnan(out.context).any()
    torch.testing.assert_close(out.context, plain.context, rtol=1e-12, atol=1e-12)
    for buffer_grad, plain_grad, t in zip(buffer_grads, plain_grads, (q, k, v), strict=True):
        assert not torch.isnan(buffer_grad).any()
        inside = tuple(slice(1, 1 + s) for s in t.shape)
        torch.testing.assert_close(buffer_grad[inside], plain_grad, rtol=1e-12, atol=1e-12)
        outside = buffer_grad.clone()
        outside[inside] = 0
        assert torch.equal(outside, torch.zeros_like(outside))


# --- determinism ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "backend"), case_params(ALL_CASES, causal=True))
def test_repeated_forward_and_backward_are_bitwise_equal(backend: str, case: AlignCase) -> None:
    q, k, v = qkv(m=9, n=11, d=8, seed=11, requires_grad=True)
    torch.manual_seed(0)
    align = case.build(8)
    upstream = randn(2, 2, 9, 3, seed=12)
    runs = []
    for _ in range(2):
        torch.manual_seed(123)
        out = attend(backend, q, k, v, align=align, causal=True)
        runs.append([out.context, *grads((out.context * upstream).sum(), (q, k, v))])
    for run in runs[1:]:
        for first, again in zip(runs[0], run, strict=True):
            assert torch.equal(first, again)


# --- dropout --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", backend_params(dropout=0.3))
def test_dropout_is_reproducible_with_a_seed(backend: str) -> None:
    q, k, v = qkv(m=8, n=8, seed=13)
    torch.manual_seed(5)
    first = attend(backend, q, k, v, dropout=0.3)
    torch.manual_seed(5)
    second = attend(backend, q, k, v, dropout=0.3)
    torch.manual_seed(6)
    other = attend(backend, q, k, v, dropout=0.3)
    assert torch.equal(first.context, second.context)
    assert not torch.equal(first.context, other.context)


@pytest.mark.parametrize(
    ("p", "backend"), with_backends([0.1, 0.5], lambda p, backend: takes(backend, dropout=p))
)
def test_dropout_keeps_the_expected_fraction(backend: str, p: float) -> None:
    """Uniform weights 1/N and one-hot values v = I make the context the dropped weights: each
    is (1/N)/(1-p) when kept (inverted dropout, as F.dropout) or 0; >= 1e5 weights."""
    b, h, m, n = 2, 2, 256, 100
    q = torch.zeros(b, h, m, 4)
    k = randn(b, h, n, 4, seed=14)
    v = torch.eye(n).expand(b, h, n, n)
    torch.manual_seed(7)
    out = attend(backend, q, k, v, dropout=p)
    dropped = out.context
    assert dropped.numel() >= 100_000
    kept = dropped != 0
    assert abs(kept.float().mean().item() - (1 - p)) <= 0.01
    expected = torch.full_like(dropped, 1 / n / (1 - p))
    torch.testing.assert_close(dropped[kept], expected[kept], rtol=1e-5, atol=0)


@pytest.mark.parametrize("backend", backend_params())
def test_dropout_zero_is_the_deterministic_result(backend: str) -> None:
    q, k, v = qkv(m=6, n=6, seed=15)
    plain = attend(backend, q, k, v)
    torch.manual_seed(1)
    zero = attend(backend, q, k, v, dropout=0.0)
    torch.manual_seed(2)
    again = attend(backend, q, k, v, dropout=0)
    assert torch.equal(zero.context, plain.context)
    assert torch.equal(again.context, plain.context)


@pytest.mark.parametrize("backend", backend_params(dropout=0.5, return_weights=True))
def test_dropout_returns_the_weights_before_dropout(backend: str) -> None:
    q, k, v = qkv(m=6, n=6, seed=16)
    plain = attend(backend, q, k, v, return_weights=True)
    torch.manual_seed(3)
    dropped = attend(backend, q, k, v, dropout=0.5, return_weights=True)
    torch.testing.assert_close(dropped.weights, plain.weights, rtol=0, atol=0)
    assert not torch.equal(dropped.context, plain.context)


# --- NaN propagation ------------------------------------------------------------------------------


def _clean_weights(q, k, v, align, **kwargs) -> Tensor:
    """Weights of the NaN-free call, from the reference path."""
    return reference_attention(prepare(q, k, v, align=align, return_weights=True, **kwargs)).weights


@pytest.mark.parametrize(("case", "backend"), case_params(EVAL_CASES, NONFINITE_BACKENDS))
def test_nan_in_a_query_propagates_to_its_row_only(backend: str, case: AlignCase) -> None:
    q, k, v = qkv(b=1, h=1, m=4, n=6, seed=17)
    align = case.build(4)
    q[0, 0, 1, 0] = float("nan")
    out = attend(backend, q, k, v, align=align)
    rows_with_nan = torch.isnan(out.context[0, 0]).any(-1)
    assert rows_with_nan.tolist() == [False, True, False, False]


@pytest.mark.parametrize(
    ("where", "case", "backend"),
    with_backends(
        ((where, case) for case in EVAL_CASES for where in ["k", "v"]),
        lambda where, case, backend: takes(backend, case, causal=True),
        NONFINITE_BACKENDS,
    ),
)
def test_nan_in_a_key_or_value_reaches_the_rows_that_see_it(
    backend: str, case: AlignCase, where: str
) -> None:
    """One key holds a NaN; every query that gives that key a positive weight in the clean call
    must get a NaN context (causal, so queries before the key do not see it)."""
    q, k, v = qkv(b=1, h=1, m=6, n=6, seed=18)
    align = case.build(4)
    positive = _clean_weights(q, k, v, align, causal=True)[0, 0] > 0  # [M, N]
    key = int(positive.sum(0).argmax())  # the key most queries attend
    seen = positive[:, key]
    assert seen.any()
    bad = {"k": k.clone(), "v": v.clone()}
    bad[where][0, 0, key, 0] = float("nan")
    nan_k, nan_v = bad["k"], bad["v"]
    out = attend(backend, q, nan_k, nan_v, align=align, causal=True)
    rows_with_nan = torch.isnan(out.context[0, 0]).any(-1)
    assert rows_with_nan[seen].all(), (seen.tolist(), rows_with_nan.tolist())


# --- bottom-right causal and sliding windows ------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "n", "expected"),
    [
        (2, 5, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
        (5, 2, [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]),
        (3, 3, [[1, 0, 0], [1, 1, 0], [1, 1, 1]]),
    ],
)
@pytest.mark.parametrize("backend", backend_params(dtype=F64, causal=True))
def test_causal_is_bottom_right(backend: str, m: int, n: int, expected: list[list[int]]) -> None:
    keep = torch.tensor(expected, dtype=torch.bool)
    q, k, v = qkv(m=m, n=n, dtype=torch.float64, seed=19)
    out, weights = attend_with_weights(backend, q, k, v, causal=True)
    torch.testing.assert_close(out.context, naive_softmax(q, k, v, keep), rtol=1e-10, atol=1e-12)
    if weights is not None:
        assert torch.equal(weights > 0, keep.expand_as(weights))


@pytest.mark.parametrize("backend", backend_params(causal=True))
def test_causal_future_independence_across_blocks(backend: str) -> None:
    """Sizes big enough that the blockwise backends split queries and keys into several blocks
    (not multiples of a block): perturbing keys/values after i' leaves queries 0..i bitwise equal
    and their gradient with respect to those keys/values exactly zero."""
    b, h, m, n, i = 16, 16, 130, 150, 115
    future = i + n - m + 1
    q, k, v = qkv(b=b, h=h, m=m, n=n, d=4, dv=2, seed=22, requires_grad=True)
    out = attend(backend, q, k, v, causal=True)
    past = out.context[:, :, : i + 1]
    _, grad_k, grad_v = grads((past * randn(*past.shape, seed=23)).sum(), (q, k, v))
    assert torch.equal(grad_k[:, :, future:], torch.zeros_like(grad_k[:, :, future:]))
    assert torch.equal(grad_v[:, :, future:], torch.zeros_like(grad_v[:, :, future:]))
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[:, :, future:] = randn(b, h, n - future, 4, seed=24)
    v2[:, :, future:] = randn(b, h, n - future, 2, seed=25)
    perturbed = attend(backend, q.detach(), k2, v2, causal=True)
    assert torch.equal(perturbed.context[:, :, : i + 1], past.detach())


@pytest.mark.parametrize(
    "backend", backend_params(dtype=F64, causal=True, mask=ak.masks.padding([5, 2], 5))
)
def test_causal_combined_with_a_mask(backend: str) -> None:
    """causal=True and an explicit mask are combined by logical and."""
    q, k, v = qkv(m=3, n=5, dtype=torch.float64, seed=20)
    pad = ak.masks.padding([5, 2], 5)
    out = attend(backend, q, k, v, causal=True, mask=pad)
    keep = pad & ak.masks.causal(3, 5)
    torch.testing.assert_close(out.context, naive_softmax(q, k, v, keep), rtol=1e-10, atol=1e-12)


def _window_counts(m: int, n: int, window: int) -> list[int]:
    """Keys query i admits: min(W, i' + 1) for i' = i + N - M (0 when i' < 0)."""
    return [max(0, min(window, i + n - m + 1)) for i in range(m)]


LENGTH = 6
WINDOWS = [1, 2, LENGTH - 1, LENGTH, LENGTH + 5]
WINDOW_SHAPES = [(LENGTH, LENGTH), (3, LENGTH), (LENGTH + 2, LENGTH)]


@pytest.mark.parametrize(("m", "n"), WINDOW_SHAPES)
@pytest.mark.parametrize("window", WINDOWS)
def test_sliding_window_mask_admits_min_w_keys(m: int, n: int, window: int) -> None:
    mask = ak.masks.sliding_window(m, n, window)
    assert mask.sum(-1).tolist() == _window_counts(m, n, window)
    for i in range(m):
        admitted = torch.nonzero(mask[i]).flatten().tolist()
        position = i + n - m
        assert admitted == [j for j in range(n) if position - window < j <= position]


@pytest.mark.parametrize(
    ("window", "m", "n", "backend"),
    with_backends(
        ((window, m, n) for (m, n) in WINDOW_SHAPES for window in WINDOWS),
        lambda window, m, n, backend: takes(
            backend, dtype=F64, mask_mod=ak.masks.sliding_window_mod(window, offset=n - m)
        ),
    ),
)
def test_sliding_window_mod_through_attention(backend: str, window: int, m: int, n: int) -> None:
    q, k, v = qkv(m=m, n=n, dtype=torch.float64, seed=21)
    mod = ak.masks.sliding_window_mod(window, offset=n - m)
    out, weights = attend_with_weights(backend, q, k, v, mask_mod=mod)
    keep = ak.masks.sliding_window(m, n, window)
    torch.testing.assert_close(out.context, naive_softmax(q, k, v, keep), rtol=1e-10, atol=1e-12)
    if weights is not None:
        counts = (weights > 0).sum(-1)
        expected = torch.tensor(_window_counts(m, n, window)).expand_as(counts)
        assert torch.equal(counts, expected)
