"""Property tests (hypothesis) of the invariants in RELIABILITY.md, for every backend, every
registered alignment (eval mode) and every registered score over random small shapes.

Each test is parametrised by alignment and by the backends whose declaration takes the call
(generated at collection: a backend that cannot run the alignment is not paired with it), and
drawn examples it cannot run (a score it does not take) are discarded with ``assume``. Tensors come from a drawn seed, so the examples are deterministic
(``derandomize=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from attention_cases import (
    POSITIONAL_ALIGNS,
    POSITIONAL_SCORES,
    SCORE_NAMES,
    AlignCase,
    admits,
    align_cases,
    backend_reasons,
    grads,
    local_window_mask,
    make_score,
    on_meta,
    with_backends,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import Tensor

import attnkit as ak

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
EVAL_CASES = align_cases(training=False)
NORMALIZED = [c for c in EVAL_CASES if c.cls.normalized]
QUERY_ORDER_FREE = [c for c in EVAL_CASES if c.name != "local_monotonic"]
KEY_ORDER_FREE = [c for c in EVAL_CASES if c.name not in POSITIONAL_ALIGNS]
CONTENT_SCORES = [s for s in SCORE_NAMES if s not in POSITIONAL_SCORES]
# Alignments that pick keys by rank: exact ties (or near ties that rounding can swap) make the
# choice depend on the key order, so their examples keep a margin between scores.
RANKING = {"hard", "topk"}

TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float64: {"rtol": 1e-10, "atol": 1e-12},
}


@dataclass(frozen=True)
class Problem:
    """Sizes, dtype, score name and a seed for the tensors and the modules' parameters."""

    seed: int
    b: int
    h: int
    m: int
    n: int
    d: int
    dv: int
    dtype: torch.dtype
    score: str

    def generator(self, salt: int = 0) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 7919 + salt)

    def tensors(self, requires_grad: bool = False, h_kv: int | None = None):
        g = self.generator()
        h_kv = self.h if h_kv is None else h_kv
        q = torch.randn(self.b, self.h, self.m, self.d, generator=g, dtype=self.dtype)
        k = torch.randn(self.b, h_kv, self.n, self.d, generator=g, dtype=self.dtype)
        v = torch.randn(self.b, h_kv, self.n, self.dv, generator=g, dtype=self.dtype)
        return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))

    def modules(self, case: AlignCase):
        torch.manual_seed(self.seed)
        return make_score(self.score, self.d, self.dtype), case.build(self.d, self.dtype)

    def random_mask(self) -> Tensor:
        """Bool ``[B, 1, M, N]``, about 70% admissible; some rows may have no admissible key."""
        return torch.rand(self.b, 1, self.m, self.n, generator=self.generator(1)) < 0.7

    def key_padding(self) -> Tensor:
        """Bool ``[B, 1, 1, N]`` from random lengths in ``[0, N]``."""
        lengths = torch.randint(0, self.n + 1, (self.b,), generator=self.generator(2))
        return ak.masks.padding(lengths, self.n)

    def admissible(self, align: ak.align.Align, mask: Tensor | None) -> Tensor:
        """``[B, H, M, N]``: keys the mask and the alignment's own window admit."""
        full = torch.ones(self.b, self.h, self.m, self.n, dtype=torch.bool)
        if mask is not None:
            full = full & mask
        window = local_window_mask(align, self.m, self.n)
        return full if window is None else full & window


@st.composite
def problems(draw, scores: list[str] = SCORE_NAMES) -> Problem:
    return Problem(
        seed=draw(st.integers(0, 2**16)),
        b=draw(st.integers(1, 3)),
        h=draw(st.integers(1, 3)),
        m=draw(st.integers(1, 9)),
        n=draw(st.integers(1, 9)),
        d=draw(st.integers(1, 8)),
        dv=draw(st.integers(1, 5)),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        score=draw(st.sampled_from(scores)),
    )


def takes(case: AlignCase, backend: str, **options) -> bool:
    """Whether ``backend``'s declaration takes this alignment with these options."""
    align = on_meta(lambda: case.build(4))
    return admits(backend, ((1, 1, 2, 4),) * 3, align=align, **options)


def case_params(cases: list[AlignCase], **options) -> list:
    """``(case, backend)`` for each backend that takes the alignment with these options."""
    return with_backends(cases, lambda case, backend: takes(case, backend, **options))


def run(backend: str, q, k, v, **kwargs) -> ak.AttentionOutput:
    """``ak.attention`` on ``backend``; discards the example when the backend cannot run it."""
    assume(not backend_reasons(backend, q, k, v, **kwargs))
    return ak.attention(q, k, v, backend=backend, **kwargs)


def assume_distinct_scores(p: Problem, case: AlignCase, score, q: Tensor, k: Tensor) -> None:
    """For ranking alignments: every row's scores differ by a margin, so the order is stable."""
    if case.name not in RANKING:
        return
    with torch.no_grad():
        e = score(q, k).double()
    if e.shape[-1] > 1:
        gaps = e.sort(-1).values.diff(dim=-1)
        assume(bool((gaps > 1e-3 * (1 + e.abs().amax(-1, keepdim=True))).all()))


