"""The ``additive`` backend (the additive score's blocks compiled by ``torch.compile``) against
the materialised formula, written here from the survey (Table 2, eq. 2-4):

    s_ij = scale · wᵀ tanh(W₁ q_i + W₂ k_j + b) + bias_ij,   s_ij = -inf where masked
    a = softmax(s) (a row with no admissible key: a = 0),   c = a v

In float64 the backend must match the float64 formula to ``FLOAT64_TOLERANCE`` (the tolerance of
``test_reference.py``); in float32 and below, to twice the error of the same formula computed in
that dtype plus a rounding floor (the error-ratio criterion of docs/reliability.md).

Compiling takes seconds, so the block sizes are made small for this module (8 queries × 16 keys
forward, 8 × 8 backward: sizes that cross several blocks and are not multiples of them) and kept
the same in every test, so that one forward and one backward kernel serve every float64 test;
one float32 forward kernel serves the lower precisions. Tests of declining compile nothing.
Skipped where inductor cannot compile.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

import attnkit as ak
import attnkit.core.additive_kernel as kernel
from attnkit.core.call import prepare
from attnkit.core.engine import backend_named

F64 = torch.float64
FLOAT64_TOLERANCE = 1e-10
ROUNDING_FLOOR = 1e-6
D_Q, D_K, D_W, D_V = 7, 4, 6, 5
MIN_HIDDEN = kernel.MIN_HIDDEN  # the module's own threshold (the fixture lowers it to 0)


@pytest.fixture(scope="module")
def compiled() -> Iterator[None]:
    """Small calls go to ``additive`` with small blocks (``kernel_blocks`` gives 8, 16, 8 for
    ``M >= 5``, ``N >= 9``); skips when inductor cannot compile here (the probe is a float64
    forward and backward, the kernels every float64 test reuses)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel, "MIN_HIDDEN", 0)
        patch.setattr(kernel, "BACKWARD_HIDDEN", 1)
        patch.setattr(kernel, "FORWARD_BLOCKS", 2)
        q, k, v, score = inputs(2, 2, 20, 30, requires_grad=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                out = ak.attention(q, k, v, score=score, backend="additive")
                out.context.sum().backward()
        except RuntimeWarning as error:
            pytest.skip(f"optional: inductor cannot compile the additive kernel here: {error}")
        yield


def inputs(
    b: int,
    h: int,
    m: int,
    n: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = F64,
    requires_grad: bool = False,
) -> tuple[Tensor, Tensor, Tensor, ak.scores.Additive]:
    """``q [B, H, M, D_Q]``, ``k [B, H, N, D_K]``, ``v [B, H, N, D_V]`` and an additive score
    (its parameters drawn large enough that tanh is not near-linear)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, m, D_Q, generator=g, dtype=F64).to(dtype)
    k = torch.randn(b, h, n, D_K, generator=g, dtype=F64).to(dtype)
    v = torch.randn(b, h, n, D_V, generator=g, dtype=F64).to(dtype)
    score = ak.scores.Additive(D_Q, D_K, D_W).to(F64)
    with torch.no_grad():
        for p in score.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    score = score.to(torch.float32 if dtype != F64 else F64)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, score


def formula(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score: ak.scores.Additive,
    allowed: Tensor | None = None,
    bias: Tensor | None = None,
    scale: float | None = None,
    dtype: torch.dtype = F64,
) -> tuple[Tensor, Tensor]:
    """``(context, lse)`` of the additive score and softmax, materialised, in ``dtype``; reads
    only the score's parameters (``W₁``, ``W₂``, ``b``, ``w``)."""
    w1, w2 = score.query_proj.weight.to(dtype), score.key_proj.weight.to(dtype)
    b, w = score.key_proj.bias.to(dtype), score.out.weight[0].to(dtype)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    hidden = torch.tanh((q @ w1.T).unsqueeze(-2) + (k @ w2.T + b).unsqueeze(-3))  # [.., M, N, d_w]
    s = hidden @ w
    if scale is not None:
        s = s * scale
    if bias is not None:
        s = s + bias.to(dtype)
    if allowed is not None:
        s = s.masked_fill(~allowed, -math.inf)
    peak = s.amax(-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak)))
    total = p.sum(-1, keepdim=True)
    a = torch.where(total > 0, p / torch.where(total > 0, total, 1.0), torch.zeros_like(p))
    lse = torch.where(total[..., 0] > 0, torch.log(total[..., 0]) + peak[..., 0], -math.inf)
    return a @ v, lse


