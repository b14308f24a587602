"""``attention()``: one call for every score and alignment; the engine picks how to compute it.

Backends are declared as data (``backend.py``, after xFormers' dispatcher): each names itself,
declares what it supports, and runs a call. The engine's loop walks the backends allowed here in
the order of :data:`BACKENDS` (fastest first) and runs the first that does not decline the call;
a backend that declines says why, and no backend hands a call to another. If a backend declines
only while running (``Declined``: a kernel that failed to compile), the loop goes on to the next.
When none is left, one ``ValueError`` lists every allowed backend's reasons. No backend changes
the result to gain speed — every one is tested against the float64 materialised formula.

Which backends are allowed: all of them, or those named by ``with backends(...):`` (a scope,
like ``torch.nn.attention.sdpa_kernel``), or the one named by ``attention(..., backend=)`` for
one call.

Shapes: B batch, H heads, M queries, N keys, D/Dv feature sizes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit.core.additive_kernel import (
    additive_kernel_attention,
    additive_kernel_limits,
    additive_kernel_memory,
    additive_kernel_preferences,
)
from attnkit.core.align import Align, Entmax15, Softmax, Sparsemax
from attnkit.core.backend import Backend, Declined, needs_gradients
from attnkit.core.call import AttentionCall, AttentionOutput, prepare
from attnkit.core.chunked import chunked_attention, chunked_memory
from attnkit.core.dense import dense_attention, dense_memory
from attnkit.core.flex import FLEX_DTYPES, flex_attention_forward, flex_limits, flex_memory
from attnkit.core.hooks import observed, run_hooked
from attnkit.core.masks import MaskMod, ScoreMod
from attnkit.core.memory import (
    BUDGET_VARIABLE,
    SMALL,
    default_budget,
    format_bytes,
    parse_budget,
)
from attnkit.core.reference import reference_attention, reference_memory
from attnkit.core.registry import Registry
from attnkit.core.scores import Score
from attnkit.core.sdpa import sdpa_attention, sdpa_memory
from attnkit.core.sparse_rows import sparse_rows_attention, sparse_rows_limits, sparse_rows_memory
from attnkit.core.tiled import tiled_attention, tiled_memory

#: the backends, registered in the order the engine tries them (the fastest that can run a call
#: first); a backend registered later (``BACKENDS.register(name)(Backend(...))``) is tried last
BACKENDS: Registry[Backend] = Registry("backend")
for _backend in [
    Backend(
        "sdpa",
        "torch.nn.functional.scaled_dot_product_attention (fused kernels)",
        sdpa_attention,
        memory=sdpa_memory,
        dot_scores_only=True,
        aligns=(Softmax,),
        multi_dimensional=False,
        weights=False,
        lse=False,
        score_mod=False,
        summary=False,
        half_float_mask=False,
        nonfinite=False,
    ),
    Backend(
        "dense",
        "weights on demand: scores by one GEMM into the weights' buffer, softmax, one GEMM",
        dense_attention,
        memory=dense_memory,
        dot_scores_only=True,
        aligns=(Softmax,),
        multi_dimensional=False,
        only_weights=True,
        score_mod=False,
        nonfinite=False,
    ),
    Backend(
        "flex",
        "compiled FlexAttention (torch.compile: C++ on the CPU, Triton on CUDA), forward only: "
        "dot-product scores (or act() of one) with score_mod, masks and causal",
        flex_attention_forward,
        memory=flex_memory,
        aligns=(Softmax,),
        multi_dimensional=False,
        weights=False,
        lse=False,
        dropout=False,
        summary=False,
        nonfinite=False,
        dtypes=FLEX_DTYPES,
        gradients=False,
        limits=flex_limits,
    ),
    Backend(
        "additive",
        "the additive score's blocks compiled by torch.compile (C++ on the CPU, Triton on "
        "CUDA): online softmax, backward recomputing tanh per block",
        additive_kernel_attention,
        memory=additive_kernel_memory,
        aligns=(Softmax,),
        multi_dimensional=False,
        weights=False,
        score_mod=False,
        dropout=False,
        summary=False,
        nonfinite=False,
        limits=additive_kernel_limits,
        preferences=additive_kernel_preferences,
    ),
    Backend(
        "tiled",
        "FlashAttention's online softmax over blocks, backward by recomputation: every score",
        tiled_attention,
        memory=tiled_memory,
        aligns=(Softmax,),
        multi_dimensional=False,
        dropped_weights=False,
    ),
    Backend(
        "sparse_rows",
        "sparsemax / 1.5-entmax of dot-product scores by blocks of rows, backward from the "
        "saved thresholds",
        sparse_rows_attention,
        memory=sparse_rows_memory,
        dot_scores_only=True,
        aligns=(Sparsemax, Entmax15),
        multi_dimensional=False,
        weights=False,
        lse=False,
        score_mod=False,
        dropout=False,
        summary=False,
        nonfinite=False,
        limits=sparse_rows_limits,
    ),
    Backend(
        "chunked",
        "the materialised formula over blocks of queries: every alignment, multi-dimensional",
        chunked_attention,
        memory=chunked_memory,
    ),
    Backend(
        "reference",
        "the materialised formula, eq. (2)-(4): every score, alignment and option",
        reference_attention,
        memory=reference_memory,
        traceable=True,
    ),
]:
    BACKENDS.register(_backend.name)(_backend)


def backend_named(name: str) -> Backend:
    """The registered backend called ``name``; ``ValueError`` listing the valid names if none."""
    if not isinstance(name, str):
        raise TypeError(f"a backend is named by a string, got {type(name).__name__}")
    for backend in BACKENDS.values():
        if backend.name == name:
            return backend
    valid = ", ".join(BACKENDS.names())
    raise ValueError(f"unknown backend {name!r}; expected one of: {valid}")


# --- the backend scope ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scope:
    allowed: tuple[Backend, ...] | None  # None: every backend
    budget: int | None  # bytes; None: the default budget (memory.py)


_SCOPE: ContextVar[_Scope | None] = ContextVar("attnkit_backends", default=None)
# Scopes open in any context of the process. A plain global, read before the ContextVar: while it
# is 0 no context has a scope, and ``torch.compile`` (which cannot trace ContextVar.get) guards on
# its value, so code compiled with no scope open is recompiled when one opens (as in hooks.py).
_OPEN_SCOPES = 0
_OPEN_LOCK = threading.Lock()


@contextmanager
def backends(*names: str, memory_budget: int | str | None = None) -> Iterator[None]:
    """Inside this scope the engine picks only from the backends ``names``, and keeps each
    call's predicted peak memory within ``memory_budget``.

    The backends are tried in the engine's order (:data:`BACKENDS`, fastest first), whatever
    order they are named in, and the first that does not decline a call and whose predicted peak
    fits the budget runs it (if every one that takes the call exceeds the budget, the one
    predicted to need least runs); when each declines, the call raises one ``ValueError`` listing
    every named backend's reasons. ``attention(..., backend="x")`` is the scope
    ``backends("x")`` for one call. A scope replaces what it sets of an enclosing one (the names,
    the budget) and keeps the rest. The previous choice is restored when the scope ends (a
    ``ContextVar``, reset in ``finally``, as ``torch.nn.attention.sdpa_kernel``), so the scope
    belongs to this thread or asyncio task only.

    Args:
        names: backend names (``"sdpa"``, ``"dense"``, ``"flex"``, ``"tiled"``,
            ``"sparse_rows"``, ``"chunked"``, ``"reference"``); none keeps the enclosing
            choice (all backends outside any scope).
        memory_budget: bytes, a size like ``"2GiB"`` or a percentage of the available memory
            like ``"40%"``; ``None`` keeps the enclosing budget (outside any scope: the
            environment variable ``ATTNKIT_MEMORY_BUDGET``, else half the available memory).

    Yields:
        Nothing: the choice holds inside the ``with`` block and is restored after it.

    Raises:
        ValueError: an unknown name (listing the valid ones), a bad budget, or neither names nor
            a budget.

    Example::

        >>> q = torch.randn(1, 2, 5, 8)
        >>> with ak.backends("tiled", "reference"):
        ...     out = ak.attention(q, q, q)                      # tiled: sdpa is not allowed
        ...     top = ak.attention(q, q, q, align="topk")        # reference: tiled runs softmax
        >>> with ak.backends(memory_budget="4GiB"):
        ...     out = ak.attention(q, q, q, return_weights=True)
    """
    global _OPEN_SCOPES
    if not names and memory_budget is None:
        valid = ", ".join(BACKENDS.names())
        raise ValueError("backends() needs backend names or a memory_budget; backends: " + valid)
    outer = _SCOPE.get() if _OPEN_SCOPES else None
    allowed = None if outer is None else outer.allowed
    if names:
        named = {backend_named(name).name for name in names}
        allowed = tuple(b for b in BACKENDS.values() if b.name in named)
    budget = None if outer is None else outer.budget
    if memory_budget is not None:
        budget = parse_budget(memory_budget)
    token = _SCOPE.set(_Scope(allowed, budget))
    with _OPEN_LOCK:
        _OPEN_SCOPES += 1
    try:
        yield
    finally:
        with _OPEN_LOCK:
            _OPEN_SCOPES -= 1
        _SCOPE.reset(token)


def allowed_backends(backend: str | None = None) -> tuple[Backend, ...]:
    """The backends a call may run on here, in the engine's order: ``(backend,)`` when one is
    named for the call, else those of the innermost :func:`backends` scope, else all."""
    if backend is not None:
        return (backend_named(backend),)
    if _OPEN_SCOPES:
        scope = _SCOPE.get()
        if scope is not None and scope.allowed is not None:
            return scope.allowed
    return tuple(BACKENDS.values())


def memory_budget(call: AttentionCall | None = None) -> int:
    """The bytes a call may use here: the innermost :func:`backends` scope's
    ``memory_budget``, else ``ATTNKIT_MEMORY_BUDGET``, else half the memory available on the
    call's device (``attnkit.core.memory``)."""
    budget = _scope_budget()
    return budget if budget is not None else default_budget(None if call is None else call.q.device)