# --- weights form a distribution ------------------------------------------------------------------


@pytest.mark.parametrize(("case", "backend"), case_params(EVAL_CASES, return_weights=True))
def test_weights_are_a_distribution_over_admissible_keys(backend: str, case: AlignCase) -> None:
    """Weights >= 0; masked keys (and keys outside a local window) get exactly 0; for a
    normalized alignment each row with an admissible key sums to 1, other rows are all 0."""

    @SETTINGS
    @given(p=problems(), masked=st.booleans())
    def check(p: Problem, masked: bool) -> None:
        q, k, v = p.tensors()
        score, align = p.modules(case)
        mask = p.random_mask() if masked else None
        out = run(backend, q, k, v, score=score, align=align, mask=mask, return_weights=True)
        w = out.weights
        assert w.shape == (p.b, p.h, p.m, p.n)
        assert (w >= 0).all()
        admissible = p.admissible(align, mask)
        assert torch.equal(w[~admissible], torch.zeros_like(w[~admissible]))
        if not case.cls.normalized:
            return
        has_key = admissible.any(-1)
        sums = w.sum(-1)
        tolerance = 1e-6 if p.dtype == torch.float32 else 1e-12
        assert ((sums[has_key] - 1).abs() <= tolerance).all(), sums[has_key]
        assert torch.equal(sums[~has_key], torch.zeros_like(sums[~has_key]))

    check()


@pytest.mark.parametrize(("case", "backend"), case_params(NORMALIZED))
def test_context_lies_in_the_convex_hull_of_the_values(backend: str, case: AlignCase) -> None:

    @SETTINGS
    @given(p=problems(), masked=st.booleans())
    def check(p: Problem, masked: bool) -> None:
        q, k, v = p.tensors()
        score, align = p.modules(case)
        mask = p.random_mask() if masked else None
        out = run(backend, q, k, v, score=score, align=align, mask=mask)
        admissible = p.admissible(align, mask).unsqueeze(-1)  # [B, H, M, N, 1]
        values = v.unsqueeze(2)  # [B, H, 1, N, dv]
        low = values.masked_fill(~admissible, float("inf")).amin(3)  # [B, H, M, dv]
        high = values.masked_fill(~admissible, float("-inf")).amax(3)
        scale = 1 + v.abs().max().item()
        slack = (1e-5 if p.dtype == torch.float32 else 1e-12) * scale
        c = out.context
        has_key = admissible.squeeze(-1).any(-1)
        inside = (c >= low - slack) & (c <= high + slack)
        assert inside[has_key].all()
        assert torch.equal(c[~has_key], torch.zeros_like(c[~has_key]))

    check()


# --- permutations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "backend"), case_params(QUERY_ORDER_FREE))
def test_permuting_queries_permutes_outputs(backend: str, case: AlignCase) -> None:

    @SETTINGS
    @given(p=problems(), padded=st.booleans())
    def check(p: Problem, padded: bool) -> None:
        q, k, v = p.tensors()
        score, align = p.modules(case)
        mask = p.key_padding() if padded else None  # the same for every query
        perm = torch.randperm(p.m, generator=p.generator(3))
        out = run(backend, q, k, v, score=score, align=align, mask=mask)
        permuted = run(backend, q[:, :, perm], k, v, score=score, align=align, mask=mask)
        torch.testing.assert_close(permuted.context, out.context[:, :, perm], **TOLERANCE[p.dtype])

    check()


@pytest.mark.parametrize(("case", "backend"), case_params(KEY_ORDER_FREE))
def test_permuting_key_value_pairs_changes_nothing(backend: str, case: AlignCase) -> None:

    @SETTINGS
    @given(p=problems(scores=CONTENT_SCORES))
    def check(p: Problem) -> None:
        q, k, v = p.tensors()
        score, align = p.modules(case)
        assume_distinct_scores(p, case, score, q, k)
        perm = torch.randperm(p.n, generator=p.generator(4))
        out = run(backend, q, k, v, score=score, align=align)
        permuted = run(backend, q, k[:, :, perm], v[:, :, perm], score=score, align=align)
        torch.testing.assert_close(permuted.context, out.context, **TOLERANCE[p.dtype])

    check()


# --- shift invariance -----------------------------------------------------------------------------


SHIFTS = [(case, "float_mask") for case in EVAL_CASES] + [
    (case, "score_mod") for case in EVAL_CASES if case.name == "softmax"
]