def parameters(score: ak.scores.Additive) -> list[Tensor]:
    return [score.query_proj.weight, score.key_proj.weight, score.key_proj.bias, score.out.weight]


def ran_on(fn) -> list[str]:  # type: ignore[no-untyped-def]
    """The backends a hook saw compute the engine calls ``fn`` made."""
    names: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        out = run(call)
        names.append(run.chosen.name)
        return out

    with ak.attention_hooks(spy):
        fn()
    return names


def assert_close(got: Tensor, want: Tensor, tolerance: float, label: str) -> None:
    assert not torch.isnan(got).any(), f"{label}: NaN"
    error = (got.to(F64) - want).abs().max().item()
    assert error <= tolerance, f"{label}: error {error:.3g} > {tolerance:.3g}"


def check_gradients(out: Tensor, want: Tensor, tensors: list[Tensor], label: str) -> None:
    """The gradients of ``Σ c ∘ G`` (a fixed random ``G``) through the backend and the formula."""
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    got = torch.autograd.grad((out * g.to(out.dtype)).sum(), tensors, allow_unused=True)
    expected = torch.autograd.grad((want * g).sum(), tensors, allow_unused=True)
    names = ["q", "k", "v", "W1", "W2", "b", "w"]
    for name, a, e in zip(names, got, expected, strict=False):
        assert a is not None and e is not None, f"{label}: no gradient for {name}"
        assert_close(a, e, FLOAT64_TOLERANCE, f"{label} d{name}")


# --- the formula's results, float64 -----------------------------------------------------------


def test_the_engine_runs_large_additive_calls_on_the_kernel(compiled: None) -> None:
    """Chosen without being named (above ``MIN_HIDDEN``, here 0), and ``explain`` says so; the
    context, ``lse`` and the gradients of q, k, v and every parameter of the score (through
    W₁ q and W₂ k + b) are the formula's. M = 29, N = 45: neither a multiple of a block."""
    q, k, v, score = inputs(2, 2, 29, 45, seed=1, requires_grad=True)
    assert ak.explain(q, k, v, score=score).splitlines()[1].startswith("runs on: additive")
    outputs: list[ak.AttentionOutput] = []
    names = ran_on(lambda: outputs.append(ak.attention(q, k, v, score=score, return_lse=True)))
    assert names == ["additive"]
    want, want_lse = formula(q, k, v, score)
    assert_close(outputs[0].context, want, FLOAT64_TOLERANCE, "context")
    assert_close(outputs[0].lse, want_lse, FLOAT64_TOLERANCE, "lse")
    check_gradients(outputs[0].context, want, [q, k, v, *parameters(score)], "plain")


