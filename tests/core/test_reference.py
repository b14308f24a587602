"""Every score × every alignment × every backend against the survey's formulas in float64.

Acceptance (RELIABILITY.md): a path in float64 matches the float64 formula to ~1e-10; a path in a
lower precision T may be off the float64 formula by at most 2x the error of the same formula
computed naively in T, plus a 1e-6 rounding floor. The formulas are in ``formulas.py`` and never
call attnkit; only their parameters are read from attnkit's modules.

Scores, alignments and backends are parametrised from attnkit's registries, so a newly
registered one is tested automatically — or fails loudly until it is added to the factories below.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import entmax
import formulas as ref
import pytest
import torch
from attention_cases import admits, on_meta, with_backends
from torch import Tensor

import attnkit as ak
from attnkit.core.align import ALIGNS
from attnkit.core.call import prepare
from attnkit.core.engine import BACKENDS
from attnkit.core.scores import SCORES

F64 = torch.float64
F32 = torch.float32
FLOAT64_TOLERANCE = 1e-10
ROUNDING_FLOOR = 1e-6  # RELIABILITY.md's floor for float32 and below
MAX_KEYS = 16  # the Location score's max_length in every test

SCORE_NAMES = SCORES.names()
ALIGN_NAMES = ALIGNS.names()
BACKEND_NAMES = [backend.name for backend in BACKENDS]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These tensors are tiny: OpenMP's parallel regions cost more than they compute (~5 ms per
    call for some element-wise ops on a loaded 2-core machine). Restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------
# Factories: how to build each registered score and alignment with sizes (shared by test files)
# --------------------------------------------------------------------------------------------


def _activated_general(d_q: int, d_k: int) -> ak.scores.Score:
    score = ak.scores.ActivatedGeneral(d_q, d_k)
    with torch.no_grad():
        score.bias.fill_(0.3)  # the default b = 0 would leave the bias untested
    return score


SCORE_FACTORY: dict[str, Callable[[int, int, int], ak.scores.Score]] = {
    "additive": lambda d_q, d_k, n_max: ak.scores.Additive(d_q, d_k, d_hidden=5),
    "dot": lambda d_q, d_k, n_max: ak.scores.Dot(),
    "scaled_dot": lambda d_q, d_k, n_max: ak.scores.ScaledDot(),
    "general": lambda d_q, d_k, n_max: ak.scores.General(d_q, d_k),
    "biased_general": lambda d_q, d_k, n_max: ak.scores.BiasedGeneral(d_q, d_k),
    "activated_general": lambda d_q, d_k, n_max: _activated_general(d_q, d_k),
    "cosine": lambda d_q, d_k, n_max: ak.scores.Cosine(temperature=0.5),
    "euclidean": lambda d_q, d_k, n_max: ak.scores.Euclidean(),
    "location": lambda d_q, d_k, n_max: ak.scores.Location(d_q, n_max),
}


def _local_predictive(d_q: int, d_k: int) -> ak.align.Align:
    align = ak.align.LocalPredictive(d_q, window=2, d_hidden=4)
    with torch.no_grad():
        align.w_p.weight.mul_(4)  # spread the predicted positions p over the whole sequence
    return align


ALIGN_FACTORY: dict[str, Callable[[int, int], ak.align.Align]] = {
    "softmax": lambda d_q, d_k: ak.align.Softmax(),
    "sparsemax": lambda d_q, d_k: ak.align.Sparsemax(),
    "entmax15": lambda d_q, d_k: ak.align.Entmax15(),
    "topk": lambda d_q, d_k: ak.align.TopK(3),
    "hard": lambda d_q, d_k: ak.align.Hard(),
    "local_monotonic": lambda d_q, d_k: ak.align.LocalMonotonic(2),
    "local_predictive": _local_predictive,
    "reinforced": lambda d_q, d_k: ak.align.Reinforced(d_q, d_k, d_hidden=4),
}


def query_size(score_name: str, d_k: int) -> int:
    """``d_q`` for a test: ``d_k`` for scores that need equal sizes, else a different size."""
    return d_k if SCORES.get(score_name).same_size else d_k + 1


def make_score(name: str, d_q: int, d_k: int, n_max: int = MAX_KEYS) -> ak.scores.Score:
    """The registered score ``name`` built for these sizes (fails loudly for an unknown one)."""
    if name not in SCORE_FACTORY:
        pytest.fail(
            f"score {name!r} is registered but the tests cannot build it: add it to SCORE_FACTORY "
            "in tests/core/test_reference.py and its formula to tests/core/formulas.py"
        )
    return SCORE_FACTORY[name](d_q, d_k, n_max)


def make_align(name: str, d_q: int, d_k: int) -> ak.align.Align:
    """The registered alignment ``name`` built for these sizes, in eval mode (deterministic)."""
    if name not in ALIGN_FACTORY:
        pytest.fail(
            f"alignment {name!r} is registered but the tests cannot build it: add it to "
            "ALIGN_FACTORY in tests/core/test_reference.py and its formula to "
            "tests/core/formulas.py"
        )
    return ALIGN_FACTORY[name](d_q, d_k).eval()


def reference_score(name: str, module: object, dtype: torch.dtype, scale: float | None = None):
    try:
        return ref.score_formula(name, module, dtype, scale)
    except KeyError:
        pytest.fail(f"score {name!r} has no formula in tests/core/formulas.py: add it")


def reference_align(name: str, module: object, q: Tensor, k: Tensor, dtype: torch.dtype):
    try:
        return ref.align_formula(name, module, q, k, dtype)
    except KeyError:
        pytest.fail(f"alignment {name!r} has no formula in tests/core/formulas.py: add it")


# --------------------------------------------------------------------------------------------
# Masks by their definitions (DESIGN.md): bottom-right causal, padding, sliding window
# --------------------------------------------------------------------------------------------


def allowed_keys(
    batch: int,
    m: int,
    n: int,
    lengths: tuple[int, ...] | None = None,
    causal: bool = False,
    window: int | None = None,
) -> Tensor:
    """Bool ``[B, 1, M, N]``: key ``j`` of batch ``b`` exists (``j < lengths[b]``), is not in the
    future of query ``i`` at key position ``i' = i + N - M`` (``j <= i'``), and lies in its
    window (``i' - window < j <= i'``)."""
    i = torch.arange(m).view(m, 1)
    j = torch.arange(n).view(1, n)
    position = i + n - m
    out = torch.ones(batch, 1, m, n, dtype=torch.bool)
    if lengths is not None:
        out = out & (j < torch.tensor(lengths).view(batch, 1, 1, 1))
    if causal:
        out = out & (j <= position)
    if window is not None:
        out = out & (j <= position) & (j > position - window)
    return out


def padding_mask(lengths: tuple[int, ...], n: int, three_d: bool) -> Tensor:
    """The user's key-padding mask: ``[B, 1, N]`` (3-D inputs) or ``[B, 1, 1, N]``."""
    keep = torch.arange(n).view(1, n) < torch.tensor(lengths).view(-1, 1)
    return keep.unsqueeze(1) if three_d else keep.view(len(lengths), 1, 1, n)


