"""The engine's loop and the backend scope: backends decline, the next one computes, and what
reports the choice (``ak.explain``, a hook's ``run.chosen``) names the backend that computed.

Every output is checked against the float64 formula of ``formulas.py`` (or, for the call that
computes nothing, ``meta``, its shape).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import formulas as ref
import pytest
import torch
from torch import Tensor

import attnkit as ak
import attnkit.core.flex as flex
from attnkit.core.engine import BACKENDS

F64 = torch.float64
NAN = float("nan")


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = F64) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def computed_by(fn: Callable[[], ak.AttentionOutput]) -> tuple[ak.AttentionOutput, list[str]]:
    """``fn()``'s output and, per engine call it made, the backend a hook saw compute it
    (``run.chosen`` after ``run``)."""
    names: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        out = run(call)
        names.append(run.chosen.name)
        return out

    with ak.attention_hooks(spy):
        out = fn()
    return out, names


def scaled_dot_softmax(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return ref.attention(q, k, v, ref.scaled_dot, ref.softmax)


# --- every backend that can decline: the next one computes, and is named ------------------------


def nan_query() -> dict:
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 6, 8, seed=1), randn(1, 2, 6, 3, seed=2)
    q[0, 1, 2, 5] = NAN
    return {"q": q, "k": k, "v": v, "options": {}}


def overflowing_weights() -> dict:
    """Finite float32 inputs whose scores with keys 0 and 1 overflow to +inf (q·k ~ 1e40 >
    float32's 3.4e38); the other scores are finite (~1e20)."""
    q = randn(1, 1, 3, 4, dtype=torch.float32).abs() * 1e20
    k = randn(1, 1, 5, 4, seed=1, dtype=torch.float32).abs()
    k[..., :2, :] *= 1e20
    v = randn(1, 1, 5, 2, seed=2, dtype=torch.float32)
    return {"q": q, "k": k, "v": v, "options": {"return_weights": True}}


def small_for_flex() -> dict:
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 6, 8, seed=1), randn(1, 2, 6, 3, seed=2)
    return {"q": q.float(), "k": k.float(), "v": v.float(), "options": {}}


def sparsemax_call() -> dict:
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 6, 8, seed=1), randn(1, 2, 6, 3, seed=2)
    return {"q": q, "k": k, "v": v, "options": {"align": "sparsemax"}}


def sparsemax_nan_value() -> dict:
    call = sparsemax_call()
    call["v"][0, 0, 1, 2] = NAN
    return call


# (backend that declines, the next allowed one, the call, words of the reason)
DECLINES = {
    "sdpa": ("tiled", nan_query, "an input holds NaN"),
    "dense": ("tiled", overflowing_weights, "a score may overflow"),
    "flex": ("tiled", small_for_flex, "below"),
    "additive": ("tiled", small_for_flex, "is not ak.scores.Additive's own"),
    "tiled": ("sparse_rows", sparsemax_call, "align 'sparsemax' is not 'softmax'"),
    "sparse_rows": ("chunked", sparsemax_nan_value, "an input holds NaN"),
}


def test_every_backend_but_the_last_can_decline() -> None:
    """The cases below cover every backend that declines anything; ``reference`` takes all."""
    assert set(DECLINES) | {"chunked", "reference"} == {b.name for b in BACKENDS.values()}


@pytest.mark.parametrize("declining", sorted(DECLINES))
def test_a_declined_call_is_computed_by_the_next_and_reported_so(declining: str) -> None:
    following, make, words = DECLINES[declining]
    case = make()
    q, k, v, options = case["q"], case["k"], case["v"], case["options"]
    with ak.backends(declining, following):
        text = ak.explain(q, k, v, **options)
        out, names = computed_by(lambda: ak.attention(q, k, v, **options))
    assert f"runs on: {following}" in text.splitlines()[1]
    passed = next(line for line in text.splitlines() if f"  passed over {declining}:" in line)
    assert words in passed, text
    assert names == [following]
    # bit for bit what the next backend computes when it is named alone
    want = ak.attention(q, k, v, backend=following, **options)
    torch.testing.assert_close(out.context, want.context, rtol=0, atol=0, equal_nan=True)
    if declining == "dense":  # the limit of growing scores: keys 0 and 1 share each row
        weights = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0]).expand(1, 1, 3, 5)
        torch.testing.assert_close(out.weights, weights, rtol=0, atol=1e-6)
        torch.testing.assert_close(
            out.context, v[..., :2, :].mean(-2, keepdim=True).expand(1, 1, 3, 2)
        )
        return
    align = ref.sparsemax if options.get("align") == "sparsemax" else ref.softmax
    context, _ = ref.attention(q.double(), k.double(), v.double(), ref.scaled_dot, align)
    if declining == "sdpa":  # a NaN query makes its row NaN (docs/reliability.md)
        assert torch.isnan(out.context[0, 1, 2]).all()
        context[0, 1, 2] = NAN
    if declining == "sparse_rows":  # a NaN value: its feature is NaN in every row
        assert torch.isnan(out.context[0, 0, :, 2]).all()
        context[0, 0, :, 2] = NAN
    torch.testing.assert_close(out.context.double(), context, rtol=0, atol=1e-5, equal_nan=True)


