"""The ``flex`` backend (compiled FlexAttention) against the float64 formula of ``formulas.py``.

Compiling a kernel takes seconds (tens of seconds on a loaded machine), once per kind of call, so
the cases are few and each covers several features at once: soft-capping in float32; then one
bfloat16 call with the activated general score, grouped-query inputs, M != N, causal, padding, a
float mask, a ``mask_mod``, an ALiBi ``score_mod`` and fully masked rows. Every other test here
compiles nothing (the backend is passed over, or the kernel is reused). Skipped where inductor
cannot compile.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from collections.abc import Iterator

import formulas as ref
import pytest
import torch
from torch import Tensor

import attnkit as ak
import attnkit.core.flex as flex

F64 = torch.float64
ROUNDING_FLOOR = 1e-6  # docs/reliability.md's floor for float32 and below


@pytest.fixture(scope="module")
def compiled() -> Iterator[None]:
    """Small calls go to ``flex`` (``MIN_SCORES`` lowered for this module); skips the tests that
    need a kernel when inductor cannot compile one here (the probe is the soft-capping call of
    the first test, so it costs no extra compile). Two kernels are compiled in all."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flex, "MIN_SCORES", 0)
        q, k, v = qkv(1, 2, 2, 32, 32, 16)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                ak.attention(q, k, v, score_mod=soft_cap, backend="flex")
        except RuntimeWarning as error:
            pytest.skip(f"optional: inductor cannot compile FlexAttention here: {error}")
        yield


def soft_cap(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return 30 * torch.tanh(s / 30)


def qkv(
    b: int, h: int, h_kv: int, m: int, n: int, d: int, seed: int = 0, d_v: int | None = None
) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, h, m, d), (b, h_kv, n, d), (b, h_kv, n, d_v or d)]
    return [torch.randn(s, generator=g, dtype=F64).float() for s in shapes]


def expect(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score,
    *,
    allowed: Tensor | None = None,
    bias: Tensor | None = None,
    score_mod=None,
) -> tuple[Tensor, float]:
    """The float64 formula and the tolerance: twice the same-dtype formula's error (the
    error-ratio criterion of docs/reliability.md) plus the rounding floor."""
    groups = q.shape[1] // k.shape[1]

    def compute(dt: torch.dtype) -> Tensor:
        k4, v4 = (t.to(dt).repeat_interleave(groups, 1) for t in (k, v))
        b = None if bias is None else bias.to(dt)
        return ref.attention(
            q.to(dt), k4, v4, score(dt), ref.softmax, allowed, bias=b, score_mod=score_mod
        )[0]

    c64 = compute(F64)
    naive = (compute(q.dtype).to(F64) - c64).abs().max().item()
    return c64, 2 * naive + ROUNDING_FLOOR


def run_flex(q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
    """``ak.attention`` forced onto ``flex``; fails if the kernel did not run (a fallback to the
    tiled path warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with torch.no_grad():
            return ak.attention(q, k, v, backend="flex", **options).context


def test_soft_capping_matches_the_formula(compiled: None) -> None:
    q, k, v = qkv(1, 2, 2, 32, 32, 16)
    out = run_flex(q, k, v, score_mod=soft_cap)
    want, tol = expect(q, k, v, lambda dt: ref.scaled_dot, score_mod=soft_cap)
    assert (out.double() - want).abs().max() <= tol


def test_masks_gqa_alibi_activated_general_and_empty_rows_in_bfloat16(compiled: None) -> None:
    """One kernel for everything else (each compile costs seconds): the activated general score
    ``tanh(kᵀ W q + b) · scale`` (Table 2); grouped-query heads (4 query heads, 2 key/value
    heads); M = 24 != N = 40; values of 8 features, keys of 16; causal (bottom-right); a
    sliding-window ``mask_mod``; key padding by a float mask (``-inf``) that also adds finite
    values; rows with no admissible key (batch 1 has no keys; rows 3 and 7 of batch 0 are masked
    out); an ALiBi ``score_mod`` reading a captured per-head slope tensor; bfloat16 inputs (the
    score's parameters stay float32, as mixed precision keeps them)."""
    b, h, m, n, d = 2, 4, 24, 40, 16
    torch.manual_seed(1)
    score = ak.scores.ActivatedGeneral(d, d)
    with torch.no_grad():
        score.bias.fill_(0.3)
    q, k, v = (t.to(torch.bfloat16) for t in qkv(b, h, 2, m, n, d, seed=1, d_v=8))
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])

    def alibi(s: Tensor, bi: Tensor, hi: Tensor, i: Tensor, j: Tensor) -> Tensor:
        return s - slopes.to(s.dtype)[hi] * (
            i + n - m - j
        )  # s: float32 in kernels, bf16 in the yardstick

    g = torch.Generator().manual_seed(2)
    float_mask = torch.randn(b, 1, m, n, generator=g, dtype=F64).to(torch.bfloat16)
    keys = torch.arange(n) < torch.tensor([30, 0])[:, None]  # [B, N]
    allowed = keys[:, None, None, :].expand(b, 1, m, n).clone()
    allowed[0, 0, [3, 7]] = False
    float_mask = float_mask.masked_fill(~allowed, -math.inf)
    window = ak.masks.sliding_window_mod(20, offset=n - m)
    out = run_flex(
        q, k, v, score=score, scale=3.0, mask=float_mask, causal=True, mask_mod=window,
        score_mod=alibi,
    )  # fmt: skip
    allowed = allowed & ak.masks.sliding_window(m, n, 20)  # within the causal keys
    bias = torch.where(allowed, float_mask, 0.0)
    w, s_bias = score.query_proj.weight.detach().double(), score.bias.detach().double()

    def formula(dt: torch.dtype):
        return lambda a, c: 3.0 * ref.activated_general(a, c, w.to(dt), s_bias.to(dt))

    want, tol = expect(q, k, v, formula, allowed=allowed, bias=bias, score_mod=alibi)
    assert out.dtype == torch.bfloat16
    assert (out.double() - want).abs().max() <= tol
    assert (out[1] == 0).all() and (out[0, :, [3, 7]] == 0).all()  # zero context, never NaN


