"""The exact engine: backend declarations, block skipping, weights/lse/summaries on demand, merging
of partial results, and sizes that do not divide the blocks — each against the float64 formula of
``formulas.py`` (never against attnkit itself)."""

from __future__ import annotations

import math
from dataclasses import replace

import formulas as ref
import pytest
import torch
from attention_cases import admits

import attnkit as ak
import attnkit.core.chunked as chunked
import attnkit.core.tiled as tiled
from attnkit.cli import main as cli_main
from attnkit.core.call import prepare
from attnkit.core.engine import BACKENDS

F64 = torch.float64
BACKEND_NAMES = [b.name for b in BACKENDS]


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 16 x 16 (tiled) and a few rows (chunked), so small inputs span many blocks."""
    monkeypatch.setattr(tiled, "BLOCK_BUDGET", 1)
    monkeypatch.setattr(chunked, "CHUNK_BUDGET", 300)


def allowed(m: int, n: int, lengths: list[int] | None, causal: bool) -> torch.Tensor:
    """Admissible keys ``[B|1, 1, M, N]``, built by loops from the definitions."""
    b = 1 if lengths is None else len(lengths)
    out = torch.zeros(b, 1, m, n, dtype=torch.bool)
    for bi in range(b):
        for i in range(m):
            for j in range(n):
                ok = lengths is None or j < lengths[bi]
                out[bi, 0, i, j] = ok and (not causal or j <= i + n - m)
    return out


# --- backends declared as data ----------------------------------------------------------------


CAPABILITY_CALLS = {
    "weights": ({"return_weights": True}, "weights were asked for"),
    "only_weights": ({}, "no weights were asked for"),
    "lse": ({"return_lse": True}, "lse was asked for"),
    "score_mod": ({"score_mod": lambda s, b, h, i, j: s}, "score_mod"),
    "dropout": ({"dropout": 0.1}, "dropout"),
    "summary": ({"summary": "entropy"}, "summary"),
    "aligns": ({"align": "sparsemax"}, "sparsemax"),
    "dot_scores_only": ({"score": "euclidean"}, "euclidean"),
}


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_NAMES)
@pytest.mark.parametrize("capability", sorted(CAPABILITY_CALLS))
def test_reasons_follow_the_declaration(backend, capability: str) -> None:
    """A backend refuses exactly the calls its declaration excludes, and says which part (the
    capability fields alone: reasons a backend judges itself, ``limits``, are left out)."""
    q = torch.randn(1, 2, 5, 4)
    options, words = CAPABILITY_CALLS[capability]
    # a backend chosen only for weights is asked about each other capability as when forced
    reasons = replace(backend, limits=None).reasons(
        prepare(q, q, q, **options), forced=capability != "only_weights"
    )
    declared = getattr(backend, capability)
    if capability == "dot_scores_only":
        refuses = declared
    elif capability == "only_weights":  # a preference: other reasons may stand beside it
        assert any(words in r for r in reasons) == declared, (backend.name, reasons)
        return
    elif capability == "aligns":
        refuses = declared is not None and ak.align.Sparsemax not in declared
    else:
        refuses = not declared
    if refuses:
        assert any(words in r for r in reasons), (backend.name, reasons)
    else:
        assert reasons == [], (backend.name, reasons)


def test_automatic_choice_takes_the_first_backend_that_fits() -> None:
    q = torch.randn(1, 2, 5, 4)
    for options in ({}, {"return_weights": True}, {"align": "entmax15"}, {"score": "euclidean"}):
        call = prepare(q, q, q, **options)
        first = next(b for b in BACKENDS if not b.reasons(call))
        assert f"runs on: {first.name}" in ak.explain(q, q, q, **options)


def test_explain_names_the_reasons_of_each_passed_over_backend() -> None:
    q = torch.empty(1, 8, 4096, 64, device="meta")
    text = ak.explain(q, q, q, score="euclidean", align="topk")
    assert "runs on: chunked" in text
    assert "passed over sdpa: score 'euclidean' is not a dot product" in text
    assert "passed over tiled: align 'topk'" in text


def test_cli_info_prints_the_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["info", "--score", "additive", "--weights", "--keys", "512"]) == 0
    out = capsys.readouterr().out
    assert "runs on: tiled" in out and "weights were asked for" in out
    assert cli_main(["info", "--backend", "sdpa", "--weights"]) == 2
    assert "cannot run this call" in capsys.readouterr().err


# --- sizes that do not divide the blocks ------------------------------------------------------


SIZES = [(1, 17), (17, 1), (97, 127), (129, 97), (127, 129)]


@pytest.mark.parametrize("backend", ["tiled", "chunked"])
@pytest.mark.parametrize(("m", "n"), SIZES)
@pytest.mark.parametrize("score_name", ["scaled_dot", "additive", "euclidean"])
def test_block_remainders_against_the_formula(
    backend: str, m: int, n: int, score_name: str, small_blocks
) -> None:
    """Forward (2x the naive float32 error + 1e-6) and gradients (3x) against float64."""
    torch.manual_seed(m * 1000 + n)
    d = 8
    score = {
        "scaled_dot": ak.scores.ScaledDot(),
        "additive": ak.scores.Additive(d, d, 6),
        "euclidean": ak.scores.Euclidean(),
    }[score_name]
    lengths = [n, max(1, n // 2)]
    ok = allowed(m, n, lengths, causal=True)
    mask = ak.masks.padding(torch.tensor(lengths), n)
    q64, k64, v64 = (torch.randn(2, 2, x, d, dtype=F64) for x in (m, n, n))

    def formula(dtype):
        qs, ks, vs = (t.to(dtype).requires_grad_() for t in (q64, k64, v64))
        fn = ref.score_formula(score_name, score, dtype)
        ctx, _ = ref.attention(qs, ks, vs, fn, ref.softmax, ok)
        grads = torch.autograd.grad(
            (ctx * torch.linspace(-1, 1, d, dtype=dtype)).sum(), (qs, ks, vs)
        )
        return ctx, grads

    gold_ctx, gold_grads = formula(F64)
    naive_ctx, naive_grads = formula(torch.float32)
    qs, ks, vs = (t.float().requires_grad_() for t in (q64, k64, v64))
    out = ak.attention(qs, ks, vs, score=score, mask=mask, causal=True, backend=backend)
    grads = torch.autograd.grad((out.context * torch.linspace(-1, 1, d)).sum(), (qs, ks, vs))

    def err(x, y):
        return (x.double() - y).abs().max().item()

    assert err(out.context, gold_ctx) <= 2 * err(naive_ctx, gold_ctx) + 1e-6
    for g, naive_g, gold_g in zip(grads, naive_grads, gold_grads, strict=True):
        assert err(g, gold_g) <= 3 * err(naive_g, gold_g) + 1e-6


# --- causal and window blocks are skipped -----------------------------------------------------


def scored_blocks(**options) -> int:
    """How many blocks the tiled forward pass scores (counted by a score_mod)."""
    calls = []

    def counting(s, b, h, i, j):
        calls.append(1)
        return s

    q = torch.randn(1, 1, 256, 8)
    ak.attention(q, q, q, backend="tiled", score_mod=counting, **options)
    return len(calls)


def test_fully_masked_blocks_are_not_computed(small_blocks) -> None:
    full = scored_blocks()
    assert full == 16 * 16
    assert scored_blocks(causal=True) == 16 * 17 // 2  # the diagonal and below
    window = scored_blocks(mask_mod=ak.masks.sliding_window_mod(16))
    assert window == 16 + 15  # diagonal blocks and the ones just below


# --- weights, lse and summaries on demand -----------------------------------------------------


@pytest.mark.parametrize("backend", ["tiled", "chunked", "reference"])
def test_weights_and_lse_are_differentiable(backend: str, small_blocks) -> None:
    """A loss on the weights and on lse back-propagates like the float64 formula's."""
    torch.manual_seed(3)
    m, n, d = 33, 40, 6
    score = ak.scores.ActivatedGeneral(d, d).double()
    ok = allowed(m, n, [n, 20], causal=True)
    q, k, v = (torch.randn(2, 2, x, d, dtype=F64, requires_grad=True) for x in (m, n, n))
    out = ak.attention(
        q,
        k,
        v,
        score=score,
        mask=ak.masks.padding(torch.tensor([n, 20]), n),
        causal=True,
        return_weights=True,
        return_lse=True,
        backend=backend,
    )
    target = torch.rand(n, dtype=F64)
    lse = torch.where(torch.isfinite(out.lse), out.lse, 0)
    loss = (out.weights * target).sum() + lse.sum() + out.context.square().sum()
    got = torch.autograd.grad(loss, (q, k, v, score.bias))

    bias = score.bias.detach().clone().requires_grad_()
    weight = score.query_proj.weight.detach()

    def fn(q, k):
        return ref.activated_general(q, k, weight, bias, torch.tanh)

    e = fn(q, k).masked_fill(~ok, -math.inf)
    gold_lse = torch.logsumexp(e, -1)
    ctx, w = ref.attention(q, k, v, fn, ref.softmax, ok)
    gold_loss = (w * target).sum() + torch.where(torch.isfinite(gold_lse), gold_lse, 0).sum()
    gold_loss = gold_loss + ctx.square().sum()
    gold = torch.autograd.grad(gold_loss, (q, k, v, bias))
    torch.testing.assert_close(out.weights, w, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.lse, gold_lse, rtol=0, atol=1e-12)
    for g, h in zip(got, gold, strict=True):
        torch.testing.assert_close(g, h, rtol=0, atol=1e-10)


