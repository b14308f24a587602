"""One attention call, checked and normalised before any computation.

``prepare()`` validates what the user passed to :func:`attnkit.attention` and returns an
:class:`AttentionCall` in one canonical form (4-D tensors, resolved score/alignment objects, one
boolean mask) that every backend reads. All bad input is rejected here, with a message naming what
was expected and what was given, so no backend ever fails deep inside PyTorch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from attnkit.core.align import Align, Softmax, resolve_align
from attnkit.core.masks import MaskMod, ScoreMod, causal_mod, index_grids
from attnkit.core.scores import Score, resolve_score
from attnkit.core.summary import check_summary


@dataclass(frozen=True)
class AttentionOutput:
    """What :func:`attnkit.attention` returns.

    Attributes:
        context: ``c`` of eq. (4), ``[B, H, M, d_v]`` (``[B, M, d_v]`` for 3-D inputs).
        weights: ``a`` of eq. (3), ``[B, H, M, N]`` (``[B, H, M, N, d_v]`` multi-dimensional),
            only when ``return_weights=True``; before dropout, unless the call asked for
            ``weights_after_dropout`` (then the dropped, rescaled weights that multiplied ``v``).
        lse: log-sum-exp of each query's admissible scores ``[B, H, M]`` (``-inf`` when it has no
            admissible key), for softmax alignment; lets partial results over disjoint key sets be
            merged exactly. ``None`` when the alignment is not a softmax or the backend has none.
        log_prob: ``[B, H, M]`` log-probability of what a stochastic alignment sampled (``Hard``,
            ``Reinforced``), for REINFORCE; else ``None``.
        output: ``y_hat`` of a module's output model (eq. 5), for modules that have one.
        summary: the ``summary=`` asked of :func:`attnkit.attention` (see ``core/summary.py``).

    Example::

        >>> q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
        >>> out = ak.attention(q, k, v, return_weights=True, return_lse=True)
        >>> out.context.shape, out.weights.shape, out.lse.shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3, 6]), torch.Size([1, 2, 3]))
    """

    context: Tensor
    weights: Tensor | None = None
    lse: Tensor | None = None
    log_prob: Tensor | None = None
    output: Tensor | None = None
    summary: Tensor | None = None


@dataclass(frozen=True, eq=False)
class Magnitudes:
    """``max |x|`` of each tensor a call's finiteness scan read (NaN when it holds a NaN,
    ``inf`` when it holds an infinity), kept with the tensors themselves: :meth:`of` knows a
    tensor only if it is one of them, so a call changed by ``dataclasses.replace`` (new
    tensors) is scanned again rather than judged by stale numbers.

    The engine reads them twice: whether the inputs are finite, and the bound on the scores
    of a fused kernel (``backend.overflow_reasons``), which needs ``max |q|`` and ``max |k|``.
    """

    tensors: tuple[Tensor, ...]
    values: tuple[float, ...]

    def of(self, t: Tensor) -> float | None:
        """``max |t|`` if ``t`` is one of the scanned tensors (the same object), else ``None``."""
        for known, value in zip(self.tensors, self.values, strict=True):
            if t is known:
                return value
        return None


@dataclass(frozen=True)
class AttentionCall:
    """A validated call in canonical form: 4-D ``q [B, H, M, d_q]``, ``k [B, H, N, d_k]``,
    ``v [B, H, N, d_v]`` (k/v heads repeated to H for grouped-query inputs).

    The admissible keys are kept in their structured parts (a tensor mask, ``causal``, a
    ``mask_mod``) rather than one materialised ``[B, H, M, N]`` tensor, so blockwise backends can
    build the mask of one block at a time and skip blocks with no admissible key.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    score: Score
    align: Align
    mask: Tensor | None  # user's bool mask, 4-D, broadcastable to [B, H, M, N]; True = may attend
    bias: Tensor | None  # finite additive float mask, 4-D, broadcastable to [B, H, M, N]
    causal: bool  # bottom-right: key j admissible for query i when j <= i + N - M
    mask_mod: MaskMod | None
    score_mod: ScoreMod | None
    scale: float | None
    dropout: float
    return_weights: bool
    three_d: bool  # inputs were [B, L, d]: outputs drop the head dimension
    summary: str | None = None  # "column_sum" | "entropy" | "argmax"
    return_lse: bool = False
    # the returned weights are the dropped ones that multiplied v (torch's MHA returns those)
    weights_after_dropout: bool = False
    # q, k, v and the float mask hold only finite numbers (assumed on "meta", which has no
    # values), after the keys no query may attend were zeroed. Backends declared
    # ``nonfinite=False`` (the fused kernels, see sdpa.py) decline calls where this is False.
    finite: bool = True
    # max |x| of q, k, v and the float mask from the scan that set ``finite`` (None: not scanned)
    magnitudes: Magnitudes | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(B, H, M, N)``."""
        b, h, m, _ = self.q.shape
        return b, h, m, self.k.shape[-2]

    @property
    def only_causal(self) -> bool:
        """The admissible keys are exactly the causal ones (fused kernels have a flag for it)."""
        return self.causal and self.mask is None and self.mask_mod is None and self.bias is None

    def mask_block(self, q0: int, q1: int, k0: int, k1: int) -> Tensor | None:
        """Bool mask of queries ``[q0, q1)`` × keys ``[k0, k1)``, broadcastable to
        ``[B, H, q1 - q0, k1 - k0]``; ``None`` when every key is admissible."""
        b, h, m, n = self.shape
        out = None
        if self.mask is not None:
            rows = self.mask if self.mask.shape[-2] == 1 else self.mask[..., q0:q1, :]
            out = rows if rows.shape[-1] == 1 else rows[..., k0:k1]
        if self.causal or self.mask_mod is not None:
            grids = index_grids(b, h, q1 - q0, k1 - k0, self.q.device, q_offset=q0, kv_offset=k0)
            if self.causal:
                out = _combine(out, causal_mod(n - m)(*grids))
            if self.mask_mod is not None:
                out = _combine(out, self.mask_mod(*grids))
        return out

    def full_mask(self) -> Tensor | None:
        """The whole mask, broadcastable to ``[B, H, M, N]`` (``None``: every key admissible)."""
        _, _, m, n = self.shape
        return self.mask_block(0, m, 0, n)

    def bias_block(self, q0: int, q1: int, k0: int, k1: int) -> Tensor | None:
        """The additive float mask of a block (``None`` without one)."""
        if self.bias is None:
            return None
        rows = self.bias if self.bias.shape[-2] == 1 else self.bias[..., q0:q1, :]
        return rows if rows.shape[-1] == 1 else rows[..., k0:k1]


def _describe(t: Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


def _check_tensors(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dim() == k.dim() == v.dim()) or q.dim() not in (3, 4):
        raise ValueError(
            "q, k, v must all be 3-D [B, L, d] or all 4-D [B, H, L, d], got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            "k and v must hold the same number of keys (dim -2), got k "
            f"{tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(
            f"q, k, v must share the batch size (dim 0), got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    for name, t in (("q", q), ("k", k)):
        if t.shape[-1] == 0:
            # A score of no features is undefined (0 · 1/sqrt(0) for the scaled dot product).
            raise ValueError(
                f"{name} needs at least one feature (its last dim), got shape {tuple(t.shape)}"
            )
    if q.dim() == 4:
        if k.shape[1] != v.shape[1]:
            raise ValueError(
                f"k and v must have the same number of heads (dim 1), got k {tuple(k.shape)} "
                f"and v {tuple(v.shape)}"
            )
        if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
            raise ValueError(
                f"the query heads ({q.shape[1]}) must be a multiple of the key/value heads "
                f"({k.shape[1]}), got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )


def _check_mask(
    mask: Tensor, target: tuple[int, ...], three_d: bool, device: torch.device
) -> Tensor:
    """Validate ``mask`` against ``target = (B, H, M, N)`` and ``device``; return it 4-D."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.device != device:
        raise ValueError(f"mask must be on the device of q ({device}), got {mask.device}")
    if not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise ValueError(
            f"mask must be bool (True = may attend) or floating (added to the scores), "
            f"got dtype {mask.dtype}"
        )
    given = tuple(mask.shape)
    if three_d and mask.dim() <= 3:
        mask = mask.reshape((1,) * (3 - mask.dim()) + given).unsqueeze(-3)
    expected = (target[0], target[2], target[3]) if three_d else target
    shape = tuple(mask.shape)
    # Broadcasting to the target, checked by hand: torch.broadcast_shapes costs ~0.5 ms a call.
    fits = len(shape) <= 4 and all(
        m in (1, t) for m, t in zip(reversed(shape), reversed(target), strict=False)
    )
    if not fits:
        raise ValueError(
            f"mask of shape {given} does not broadcast to the scores' shape {expected}"
        )
    return mask.reshape((1,) * (4 - mask.dim()) + shape)  # 4-D, so blocks slice dims -2, -1