def test_the_whole_engine_walks_past_every_declining_backend() -> None:
    """Without a scope the loop is the same: a NaN query is declined by sdpa, dense, flex and
    additive, and computed (and named) by tiled, with attnkit's NaN semantics (only that row is NaN)."""
    case = nan_query()
    q, k, v = case["q"], case["k"], case["v"]
    text = ak.explain(q, k, v)
    out, names = computed_by(lambda: ak.attention(q, k, v))
    assert "runs on: tiled" in text
    passed = [line for line in text.splitlines() if "  passed over " in line]
    assert [line.split("  passed over ")[1].split(":")[0] for line in passed] == [
        "sdpa",
        "dense",
        "flex",
        "additive",
    ]
    assert names == ["tiled"]
    want, _ = scaled_dot_softmax(q, k, v)
    assert torch.isnan(out.context[0, 1, 2]).all()
    want[0, 1, 2] = NAN
    torch.testing.assert_close(out.context, want, rtol=0, atol=1e-12, equal_nan=True)


def test_chunked_declines_while_torch_compile_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    """``chunked`` branches on tensor values, so it declines while dynamo traces and the
    traceable ``reference`` runs (the trace is simulated: only the engine reads the flag)."""
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 6, 8, seed=1), randn(1, 2, 6, 3, seed=2)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with ak.backends("chunked", "reference"):
        text = ak.explain(q, k, v, align="sparsemax")
        out = ak.attention(q, k, v, align="sparsemax")
    monkeypatch.undo()
    assert "runs on: reference" in text and "passed over chunked: torch.compile is tracing" in text
    want, _ = ref.attention(q, k, v, ref.scaled_dot, ref.sparsemax)
    torch.testing.assert_close(out.context, want, rtol=0, atol=1e-12)


def test_a_backend_that_declines_while_running_hands_the_call_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``flex`` learns only when it runs that a ``meta`` call has no values for its kernel:
    explain names it (it cannot know), the engine computes the call on tiled, and the hook's
    ``run.chosen`` is flex before ``run`` and tiled after."""
    monkeypatch.setattr(flex, "MIN_SCORES", 0)
    q = torch.empty(1, 2, 64, 16, device="meta")
    before: list[str] = []
    after: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        before.append(run.chosen.name)
        out = run(call)
        after.append(run.chosen.name)
        return out

    with torch.no_grad(), ak.backends("flex", "tiled"), ak.attention_hooks(spy):
        assert "runs on: flex" in ak.explain(q, q, q)
        out = ak.attention(q, q, q)
    assert out.context.shape == (1, 2, 64, 16) and out.context.device.type == "meta"
    assert (before, after) == (["flex"], ["tiled"])
    with torch.no_grad(), pytest.raises(ValueError, match=r"'flex'.*'meta' have no values"):
        ak.attention(q, q, q, backend="flex")


# --- the scope --------------------------------------------------------------------------------


def test_the_scope_limits_the_choice_and_is_restored() -> None:
    q, k, v = randn(1, 2, 5, 8), randn(1, 2, 7, 8, seed=1), randn(1, 2, 7, 4, seed=2)
    want, _ = scaled_dot_softmax(q, k, v)
    outside, names = computed_by(lambda: ak.attention(q, k, v))
    assert names == ["sdpa"]
    with ak.backends("tiled", "reference"):
        inside, names = computed_by(lambda: ak.attention(q, k, v))
        assert names == ["tiled"]
        topk, names = computed_by(lambda: ak.attention(q, k, v, align=ak.align.TopK(2)))
        assert names == ["reference"]  # tiled runs softmax only; chunked is not allowed
        assert "not allowed here" in ak.explain(q, k, v)
    _, names = computed_by(lambda: ak.attention(q, k, v))
    assert names == ["sdpa"]
    for out in (outside, inside):
        torch.testing.assert_close(out.context, want, rtol=0, atol=1e-12)
    top_want, _ = ref.attention(q, k, v, ref.scaled_dot, lambda e, a: ref.topk(e, a, 2))
    torch.testing.assert_close(topk.context, top_want, rtol=0, atol=1e-12)


def test_the_order_of_the_names_does_not_matter() -> None:
    """The engine's order decides (fastest first), as with ``sdpa_kernel``."""
    q = randn(1, 1, 3, 4)
    with ak.backends("reference", "chunked", "tiled"):
        _, names = computed_by(lambda: ak.attention(q, q, q))
    assert names == ["tiled"]