@pytest.mark.parametrize("backend", ["tiled", "chunked", "reference"])
@pytest.mark.parametrize("summary", ["column_sum", "entropy", "argmax"])
def test_summaries_match_the_weights(backend: str, summary: str, small_blocks) -> None:
    torch.manual_seed(4)
    m, n, d = 35, 50, 8
    ok = allowed(m, n, [n, 30], causal=True)
    ok[0, 0, 5] = False  # a row with no admissible key at all
    q, k, v = (torch.randn(2, 3, x, d, dtype=F64) for x in (m, n, n))
    out = ak.attention(q, k, v, mask=ok, summary=summary, backend=backend)
    _, w = ref.attention(q, k, v, ref.scaled_dot, ref.softmax, ok)
    has_key = ok.expand(2, 3, m, n).any(-1)
    if summary == "column_sum":
        expected = w.sum(-2)
        torch.testing.assert_close(out.summary, expected, rtol=0, atol=1e-12)
    elif summary == "entropy":
        expected = -(w * torch.where(w > 0, w.log(), 0)).sum(-1)
        torch.testing.assert_close(out.summary, expected, rtol=0, atol=1e-10)
    else:
        expected = torch.where(has_key, w.argmax(-1), -1)
        assert torch.equal(out.summary, expected)


def test_sdpa_is_passed_over_for_summaries_and_lse() -> None:
    q = torch.randn(1, 2, 5, 4)
    assert ak.attention(q, q, q, summary="argmax").summary.shape == (1, 2, 5)
    assert ak.attention(q, q, q, return_lse=True).lse.shape == (1, 2, 5)
    with pytest.raises(ValueError, match="lse was asked for"):
        ak.attention(q, q, q, return_lse=True, backend="sdpa")
    with pytest.raises(ValueError, match="return_lse=True needs the softmax alignment"):
        ak.attention(q, q, q, return_lse=True, align="sparsemax")