def _combine(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None:
        return b
    return a if b is None else a & b


def prepare(
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
    scan_finite: bool = True,
) -> AttentionCall:
    """Check the arguments of :func:`attnkit.attention` and normalise them (see module doc).

    ``scan_finite=False`` is for callers that read no ``finite`` (the efficient kinds, which
    have no fused kernel to protect): the inputs are then scanned for NaN and infinities only
    when a mask may hide a key from every query (its key and value must then reach no output);
    otherwise ``finite`` stays ``True`` unchecked, which changes no result, since a NaN in a key
    that some query attends reaches that query's output either way. Causal masking alone hides
    no key from every query (the last query sees them all), so it needs no scan."""
    _check_tensors(q, k, v)
    check_summary(summary)
    score_obj = resolve_score(score)
    align_obj = resolve_align(align)
    if return_lse and not isinstance(align_obj, Softmax):
        raise ValueError(
            f"return_lse=True needs the softmax alignment, got {align_obj.registry_name!r}"
        )
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    three_d = q.dim() == 3
    if three_d:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    score_obj.check(q.shape[-1], k.shape[-1], k.shape[-2])
    if score_obj.value_features is not None and score_obj.value_features != v.shape[-1]:
        raise ValueError(
            f"multi-dimensional score gives {score_obj.value_features} features per key, "
            f"but v has d_v={v.shape[-1]} (v {tuple(v.shape)})"
        )
    if k.shape[1] != q.shape[1]:  # grouped-query: each k/v head serves a group of query heads
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    b, h, m, n = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    target = (b, h, m, n)

    allowed, bias = None, None
    if mask is not None:
        mask = _check_mask(mask, target, three_d, q.device)
        if mask.dtype == torch.bool:
            allowed = mask
        else:
            # -inf entries of a float mask remove keys; finite entries are added to the scores.
            allowed = ~torch.isneginf(mask)
            # Kept in float32 for half inputs: a finite -1e5 would become -inf in float16.
            half = q.dtype in (torch.float16, torch.bfloat16)
            bias = torch.where(allowed, mask, torch.zeros_like(mask))
            bias = bias.to(torch.float32 if half else q.dtype)
            if known_values(allowed) and bool(allowed.all()):
                allowed = None
    if mask_mod is not None:
        # Fail here, on the first block, rather than deep inside a backend.
        probe = mask_mod(*index_grids(b, h, min(m, 1), min(n, 1), q.device))
        if not isinstance(probe, Tensor) or probe.dtype != torch.bool:
            raise TypeError(f"mask_mod must return a bool tensor, got {type(probe).__name__}")
    scan = scan_finite or allowed is not None or mask_mod is not None
    finite, magnitudes = _scan(q, k, v, bias) if scan else (True, None)
    call = AttentionCall(
        q=q,
        k=k,
        v=v,
        score=score_obj,
        align=align_obj,
        mask=allowed,
        bias=bias,
        causal=bool(causal),
        mask_mod=mask_mod,
        score_mod=score_mod,
        scale=None if scale is None else float(scale),
        dropout=float(dropout),
        return_weights=return_weights,
        three_d=three_d,
        summary=summary,
        return_lse=return_lse,
        weights_after_dropout=bool(weights_after_dropout),
        finite=finite,
        magnitudes=magnitudes,
    )
    return call if call.finite else _without_unreachable_keys(call)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores and alignments of half-precision inputs are computed in float32."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def known_values(t: Tensor) -> bool:
    """Whether Python may branch on ``t``'s values: not on ``meta`` (it has none), not while
    ``torch.compile`` traces (a branch on values cannot be traced: the code takes the path that
    is exact for every value instead)."""
    return t.device.type != "meta" and not torch.compiler.is_compiling()


def max_abs(t: Tensor) -> Tensor:
    """``max |t|`` as a 0-d tensor of ``t``'s dtype, NaN if ``t`` holds a NaN (``inf`` for an
    infinity), without a temporary the size of ``t``.

    A dense tensor (contiguous in some order of its dims) is read once, in memory order, by
    ``aminmax``. Other strided views, such as the heads of a packed projection (``[B, L, 3E]``
    split into ``[B, H, L, d]``: rows with gaps between them), would be copied whole by
    ``aminmax`` (and by ``abs()``) before the pass; ``amax`` and ``amin`` read them in place,
    two passes without a copy. Broadcast dims (stride 0) are read once.

    Args:
        t: any floating tensor with at least one element.

    Example::

        >>> float(max_abs(torch.tensor([[1.0, -3.0], [2.0, 0.5]]).T))
        3.0
    """
    t = t.detach()
    if 0 in t.stride():  # an expanded tensor: its repeated entries are read once
        t = t[tuple(slice(0, 1) if s == 0 else slice(None) for s in t.stride())]
    if not t.is_contiguous():
        order = sorted(range(t.dim()), key=lambda d: (t.stride(d), t.shape[d]), reverse=True)
        permuted = t.permute(order)
        if not permuted.is_contiguous():
            return torch.maximum(t.amax(), -t.amin())  # NaN if either is NaN
        t = permuted
    low, high = torch.aminmax(t)
    return torch.maximum(high, -low)


def _scan(*tensors: Tensor | None) -> tuple[bool, Magnitudes | None]:
    """Whether ``tensors`` hold only finite numbers, and their :class:`Magnitudes`.

    ``(True, None)`` when no tensor has values to read (``meta``, or empty); ``(False, None)``
    while ``torch.compile`` traces, so the traced path is the one exact for non-finite inputs
    too. One :func:`max_abs` pass per tensor (:func:`_reads`) and one read of the results: the
    extremes are finite exactly when every element is."""
    if torch.compiler.is_compiling():
        return False, None
    present = tuple(t for t in tensors if t is not None and t.numel() and t.device.type != "meta")
    if not present:
        return True, None
    groups = _reads(present)
    read = torch.stack([max_abs(whole).to(torch.float64) for _, whole in groups]).tolist()
    largest = {
        id(t): value for (members, _), value in zip(groups, read, strict=True) for t in members
    }
    values = tuple(largest[id(t)] for t in present)
    return all(math.isfinite(x) for x in values), Magnitudes(present, values)


def _reads(tensors: tuple[Tensor, ...]) -> list[tuple[tuple[Tensor, ...], Tensor]]:
    """What :func:`_scan` reads for ``tensors``: ``(the tensors it stands for, a tensor)``.

    Distinct views that together are exactly the elements of one storage — the queries, keys
    and values split from one packed projection ``[B, L, 3·H·d]``, as ``MultiHeadAttention``
    gives them — are read as that storage, once and contiguously, instead of each strided view
    apart (three times fewer passes, none over rows with gaps). Each then gets the storage's
    ``max |x|``, at least its own: a NaN or infinity in any view is seen, and the overflow bound
    of the fused kernels stays a bound. Views that overlap could leave part of the storage
    outside every view; what it holds can then only make the scan say "not finite", which
    sends the call to a backend exact for every input, never the other way."""
    groups: dict[tuple[int, torch.dtype], list[Tensor]] = {}
    try:
        for t in {id(t): t for t in tensors}.values():  # each object once
            groups.setdefault((t.untyped_storage().data_ptr(), t.dtype), []).append(t)
    except (RuntimeError, NotImplementedError):  # a wrapper tensor without a storage of its own
        return [((t,), t) for t in tensors]
    reads = []
    for members in groups.values():
        first = members[0]
        total = sum(t.numel() for t in members)
        if len(members) > 1 and total * first.element_size() == first.untyped_storage().nbytes():
            whole = first.detach().as_strided((total,), (1,), 0)
            reads.append((tuple(members), whole))
        else:
            reads.extend(((t,), t) for t in members)
    return reads


def _without_unreachable_keys(call: AttentionCall) -> AttentionCall:
    """Zero the keys and values that no query may attend (padding), so that whatever they hold
    (NaN, infinities) reaches no output and no gradient. A ``where``, not a product: nothing flows
    to or from the replaced entries. Runs only when an input is non-finite; ``finite`` is then
    checked again, so NaN confined to padding leaves the call to the fast backends."""
    allowed = call.full_mask()
    if allowed is None:
        return call
    b, h, m, n = call.shape
    reachable = allowed.expand(b, h, m, n).any(-2).unsqueeze(-1)  # [B, H, N, 1]
    k = torch.where(reachable, call.k, torch.zeros((), dtype=call.k.dtype, device=call.k.device))
    v = torch.where(reachable, call.v, torch.zeros((), dtype=call.v.dtype, device=call.v.device))
    finite, magnitudes = _scan(call.q, k, v, call.bias)
    return replace(call, k=k, v=v, finite=finite, magnitudes=magnitudes)
