"""What every efficient attention kind shares: its base class and its one input check.

:class:`EfficientKind` is the base (an :class:`~attnkit.core.kinds.AttentionKind`): its ``forward``
runs :func:`check_call` once and hands the checked :class:`EfficientCall` to the kind's ``attend``.

Each kind takes attnkit's call conventions (``q [B, H, M, d]``, ``k [B, H_kv, N, d]``,
``v [B, H_kv, N, d_v]`` or 3-D without the head axis; bool masks with ``True`` = may attend;
bottom-right causal) and the keyword arguments :class:`attnkit.MultiHeadAttention` passes to an
attention kind (``score``, ``align``, ``mask``, ``causal``, ``dropout``, ``return_weights``). The
validation is :func:`attnkit.core.call.prepare`'s, so bad input gets the same messages as in
:func:`attnkit.attention`; what is left here is what the efficient kinds cannot do: other scores
than the (scaled) dot product, other alignments than softmax, score/mask mods, dropout, and finite
additive float masks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, Softmax
from attnkit.core.call import AttentionOutput, prepare
from attnkit.core.scores import Dot, ScaledDot, Score

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclass(frozen=True)
class EfficientCall:
    """A checked call: 4-D ``q [B, H, M, d]``, ``k [B, H, N, d]``, ``v [B, H, N, d_v]`` (grouped
    key/value heads repeated), ``mask`` bool broadcastable to ``[B, H, M, N]`` or ``None``."""

    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor | None
    causal: bool
    scale: float
    three_d: bool
    return_weights: bool = False

    @property
    def shape(self) -> tuple[int, int, int, int]:
        b, h, m, _ = self.q.shape
        return b, h, m, self.k.shape[-2]

    def require_self_attention(self, kind: str) -> None:
        """Kinds whose pattern is laid over one sequence need ``M == N``."""
        _, _, m, n = self.shape
        if m != n:
            raise ValueError(
                f"{kind} attention is self-attention: queries and keys must have one length, "
                f"got M={m}, N={n}"
            )

    def key_mask(self, kind: str) -> Tensor | None:
        """The mask as a key-padding mask ``[B', H', 1, N]`` (bool); kinds that never form the
        query-key matrix can only honour masks that are the same for every query."""
        if self.mask is None:
            return None
        if self.mask.shape[-2] != 1 and self.shape[2] != 1:
            raise ValueError(
                f"{kind} attention supports only masks that are the same for every query "
                f"(key padding, shape [B, 1, 1, N]), got mask of shape {tuple(self.mask.shape)}"
            )
        return self.mask[..., :1, :]

    def output(self, context: Tensor, weights: Tensor | None = None) -> AttentionOutput:
        """``context [B, H, M, d_v]`` (and ``weights [B, H, M, ·]`` when the call asked for
        them) in the user's shapes."""
        weights = weights if self.return_weights else None
        if self.three_d:
            context = context.squeeze(1)
            weights = None if weights is None else weights.squeeze(1)
        return AttentionOutput(context=context, weights=weights)


class KindOptions(TypedDict, total=False):
    """The keywords every efficient kind takes (those :class:`attnkit.MultiHeadAttention` passes
    to its attention kind), with :func:`attnkit.attention`'s meaning:

    - ``mask``: bool (True = may attend) or float of 0 and -inf, broadcastable to
      ``[B, H, M, N]`` (kinds that never form the query-key matrix: key padding only);
    - ``causal``: bottom-right causal masking;
    - ``scale``: multiplies ``q·k`` (default ``1/sqrt(d)`` for ``scaled_dot``);
    - ``score``, ``align``: ``"scaled_dot"``/``"dot"`` and ``"softmax"`` only (the kinds
      approximate or restrict ``softmax(q·k)``);
    - ``score_mod``: must be None; ``dropout``: must be 0;
    - ``return_weights``: the weights where the kind forms them, else ignored (``None``).
    """

    mask: Tensor | None
    causal: bool
    scale: float | None
    score: str | Score | None
    align: str | Align | None
    score_mod: object | None
    dropout: float
    return_weights: bool