def test_a_kernel_is_compiled_once_per_kind_of_call(compiled: None) -> None:
    """The same kind of call again (new tensors, and a new closure of the engine's score_mod
    around the user's) runs the compiled kernel without recompiling."""
    run_flex(*qkv(1, 2, 2, 32, 32, 16, seed=3), score_mod=soft_cap)  # compiled here if not before
    before = flex.kernels_compiled()
    q, k, v = qkv(1, 2, 2, 32, 32, 16, seed=4)
    with torch.compiler.set_stance("fail_on_recompile"):
        out = run_flex(q, k, v, score_mod=soft_cap)
    assert flex.kernels_compiled() == before
    want, tol = expect(q, k, v, lambda dt: ref.scaled_dot, score_mod=soft_cap)
    assert (out.double() - want).abs().max() <= tol


def test_calls_needing_gradients_stay_tiled_and_get_gradients(compiled: None) -> None:
    """FlexAttention has no CPU backward: with autograd on, the tiled path runs and its
    gradients are those of the formula."""
    q, k, v = (t.double().requires_grad_() for t in qkv(1, 2, 2, 12, 12, 8, seed=5))
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    assert "gradients are needed" in ak.explain(q32, k32, v32, score_mod=soft_cap)
    out = ak.attention(q32, k32, v32, score_mod=soft_cap).context
    out.sum().backward()
    want = ref.attention(q, k, v, ref.scaled_dot, ref.softmax, score_mod=soft_cap)[0]
    want.sum().backward()
    for ours, theirs in ((q32, q), (k32, k), (v32, v)):
        assert torch.allclose(ours.grad.double(), theirs.grad, atol=1e-5)
    with torch.no_grad():  # the same call without autograd is flex's
        assert "runs on: flex" in ak.explain(q32, k32, v32, score_mod=soft_cap)


def test_explain_says_why_flex_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flex, "MIN_SCORES", 1 << 25)  # the default (the fixture lowers it)
    q = torch.empty(1, 8, 4096, 64, device="meta")
    assert "runs on: flex" in ak.explain(q, q, q, score_mod=soft_cap)
    small = torch.empty(1, 2, 64, 16, device="meta")
    reasons = {
        "below": ak.explain(small, small, small, score_mod=soft_cap),
        "euclidean": ak.explain(q, q, q, score="euclidean"),
        "weights were asked for": ak.explain(q, q, q, score_mod=soft_cap, return_weights=True),
        "dropout": ak.explain(q, q, q, score_mod=soft_cap, dropout=0.1),
        "float64": ak.explain(q.double(), q.double(), q.double(), score_mod=soft_cap),
        "additive": ak.explain(q, q, q, score=ak.scores.Additive(64, 64, 8).to("meta")),
    }
    for words, text in reasons.items():
        line = next(x for x in text.splitlines() if "passed over flex" in x)
        assert words in line, (words, text)
    with pytest.raises(ValueError, match=r"'flex'.*below"):
        ak.attention(*qkv(1, 2, 2, 8, 8, 4), score_mod=soft_cap, backend="flex")


def test_importing_attnkit_loads_no_compiler() -> None:
    code = "import sys, attnkit; print(any(m.startswith('torch._inductor') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