def _scope_budget() -> int | None:
    """The innermost :func:`backends` scope's ``memory_budget``, or ``None``."""
    if _OPEN_SCOPES:
        scope = _SCOPE.get()
        if scope is not None:
            return scope.budget
    return None


def _budget_set() -> bool:
    """Whether a scope or ``ATTNKIT_MEMORY_BUDGET`` sets the budget; otherwise it is a share of
    the free memory, which a call of at most ``SMALL`` bytes is taken to fit unasked."""
    return _scope_budget() is not None or bool(os.environ.get(BUDGET_VARIABLE))


# --- the loop ------------------------------------------------------------------------------------


def _refusal(passed: list[tuple[str, list[str]]]) -> ValueError:
    """The one error for a call that no allowed backend runs, with every backend's reasons."""
    if len(passed) == 1:
        name, reasons = passed[0]
        return ValueError(f"backend {name!r} cannot run this call: " + "; ".join(reasons))
    parts = " ".join(f"[{name}] " + "; ".join(reasons) + "." for name, reasons in passed)
    names = ", ".join(name for name, _ in passed)
    return ValueError(f"no backend allowed here ({names}) can run this call: {parts}")


def _first(
    call: AttentionCall,
    candidates: tuple[Backend, ...],
    forced: bool,
    passed: list[tuple[str, list[str]]],
    after: int = -1,
) -> Backend:
    """The first of ``candidates`` past index ``after`` that does not decline ``call`` and whose
    predicted peak memory fits the budget; the reasons of those passed over are appended to
    ``passed``. When every one that takes the call exceeds the budget, the one predicted to need
    least; raises when every one declines."""
    budget: int | None = None
    over: list[tuple[int, Backend]] = []
    for candidate in candidates[after + 1 :]:
        reasons = candidate.decline(call, forced)
        if reasons is None:
            if torch.compiler.is_compiling():  # only the traceable reference takes the call
                return candidate
            peak = candidate.peak_memory(call)
            if peak <= SMALL and not _budget_set():  # no need to ask how much is free
                return candidate
            budget = memory_budget(call) if budget is None else budget
            if peak <= budget:
                return candidate
            reasons = [
                f"its predicted peak memory {format_bytes(peak)} exceeds the budget "
                f"{format_bytes(budget)}"
            ]
            over.append((peak, candidate))
        passed.append((candidate.name, reasons))
    if over:  # each exceeds the budget: the least hungry runs
        smallest = min(over, key=lambda item: item[0])[1]
        passed[:] = [entry for entry in passed if entry[0] != smallest.name]
        return smallest
    raise _refusal(passed)