# --------------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------------


def max_error(x: Tensor, golden: Tensor) -> float:
    if x.numel() == 0:
        return 0.0
    return (x.to(F64) - golden).abs().max().item()


def param_dtype(dtype: torch.dtype) -> torch.dtype:
    """Modules stay in float32 under half-precision inputs (mixed precision), else match."""
    return F64 if dtype == F64 else F32


@dataclass
class Golden:
    context: Tensor  # float64, 4-D
    weights: Tensor
    context_tol: float
    weights_tol: float
    allowed: Tensor | None


def golden(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score_name: str,
    score: object,
    align_name: str,
    align: object,
    dtype: torch.dtype,
    allowed: Tensor | None,
    *,
    bias: Tensor | None = None,
    score_mod: Callable | None = None,
    scale: float | None = None,
    kv_repeat: int = 1,
    float64: tuple[Tensor, Tensor] | None = None,
) -> Golden:
    """The float64 formula on the (rounded) inputs, and the tolerance for a path in ``dtype``.
    ``float64``: the float64 formula's result when already known (same inputs and parameters).
    """

    def compute(dt: torch.dtype) -> tuple[Tensor, Tensor]:
        q4, k4, v4 = (t.to(dt) if t.dim() == 4 else t.to(dt).unsqueeze(1) for t in (q, k, v))
        k4, v4 = k4.repeat_interleave(kv_repeat, 1), v4.repeat_interleave(kv_repeat, 1)
        s = reference_score(score_name, score, dt, scale)
        a = reference_align(align_name, align, q4, k4, dt)
        b = None if bias is None else bias.to(dt)
        return ref.attention(q4, k4, v4, s, a, allowed, bias=b, score_mod=score_mod)

    c64, a64 = compute(F64) if float64 is None else float64
    if dtype == F64:
        return Golden(c64, a64, FLOAT64_TOLERANCE, FLOAT64_TOLERANCE, allowed)
    c_naive, a_naive = compute(dtype)
    return Golden(
        c64,
        a64,
        2 * max_error(c_naive, c64) + ROUNDING_FLOOR,
        2 * max_error(a_naive, a64) + ROUNDING_FLOOR,
        allowed,
    )


def assert_matches(
    out: ak.AttentionOutput, want: Golden, dtype: torch.dtype, three_d: bool, label: str
) -> None:
    context, weights = out.context, out.weights
    assert context.dtype == dtype, f"{label}: context dtype {context.dtype}, inputs {dtype}"
    assert weights is None or weights.dtype == dtype, f"{label}: weights dtype {weights.dtype}"
    if three_d:
        context = context.unsqueeze(1)
        weights = None if weights is None else weights.unsqueeze(1)
    assert context.shape == want.context.shape, label
    assert torch.isfinite(context).all(), f"{label}: non-finite context"
    err = max_error(context, want.context)
    assert err <= want.context_tol, f"{label}: context error {err:.3g} > {want.context_tol:.3g}"
    if weights is not None:
        assert weights.shape == want.weights.shape, label
        assert torch.isfinite(weights).all(), f"{label}: non-finite weights"
        err = max_error(weights, want.weights)
        assert err <= want.weights_tol, f"{label}: weights error {err:.3g} > {want.weights_tol:.3g}"
    if want.allowed is not None:
        # A query with no admissible key: exactly zero context and weights, never NaN.
        empty = ~want.allowed.expand(*want.context.shape[:-1], want.allowed.shape[-1]).any(-1)
        assert (context[empty] == 0).all(), f"{label}: fully masked rows must give 0"
        if weights is not None:
            assert (weights[empty] == 0).all(), f"{label}: fully masked rows must weigh 0"