def test_causal_padding_window_and_empty_rows(compiled: None) -> None:
    """Causal (bottom-right, M = 21 < N = 35) and a sliding-window ``mask_mod`` (query i sees
    keys i + 5 < j <= i + 14), key padding (batch 1 has 12 keys) and a float mask with finite
    values and ``-inf``; row 3 of batch 0 and the rows of batch 1 from 6 on have no admissible
    key: zero context, ``lse = -inf``, zero gradients from them, never NaN. Blocks with no
    admissible key are skipped."""
    b, h, m, n = 2, 2, 21, 35
    q, k, v, score = inputs(b, h, m, n, seed=2, requires_grad=True)
    lengths = torch.tensor([n, 12])
    padding = torch.arange(n) < lengths.view(b, 1, 1, 1)  # [B, 1, 1, N]
    bias = torch.randn(b, 1, m, n, generator=torch.Generator().manual_seed(3), dtype=F64)
    bias[0, 0, 3, :] = -math.inf
    offset = n - m
    window = 9

    def sliding(bi: Tensor, hi: Tensor, i: Tensor, j: Tensor) -> Tensor:
        return j > i + offset - window

    rows, keys = torch.arange(m).view(m, 1), torch.arange(n).view(1, n)
    allowed = (keys <= rows + offset) & (keys > rows + offset - window) & padding
    allowed = allowed & ~torch.isneginf(bias)
    empty = ~allowed.any(-1)
    assert empty[0, 0].nonzero().flatten().tolist() == [3]
    assert empty[1, 0].nonzero().flatten().tolist() == list(range(6, m))
    out = ak.attention(
        q,
        k,
        v,
        score=score,
        causal=True,
        mask_mod=sliding,
        mask=torch.where(padding, bias, -math.inf),
        return_lse=True,
        backend="additive",
    )
    finite_bias = torch.where(allowed, bias, torch.zeros_like(bias))
    want, want_lse = formula(q, k, v, score, allowed, finite_bias)
    assert_close(out.context, want, FLOAT64_TOLERANCE, "context")
    assert (out.context[empty.expand(b, h, m)] == 0).all()
    assert torch.equal(torch.isneginf(out.lse), empty.expand(b, h, m))
    assert_close(out.lse.masked_fill(empty, 0), want_lse.masked_fill(empty, 0), 1e-10, "lse")
    check_gradients(out.context, want, [q, k, v, *parameters(score)], "masked")


def test_bool_mask_scale_grouped_query_heads_and_3d_inputs(compiled: None) -> None:
    """A bool ``[B, 1, M, N]`` mask, ``scale=`` (folded into ``w``), grouped-query heads (4
    query heads over 2 key/value heads) and 3-D inputs ``[B, L, d]``."""
    q, k, v, score = inputs(1, 4, 13, 40, seed=4, requires_grad=True)
    k2, v2 = k[:, ::2].detach().requires_grad_(), v[:, ::2].detach().requires_grad_()
    g = torch.Generator().manual_seed(5)
    allowed = torch.rand(1, 1, 13, 40, generator=g) > 0.4
    out = ak.attention(q, k2, v2, score=score, mask=allowed, scale=0.7, backend="additive")
    want, _ = formula(
        q, k2.repeat_interleave(2, 1), v2.repeat_interleave(2, 1), score, allowed, scale=0.7
    )
    assert_close(out.context, want, FLOAT64_TOLERANCE, "gqa context")
    check_gradients(out.context, want, [q, k2, v2, *parameters(score)], "gqa")
    q3, k3, v3 = q[0, :2].detach(), k2[0].detach(), v2[0].detach()  # [B = 2, L, d]
    out3 = ak.attention(q3, k3, v3, score=score, backend="additive")
    assert out3.context.shape == (2, 13, D_V)
    assert_close(out3.context, formula(q3, k3, v3, score)[0], FLOAT64_TOLERANCE, "3-D")


class _Attend(torch.nn.Module):
    """``ak.attention`` with an additive score held as a submodule, so ``functional_call`` can
    hand gradcheck's copies of its parameters to the engine."""

    def __init__(self, score: ak.scores.Additive) -> None:
        super().__init__()
        self.score = score

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return ak.attention(q, k, v, score=self.score, causal=True, backend="additive").context