# --- merging partial results over disjoint key sets -------------------------------------------


@pytest.mark.parametrize("splits", [1, 2, 3, 17])
def test_merge_attention_equals_one_call_over_all_keys(splits: int) -> None:
    torch.manual_seed(splits)
    m, n, d = 9, 34, 5
    q, k, v = (torch.randn(2, 2, x, d, dtype=F64, requires_grad=True) for x in (m, n, n))
    ok = torch.rand(2, 1, m, n) > 0.3
    ok[..., : n // splits] = False if splits > 1 else ok[..., : n // splits]  # an empty split
    ok[0, 0, 3] = False  # a query with no admissible key anywhere
    parts = []
    for idx in torch.tensor_split(torch.arange(n), splits):
        parts.append(
            ak.attention(
                q,
                k[:, :, idx],
                v[:, :, idx],
                mask=ok[..., idx],
                return_weights=True,
                return_lse=True,
            )
        )
    merged = ak.merge_attention(parts)
    ctx, w = ref.attention(q, k, v, ref.scaled_dot, ref.softmax, ok)
    lse = torch.logsumexp(ref.scaled_dot(q, k).masked_fill(~ok, -math.inf), -1)
    torch.testing.assert_close(merged.context, ctx, rtol=0, atol=1e-12)
    torch.testing.assert_close(merged.weights, w, rtol=0, atol=1e-12)
    assert torch.equal(torch.isinf(merged.lse), torch.isinf(lse))
    torch.testing.assert_close(
        torch.nan_to_num(merged.lse, neginf=0), torch.nan_to_num(lse, neginf=0)
    )
    got = torch.autograd.grad(merged.context.sum(), (q, k, v))
    gold = torch.autograd.grad(ctx.sum(), (q, k, v))
    for g, h in zip(got, gold, strict=True):
        assert not torch.isnan(g).any()
        torch.testing.assert_close(g, h, rtol=0, atol=1e-12)


def test_merge_attention_refuses_what_it_cannot_merge() -> None:
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="at least one"):
        ak.merge_attention([])
    with pytest.raises(ValueError, match="lse=None in partial"):
        ak.merge_attention([ak.attention(q, q, q), ak.attention(q, q, q, return_lse=True)])
    with pytest.raises(ValueError, match="share one shape"):
        ak.merge_attention(
            [
                ak.attention(q, q, q, return_lse=True),
                ak.attention(q[..., :2, :], q, q, return_lse=True),
            ]
        )


