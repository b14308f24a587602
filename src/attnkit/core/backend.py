"""What a backend is: a way to compute attention that declares what it supports, and declines
the calls it cannot run.

A :class:`Backend` is data (after xFormers' dispatcher): its name, a description, the function
that runs a call, and its capabilities as fields. :meth:`Backend.decline` derives from them why
it cannot run a given call — a list of reasons, or ``None`` when it can. The engine
(``engine.py``) walks the backends in order and runs the first that does not decline; nothing
hands a call from one backend to another. ``ak.explain``, ``attnkit info``, the hooks' ``run`` and
the tests read the same facts.

Two kinds of reasons:

* declared: what the fields exclude (a score that is not a dot product, weights, a dtype, ...)
  and the backend's own ``limits`` (e.g. which scores a compiled kernel expresses) and
  ``preferences`` (e.g. a call too small to pay for compiling a kernel; like ``only_weights``,
  these only guide the automatic choice and do not count when the backend is named alone);
* read from the values: a backend with ``nonfinite=False`` (a fused kernel, or softmax over one
  GEMM) defines no result for NaN, infinities or scores that overflow, so it declines calls
  whose inputs hold them or whose scores may overflow (:func:`overflow_reasons`). These are read
  only when nothing declared rules the backend out, and never on ``meta`` tensors or while
  ``torch.compile`` traces (no values to read: they are assumed finite).

A backend whose ``run`` learns only while running that it cannot give attnkit's result (a kernel
that fails to compile, a non-finite output of a compiled kernel) returns :class:`Declined` with
its reasons, and the engine moves on to the next backend in the same way.

Shapes: B batch, H heads, M queries, N keys, D/Dv feature sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnkit.core.align import Align
from attnkit.core.call import AttentionCall, AttentionOutput, known_values, max_abs
from attnkit.core.captured import captured_tensors
from attnkit.core.reference import compute_dtype, score_features

ALL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class Declined:
    """What a backend's ``run`` returns instead of an output when only running it showed that
    it cannot give attnkit's result for the call; the engine then tries the next backend."""

    reasons: tuple[str, ...]


#: a backend's run function: an output, or :class:`Declined`
RunFn = Callable[[AttentionCall], "AttentionOutput | Declined"]


@dataclass(frozen=True)
class Backend:
    """A way to compute attention, with what it supports declared as data.

    ``decline(call)`` derives from the declaration why the backend cannot run a call (``None``
    when it can), so the dispatcher, ``explain()``, ``attnkit info`` and the tests all read the
    same facts.
    """

    name: str
    description: str
    run: RunFn
    dot_scores_only: bool = False  # only scores whose pairwise part is a dot product
    aligns: tuple[type[Align], ...] | None = None  # None: every alignment
    multi_dimensional: bool = True
    weights: bool = True
    # a preference: passed over for calls that ask for no weights (it writes them), unless it is
    # the only backend allowed (``backend=``, or a scope naming it alone)
    only_weights: bool = False
    dropped_weights: bool = True  # can return the weights after dropout (whole rows dropped)
    lse: bool = True  # can return the log-sum-exp (softmax alignment)
    score_mod: bool = True
    dropout: bool = True
    summary: bool = True
    half_float_mask: bool = True  # adds a float mask to half-precision scores exactly
    # defines attnkit's results for NaN, infinities and overflowing scores (docs/reliability.md);
    # else declines calls whose inputs hold them or whose scores may overflow
    nonfinite: bool = True
    dtypes: tuple[torch.dtype, ...] = ALL_DTYPES
    devices: tuple[str, ...] | None = None  # device types; None: any
    # runs under torch.compile: no Python branch on tensor values (the others read values to
    # choose a kernel or skip blocks, which dynamo cannot trace)
    traceable: bool = False
    gradients: bool = True  # computes gradients (else passed over when autograd needs them)
    # reasons only the backend can judge (e.g. which scores a compiled kernel expresses)
    limits: Callable[[AttentionCall], list[str]] | None = None
    # reasons that only guide the automatic choice (e.g. a call too small to pay for compiling
    # a kernel): not counted when the backend is the only one allowed
    preferences: Callable[[AttentionCall], list[str]] | None = None
    # predicted peak bytes of a call: memory(call, backward) (see memory.py)
    memory: Callable[[AttentionCall, bool], int] | None = None

    def peak_memory(self, call: AttentionCall) -> int:
        """Predicted peak bytes of running ``call`` here: the forward, and the backward too
        when autograd will differentiate the call (``memory.py``); 0 if the backend declares
        no prediction."""
        if self.memory is None:
            return 0
        return int(self.memory(call, needs_gradients(call)))

    def reasons(self, call: AttentionCall, forced: bool = False) -> list[str]:
        """What the declaration (fields and ``limits``) says against ``call``: empty when
        nothing does. ``forced``: the backend is the only one allowed, so preferences that only
        guide the automatic choice do not count. Reads no tensor values."""
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
        tracing = torch.compiler.is_compiling()
        if not self.nonfinite and not call.finite and not tracing:
            why.append("an input holds NaN or an infinity (it defines no result for them)")
        elif not self.nonfinite and self.traceable and tracing:  # no values to rule them out
            why.append("while tracing, NaN or an infinity in the inputs cannot be ruled out")
        if call.q.dtype not in self.dtypes:
            why.append(f"dtype {call.q.dtype} is not supported")
        if self.devices is not None and call.q.device.type not in self.devices:
            why.append(f"device {call.q.device.type!r} is not supported")
        if not self.traceable and tracing:
            why.append("torch.compile is tracing (this backend branches on tensor values)")
        if not self.gradients and needs_gradients(call):
            why.append(
                "gradients are needed (autograd is on and an input or parameter requires grad)"
            )
        if self.limits is not None:
            why.extend(self.limits(call))
        if self.preferences is not None and not forced:
            why.extend(self.preferences(call))
        return why

    def decline(self, call: AttentionCall, forced: bool = False) -> list[str] | None:
        """Why this backend cannot run ``call``, or ``None`` when it can: the declared reasons
        (:meth:`reasons`), then — only if there are none — those read from the values (a score
        that may overflow, for a backend with ``nonfinite=False``)."""
        why = self.reasons(call, forced)
        if not why and not self.nonfinite:
            why = overflow_reasons(call)
        return why or None