def check(
    backend: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score_name: str,
    score: ak.scores.Score,
    align_name: str,
    align: ak.align.Align,
    dtypes: tuple[torch.dtype, ...] = (F64, F32),
    allowed: Tensor | None = None,
    bias: Tensor | None = None,
    kv_repeat: int = 1,
    **kwargs,
) -> int:
    """Run ``ak.attention`` through ``backend`` in each of ``dtypes``, with and without weights
    (whichever calls the backend accepts; skip with its reasons if it accepts none), and compare
    with the formula.

    ``q, k, v`` are float64 and are rounded to each dtype; ``allowed`` is the reference mask (bool
    ``[B, 1 or H, M, N]``) that the user-level ``kwargs`` (mask, causal, mask_mod) must amount
    to; ``bias`` the reference additive mask. Returns how many calls were compared."""
    runner = {b.name: b for b in BACKENDS}[backend]
    refused: set[str] = set()
    ran = 0
    shared = None  # the float64 formula, reused by every dtype that represents the inputs exactly
    inputs = [t for t in (q, k, v, bias) if t is not None]
    for dtype in dtypes:
        exact = all(torch.equal(t.to(dtype).to(F64), t) for t in inputs)
        qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
        bias_d = None if bias is None else bias.to(dtype)  # the path sees the rounded float mask
        score = score.to(param_dtype(dtype))
        align = align.to(param_dtype(dtype))
        want = None
        for return_weights in (True, False):
            options = dict(score=score, align=align, return_weights=return_weights, **kwargs)
            reasons = runner.reasons(prepare(qd, kd, vd, **options))
            if reasons:
                refused.update(reasons)
                continue
            out = ak.attention(qd, kd, vd, backend=backend, **options)
            assert (out.weights is not None) == return_weights
            if want is None:
                want = golden(
                    qd,
                    kd,
                    vd,
                    score_name,
                    score,
                    align_name,
                    align,
                    dtype,
                    allowed,
                    bias=bias_d,
                    score_mod=kwargs.get("score_mod"),
                    scale=kwargs.get("scale"),
                    kv_repeat=kv_repeat,
                    float64=shared if exact else None,
                )
                if exact:
                    shared = (want.context, want.weights)
            label = f"{backend}, {score_name} × {align_name}, {dtype}, weights={return_weights}"
            assert_matches(out, want, dtype, q.dim() == 3, label)
            ran += 1
    if not ran:  # the test was collected because the declaration takes a call (check_runs)
        pytest.fail(f"backend {backend!r} refused every call: " + "; ".join(sorted(refused)))
    return ran


@functools.cache
def check_runs(
    backend: str,
    score_name: str,
    align_name: str,
    dtypes: tuple[torch.dtype, ...] = (F64, F32),
    weights: tuple[bool, ...] = (True, False),
    multi: bool = False,
    score_mod: bool = False,
    float_mask: bool = False,
) -> bool:
    """Whether :func:`check` (or a test that asks like it) runs at least one call on
    ``backend``: its declaration asked, at collection time, about the same kind of call on
    ``meta`` tensors (score, alignment, dtypes, with and without weights, a ``score_mod``, a
    float mask, a multi-dimensional score)."""
    d_k, d_v = 6, 4
    d_q = d_k + 1 if multi else query_size(score_name, d_k)
    if multi:
        score = on_meta(lambda: ak.scores.Additive(d_q, d_k, d_hidden=5, value_features=d_v))
    else:
        score = on_meta(lambda: make_score(score_name, d_q, d_k))
    align = on_meta(lambda: make_align(align_name, d_q, d_k))
    shapes = ((2, 3, 5, d_q), (2, 3, 7, d_k), (2, 3, 7, d_v))
    options: dict = {"score": score, "align": align}
    if score_mod:
        options["score_mod"] = alibi
    if float_mask:
        options["mask"] = torch.zeros(5, 7)
    return any(
        admits(backend, shapes, dtype=dtype, forced=False, return_weights=w, **options)
        for dtype in dtypes
        for w in weights
    )


# --------------------------------------------------------------------------------------------
# Every score × every alignment × every backend
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """Sizes of a test call; ``heads=None`` for 3-D inputs; ``lengths`` enables key padding
    (with these lengths) together with ``causal=True``."""

    batch: int
    heads: int | None
    m: int
    n: int
    d_k: int
    d_v: int
    lengths: tuple[int, ...] | None

    def __str__(self) -> str:
        dims = "3d" if self.heads is None else "4d"
        mask = "masked" if self.lengths is not None else "unmasked"
        return f"{dims}-M{self.m}-N{self.n}-dk{self.d_k}-dv{self.d_v}-{mask}"

    def inputs(self, d_q: int) -> tuple[Tensor, Tensor, Tensor]:
        lead = (self.batch,) if self.heads is None else (self.batch, self.heads)
        # float32 values (exact in float64), so one float64 formula serves both dtypes
        q = torch.randn(*lead, self.m, d_q).to(F64)
        k = torch.randn(*lead, self.n, self.d_k).to(F64)
        v = torch.randn(*lead, self.n, self.d_v).to(F64)
        return q, k, v

    def masking(self) -> tuple[dict, Tensor | None]:
        """(the user's keyword arguments, the reference mask)."""
        if self.lengths is None:
            return {}, None
        user = {"mask": padding_mask(self.lengths, self.n, self.heads is None), "causal": True}
        return user, allowed_keys(self.batch, self.m, self.n, self.lengths, causal=True)