def check_call(
    kind: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score: str | Score | None = None,
    align: str | Align | None = None,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    score_mod: object | None = None,
    dropout: float = 0.0,
    return_weights: bool = False,
) -> EfficientCall:
    """Validate a call of the efficient kind ``kind`` (see :class:`KindOptions`): the one input
    check every kind runs before its own algorithm."""
    if score_mod is not None:
        raise ValueError(
            f"{kind} attention takes no score_mod (it does not form every score to modify); "
            "use attention='exact' for position biases such as ALiBi"
        )
    call = prepare(
        q,
        k,
        v,
        score="scaled_dot" if score is None else score,
        align="softmax" if align is None else align,
        mask=mask,
        causal=causal,
        scale=scale,
        dropout=dropout,
        scan_finite=False,  # no fused kernel to protect; prepare scans when a mask hides keys
    )
    if type(call.score) not in (ScaledDot, Dot):
        raise ValueError(
            f"{kind} attention approximates or restricts softmax(q·k) attention: score must be "
            f"'scaled_dot' or 'dot', got {call.score.registry_name!r}"
        )
    if type(call.align) is not Softmax:
        raise ValueError(
            f"{kind} attention needs align='softmax', got {call.align.registry_name!r}"
        )
    if call.dropout > 0:
        raise ValueError(f"{kind} attention has no attention-weight dropout, got {dropout}")
    if call.bias is not None and bool((call.bias != 0).any()):
        raise ValueError(
            f"{kind} attention takes bool masks (or float masks of 0 and -inf), got a float "
            "mask with finite non-zero entries"
        )
    d = call.q.shape[-1]
    chosen = call.scale if call.scale is not None else call.score.default_scale(d)
    return EfficientCall(
        q=call.q,
        k=call.k,
        v=call.v,
        mask=call.mask,
        causal=call.causal,
        scale=1.0 if chosen is None else float(chosen),
        three_d=call.three_d,
        return_weights=bool(return_weights),
    )


class EfficientKind(nn.Module):
    """Base of the efficient attention kinds: an :class:`~attnkit.core.kinds.AttentionKind`
    that checks its input once (:func:`check_call`) and then runs :meth:`attend`.

    Subclasses set ``name`` and ``taxonomy`` and implement ``attend(call) -> AttentionOutput``;
    one whose state depends on the head sizes builds it in :meth:`bind` (called by the
    ``MultiHeadAttention`` that runs it, before its first call).
    """

    name: str = ""
    taxonomy: Mapping[str, str | list[str]] | None = None
    forms_weights = False
    bound: tuple[int, int, int] | None = None

    def bind(self, num_heads: int, head_dim_k: int, head_dim_v: int) -> EfficientKind:
        """Use this kind in a module with ``num_heads`` heads of sizes ``head_dim_k`` and
        ``head_dim_v``; returns ``self``.

        Raises:
            ValueError: the kind has parameters or buffers and is bound already (one module per
                ``MultiHeadAttention``: pass a new object or ``copy.deepcopy(kind)``).
        """
        stateful = any(True for _ in self.parameters()) or any(True for _ in self.buffers())
        if self.bound is not None and stateful:
            raise ValueError(
                f"this {type(self).__name__} is already used by another module (bound to "
                f"num_heads, head_dim_k, head_dim_v = {self.bound}); a kind with parameters or "
                "buffers is one module per MultiHeadAttention: pass a new object or "
                "copy.deepcopy(kind)"
            )
        self.bound = (num_heads, head_dim_k, head_dim_v)
        return self

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, **options: Unpack[KindOptions]
    ) -> AttentionOutput:
        """Attend (the kind's algorithm) with the options of :class:`KindOptions`."""
        return self.attend(check_call(self.name, q, k, v, **options))

    def attend(self, call: EfficientCall) -> AttentionOutput:
        """The kind's algorithm on a checked call."""
        raise NotImplementedError(f"{type(self).__name__} must implement attend(call)")


def masked_softmax(scores: Tensor, allowed: Tensor | None) -> Tensor:
    """Softmax over the last axis with ``allowed`` (bool, broadcastable) keys only; a row with no
    admissible key gives zeros (and zero gradients), never NaN."""
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    # torch's fused softmax gives NaN on an all -inf row; nan_to_num makes it zeros. The NaN
    # gradient of such a row ends at the masked_fill (or -inf padding) that emptied it, whose
    # backward zeroes every masked entry: inputs get exactly zero gradient from it.
    return torch.softmax(scores, -1).nan_to_num(nan=0.0)


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value