def test_gradcheck(compiled: None) -> None:
    """``torch.autograd.gradcheck`` in float64 of q, k, v and the score's four parameters
    through the kernel's own backward (a causal call over several blocks)."""
    q, k, v, score = inputs(1, 2, 9, 17, seed=6, requires_grad=True)
    attend = _Attend(score)
    names = ["score.query_proj.weight", "score.key_proj.weight", "score.key_proj.bias"]
    names.append("score.out.weight")
    params = [p.detach().clone().requires_grad_() for p in parameters(score)]

    def fn(q: Tensor, k: Tensor, v: Tensor, *swapped: Tensor) -> Tensor:
        return torch.func.functional_call(attend, dict(zip(names, swapped, strict=True)), (q, k, v))

    assert torch.autograd.gradcheck(fn, (q, k, v, *params), fast_mode=True)


@pytest.mark.parametrize(("b", "m", "n"), [(0, 5, 9), (2, 0, 9), (2, 5, 0)])
def test_empty_calls(b: int, m: int, n: int) -> None:
    """An empty batch or no queries: an empty context; no keys: every row is key-less, zero
    context and gradients, ``lse = -inf`` (docs/reliability.md). Nothing is compiled: no block
    has a query and a key."""
    q, k, v, score = inputs(b, 2, m, n, requires_grad=True)
    out = ak.attention(q, k, v, score=score, return_lse=True, backend="additive")
    assert out.context.shape == (b, 2, m, D_V) and not out.context.any()
    assert torch.isneginf(out.lse).all()
    out.context.sum().backward()
    assert all(t.grad is not None and not t.grad.any() for t in (q, k, v))


# --- lower precision: the error-ratio criterion -------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lower_precision_within_twice_the_naive_error(compiled: None, dtype: torch.dtype) -> None:
    """float32, and bfloat16 (computed in float32, as every backend does; the score's parameters
    stay float32, as mixed precision keeps them): at most twice the error of the same formula
    computed in that dtype, against float64, plus the rounding floor. One float32 kernel."""
    q, k, v, score = inputs(2, 2, 29, 45, seed=7, dtype=dtype)
    with torch.no_grad():
        out = ak.attention(q, k, v, score=score, causal=True, backend="additive").context
    allowed = torch.arange(45).view(1, 45) <= torch.arange(29).view(29, 1) + 16
    want, _ = formula(q, k, v, score, allowed)
    naive, _ = formula(q, k, v, score, allowed, dtype=dtype)
    tolerance = 2 * (naive.to(F64) - want).abs().max().item() + ROUNDING_FLOOR
    assert out.dtype == dtype
    assert_close(out, want, tolerance, str(dtype))


# --- compiled once per kind of call -----------------------------------------------------------


def test_other_lengths_and_batch_sizes_reuse_the_kernels(compiled: None) -> None:
    """The blocks have one shape whatever M and N, and B·H is a dynamic size: new lengths and
    batch sizes compile no new graph (dynamo's count of unique graphs stays), also for B·H = 1
    (one forward kernel more)."""
    from torch._dynamo.utils import counters

    q, k, v, score = inputs(2, 2, 29, 45, seed=8, requires_grad=True)
    ak.attention(q, k, v, score=score, backend="additive").context.sum().backward()
    before = (counters["stats"]["unique_graphs"], kernel.kernels_compiled())
    for b, h, m, n in [(3, 2, 11, 60), (1, 3, 40, 17), (2, 2, 29, 45)]:
        q, k, v, score = inputs(b, h, m, n, seed=b + m, requires_grad=True)
        out = ak.attention(q, k, v, score=score, backend="additive")
        out.context.sum().backward()
        want, _ = formula(q, k, v, score)
        assert_close(out.context, want, FLOAT64_TOLERANCE, f"B={b} H={h} M={m} N={n}")
    assert (counters["stats"]["unique_graphs"], kernel.kernels_compiled()) == before
    # B·H = 1 is a kind of its own (dynamo specialises sizes of 1); its lengths share a kernel
    with torch.no_grad():
        q, k, v, score = inputs(1, 1, 29, 45, seed=13)
        ak.attention(q, k, v, score=score, backend="additive")
        before = counters["stats"]["unique_graphs"]
        q, k, v, score = inputs(1, 1, 60, 23, seed=14)
        out = ak.attention(q, k, v, score=score, backend="additive")
    assert counters["stats"]["unique_graphs"] == before
    assert_close(out.context, formula(q, k, v, score)[0], FLOAT64_TOLERANCE, "B·H = 1")


