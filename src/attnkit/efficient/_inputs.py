"""Checks and normalisation shared by every efficient attention kind.

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

from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.core.align import Align, Softmax
from attnkit.core.call import AttentionOutput, prepare
from attnkit.core.scores import Dot, ScaledDot, Score


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

    @property
    def shape(self) -> tuple[int, int, int, int]:
        b, h, m, _ = self.q.shape
        return b, h, m, self.k.shape[-2]

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

    def output(self, context: Tensor) -> AttentionOutput:
        """``context [B, H, M, d_v]`` in the user's shapes."""
        return AttentionOutput(context=context.squeeze(1) if self.three_d else context)


def check_call(
    kind: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score: str | Score | None,
    align: str | Align | None,
    mask: Tensor | None,
    causal: bool,
    scale: float | None,
    dropout: float,
) -> EfficientCall:
    """Validate a call of the efficient kind ``kind`` (see module doc)."""
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
    )


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