def _run_from(
    call: AttentionCall,
    candidates: tuple[Backend, ...],
    forced: bool,
    chosen: Backend,
    passed: list[tuple[str, list[str]]],
) -> tuple[Backend, AttentionOutput]:
    """Run ``call`` on ``chosen``; while the backend that runs declines (``Declined``), on the
    next of ``candidates`` that does not decline it. ``(the backend that computed, output)``."""
    while True:
        out = chosen.run(call)
        if not isinstance(out, Declined):
            return chosen, out
        passed.append((chosen.name, list(out.reasons)))
        index = next((i for i, b in enumerate(candidates) if b is chosen), len(candidates))
        chosen = _first(call, candidates, forced, passed, index)


def choose_backend(call: AttentionCall, backend: str | None = None) -> Backend:
    """The backend the engine picks for ``call``: the first allowed one (``backend`` if
    given) that does not decline it. Raises ``ValueError`` with every reason when none fits."""
    candidates = allowed_backends(backend)
    return _first(call, candidates, len(candidates) == 1, [])


def compute(
    call: AttentionCall, backend: str | None = None, chosen: Backend | None = None
) -> tuple[Backend, AttentionOutput]:
    """Compute ``call`` on the allowed backends (``backend`` if given): from ``chosen`` if
    given (the engine already picked it: its declaration is not asked again), else from the
    first that does not decline. Returns the backend that computed the output, and the output
    (in canonical 4-D form)."""
    candidates = allowed_backends(backend)
    forced = len(candidates) == 1
    passed: list[tuple[str, list[str]]] = []
    if chosen is None:
        chosen = _first(call, candidates, forced, passed)
    return _run_from(call, candidates, forced, chosen, passed)