# --- what the kernel declines, and the fallbacks ------------------------------------------------


def reasons(q: Tensor, k: Tensor, v: Tensor, **options) -> list[str]:
    return backend_named("additive").decline(prepare(q, k, v, **options)) or []


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"score_mod": lambda s, b, h, i, j: s * 0.5}, "a score_mod was given"),
        ({"dropout": 0.1}, "dropout > 0"),
        ({"return_weights": True}, "weights were asked for"),
        ({"summary": "entropy"}, "summary 'entropy'"),
        ({"align": "sparsemax"}, "align 'sparsemax'"),
        ({"score": "scaled_dot"}, "not ak.scores.Additive's own"),
        ({"score": ak.scores.Additive(D_Q, D_K, D_W, activation="relu")}, "tanh"),
        ({"score": ak.scores.Additive(D_Q, D_K, D_W, value_features=D_V)}, "multi-dimensional"),
    ],
)
def test_what_the_kernel_does_not_compute_is_declined_with_the_reason(
    options: dict, words: str
) -> None:
    """Declined by the declaration (nothing compiles), and computed by ``tiled``, which the
    other backends' tests check against the formula."""
    q, k, v, score = inputs(1, 1, 512, 1024, dtype=torch.float32)
    options = {"score": score.float(), **options}
    if options["score"] == "scaled_dot":
        q, k = q[..., :4], k
    why = reasons(q, k, v, **options)
    assert any(words in reason for reason in why), why
    assert "runs on: additive" not in ak.explain(q, k, v, **options)


def test_small_calls_stay_on_tiled_and_the_scope_disables_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below ``MIN_HIDDEN`` the engine passes the kernel over (compiling would take longer than
    the call) but takes it when it is named alone; ``ak.backends`` without it keeps any call
    off it."""
    monkeypatch.setattr(kernel, "MIN_HIDDEN", MIN_HIDDEN)
    q, k, v, score = inputs(1, 1, 64, 64, dtype=torch.float32)
    text = ak.explain(q, k, v, score=score)
    assert "runs on: tiled" in text and "passed over additive" in text and "below" in text
    assert backend_named("additive").reasons(prepare(q, k, v, score=score), forced=True) == []
    assert "runs on: additive" in ak.explain(q, k, v, score=score, backend="additive")
    big = torch.empty(1, 1, 1024, D_Q, device="meta"), torch.empty(1, 1, 1024, D_K, device="meta")
    vm = torch.empty(1, 1, 1024, D_V, device="meta")
    large = ak.scores.Additive(D_Q, D_K, 128)
    assert "runs on: additive" in ak.explain(*big, vm, score=large)
    with ak.backends("tiled", "reference"):
        assert "runs on: tiled" in ak.explain(*big, vm, score=large)


def test_non_finite_inputs_and_a_float_mask_needing_grad_are_declined() -> None:
    q, k, v, score = inputs(1, 1, 512, 1024, dtype=torch.float32)
    q[0, 0, 3, 1] = math.nan
    assert any("NaN" in r for r in reasons(q, k, v, score=score))
    bias = torch.zeros(512, 1024, requires_grad=True)
    why = reasons(q.nan_to_num(), k, v, score=score, mask=bias)
    assert any("float mask requires grad" in r for r in why), why


def test_a_non_finite_result_is_declined_after_running(compiled: None) -> None:
    """A NaN in the score's ``w`` (a parameter: no input shows it) makes the kernel's context
    NaN; the call is declined and ``tiled`` computes it with attnkit's NaN semantics."""
    q, k, v, score = inputs(2, 2, 29, 45, seed=10)
    with torch.no_grad():
        score.out.weight[0, 2] = math.nan
    outputs: list[ak.AttentionOutput] = []
    names = ran_on(lambda: outputs.append(ak.attention(q, k, v, score=score)))
    assert names == ["tiled"]
    assert torch.isnan(outputs[0].context).all()