# --- dropout on the tiled path ----------------------------------------------------------------


def test_tiled_dropout_backward_matches_its_own_forward(small_blocks) -> None:
    """With the same seed, the tiled backward recomputes the same dropout mask: the gradient of
    v is the (dropped, rescaled) weights' column sums, read off with v = identity."""
    n = 40
    q = torch.randn(1, 1, n, 4, dtype=F64)
    v = torch.eye(n, dtype=F64)[None, None].requires_grad_()
    torch.manual_seed(7)
    out = ak.attention(q, q, v, dropout=0.3, backend="tiled")
    dropped = out.context.detach()  # = dropout(weights) @ I
    (grad_v,) = torch.autograd.grad(out.context.sum(), v)
    torch.testing.assert_close(grad_v[0, 0, :, 0], dropped[0, 0].sum(0), rtol=0, atol=1e-12)
    kept = (dropped > 0).double().mean().item()
    assert 0.55 < kept < 0.85  # ~0.7 of the weights survive


ONE_D_SHAPES = ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4))


@pytest.mark.parametrize(
    "backend",
    [  # with the weights where the backend gives them (sdpa: without)
        b
        for b in BACKEND_NAMES
        if admits(
            b,
            ONE_D_SHAPES,
            dtype=F64,
            mask=torch.ones(5, dtype=torch.bool),
            return_weights=b != "sdpa",
        )
    ],
)
def test_one_dimensional_key_mask(backend: str) -> None:
    """A ``[N]`` mask broadcasts over batch, heads and queries on every backend that runs
    softmax (sparse_rows: tested with its alignments; flex: too small a call to compile)."""
    q, k, v = (torch.randn(2, 2, x, 4, dtype=F64) for x in (3, 5, 5))
    keys = torch.tensor([True, False, True, True, False])
    call_weights = backend != "sdpa"
    out = ak.attention(q, k, v, mask=keys, backend=backend, return_weights=call_weights)
    ctx, _ = ref.attention(q, k, v, ref.scaled_dot, ref.softmax, keys.view(1, 1, 1, 5))
    torch.testing.assert_close(out.context, ctx, rtol=0, atol=1e-12)


def test_large_finite_float_mask_with_half_inputs() -> None:
    """-1e5 is finite: in float16 it would round to -inf and empty the row; attnkit keeps the
    float mask in float32 (and passes over SDPA, which would add it in half precision)."""
    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 4).half()
    bias = torch.full((3, 3), -1e5)
    out = ak.attention(q, q, q, mask=bias)
    expected = ak.attention(q.float(), q.float(), q.float()).context  # a constant shift
    assert out.context.abs().sum() > 0  # in float16 the row would have been emptied
    # float32 holds -1e5 + score to ~0.008: the weights keep that much rounding
    torch.testing.assert_close(out.context.float(), expected, rtol=0, atol=3e-2)
    assert "float mask with half-precision inputs" in ak.explain(q, q, q, mask=bias)