def _identity_mod(s: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
    return s


SHIFT_OPTIONS = {
    "score_mod": {"score_mod": _identity_mod},
    "float_mask": {"mask": torch.zeros(2, 1)},
}


@pytest.mark.parametrize(
    ("case", "via", "backend"),
    with_backends(SHIFTS, lambda case, via, backend: takes(case, backend, **SHIFT_OPTIONS[via])),
)
def test_adding_a_constant_to_a_row_of_scores_changes_nothing(
    backend: str, case: AlignCase, via: str
) -> None:
    """Every alignment here is shift-invariant per row (softmax, sparsemax and entmax by
    definition; top-k, hard and local ones through them; reinforced's policy ignores the scores)."""

    @SETTINGS
    @given(p=problems())
    def check(p: Problem) -> None:
        q, k, v = p.tensors()
        score, align = p.modules(case)
        assume_distinct_scores(p, case, score, q, k)
        shift = torch.rand(p.b, p.h, p.m, generator=p.generator(5), dtype=p.dtype) * 10 - 5
        if via == "float_mask":
            options = {"mask": shift.unsqueeze(-1)}  # [B, H, M, 1]: one constant per row
        else:
            options = {"score_mod": lambda s, b, h, i, j: s + shift[b, h, i].to(s.dtype)}
        out = run(backend, q, k, v, score=score, align=align)
        shifted = run(backend, q, k, v, score=score, align=align, **options)
        tolerance = {"rtol": 1e-4, "atol": 1e-4} if p.dtype == torch.float32 else TOLERANCE[p.dtype]
        torch.testing.assert_close(shifted.context, out.context, **tolerance)

    check()


# --- causality ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "backend"), case_params(EVAL_CASES, causal=True))
def test_causal_outputs_do_not_depend_on_the_future(backend: str, case: AlignCase) -> None:
    """Perturbing keys/values after position i' = i + N - M leaves queries 0..i bitwise equal,
    and their gradient with respect to those keys/values is exactly zero."""

    @SETTINGS
    @given(p=problems(), row=st.integers(0, 8))
    def check(p: Problem, row: int) -> None:
        i = min(row, p.m - 1)
        future = max(i + p.n - p.m + 1, 0)  # first key query i may not see
        q, k, v = p.tensors(requires_grad=True)
        score, align = p.modules(case)
        out = run(backend, q, k, v, score=score, align=align, causal=True)
        g = torch.randn(out.context.shape, generator=p.generator(6), dtype=p.dtype)
        past = (out.context[:, :, : i + 1] * g[:, :, : i + 1]).sum()
        _, grad_k, grad_v = grads(past, (q, k, v))
        assert torch.equal(grad_k[:, :, future:], torch.zeros_like(grad_k[:, :, future:]))
        assert torch.equal(grad_v[:, :, future:], torch.zeros_like(grad_v[:, :, future:]))

        k2, v2 = k.detach().clone(), v.detach().clone()
        k2[:, :, future:] += 3 * torch.randn(k2[:, :, future:].shape, dtype=p.dtype)
        v2[:, :, future:] -= 3 * torch.randn(v2[:, :, future:].shape, dtype=p.dtype)
        perturbed = run(backend, q.detach(), k2, v2, score=score, align=align, causal=True)
        assert torch.equal(perturbed.context[:, :, : i + 1], out.context[:, :, : i + 1].detach())

    check()


# --- masked keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "backend"), case_params(EVAL_CASES, mask=torch.ones(1, 1, 1, 2, dtype=torch.bool))
)
def test_masked_keys_get_zero_gradient(backend: str, case: AlignCase) -> None:

    @SETTINGS
    @given(p=problems())
    def check(p: Problem) -> None:
        q, k, v = p.tensors(requires_grad=True)
        score, align = p.modules(case)
        mask = p.key_padding()
        out = run(backend, q, k, v, score=score, align=align, mask=mask)
        g = torch.randn(out.context.shape, generator=p.generator(7), dtype=p.dtype)
        _, grad_k, grad_v = grads((out.context * g).sum(), (q, k, v))
        masked = ~mask[:, 0, 0]  # [B, N]
        for grad in (grad_k, grad_v):
            hidden = grad.permute(0, 2, 1, 3)[masked]  # [masked keys, H, d]
            assert torch.equal(hidden, torch.zeros_like(hidden))

    check()


# --- grouped-query attention ----------------------------------------------------------------------


@pytest.mark.parametrize(("case", "backend"), case_params(EVAL_CASES))
def test_grouped_query_attention_equals_repeated_heads(backend: str, case: AlignCase) -> None:

    @SETTINGS
    @given(p=problems(), h_kv=st.integers(1, 3), groups=st.integers(1, 3), causal=st.booleans())
    def check(p: Problem, h_kv: int, groups: int, causal: bool) -> None:
        p = Problem(**{**p.__dict__, "h": h_kv * groups})
        q, k, v = p.tensors(h_kv=h_kv)
        score, align = p.modules(case)
        grouped = run(backend, q, k, v, score=score, align=align, causal=causal)
        repeated = run(
            backend,
            q,
            k.repeat_interleave(groups, dim=1),
            v.repeat_interleave(groups, dim=1),
            score=score,
            align=align,
            causal=causal,
        )
        assert grouped.context.shape == (p.b, p.h, p.m, p.dv)
        torch.testing.assert_close(grouped.context, repeated.context, **TOLERANCE[p.dtype])

    check()
