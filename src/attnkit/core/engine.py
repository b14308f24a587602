"""``attention()``: one call for every score and alignment; the engine picks how to compute it.

Backends are declared as data (STYLE.md, after xFormers' dispatch): each names itself, declares
what it supports, and runs a call; why it cannot run a given call is derived from the declaration. The engine takes the first backend with no reasons against
it; forcing a backend that cannot run raises with its reasons. No backend changes the result to
gain speed — every one is tested against the float64 materialised formula.

Einsum letters / shapes: B batch, H heads, M queries, N keys, d_q/d_k/d_v feature sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit.core.align import Align, Entmax15, Softmax, Sparsemax
from attnkit.core.call import AttentionCall, AttentionOutput, prepare
from attnkit.core.chunked import chunked_attention
from attnkit.core.dense import dense_attention
from attnkit.core.flex import FLEX_DTYPES, flex_attention_forward, flex_limits
from attnkit.core.hooks import observed, run_hooked
from attnkit.core.masks import MaskMod, ScoreMod
from attnkit.core.reference import reference_attention
from attnkit.core.scores import Score
from attnkit.core.sdpa import sdpa_attention
from attnkit.core.sparse_rows import sparse_rows_attention
from attnkit.core.tiled import captured_tensors, tiled_attention

ALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class Backend:
    """A way to compute attention, with what it supports declared as data.

    ``reasons(call)`` derives from the declaration why the backend cannot run a call, so the
    dispatcher, ``explain()``, ``attnkit info`` and the tests all read the same facts.
    """

    name: str
    description: str
    run: Callable[[AttentionCall], AttentionOutput]
    dot_scores_only: bool = False  # only scores whose pairwise part is a dot product
    aligns: tuple[type[Align], ...] | None = None  # None: every alignment
    multi_dimensional: bool = True
    weights: bool = True
    # chosen automatically only for calls that ask for the weights (it writes them); forced, any
    only_weights: bool = False
    dropped_weights: bool = True  # can return the weights after dropout (whole rows dropped)
    lse: bool = True  # can return the log-sum-exp (softmax alignment)
    score_mod: bool = True
    dropout: bool = True
    summary: bool = True
    half_float_mask: bool = True  # adds a float mask to half-precision scores exactly
    dtypes: tuple[torch.dtype, ...] = ALL_DTYPES
    devices: tuple[str, ...] | None = None  # device types; None: any
    # runs under torch.compile: no Python branch on tensor values (the others read values to
    # choose a kernel or skip blocks, which dynamo cannot trace)
    traceable: bool = False
    gradients: bool = True  # computes gradients (else passed over when autograd needs them)
    # reasons only the backend can judge (e.g. which scores a compiled kernel expresses)
    limits: Callable[[AttentionCall], list[str]] | None = None

    def reasons(self, call: AttentionCall, forced: bool = False) -> list[str]:
        """Why this backend cannot compute ``call`` (empty when it can); ``forced``: the caller
        named it, so preferences that only guide the automatic choice do not count."""
        why = []
        if self.dot_scores_only and not call.score.pairwise_is_dot:
            why.append(f"score {call.score.registry_name!r} is not a dot product of features")
        if self.aligns is not None and type(call.align) not in self.aligns:
            names = ", ".join(repr(a.registry_name) for a in self.aligns)
            why.append(f"align {call.align.registry_name!r} is not {names} (needs whole rows)")
        if not self.multi_dimensional and call.score.value_features is not None:
            why.append("multi-dimensional scores need whole rows per feature")
        if not self.weights and call.return_weights:
            why.append("weights were asked for")
        if self.only_weights and not call.return_weights and not forced:
            why.append(
                "no weights were asked for (it would write a [B, H, M, N] tensor for nothing)"
            )
        dropped = call.return_weights and call.weights_after_dropout and call.dropout > 0
        if not self.dropped_weights and dropped:
            why.append("the weights after dropout were asked for")
        if not self.lse and call.return_lse:
            why.append("lse was asked for")
        if not self.score_mod and call.score_mod is not None:
            why.append("a score_mod was given")
        if not self.dropout and call.dropout > 0:
            why.append("dropout > 0 is not supported")
        if not self.summary and call.summary is not None:
            why.append(f"summary {call.summary!r} was asked for")
        half = call.q.dtype in (torch.float16, torch.bfloat16)
        if not self.half_float_mask and half and call.bias is not None:
            why.append("a float mask with half-precision inputs would be added in half precision")
        if call.q.dtype not in self.dtypes:
            why.append(f"dtype {call.q.dtype} is not supported")
        if self.devices is not None and call.q.device.type not in self.devices:
            why.append(f"device {call.q.device.type!r} is not supported")
        if not self.traceable and torch.compiler.is_compiling():
            why.append("torch.compile is tracing (this backend branches on tensor values)")
        if not self.gradients and needs_gradients(call):
            why.append(
                "gradients are needed (autograd is on and an input or parameter requires grad)"
            )
        if self.limits is not None:
            why.extend(self.limits(call))
        return why


def needs_gradients(call: AttentionCall) -> bool:
    """Whether autograd would differentiate ``call``: grad mode is on and ``q``, ``k``, ``v``,
    the float mask, the score's parameters or a tensor a mod captures requires grad."""
    if not torch.is_grad_enabled():
        return False
    tensors = [call.q, call.k, call.v, call.bias, *call.score.parameters()]
    tensors += captured_tensors(call.score_mod) + captured_tensors(call.mask_mod)
    return any(t is not None and t.requires_grad for t in tensors)