def test_a_failed_compile_declines_the_call_and_is_remembered(
    compiled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forward's kernel failing to compile: one warning, the call computed by ``tiled``
    (the formula's result), and that kind of call declined from then on with the reason."""
    real = kernel.compiled_blocks()

    def broken(*args: Tensor) -> tuple[Tensor, ...]:
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(kernel, "_failed", OrderedDict())
    monkeypatch.setattr(
        kernel, "compiled_blocks", lambda: kernel.CompiledBlocks(broken, broken, real.mark_dynamic)
    )
    q, k, v, score = inputs(2, 2, 29, 45, seed=11)
    outputs: list[ak.AttentionOutput] = []
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
        names = ran_on(lambda: outputs.append(ak.attention(q, k, v, score=score)))
    assert names == ["tiled"]
    assert_close(outputs[0].context, formula(q, k, v, score)[0], FLOAT64_TOLERANCE, "fallback")
    assert any("no C++ compiler" in r for r in reasons(q, k, v, score=score))


def test_a_failed_backward_compile_runs_the_same_blocks_eagerly(
    compiled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forward compiled, the backward failing to: the same block function runs eagerly, so
    the gradients are still the formula's; a warning says so."""
    real = kernel.compiled_blocks()

    def broken(*args: Tensor) -> tuple[Tensor, ...]:
        raise RuntimeError("backward cannot compile")

    monkeypatch.setattr(kernel, "_failed", OrderedDict())
    monkeypatch.setattr(
        kernel,
        "compiled_blocks",
        lambda: kernel.CompiledBlocks(real.forward, broken, real.mark_dynamic),
    )
    q, k, v, score = inputs(2, 2, 29, 45, seed=12, requires_grad=True)
    out = ak.attention(q, k, v, score=score, causal=True, backend="additive")
    allowed = torch.arange(45).view(1, 45) <= torch.arange(29).view(29, 1) + 16
    want, _ = formula(q, k, v, score, allowed)
    with pytest.warns(RuntimeWarning, match="backward cannot compile"):
        check_gradients(out.context, want, [q, k, v, *parameters(score)], "eager backward")


# --- memory -----------------------------------------------------------------------------------


def test_predicted_memory_grows_linearly_with_the_length() -> None:
    """No ``[M, N]`` (let alone ``[M, N, d_w]``) tensor: doubling M = N at most doubles the
    prediction (plus the fixed block), forward and backward; the materialised formula's grows
    fourfold."""
    score = ak.scores.Additive(64, 64, 128)
    backend, reference = backend_named("additive"), backend_named("reference")

    def call(n: int):  # type: ignore[no-untyped-def]
        q = torch.empty(1, 4, n, 64, device="meta")
        return prepare(q, q, q, score=score)

    for backward in (False, True):
        small, large = (backend.memory(call(n), backward) for n in (4096, 8192))
        assert large <= 2.2 * small, (backward, small, large)
        assert reference.memory(call(8192), backward) > 50 * large


def test_the_kernels_tanh_is_within_two_ulps_of_one_of_float64s() -> None:
    """The compiled blocks evaluate tanh as 2 σ(2x) − 1: an absolute error of at most two
    float32 ulps of 1 (2.4e-7) anywhere, exact ±1 at ±∞, no NaN."""
    x = torch.cat(
        [torch.linspace(-20, 20, 400_001), torch.tensor([math.inf, -math.inf, 1e-8, 0.0, -1e-30])]
    )
    got = kernel.tanh_by_sigmoid(x)
    assert got.dtype == torch.float32 and not got.isnan().any()
    assert (got.double() - torch.tanh(x.double())).abs().max().item() <= 2 * 2.0**-23
    assert got[-5:-3].tolist() == [1.0, -1.0]