def needs_gradients(call: AttentionCall) -> bool:
    """Whether autograd would differentiate ``call``: grad mode is on and ``q``, ``k``, ``v``,
    the float mask, the score's parameters or a tensor a mod captures requires grad."""
    if not torch.is_grad_enabled():
        return False
    tensors = [call.q, call.k, call.v, call.bias, *call.score.parameters()]
    tensors += captured_tensors(call.score_mod) + captured_tensors(call.mask_mod)
    return any(t is not None and t.requires_grad for t in tensors)


def overflow_reasons(call: AttentionCall) -> list[str]:
    """Why a score of ``call`` may not be finite although its inputs are: the bound
    ``|scale · q'·k' + bias| <= |scale| · D · max|q'| · max|k'| + max|bias|`` (Cauchy-Schwarz,
    on the score's features ``q' [B, H, M, D]``, ``k' [B, H, N, D]``) reaches a quarter of the
    compute dtype's largest number. O(input): one pass per tensor, never the ``[B, H, M, N]``
    scores, and none for a tensor the call's finiteness scan already read (``call.magnitudes``:
    the features of the dot-product scores are ``q`` and ``k`` themselves). Empty on ``meta`` or
    while tracing (no values), and for scores that are not a dot product of features (the bound
    is theirs)."""
    if not call.score.pairwise_is_dot or not known_values(call.q):
        return []
    if not (call.q.numel() and call.k.numel()):
        return []
    with torch.no_grad():  # e.g. W q of the general score; the backend computes it again
        qf, kf = score_features(call, call.q, call.k)
    factor = call.score.resolve_scale(call.scale, call.k.shape[-1])
    scale = 1.0 if factor is None else factor
    tensors = [qf, kf] if call.bias is None or not call.bias.numel() else [qf, kf, call.bias]
    known = call.magnitudes
    scanned = [None if known is None else known.of(t) for t in tensors]
    missing = [t for t, value in zip(tensors, scanned, strict=True) if value is None]
    read: list[float] = []
    if missing:  # NaN and inf come out as NaN and inf, which fail the bound below
        read = torch.stack([max_abs(t).to(torch.float64) for t in missing]).tolist()
    fresh = iter(read)
    largest = [next(fresh) if value is None else value for value in scanned]
    bound = abs(scale) * qf.shape[-1] * largest[0] * largest[1] + sum(largest[2:])
    dtype = compute_dtype(call.v.dtype)
    limit = torch.finfo(dtype).max / 4
    if bound < limit:  # False for NaN and inf
        return []
    return [
        f"a score may overflow: |scale · q'·k' + bias| <= {bound:.3g}, not below {limit:.3g} "
        f"(a quarter of {dtype}'s largest number)"
    ]