def test_the_scope_is_restored_when_its_block_raises() -> None:
    q = randn(1, 1, 3, 4)
    with pytest.raises(RuntimeError, match="inside"), ak.backends("reference"):
        raise RuntimeError("inside")
    _, names = computed_by(lambda: ak.attention(q, q, q))
    assert names == ["sdpa"]


def test_an_inner_scope_replaces_the_outer_one_until_it_ends() -> None:
    q = randn(1, 1, 3, 4)
    with ak.backends("tiled"):
        with ak.backends("chunked"):
            _, inner = computed_by(lambda: ak.attention(q, q, q))
        _, outer = computed_by(lambda: ak.attention(q, q, q))
    assert (inner, outer) == (["chunked"], ["tiled"])


def test_backend_keyword_is_a_scope_of_one_call() -> None:
    """``backend=`` means the same as ``with ak.backends(name):`` for its call, inside any
    scope, and declines the same way."""
    q, k, v = randn(1, 2, 5, 8), randn(1, 2, 7, 8, seed=1), randn(1, 2, 7, 4, seed=2)
    with ak.backends("tiled"):
        out, names = computed_by(lambda: ak.attention(q, k, v, backend="chunked"))
    assert names == ["chunked"]
    torch.testing.assert_close(out.context, scaled_dot_softmax(q, k, v)[0], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"^backend 'sdpa' cannot run this call: score"):
        ak.attention(q, k, v, score="euclidean", backend="sdpa")
    with ak.backends("sdpa"), pytest.raises(ValueError, match=r"^backend 'sdpa' cannot run"):
        ak.attention(q, k, v, score="euclidean")


def test_when_no_backend_fits_one_error_lists_every_reason() -> None:
    q = randn(1, 2, 5, 8)
    with ak.backends("sdpa", "dense", "tiled"), pytest.raises(ValueError) as info:
        ak.attention(q, q, q, align="topk", return_weights=True)
    message = str(info.value)
    assert message.startswith("no backend allowed here (sdpa, dense, tiled) can run this call")
    assert "\n" not in message
    for name in ("sdpa", "dense", "tiled"):
        assert f"[{name}] align 'topk' is not 'softmax'" in message
    assert "weights were asked for" in message  # sdpa's second reason
    with ak.backends("sdpa", "dense"), pytest.raises(ValueError, match=r"\[sdpa\].*\[dense\]"):
        ak.explain(q, q, q, align="topk")


def test_unknown_names_are_refused_with_the_valid_ones() -> None:
    valid = ", ".join(b.name for b in BACKENDS.values())
    with pytest.raises(ValueError, match=rf"unknown backend 'flash'; expected one of: {valid}$"):
        ak.backends("tiled", "flash").__enter__()
    with pytest.raises(ValueError, match="needs backend names or a memory_budget"):
        ak.backends().__enter__()
    with pytest.raises(TypeError, match="named by a string, got int"):
        ak.backends(3).__enter__()  # type: ignore[arg-type]
    q = randn(1, 1, 3, 4)
    _, names = computed_by(lambda: ak.attention(q, q, q))
    assert names == ["sdpa"]  # a refused scope was never entered


def test_the_scope_belongs_to_its_thread() -> None:
    q = randn(1, 1, 3, 4)
    seen: list[list[str]] = []

    def elsewhere() -> None:
        seen.append(computed_by(lambda: ak.attention(q, q, q))[1])

    with ak.backends("reference"):
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        _, here = computed_by(lambda: ak.attention(q, q, q))
    assert seen == [["sdpa"]] and here == ["reference"]


def test_modules_run_inside_the_scope() -> None:
    """A model's attention obeys the scope like a direct call (same result, other backend)."""
    mha = ak.MultiHeadAttention(16, 4, batch_first=True).double().eval()
    x = randn(2, 5, 16)
    want, _ = mha(x, x, x, need_weights=False)
    names: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        out = run(call)
        names.append(run.chosen.name)
        return out

    with ak.backends("reference"), ak.attention_hooks(spy):
        got, _ = mha(x, x, x, need_weights=False)
    assert names == ["reference"]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
