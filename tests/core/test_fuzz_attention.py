"""Fuzzing the public entry points ``ak.attention`` and ``ak.MultiHeadAttention``.

Random shapes (sizes 0, 1, 17, blocks that do not divide them), dtypes, devices ("cpu", "meta"),
masks (bool/float, broadcastable or not), causal, scores and alignments. The rule for every call
(docs/reliability.md, "Fuzzing"): a result equal to the float64 reference — at most 2x the error of the
same formula computed naively in the call's dtype, plus a rounding floor — on every backend that
can run it, or a ``ValueError``/``TypeError`` whose message names the argument. Never another
exception, and never backends that disagree silently (NaN in one, a number in another).

Hypothesis is derandomized (the same examples on every run) and each property runs 200 examples.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_reference import (
    ALIGN_NAMES,
    SCORE_NAMES,
    allowed_keys,
    assert_matches,
    golden,
    make_align,
    make_score,
    param_dtype,
)
from torch import Tensor, nn

import attnkit as ak
import attnkit.core.chunked as chunked
import attnkit.core.tiled as tiled
from attnkit.core.call import prepare
from attnkit.core.engine import BACKENDS

FUZZ = settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
F64 = torch.float64
HALF = (torch.float16, torch.bfloat16)
SIZES = [1, 2, 3, 5, 17]  # with 0 drawn separately; 17 divides no block
FEATURES = [1, 3, 8, 17]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def block_budgets(small: bool):
    """Small budgets make tiny inputs span several (non-dividing) blocks of tiled and chunked."""
    if not small:
        yield
        return
    with (
        mock.patch.object(tiled, "BLOCK_BUDGET", 1),
        mock.patch.object(chunked, "CHUNK_BUDGET", 90),
    ):
        yield


def assert_names(error: Exception, names: tuple[str, ...]) -> None:
    """The message of a refusal names one of the arguments it is about."""
    text = str(error)
    found = [n for n in names if re.search(rf"(?<![A-Za-z_]){re.escape(n)}(?![A-Za-z_])", text)]
    assert found, f"{type(error).__name__} {text!r} names none of {names}"


# --- ak.attention --------------------------------------------------------------------------------

# How a valid call is broken, and the argument its refusal must name.
CORRUPTIONS = {
    "q_features": ("q", "k", "d_q", "d_k"),
    "zero_features": ("q", "k"),
    "kv_length": ("k", "v"),
    "dtype": ("q", "k", "v"),
    "integer_q": ("q",),
    "rank": ("q", "k", "v"),
    "batch": ("q", "k", "v"),
    "mask_shape": ("mask",),
    "mask_dtype": ("mask",),
    "dropout": ("dropout",),
    "scale": ("scale",),
    "heads": ("q", "k", "heads"),
}


@dataclass
class Call:
    score: str
    align: str
    dtype: torch.dtype
    three_d: bool
    b: int
    h: int
    h_kv: int
    m: int
    n: int
    d_k: int
    d_q: int
    d_v: int
    mask: str  # none | padding | full_bool | broadcast_bool | float
    causal: bool
    scale: float | None
    small_blocks: bool
    corruption: str | None
    seed: int


@st.composite
def calls(draw, corrupt: bool = True, dtypes=(torch.float32, F64, *HALF)) -> Call:
    score = draw(st.sampled_from(["scaled_dot", "dot", *SCORE_NAMES]))
    three_d = draw(st.booleans())
    h = 1 if three_d else draw(st.sampled_from([1, 2, 3]))
    h_kv = h if three_d else draw(st.sampled_from([d for d in (1, h) if h % d == 0]))
    d_k = draw(st.sampled_from(FEATURES))
    same = ak.scores.SCORES.get(score).same_size
    zero = draw(st.sampled_from([0] + [None] * 9))
    return Call(
        score=score,
        # softmax half the time: the fused and tiled backends take only softmax
        align=draw(st.sampled_from(["softmax"] * len(ALIGN_NAMES) + ALIGN_NAMES)),
        dtype=draw(st.sampled_from(dtypes)),
        three_d=three_d,
        b=zero if zero is not None and draw(st.booleans()) else draw(st.sampled_from([1, 2])),
        h=h,
        h_kv=h_kv,
        m=zero if zero is not None and draw(st.booleans()) else draw(st.sampled_from(SIZES)),
        n=draw(st.sampled_from([0, *SIZES])) if zero is not None else draw(st.sampled_from(SIZES)),
        d_k=d_k,
        d_q=d_k if same else draw(st.sampled_from(FEATURES)),
        d_v=draw(st.sampled_from([1, 4, 17])),
        mask=draw(st.sampled_from(["none", "padding", "full_bool", "broadcast_bool", "float"])),
        causal=draw(st.booleans()),
        scale=draw(st.sampled_from([None, None, 0.5, 2.0])),
        small_blocks=draw(st.booleans()),
        corruption=draw(st.sampled_from([None] * 40 + list(CORRUPTIONS))) if corrupt else None,
        seed=draw(st.integers(0, 2**16)),
    )


@dataclass
class Built:
    q: Tensor
    k: Tensor
    v: Tensor
    kwargs: dict
    allowed: Tensor | None  # the reference mask, bool [B, 1, M, N]
    bias: Tensor | None  # the reference additive mask


def build(c: Call, device: str = "cpu") -> Built:
    """Inputs in float64 holding values exact in ``c.dtype`` (so one float64 formula serves)."""
    g = torch.Generator().manual_seed(c.seed)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g).to(c.dtype).to(F64)

    lead = (c.b,) if c.three_d else (c.b, c.h)
    lead_kv = (c.b,) if c.three_d else (c.b, c.h_kv)
    q, k, v = randn(*lead, c.m, c.d_q), randn(*lead_kv, c.n, c.d_k), randn(*lead_kv, c.n, c.d_v)
    allowed = torch.ones(c.b, 1, c.m, c.n, dtype=torch.bool)
    bias, kwargs = None, {}
    if c.mask == "padding":
        lengths = torch.randint(0, c.n + 1, (c.b,), generator=g)
        keep = torch.arange(c.n).view(1, c.n) < lengths.view(-1, 1)
        kwargs["mask"] = keep.view(c.b, 1, c.n) if c.three_d else keep.view(c.b, 1, 1, c.n)
        allowed = allowed & keep.view(c.b, 1, 1, c.n)
    elif c.mask in ("full_bool", "broadcast_bool"):
        shape = (c.m, c.n) if c.mask == "full_bool" else (c.m, 1)
        keep = torch.rand(*shape, generator=g) < 0.7
        kwargs["mask"] = keep
        allowed = allowed & keep
    elif c.mask == "float":
        values = (torch.randn(c.m, c.n, generator=g) * 2).to(c.dtype).to(F64)
        removed = torch.rand(c.m, c.n, generator=g) < 0.2
        kwargs["mask"] = values.masked_fill(removed, -math.inf)
        bias = values.masked_fill(removed, 0.0)
        allowed = allowed & ~removed
    if c.causal:
        kwargs["causal"] = True
        allowed = allowed & allowed_keys(1, c.m, c.n, causal=True)
    if c.scale is not None:
        kwargs["scale"] = c.scale
    return Built(q, k, v, kwargs, allowed, bias)


def modules(c: Call, dtype: torch.dtype, device: str = "cpu") -> tuple:
    torch.manual_seed(c.seed)
    score = make_score(c.score, c.d_q, c.d_k, max(c.n, 1)).to(device=device, dtype=dtype)
    align = make_align(c.align, c.d_q, c.d_k).to(device=device, dtype=dtype)
    return score, align


def corrupt(c: Call, x: Built) -> None:
    """Break the call as ``c.corruption`` says."""
    q, k, v = x.q, x.k, x.v
    kind = c.corruption
    if kind == "q_features":
        x.q = torch.randn(*q.shape[:-1], q.shape[-1] + 1, dtype=q.dtype)
    elif kind == "zero_features":
        x.k = k[..., :0]
    elif kind == "kv_length":
        x.v = torch.randn(*v.shape[:-2], v.shape[-2] + 1, v.shape[-1], dtype=v.dtype)
    elif kind == "dtype":
        x.k = k.to(torch.float32 if c.dtype == F64 else F64)  # kept as is by the caller
    elif kind == "integer_q":
        x.q = q.to(torch.int64)
    elif kind == "rank":
        x.q = q.reshape(-1)[: max(q.shape[-1], 1)].view(1, -1) if q.numel() else q.flatten()
    elif kind == "batch":
        x.q = torch.cat([q, q[:1] if q.shape[0] else torch.zeros_like(q[:0])], 0)
        x.q = x.q if x.q.shape[0] != k.shape[0] else torch.randn(k.shape[0] + 1, *q.shape[1:])
    elif kind == "mask_shape":
        x.kwargs["mask"] = torch.ones(c.m + 2, c.n + 3, dtype=torch.bool)
    elif kind == "mask_dtype":
        x.kwargs["mask"] = torch.ones(c.m, c.n, dtype=torch.int32)
    elif kind == "dropout":
        x.kwargs["dropout"] = 1.5
    elif kind == "scale":
        x.kwargs["scale"] = "large"
    elif kind == "heads":
        if c.three_d:
            x.q = q.unsqueeze(1).expand(q.shape[0], 3, *q.shape[1:])
            x.k, x.v = k.unsqueeze(1).expand(k.shape[0], 2, *k.shape[1:]), v.unsqueeze(1)
        else:
            x.k = torch.cat([k, k], 1) if c.h % (2 * c.h_kv) else k[:, :0]
            x.v = torch.cat([v, v], 1) if c.h % (2 * c.h_kv) else v[:, :0]


def runnable(q, k, v, **kwargs) -> list[str]:
    """The backends that can run the call (``prepare`` may refuse it: then none)."""
    call = prepare(q, k, v, **kwargs)
    return [b.name for b in BACKENDS if not b.reasons(call)]


@FUZZ
@given(c=calls())
def test_attention_matches_the_float64_formula_or_refuses(c: Call) -> None:
    x = build(c)
    score, align = modules(c, param_dtype(c.dtype))
    if c.corruption is not None:
        corrupt(c, x)
    q, k, v = (t if not t.is_floating_point() else t.to(c.dtype) for t in (x.q, x.k, x.v))
    if c.corruption == "dtype":
        k = x.k
    kwargs = dict(score=score, align=align, **x.kwargs)
    with block_budgets(c.small_blocks):
        try:
            backends = runnable(q, k, v, **kwargs)
        except (ValueError, TypeError) as error:
            assert c.corruption is not None, f"a valid call was refused: {error}"
            assert_names(error, CORRUPTIONS[c.corruption])
            with pytest.raises(type(error)):
                ak.attention(q, k, v, **kwargs)
            event("refused")
            return
        assert c.corruption is None, f"corruption {c.corruption!r} was accepted"
        event("empty" if min(c.b, c.m, c.n) == 0 else f"compared on {len(backends)} backends")
        want = None
        for backend in [None, *backends]:
            for weights in (False, True):
                if backend is not None and weights and "weights" not in _abilities(backend):
                    continue
                out = ak.attention(q, k, v, backend=backend, return_weights=weights, **kwargs)
                if min(c.b, c.m, c.n) == 0:
                    assert_empty(out, c)
                    continue
                if want is None:
                    want = golden(
                        q, k, v, c.score, score, c.align, align, c.dtype,
                        x.allowed.expand(c.b, 1, c.m, c.n),
                        bias=None if x.bias is None else x.bias.to(c.dtype),
                        scale=c.scale,
                        kv_repeat=c.h // c.h_kv,
                    )  # fmt: skip
                label = f"{backend or 'auto'}, {c}, weights={weights}"
                assert_matches(out, want, c.dtype, c.three_d, label)


def _abilities(backend: str) -> set[str]:
    chosen = next(b for b in BACKENDS if b.name == backend)
    return {"weights"} if chosen.weights else set()


def assert_empty(out: ak.AttentionOutput, c: Call) -> None:
    """Zero batch or queries: an empty result; zero keys: zeros (every row is key-less)."""
    lead = (c.b,) if c.three_d else (c.b, c.h)
    assert out.context.shape == (*lead, c.m, c.d_v)
    assert out.context.dtype == c.dtype
    assert (out.context == 0).all()
    if out.weights is not None:
        assert out.weights.shape == (*lead, c.m, c.n) and (out.weights == 0).all()


# --- non-finite inputs: every backend agrees -----------------------------------------------------

PLACES = ["q", "k", "v", "mask"]


@FUZZ
@given(
    c=calls(corrupt=False, dtypes=(F64,)),
    poison=st.lists(
        st.tuples(st.sampled_from(PLACES), st.sampled_from([math.nan, math.inf, -math.inf])),
        min_size=1,
        max_size=3,
    ),
    where=st.integers(0, 2**16),
)
def test_non_finite_inputs_give_the_same_result_on_every_backend(c, poison, where) -> None:
    """NaN/±inf at random places of q, k, v and a float mask: every backend that can run the
    call returns the same NaN and inf pattern and the same finite numbers as the reference."""
    if c.mask != "float":
        poison = [(p, value) for p, value in poison if p != "mask"] or [("q", math.nan)]
    x = build(c)
    score, align = modules(c, F64)
    g = torch.Generator().manual_seed(where)
    tensors = {"q": x.q, "k": x.k, "v": x.v, "mask": x.kwargs.get("mask")}
    for place, value in poison:
        t = tensors[place]
        if t is not None and t.numel():
            t.view(-1)[int(torch.randint(0, t.numel(), (1,), generator=g))] = value
    kwargs = dict(score=score, align=align, **x.kwargs)
    with block_budgets(c.small_blocks):
        backends = runnable(x.q, x.k, x.v, **kwargs)
        results = {b: ak.attention(x.q, x.k, x.v, backend=b, **kwargs) for b in backends}
    want = results["reference"].context
    event(f"{len(results)} backends, NaN in the result: {bool(torch.isnan(want).any())}")
    for backend, out in results.items():
        got = out.context
        assert torch.equal(torch.isnan(got), torch.isnan(want)), f"{backend}: NaN differs"
        assert torch.equal(torch.isinf(got), torch.isinf(want)), f"{backend}: inf differs"
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, equal_nan=True, msg=backend)


# --- the meta device -----------------------------------------------------------------------------


@FUZZ
@given(c=calls(dtypes=(torch.float32, F64, torch.float16)))
def test_meta_tensors_give_shapes_or_a_clear_refusal(c: Call) -> None:
    """On "meta" (no values) a call either works, shape-only, or raises ValueError/TypeError."""
    x = build(c)
    if c.corruption is not None:
        corrupt(c, x)
    q, k, v = (t.to("meta", c.dtype if t.is_floating_point() else t.dtype) for t in (x.q, x.k, x.v))
    if c.corruption == "dtype":
        k = x.k.to("meta")
    kwargs = {
        key: value.to("meta") if isinstance(value, Tensor) else value
        for key, value in x.kwargs.items()
    }
    score, align = modules(c, param_dtype(c.dtype), "meta")
    try:
        backends = runnable(q, k, v, score=score, align=align, **kwargs)
    except (ValueError, TypeError) as error:
        if c.corruption is not None:
            assert_names(error, CORRUPTIONS[c.corruption])
        return
    lead = (c.b,) if c.three_d else (c.b, c.h)
    with block_budgets(c.small_blocks):
        for backend in [None, *backends]:
            try:
                out = ak.attention(q, k, v, score=score, align=align, backend=backend, **kwargs)
            except (ValueError, TypeError):
                continue
            assert out.context.shape == (*lead, c.m, c.d_v), backend
            assert out.context.device.type == "meta"
            event(f"ran on {backend}")


# --- ak.MultiHeadAttention against torch.nn.MultiheadAttention ------------------------------------


@dataclass
class MhaCase:
    heads: int
    head_dim: int
    kdim: int | None
    vdim: int | None
    bias: bool
    add_bias_kv: bool
    batch_first: bool
    batched: bool
    n: int
    length: int
    src: int
    dtype: torch.dtype
    padding: str  # none | bool | float
    attn_mask: str  # none | bool2d | bool3d | float2d
    causal: bool
    need_weights: bool
    average: bool
    corruption: str | None
    seed: int


MHA_CORRUPTIONS = {
    "integer": ("query", "key", "value"),
    "features": ("query", "key", "value"),
    "batch": ("query", "key", "value"),
    "padding_shape": ("key_padding_mask",),
    "attn_mask_shape": ("attn_mask",),
}


@st.composite
def mha_cases(draw) -> MhaCase:
    return MhaCase(
        heads=draw(st.sampled_from([1, 2, 3])),
        head_dim=draw(st.sampled_from([1, 4, 5])),
        kdim=draw(st.sampled_from([None, 3, 17])),
        vdim=draw(st.sampled_from([None, 2, 17])),
        bias=draw(st.booleans()),
        add_bias_kv=draw(st.sampled_from([False, False, True])),
        batch_first=draw(st.booleans()),
        batched=draw(st.sampled_from([True, True, False])),
        n=draw(st.sampled_from([1, 2, 3])),
        length=draw(st.sampled_from(SIZES)),
        src=draw(st.sampled_from(SIZES)),
        dtype=draw(st.sampled_from([torch.float32, F64])),
        padding=draw(st.sampled_from(["none", "bool", "float"])),
        attn_mask=draw(st.sampled_from(["none", "bool2d", "bool3d", "float2d"])),
        causal=draw(st.booleans()),
        need_weights=draw(st.booleans()),
        average=draw(st.booleans()),
        corruption=draw(st.sampled_from([None] * 15 + list(MHA_CORRUPTIONS))),
        seed=draw(st.integers(0, 2**16)),
    )


def _mha_inputs(c: MhaCase, embed: int):
    g = torch.Generator().manual_seed(c.seed)
    n = c.n if c.batched else 1

    def make(length: int, size: int) -> Tensor:
        t = torch.randn(n, length, size, generator=g, dtype=F64)
        if not c.batched:
            return t[0]
        return t if c.batch_first else t.transpose(0, 1)

    query, key, value = (
        make(c.length, embed),
        make(c.src, c.kdim or embed),
        make(c.src, c.vdim or embed),
    )
    padding = attn = None
    pad_shape = (n, c.src) if c.batched else (c.src,)
    bool_padding = torch.rand(*pad_shape, generator=g) < 0.3
    if c.padding == "bool":
        padding = bool_padding
    elif c.padding == "float" and c.attn_mask != "bool2d" and c.attn_mask != "bool3d":
        padding = torch.zeros(pad_shape, dtype=F64).masked_fill(bool_padding, -math.inf)
    heads_shape = (n * c.heads, c.length, c.src) if c.batched else (c.heads, c.length, c.src)
    if c.attn_mask in ("bool2d", "bool3d") and c.padding != "float":
        shape = (c.length, c.src) if c.attn_mask == "bool2d" else heads_shape
        attn = torch.rand(*shape, generator=g) < 0.3
    elif c.attn_mask == "float2d" and c.padding != "bool":
        attn = torch.randn(c.length, c.src, generator=g, dtype=F64)
    return query, key, value, padding, attn


@FUZZ
@given(c=mha_cases())
def test_multi_head_attention_matches_torch_or_refuses(c: MhaCase) -> None:
    """Against ``torch.nn.MultiheadAttention`` with the same weights, float64 as the reference
    and torch in the call's dtype as the naive yardstick. Rows torch leaves NaN (no admissible
    key) are where attnkit gives a finite result by design; they are compared for finiteness."""
    embed = c.heads * c.head_dim
    layout = dict(kdim=c.kdim, vdim=c.vdim, bias=c.bias, add_bias_kv=c.add_bias_kv)
    torch.manual_seed(c.seed)
    reference = nn.MultiheadAttention(
        embed, c.heads, batch_first=c.batch_first, dtype=F64, **layout
    )
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_(0, 0.5)
    ours = ak.MultiHeadAttention(embed, c.heads, batch_first=c.batch_first, dtype=c.dtype, **layout)
    ours.load_state_dict(reference.state_dict())
    ours.eval()
    reference.eval()
    query, key, value, padding, attn = _mha_inputs(c, embed)
    causal = c.causal and attn is None
    options = dict(need_weights=c.need_weights, average_attn_weights=c.average)
    inputs = [query.to(c.dtype), key.to(c.dtype), value.to(c.dtype)]
    masks = {"key_padding_mask": padding, "attn_mask": attn}
    if c.corruption == "integer":
        inputs[1] = inputs[1].to(torch.int64)
    elif c.corruption == "features":
        inputs[2] = torch.cat([inputs[2], inputs[2][..., :1]], -1)
    elif c.corruption == "batch" and c.batched:
        axis = 0 if c.batch_first else 1
        inputs[1] = torch.cat([inputs[1], inputs[1]], axis)
    elif c.corruption == "padding_shape":
        masks["key_padding_mask"] = torch.zeros(c.src + 1, dtype=torch.bool)
    elif c.corruption == "attn_mask_shape":
        masks["attn_mask"] = torch.zeros(c.length + 1, c.src, dtype=torch.bool)
    for name, mask in masks.items():
        if mask is not None and mask.is_floating_point():
            masks[name] = mask.to(c.dtype)
    try:
        out, weights = ours(*inputs, **masks, is_causal=causal, **options)
    except (ValueError, TypeError) as error:
        assert c.corruption is not None, f"a valid call was refused: {error}"
        assert_names(error, MHA_CORRUPTIONS[c.corruption])
        event("refused")
        return
    event("compared")
    assert c.corruption in (None, "batch"), f"corruption {c.corruption!r} was accepted"

    def torch_run(module: nn.Module, dtype: torch.dtype):
        ref_masks = {
            k: None if m is None else m.to(dtype) if m.is_floating_point() else m
            for k, m in masks.items()
        }
        if causal:
            i = torch.arange(c.length).view(-1, 1)
            j = torch.arange(c.src).view(1, -1)
            future = j > i + c.src - c.length  # bottom-right, True = not allowed
            float_padding = padding is not None and padding.is_floating_point()
            ref_masks["attn_mask"] = (
                torch.zeros(future.shape, dtype=dtype).masked_fill(future, -math.inf)
                if float_padding
                else future
            )
        return module(*(t.to(dtype) for t in (query, key, value)), **ref_masks, **options)

    want, want_w = torch_run(reference, F64)
    naive, naive_w = torch_run(reference.to(c.dtype), c.dtype) if c.dtype != F64 else (want, want_w)
    assert torch.isfinite(out).all(), "attnkit never returns NaN for finite inputs"
    rows = torch.isfinite(want)  # torch's NaN rows: queries without an admissible key
    floor = 0.0 if c.dtype == F64 else 1e-6
    tol = 2 * (naive.to(F64) - want)[rows].abs().max().item() if rows.any() else 0.0
    err = (out.to(F64) - want)[rows].abs().max().item() if rows.any() else 0.0
    assert err <= tol + floor + (1e-10 if c.dtype == F64 else 0), (
        f"output error {err:.3g} > {tol:.3g}"
    )
    assert (weights is None) == (want_w is None)
    if weights is not None:
        ok = torch.isfinite(want_w)
        tol = 2 * (naive_w.to(F64) - want_w)[ok].abs().max().item() if ok.any() else 0.0
        err = (weights.to(F64) - want_w)[ok].abs().max().item() if ok.any() else 0.0
        assert err <= tol + floor + (1e-10 if c.dtype == F64 else 0), f"weights error {err:.3g}"