def backend_reasons(call: AttentionCall) -> list[tuple[str, list[str]]]:
    """For each backend in order, the reasons it declines ``call`` (empty list = it runs it)."""
    return [(b.name, b.decline(call) or []) for b in BACKENDS.values()]


def explain(q: Tensor, k: Tensor, v: Tensor, **options: Any) -> str:
    """Which backend :func:`attention` would run for these arguments, and why each backend before
    it was passed over. Takes exactly the arguments of :func:`attention`, and honours the
    :func:`backends` scope it is called in; computes no attention.

    On real tensors the reasons read from the values are checked too (NaN, infinities, scores
    that may overflow), so the backend named is the one that computes the call. On the ``meta``
    device (no values) the inputs are taken to be finite. Only a backend that declines while
    running (a kernel that fails to compile, or a compiled kernel giving a non-finite result)
    can make another compute the call; a kernel that failed once is declined here from then on.

    Args:
        q: queries ``[B, H, M, D]`` (or ``[B, M, D]``).
        k: keys ``[B, H, N, D]`` (or ``[B, N, D]``).
        v: values ``[B, H, N, Dv]`` (or ``[B, N, Dv]``).
        **options: the keyword arguments of :func:`attention` (``score``, ``align``, ``mask``,
            ``return_weights``, ``backend``, ...).

    Returns:
        A report: the call's sizes, the backend chosen, and why each earlier backend was not.

    Example::

        >>> q = torch.empty(1, 8, 4096, 64, device="meta")
        >>> print(ak.explain(q, q, q, score="euclidean", return_weights=True))
        attention over B=1 H=8 M=4096 N=4096, d_q=64, d_v=64, torch.float32, score=euclidean, align=softmax
        runs on: tiled — ...
        in the order tried: each backend's predicted peak memory (forward; budget ...) and why ...
          sdpa        8.12 MiB  passed over sdpa: score 'euclidean' is not a dot product of ...
          dense        520 MiB  passed over dense: score 'euclidean' is not a dot product of ...
          ...
          tiled        560 MiB  runs
          sparse_rows 32.2 MiB  not tried: tiled runs before it
          ...
    """
    backend = options.pop("backend", None)
    call = prepare(q, k, v, **options)
    candidates = allowed_backends(backend)
    passed: list[tuple[str, list[str]]] = []
    chosen = _first(call, candidates, len(candidates) == 1, passed)
    b, h, m, n = call.shape
    peaks = {x.name: format_bytes(x.peak_memory(call)) for x in candidates}
    width = max(len(text) for text in peaks.values())
    lines = [
        f"attention over B={b} H={h} M={m} N={n}, d_q={call.q.shape[-1]}, d_v={call.v.shape[-1]}, "
        f"{call.q.dtype}, score={call.score.registry_name}, align={call.align.registry_name}",
        f"runs on: {chosen.name} — {chosen.description}",
    ]
    outside = [other.name for other in BACKENDS.values() if other not in candidates]
    if outside:
        lines.append("  not allowed here (backends scope or backend=): " + ", ".join(outside))
    reasons = dict(passed)
    passes = "forward + backward" if needs_gradients(call) else "forward"
    lines.append(
        f"in the order tried: each backend's predicted peak memory ({passes}; budget "
        f"{format_bytes(memory_budget(call))}) and why it was passed over"
    )
    for name, peak in peaks.items():
        if name == chosen.name:
            verdict = "runs"
        elif name in reasons:
            verdict = f"passed over {name}: " + "; ".join(reasons[name])
        else:
            verdict = f"not tried: {chosen.name} runs before it"
        lines.append(f"  {name:<12}{peak:>{width}}  {verdict}")
    return "\n".join(lines)