BACKENDS: list[Backend] = [
    Backend(
        "sdpa",
        "torch.nn.functional.scaled_dot_product_attention (fused kernels)",
        sdpa_attention,
        dot_scores_only=True,
        aligns=(Softmax,),
        multi_dimensional=False,
        weights=False,
        lse=False,
        score_mod=False,
        summary=False,
        half_float_mask=False,
    ),
    Backend(
        "dense",
        "weights on demand: scores by one GEMM into the weights' buffer, softmax, one GEMM",
        dense_attention,
        dot_scores_only=True,
        aligns=(Softmax,),
        multi_dimensional=False,
        only_weights=True,
        score_mod=False,
    ),
    Backend(
        "flex",
        "compiled FlexAttention (torch.compile: C++ on the CPU, Triton on CUDA), forward only: "
        "dot-product scores (or act() of one) with score_mod, masks and causal",
        flex_attention_forward,
        aligns=(Softmax,),
        multi_dimensional=False,
        weights=False,
        lse=False,
        dropout=False,
        summary=False,
        dtypes=FLEX_DTYPES,
        gradients=False,
        limits=flex_limits,
    ),
    Backend(
        "tiled",
        "FlashAttention's online softmax over blocks, backward by recomputation: every score",
        tiled_attention,
        aligns=(Softmax,),
        multi_dimensional=False,
        dropped_weights=False,
    ),
    Backend(
        "sparse_rows",
        "sparsemax / 1.5-entmax of dot-product scores by blocks of rows, backward from the "
        "saved thresholds",
        sparse_rows_attention,
        dot_scores_only=True,
        aligns=(Sparsemax, Entmax15),
        multi_dimensional=False,
        weights=False,
        lse=False,
        score_mod=False,
        dropout=False,
        summary=False,
    ),
    Backend(
        "chunked",
        "the materialised formula over blocks of queries: every alignment, multi-dimensional",
        chunked_attention,
    ),
    Backend(
        "reference",
        "the materialised formula, eq. (2)-(4): every score, alignment and option",
        reference_attention,
        traceable=True,
    ),
]


def backend_named(name: str) -> Backend:
    """The registered backend called ``name``."""
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    valid = ", ".join(b.name for b in BACKENDS)
    raise ValueError(f"unknown backend {name!r}; expected one of: {valid}")


def choose_backend(call: AttentionCall, backend: str | None = None) -> Backend:
    """The backend that runs ``call``: ``backend`` if it can, else the first that fits."""
    if backend is not None:
        chosen = backend_named(backend)
        reasons = chosen.reasons(call, forced=True)
        if reasons:
            raise ValueError(f"backend {backend!r} cannot run this call: " + "; ".join(reasons))
        return chosen
    for candidate in BACKENDS:
        if not candidate.reasons(call):
            return candidate
    raise AssertionError("the reference backend takes every call")  # pragma: no cover


def backend_reasons(call: AttentionCall) -> list[tuple[str, list[str]]]:
    """For each backend in order, the reasons it cannot run ``call`` (empty list = it can)."""
    return [(b.name, b.reasons(call)) for b in BACKENDS]


def explain(q: Tensor, k: Tensor, v: Tensor, **options: Any) -> str:
    """Which backend :func:`attention` would run for these arguments, and why each backend before
    it was passed over. Takes exactly the arguments of :func:`attention`; computes nothing (tensors
    on the ``meta`` device are fine).

    Args:
        q: queries ``[B, H, M, d_q]`` (or ``[B, M, d_q]``).
        k: keys ``[B, H, N, d_k]`` (or ``[B, N, d_k]``).
        v: values ``[B, H, N, d_v]`` (or ``[B, N, d_v]``).
        **options: the keyword arguments of :func:`attention` (``score``, ``align``, ``mask``,
            ``return_weights``, ``backend``, ...).

    Returns:
        A report: the call's sizes, the backend chosen, and why each earlier backend was not.

    Example::

        >>> q = torch.empty(1, 8, 4096, 64, device="meta")
        >>> print(ak.explain(q, q, q, score="euclidean", return_weights=True))
        attention over B=1 H=8 M=4096 N=4096, d_q=64, d_v=64, torch.float32, score=euclidean, align=softmax
        runs on: tiled — ...
          passed over sdpa: score 'euclidean' is not a dot product of features; weights were asked for
          passed over dense: score 'euclidean' is not a dot product of features
          passed over flex: ...
    """
    backend = options.pop("backend", None)
    call = prepare(q, k, v, **options)
    chosen = choose_backend(call, backend)
    b, h, m, n = call.shape
    lines = [
        f"attention over B={b} H={h} M={m} N={n}, d_q={call.q.shape[-1]}, d_v={call.v.shape[-1]}, "
        f"{call.q.dtype}, score={call.score.registry_name}, align={call.align.registry_name}",
        f"runs on: {chosen.name} — {chosen.description}",
    ]
    for name, reasons in backend_reasons(call):
        if name == chosen.name:
            break
        lines.append(f"  passed over {name}: " + "; ".join(reasons))
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
        backend: force a backend (``"sdpa"``, ``"reference"``); raises if it cannot run the call.

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
    chosen = choose_backend(call, backend)
    if observed():  # hooks watch this context (attnkit.core.hooks): they compute the call
        return _to_user_shapes(call, run_hooked(call, chosen, choose_backend))
    return _to_user_shapes(call, chosen.run(call))