CASES = [
    Case(2, 3, 5, 7, 6, 4, None),
    # causal with M > N: queries 0 and 1 see no key at all; batch 1 has 2 keys
    Case(2, 3, 7, 5, 6, 4, (4, 2)),
    # 3-D, d_v > d_k; batch 0 has no key at all
    Case(2, None, 4, 6, 5, 7, (0, 5)),
]


@pytest.mark.parametrize(
    ("score_name", "align_name", "case", "backend"),
    with_backends(
        itertools.product(SCORE_NAMES, ALIGN_NAMES, CASES),
        lambda score, align, case, backend: check_runs(backend, score, align),
    ),
)
def test_every_score_and_alignment_matches_the_formulas(
    score_name: str, align_name: str, case: Case, backend: str
) -> None:
    """float64: to 1e-10; float32: within 2x the naive float32 formula's error + 1e-6."""
    torch.manual_seed(1)
    d_q = query_size(score_name, case.d_k)
    score = make_score(score_name, d_q, case.d_k)
    align = make_align(align_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    user, allowed = case.masking()
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name=align_name,
        align=align,
        allowed=allowed,
        **user,
    )


@pytest.mark.parametrize(
    ("align_name", "case", "backend"),
    with_backends(
        itertools.product(ALIGN_NAMES, CASES),
        lambda align, case, backend: check_runs(backend, "additive", align, multi=True),
    ),
)
def test_multi_dimensional_attention_matches_eq_30_to_32(
    align_name: str, case: Case, backend: str
) -> None:
    torch.manual_seed(2)
    d_q = case.d_k + 1
    score = ak.scores.Additive(d_q, case.d_k, d_hidden=5, value_features=case.d_v)
    align = make_align(align_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    user, allowed = case.masking()
    assert check(
        backend,
        q,
        k,
        v,
        score_name="additive",
        score=score,
        align_name=align_name,
        align=align,
        allowed=allowed,
        **user,
    )


# Half precision: attnkit computes scores and alignments in float32 and casts the output back;
# the yardstick is the same formula computed naively in half precision.
HALF_PAIRS = [(s, "softmax") for s in SCORE_NAMES] + [
    ("scaled_dot", a) for a in ALIGN_NAMES if a != "softmax"
]


@pytest.mark.parametrize(
    ("score_name", "align_name", "dtype", "backend"),
    with_backends(
        ((s, a, dtype) for s, a in HALF_PAIRS for dtype in (torch.float16, torch.bfloat16)),
        lambda score, align, dtype, backend: check_runs(backend, score, align, (dtype,)),
    ),
)
def test_half_precision_inputs(
    score_name: str, align_name: str, dtype: torch.dtype, backend: str
) -> None:
    case = CASES[1]  # with fully masked rows
    torch.manual_seed(3)
    d_q = query_size(score_name, case.d_k)
    score = make_score(score_name, d_q, case.d_k)
    align = make_align(align_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    user, allowed = case.masking()
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name=align_name,
        align=align,
        dtypes=(dtype,),
        allowed=allowed,
        **user,
    )


# --------------------------------------------------------------------------------------------
# score_mod, mask_mod, float masks, scale, grouped-query inputs
# --------------------------------------------------------------------------------------------


def alibi(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return s - 0.5 * (i - j).abs()


def alibi_per_head(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return s - 0.25 * (h + 1) * (i - j).abs()


def soft_cap(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return 30 * torch.tanh(s / 30)


SCORE_MODS = [alibi, soft_cap]
MOD_PAIRS = [(s, "softmax") for s in SCORE_NAMES] + [
    ("scaled_dot", a) for a in ALIGN_NAMES if a != "softmax"
]


@pytest.mark.parametrize(
    ("score_name", "align_name", "score_mod", "backend"),
    with_backends(
        ((s, a, mod) for s, a in MOD_PAIRS for mod in SCORE_MODS),
        lambda score, align, mod, backend: check_runs(backend, score, align, score_mod=True),
    ),
)
def test_score_mod_matches_the_modified_formula(
    score_name: str, align_name: str, score_mod: Callable, backend: str
) -> None:
    torch.manual_seed(4)
    case = CASES[1]
    d_q = query_size(score_name, case.d_k)
    score = make_score(score_name, d_q, case.d_k)
    align = make_align(align_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    user, allowed = case.masking()
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name=align_name,
        align=align,
        allowed=allowed,
        score_mod=score_mod,
        **user,
    )


@pytest.mark.parametrize(
    ("score_mod", "backend"),
    with_backends(
        [alibi_per_head, soft_cap],
        lambda mod, backend: check_runs(
            backend, "additive", "softmax", (F64,), multi=True, score_mod=True
        ),
    ),
)
def test_score_mod_on_multi_dimensional_scores(score_mod: Callable, backend: str) -> None:
    torch.manual_seed(5)
    case = CASES[0]
    score = ak.scores.Additive(case.d_k, case.d_k, d_hidden=5, value_features=case.d_v)
    q, k, v = case.inputs(case.d_k)
    assert check(
        backend,
        q,
        k,
        v,
        score_name="additive",
        score=score,
        align_name="softmax",
        align=ak.align.Softmax(),
        dtypes=(F64,),
        score_mod=score_mod,
    )


def _head_zero_sees_all(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return h == 0


def _first_key(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return j == 0


def mask_mod_cases(m: int, n: int) -> list[tuple[str, dict, Tensor]]:
    """(id, user's keyword arguments, reference mask [B or 1, H or 1, M, N]) for B=2, H=2."""
    lengths = (n - 1, 3)
    masks = ak.masks
    out = []
    for label, window in (("1", 1), ("2", 2), ("N-1", n - 1), ("N", n), ("N+5", n + 5)):
        out.append(
            (
                f"window{label}",
                {"mask_mod": masks.sliding_window_mod(window, n - m)},
                allowed_keys(1, m, n, window=window),
            )
        )
    window3 = allowed_keys(1, m, n, window=3)
    padded = allowed_keys(2, m, n, lengths)
    causal = allowed_keys(1, m, n, causal=True)
    first = torch.arange(n).view(1, 1, 1, n) == 0
    head0 = torch.arange(2).view(1, 2, 1, 1) == 0
    out += [
        (
            "and(window3,padding)",
            {
                "mask_mod": masks.and_masks(
                    masks.sliding_window_mod(3, n - m), masks.padding_mod(torch.tensor(lengths))
                )
            },
            window3 & padded,
        ),
        (
            "or(causal,first_key)",
            {"mask_mod": masks.or_masks(masks.causal_mod(n - m), _first_key)},
            causal | first,
        ),
        (
            "and(or(head0,causal),padding)",
            {
                "mask_mod": masks.and_masks(
                    masks.or_masks(_head_zero_sees_all, masks.causal_mod(n - m)),
                    masks.padding_mod(torch.tensor(lengths)),
                )
            },
            (head0 | causal) & padded,
        ),
        (
            "window3+mask+causal",
            {
                "mask_mod": masks.sliding_window_mod(3, n - m),
                "mask": padding_mask(lengths, n, three_d=False),
                "causal": True,
            },
            window3 & padded & causal,
        ),
    ]
    return out


MASK_MOD_IDS = [name for name, _, _ in mask_mod_cases(5, 7)]


@pytest.mark.parametrize(
    ("score_name", "align_name", "which", "m", "n", "backend"),
    with_backends(
        (
            (score, align, which, m, n)
            for score, align in (("scaled_dot", "softmax"), ("additive", "sparsemax"))
            for which in MASK_MOD_IDS
            for m, n in ((5, 7), (7, 5))
        ),
        lambda score, align, which, m, n, backend: check_runs(backend, score, align),
    ),
)
def test_mask_mod_matches_the_masked_formula(
    score_name: str, align_name: str, which: str, m: int, n: int, backend: str
) -> None:
    torch.manual_seed(6)
    cases = {name: (user, allowed) for name, user, allowed in mask_mod_cases(m, n)}
    user, allowed = cases[which]
    d_k = 6
    d_q = query_size(score_name, d_k)
    score = make_score(score_name, d_q, d_k)
    align = make_align(align_name, d_q, d_k)
    q, k, v = Case(2, 2, m, n, d_k, 4, None).inputs(d_q)
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name=align_name,
        align=align,
        allowed=allowed,
        **user,
    )


@pytest.mark.parametrize(
    ("score_name", "align_name", "three_d", "backend"),
    with_backends(
        itertools.product(
            ["scaled_dot", "additive"], ["softmax", "sparsemax", "local_monotonic"], [False, True]
        ),
        lambda score, align, three_d, backend: check_runs(backend, score, align, float_mask=True),
    ),
)
def test_float_mask_is_added_to_the_scores(
    score_name: str, align_name: str, three_d: bool, backend: str
) -> None:
    torch.manual_seed(7)
    case = Case(2, None if three_d else 2, 5, 7, 6, 4, None)
    d_q = query_size(score_name, case.d_k)
    score = make_score(score_name, d_q, case.d_k)
    align = make_align(align_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    float_mask = torch.randn(2, 1, case.m, case.n, dtype=F64)
    removed = torch.rand(2, 1, case.m, case.n) < 0.3
    removed[0, 0, 1] = True  # a query with no key
    float_mask = float_mask.masked_fill(removed, -math.inf)
    bias = float_mask.masked_fill(removed, 0)
    user_mask = float_mask.squeeze(1) if three_d else float_mask
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name=align_name,
        align=align,
        allowed=~removed,
        bias=bias,
        mask=user_mask,
    )


@pytest.mark.parametrize(
    ("score_name", "scale", "backend"),
    with_backends(
        itertools.product(SCORE_NAMES, [0.7, 2.0]),
        lambda score, scale, backend: check_runs(backend, score, "softmax"),
    ),
)
def test_scale_replaces_or_multiplies(score_name: str, scale: float, backend: str) -> None:
    """``scale`` replaces ``1/sqrt(d_k)`` of the scaled dot product; it multiplies other scores."""
    torch.manual_seed(8)
    case = CASES[1]
    d_q = query_size(score_name, case.d_k)
    score = make_score(score_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    user, allowed = case.masking()
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name="softmax",
        align=ak.align.Softmax(),
        allowed=allowed,
        scale=scale,
        **user,
    )


def test_scaled_dot_with_scale_one_is_the_dot_product() -> None:
    torch.manual_seed(9)
    q, k, v = (torch.randn(2, 3, 5, 6, dtype=F64) for _ in range(3))
    scaled = ak.attention(q, k, v, score="scaled_dot", scale=1.0, return_weights=True)
    plain = ak.attention(q, k, v, score="dot", return_weights=True)
    assert max_error(scaled.weights, plain.weights) <= FLOAT64_TOLERANCE
    shrunk = ak.attention(q, k, v, score="dot", scale=1 / math.sqrt(6), return_weights=True)
    default = ak.attention(q, k, v, score="scaled_dot", return_weights=True)
    assert max_error(shrunk.weights, default.weights) <= FLOAT64_TOLERANCE


@pytest.mark.parametrize(
    ("score_name", "backend"),
    with_backends(SCORE_NAMES, lambda score, backend: check_runs(backend, score, "softmax")),
)
def test_grouped_query_inputs_repeat_key_value_heads(score_name: str, backend: str) -> None:
    torch.manual_seed(10)
    d_k = 6
    d_q = query_size(score_name, d_k)
    score = make_score(score_name, d_q, d_k)
    q = torch.randn(2, 4, 5, d_q, dtype=F64)
    k = torch.randn(2, 2, 7, d_k, dtype=F64)
    v = torch.randn(2, 2, 7, 3, dtype=F64)
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name="softmax",
        align=ak.align.Softmax(),
        allowed=allowed_keys(2, 5, 7, causal=True),
        causal=True,
        kv_repeat=2,
    )


@pytest.mark.parametrize(
    "backend", [b for b in BACKEND_NAMES if check_runs(b, "euclidean", "softmax")]
)
def test_euclidean_score_at_zero_distance(backend: str) -> None:
    """Self-attention with the Euclidean score (keys = queries, plus near-duplicates): a
    vector's distance to itself is exactly 0, which ``-||q - k||`` computes exactly. Computed
    as ``sqrt(|q|^2 + |k|^2 - 2 q.k)`` it is the square root of a rounding error."""
    torch.manual_seed(17)
    x = 0.1 * torch.randn(2, 2, 6, 8, dtype=F64)
    keys = torch.cat([x, x[..., :3, :] + 1e-7 * torch.randn(2, 2, 3, 8, dtype=F64)], dim=-2)
    v = torch.randn(2, 2, 9, 4, dtype=F64)
    assert check(
        backend,
        x,
        keys,
        v,
        score_name="euclidean",
        score=ak.scores.Euclidean(),
        align_name="softmax",
        align=ak.align.Softmax(),
    )


# --------------------------------------------------------------------------------------------
# Sequences longer than one block of the blockwise backends; the gradients along
# --------------------------------------------------------------------------------------------

LONG_CASES = [
    # (score, align, M, N, lengths). Sizes that do not divide power-of-two blocks; at the time of
    # writing the tiled backend's blocks are 1024 (dot) and 512 (additive, d_w = 5) wide, so the
    # softmax cases span several of its real blocks (test_small_blocks covers the chunked one).
    ("scaled_dot", "softmax", 1025, 1023, (1023,)),
    ("scaled_dot", "softmax", 1, 1025, None),
    ("additive", "softmax", 600, 1025, (1000,)),
    ("additive", "sparsemax", 97, 1025, (1025,)),
]


@pytest.mark.parametrize(
    ("score_name", "align_name", "m", "n", "lengths", "backend"),
    with_backends(
        LONG_CASES,
        lambda score, align, m, n, lengths, backend: check_runs(
            backend, score, align, (F32,), (False,)
        ),
    ),
)
def test_long_sequences_forward_and_backward(
    score_name: str, align_name: str, m: int, n: int, lengths: tuple | None, backend: str
) -> None:
    """Forward and gradients in float32 against the float64 formula (gradients: 3x the naive
    float32 error, FlashAttention's criterion), with sizes that straddle block boundaries."""
    torch.manual_seed(11)
    d_k, d_v = 8, 5
    d_q = query_size(score_name, d_k)
    score = make_score(score_name, d_q, d_k, n_max=n)
    align = make_align(align_name, d_q, d_k)
    b, h = 1, 1
    q64 = torch.randn(b, h, m, d_q, dtype=F64)
    k64 = torch.randn(b, h, n, d_k, dtype=F64)
    v64 = torch.randn(b, h, n, d_v, dtype=F64)
    user = {} if lengths is None else {"mask": padding_mask(lengths, n, False), "causal": True}
    allowed = None if lengths is None else allowed_keys(1, m, n, lengths, causal=True)
    upstream = torch.randn(b, h, m, d_v, dtype=F64)

    def formula(dt: torch.dtype) -> list[Tensor]:
        q, k, v = (t.float().to(dt).requires_grad_() for t in (q64, k64, v64))
        s = reference_score(score_name, score, dt)
        a = reference_align(align_name, align, q, k, dt)
        c, _ = ref.attention(q, k, v, s, a, allowed)
        return [c, *torch.autograd.grad(c, (q, k, v), upstream.to(dt))]

    q, k, v = (t.float().requires_grad_() for t in (q64, k64, v64))
    out = ak.attention(q, k, v, score=score.float(), align=align, backend=backend, **user)
    got = [out.context, *torch.autograd.grad(out.context, (q, k, v), upstream.float())]
    want, naive = formula(F64), formula(F32)
    for name, x, w, nv, factor in zip(
        ("context", "dq", "dk", "dv"), got, want, naive, (2, 3, 3, 3), strict=True
    ):
        assert torch.isfinite(x).all(), f"{name}: not finite"
        tol = factor * max_error(nv, w) + ROUNDING_FLOOR
        assert max_error(x, w) <= tol, f"{name}: error {max_error(x, w):.3g} > {tol:.3g}"


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink the blockwise backends' blocks (tiled: to its minimum, 16 × 16; chunked: to a few
    query rows), so small inputs span several blocks. Raises if the budgets are renamed: then
    update this fixture."""
    import attnkit.core.chunked as chunked
    import attnkit.core.tiled as tiled

    monkeypatch.setattr(tiled, "BLOCK_BUDGET", 1)
    monkeypatch.setattr(chunked, "CHUNK_BUDGET", 400)  # 10 rows (dot), 2 rows (additive)


SMALL_BLOCK_PAIRS = [(s, "softmax") for s in SCORE_NAMES] + [
    ("scaled_dot", a) for a in ALIGN_NAMES if a != "softmax"
]


@pytest.mark.parametrize(
    ("score_name", "align_name", "backend"),
    with_backends(
        SMALL_BLOCK_PAIRS,
        lambda score, align, backend: check_runs(backend, score, align, score_mod=True),
    ),
)
def test_small_blocks(score_name: str, align_name: str, backend: str, small_blocks) -> None:
    """Several blocks (M = 21, N = 19: 2 × 2 tiles of 16; chunks of 10 or 2 query rows), key
    padding, bottom-right causal (queries 0, 1 see nothing), a position-dependent score_mod;
    forward in float64 and float32 and, in float64, the gradients of q, k, v against the
    formula's autograd."""
    torch.manual_seed(18)
    case = Case(2, 1, 21, 19, 6, 4, (19, 12))
    d_q = query_size(score_name, case.d_k)
    score = make_score(score_name, d_q, case.d_k, n_max=case.n)
    align = make_align(align_name, d_q, case.d_k)
    q, k, v = case.inputs(d_q)
    user, allowed = case.masking()
    user["score_mod"] = alibi
    assert check(
        backend,
        q,
        k,
        v,
        score_name=score_name,
        score=score,
        align_name=align_name,
        align=align,
        allowed=allowed,
        **user,
    )
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    score, align = score.double(), align.double()
    out = ak.attention(q, k, v, score=score, align=align, backend=backend, **user)
    upstream = torch.randn_like(out.context)
    got = torch.autograd.grad(out.context, (q, k, v), upstream, allow_unused=True)
    s = reference_score(score_name, score, F64)
    a = reference_align(align_name, align, q, k, F64)
    c, _ = ref.attention(q, k, v, s, a, allowed, score_mod=alibi)
    want = torch.autograd.grad(c, (q, k, v), upstream, allow_unused=True)
    for name, x, w in zip("qkv", got, want, strict=True):
        x = torch.zeros_like(q if name == "q" else k if name == "k" else v) if x is None else x
        w = torch.zeros_like(x) if w is None else w
        assert max_error(x, w) <= FLOAT64_TOLERANCE, f"d{name}: error {max_error(x, w):.3g}"


# --------------------------------------------------------------------------------------------
# The stochastic alignments in training mode draw from the survey's distributions
# --------------------------------------------------------------------------------------------

DRAWS = 40_000


@pytest.mark.parametrize("estimator", ["reinforce", "straight_through"])
def test_hard_alignment_draws_from_the_softmax(estimator: str) -> None:
    """Eq. (26): ``m`` is drawn from the multinomial with probabilities ``a = softmax(e)``
    (for the straight-through estimator by the Gumbel-max trick, which draws the same ``m``)."""
    torch.manual_seed(12)
    e = torch.tensor([0.3, -1.0, 1.2, 0.0, 0.5], dtype=F64)
    allowed = torch.tensor([True, True, True, False, True])
    probs = ref.softmax(e, allowed)
    hard = ak.align.Hard(estimator=estimator).train()
    weights, log_prob = hard.sample(e.expand(DRAWS, 5), allowed.expand(DRAWS, 5))
    assert torch.isfinite(weights).all(), "hard weights must be finite"
    # straight-through weights are one_hot - relaxed + relaxed: one-hot up to rounding
    one_hot = torch.zeros_like(weights).scatter(-1, weights.argmax(-1, keepdim=True), 1.0)
    torch.testing.assert_close(weights, one_hot, rtol=0, atol=1e-15)
    frequency = weights.mean(0)
    assert (frequency - probs).abs().max() < 0.01, (frequency, probs)
    chosen = weights.argmax(-1)
    torch.testing.assert_close(log_prob, probs.log()[chosen], rtol=0, atol=1e-12)


def test_reinforced_alignment_keeps_each_key_with_the_policy_probability() -> None:
    torch.manual_seed(13)
    align = ak.align.Reinforced(3, 4, d_hidden=4).double().train()
    q = torch.randn(1, 3, dtype=F64)
    k = torch.randn(5, 4, dtype=F64)
    e = torch.randn(DRAWS, 1, 5, dtype=F64)
    logits = ref.score_formula("additive", align.policy, F64)(q, k)  # [1, 5]
    weights, log_prob = align.sample(e, query=q.expand(DRAWS, 1, 3), key=k.expand(DRAWS, 5, 4))
    kept = weights > 0
    frequency = kept.double().mean(0)
    # A draw keeping no key falls back to all keys; its probability is prod(1 - pi).
    none_kept = torch.prod(1 - torch.sigmoid(logits))
    expected = torch.sigmoid(logits) + none_kept
    assert (frequency - expected).abs().max() < 0.01
    # Inside the kept subset, soft alignment (eq. 25).
    torch.testing.assert_close(weights, ref.softmax(e, kept), rtol=0, atol=1e-12)
    assert log_prob.shape == (DRAWS, 1)


# --------------------------------------------------------------------------------------------
# The formulas themselves, checked against independent computations
# --------------------------------------------------------------------------------------------


def test_sparse_formulas_agree_with_the_entmax_package() -> None:
    torch.manual_seed(14)
    e = torch.randn(40, 9, dtype=F64) * 2
    allowed = torch.rand(40, 9) < 0.7
    allowed[0] = False
    for mine, theirs in ((ref.sparsemax, entmax.sparsemax), (ref.entmax15, entmax.entmax15)):
        got = mine(e, allowed)
        for r in range(e.shape[0]):
            idx = allowed[r].nonzero().squeeze(-1)
            want = torch.zeros(9, dtype=F64)
            if idx.numel():
                want[idx] = theirs(e[r, idx], dim=-1)
            torch.testing.assert_close(got[r], want, rtol=0, atol=1e-12)
        sums = got.sum(-1)
        assert torch.allclose(sums[1:], torch.ones_like(sums[1:])) and sums[0] == 0
        assert (got[1:] == 0).any(), "sparse alignments give exact zeros"


def test_softmax_formula_agrees_with_torch() -> None:
    torch.manual_seed(15)
    e = torch.randn(6, 8, dtype=F64) * 5
    allowed = torch.ones(6, 8, dtype=torch.bool)
    assert max_error(ref.softmax(e, allowed), torch.softmax(e, -1)) <= 1e-15


def test_score_formulas_agree_with_per_pair_loops() -> None:
    """Table 2 written once more, one (query, key) pair at a time, to check the einsums."""
    torch.manual_seed(16)
    d_q, d_k, d_w, M, N = 3, 4, 5, 3, 4
    q, k = torch.randn(M, d_q, dtype=F64), torch.randn(N, d_k, dtype=F64)
    W1, W2, b, w = (torch.randn(*s, dtype=F64) for s in ((d_w, d_q), (d_w, d_k), (d_w,), (d_w,)))
    W, bk, Wa, ba = (torch.randn(*s, dtype=F64) for s in ((d_k, d_q), (d_k,), (7, d_q), (7,)))
    Wd = torch.randn(d_w, 2, dtype=F64)
    qs = torch.randn(M, d_k, dtype=F64)  # same size as the keys
    expected = {
        "additive": lambda i, j: w @ torch.tanh(W1 @ q[i] + W2 @ k[j] + b),
        "general": lambda i, j: k[j] @ W @ q[i],
        "biased_general": lambda i, j: k[j] @ (W @ q[i] + bk),
        "activated_general": lambda i, j: torch.tanh(k[j] @ W @ q[i] + 0.3),
        "dot": lambda i, j: qs[i] @ k[j],
        "scaled_dot": lambda i, j: qs[i] @ k[j] / 2.0,
        "cosine": lambda i, j: qs[i] @ k[j] / (qs[i].norm() * k[j].norm()) / 0.5,
        "euclidean": lambda i, j: -(qs[i] - k[j]).norm(),
        "location": lambda i, j: (Wa @ q[i] + ba)[j],
        "additive_multi": lambda i, j: Wd.T @ torch.tanh(W1 @ q[i] + W2 @ k[j] + b),
    }
    computed = {
        "additive": ref.additive(q, k, W1, W2, b, w),
        "general": ref.general(q, k, W),
        "biased_general": ref.biased_general(q, k, W, bk),
        "activated_general": ref.activated_general(q, k, W, torch.tensor(0.3, dtype=F64)),
        "dot": ref.dot(qs, k),
        "scaled_dot": ref.scaled_dot(qs, k),
        "cosine": ref.cosine(qs, k, 0.5),
        "euclidean": ref.euclidean(qs, k),
        "location": ref.location(q, Wa, ba, N),
        "additive_multi": ref.additive(q, k, W1, W2, b, Wd),
    }
    for name, pair in expected.items():
        want = torch.stack([torch.stack([pair(i, j) for j in range(N)]) for i in range(M)])
        assert max_error(computed[name], want) <= 1e-12, name


def test_alignment_formulas_on_a_worked_example() -> None:
    """Small hand-checkable rows: windows, top-k, hard, local-predictive's position."""
    e = torch.tensor([[1.0, 3.0, 2.0, 0.0, 4.0]], dtype=F64)
    every = torch.ones(1, 5, dtype=torch.bool)
    torch.testing.assert_close(ref.topk(e, every, 2), ref.softmax(e, every & (e >= 3)))
    assert ref.hard_eval(e, every).tolist() == [[0, 0, 0, 0, 1]]
    # Query 0 with D = 1 sees keys 0 and 1 only (eq. 27 with p = i = 0).
    torch.testing.assert_close(
        ref.local_monotonic(e, every, 1), ref.softmax(e, torch.tensor([[1, 1, 0, 0, 0]]).bool())
    )
    # Sparsemax of (1, 3, 2, 0, 4): 1 + 2·3 is not > 4 + 3, so the support is {4} and tau = 3.
    torch.testing.assert_close(
        ref.sparsemax(e, every), torch.tensor([[0.0, 0, 0, 0, 1]], dtype=F64)
    )
    assert ref.sequence_length(torch.tensor([[True, False, True, False]])).item() == 3