def _to_user_shapes(call: AttentionCall, out: AttentionOutput) -> AttentionOutput:
    if not call.three_d:
        return out

    def squeeze(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.squeeze(1)

    return AttentionOutput(
        context=out.context.squeeze(1),
        weights=squeeze(out.weights),
        lse=squeeze(out.lse),
        log_prob=squeeze(out.log_prob),
        summary=squeeze(out.summary),
    )


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score: str | Score = "scaled_dot",
    align: str | Align = "softmax",
    mask: Tensor | None = None,
    causal: bool = False,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
    return_weights: bool = False,
    return_lse: bool = False,
    summary: str | None = None,
    weights_after_dropout: bool = False,
    backend: str | None = None,
) -> AttentionOutput:
    """The general attention module (survey eq. 2-4; multi-dimensional eq. 30-32).

    Args:
        q: queries ``[B, H, M, d_q]`` or ``[B, M, d_q]``.
        k: keys ``[B, H_kv, N, d_k]`` or ``[B, N, d_k]``; ``H_kv`` divides ``H`` (grouped-query
            attention: each key/value head serves ``H / H_kv`` query heads).
        v: values ``[B, H_kv, N, d_v]`` or ``[B, N, d_v]``.
        score: a name (``"additive"``, ``"dot"``, ``"scaled_dot"``, ``"general"``,
            ``"biased_general"``, ``"activated_general"``, ``"cosine"``, ``"euclidean"``,
            ``"location"``) or an ``ak.scores.Score`` (required for scores with parameters).
        align: a name (``"softmax"``, ``"hard"``, ``"local_monotonic"``, ``"local_predictive"``,
            ``"sparsemax"``, ``"entmax15"``, ``"topk"``, ``"reinforced"``) or an ``ak.align.Align``.
        mask: bool (True = may attend) or float (added to the scores; ``-inf`` removes a key),
            broadcastable to ``[B, H, M, N]`` (``[B, M, N]`` for 3-D inputs).
        causal: query ``i`` attends keys ``j <= i + N - M`` (bottom-right aligned); combined with
            ``mask`` and ``mask_mod`` by logical and.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` (FlexAttention's signature), applied
            after the score function and the float mask.
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (FlexAttention's signature).
        scale: multiplies the scores; for ``scaled_dot`` it replaces ``1/sqrt(d_k)``.
        dropout: probability of zeroing each attention weight (drawn from torch's RNG, so
            reproducible with ``torch.manual_seed``). Applied whenever > 0: modules pass 0 in eval.
        return_weights: also return the attention weights.
        return_lse: the result must carry ``lse`` (softmax alignment), e.g. for
            :func:`attnkit.merge_attention`; backends that cannot give it are passed over.
        summary: ``"column_sum"`` ``[B, H, N]``, ``"entropy"`` or ``"argmax"`` ``[B, H, M]`` of the
            weights, without returning them (the tiled backend computes them in its pass).
        weights_after_dropout: with ``return_weights`` and ``dropout > 0``, return the weights
            after dropout (zeroed and rescaled by ``1 / (1 - dropout)``: the ones that
            multiplied ``v``), as ``torch.nn.MultiheadAttention`` does; default: before dropout.
            Computed on the materialised paths (one ``F.dropout`` over the whole weights).
        backend: run on this backend only (``"sdpa"``, ``"reference"``, ...): the scope
            :func:`backends` for this one call; raises with its reasons if it declines the call.

    Returns:
        :class:`AttentionOutput` with ``context [B, H, M, d_v]`` (3-D in, 3-D out), and
        ``weights``, ``lse``, ``log_prob`` as documented there.

    Non-finite numbers (the same on every backend, score and alignment; docs/reliability.md):

    - a query with no admissible key gets a zero context, zero weights and zero gradients (never
      NaN), whatever its query holds;
    - NaN in an admissible input reaches what the formula computes from it: NaN in ``q_i`` makes
      row ``i`` NaN (context, every weight, ``lse``); NaN in an admissible key, the rows whose
      alignment reads its score; NaN in ``v_jf``, feature ``f`` of the rows admitting key ``j``;
    - masked-out keys are absent: NaN or infinities in their keys, values or float-mask entries
      reach no output (and, for keys no query may attend, no gradient);
    - a ``+inf`` admissible score: the row's weight is shared equally by its ``+inf`` keys and
      ``lse = +inf`` — the limit of softmax, sparsemax and 1.5-entmax as those scores grow
      together; its weights are constant in the scores (zero gradient through them).

    Example::

        >>> import torch, attnkit as ak
        >>> q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 7, 16), torch.randn(2, 4, 7, 32)
        >>> out = ak.attention(q, k, v, causal=True, return_weights=True)
        >>> out.context.shape, out.weights.shape
        (torch.Size([2, 4, 5, 32]), torch.Size([2, 4, 5, 7]))
    """
    # The keyword signature is written out twice on purpose: here, as the documented public one
    # (IDEs, type checkers, help()), and in ``prepare``, the one validator every path uses;
    # tests/core/test_engine_signature.py keeps the two identical.
    call = prepare(
        q,
        k,
        v,
        score=score,
        align=align,
        mask=mask,
        causal=causal,
        score_mod=score_mod,
        mask_mod=mask_mod,
        scale=scale,
        dropout=dropout,
        return_weights=return_weights,
        return_lse=return_lse,
        summary=summary,
        weights_after_dropout=weights_after_dropout,
    )
    candidates = allowed_backends(backend)
    forced = len(candidates) == 1
    passed: list[tuple[str, list[str]]] = []
    chosen = _first(call, candidates, forced, passed)
    if observed():  # hooks watch this context (attnkit.core.hooks): they compute the call
        return _to_user_shapes(call, run_hooked(call, chosen, compute, backend))
    return _to_user_shapes(call, _run_from(call, candidates, forced, chosen, passed)[1])
