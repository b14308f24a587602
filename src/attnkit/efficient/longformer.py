"""Longformer attention: a sliding window plus designated global tokens (Beltagy et al. 2020,
"Longformer: The Long-Document Transformer", §3.1 "Attention Pattern" and "Global Attention").

Every query attends its window (see :mod:`attnkit.efficient.sliding_window` for exactly which
keys) and every *global* token; a global token's query attends every key. Global attention is
symmetric, as in the paper: with the user's mask and the causal mask applied on top. The pattern
it computes equals dense attention with the mask::

    allowed[i, j] = window(i, j) or is_global[j] or is_global[i]     (and mask, and causal)

Cost: the window in bands, O(N·w); the ``G`` global keys for every query, O(N·G); the ``G``
global queries against every key, O(G·N). (The paper uses separate projections for the global
attention; here the caller's q, k, v serve both, which is what a drop-in kind can do.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.kinds import KINDS
from attnkit.efficient._inputs import EfficientCall, EfficientKind, KindOptions, check_positive_int
from attnkit.efficient.sliding_window import banded_attention

if TYPE_CHECKING:
    from typing_extensions import Unpack

TAXONOMY: dict[str, str | list[str]] = {
    "scoring": "Scaled-Multiplicative",
    "alignment": ["Local", "Global"],
}


def _global_flags(global_tokens: Tensor | None, batch: int, n: int, device: torch.device) -> Tensor:
    """``global_tokens`` as bool ``[B, N]`` (True = global)."""
    if global_tokens is None:
        flags = torch.zeros(batch, n, dtype=torch.bool, device=device)
        flags[:, :1] = True  # the paper's classification default: the first ([CLS]) token
        return flags
    if not isinstance(global_tokens, Tensor):
        raise TypeError(f"global_tokens must be a torch.Tensor, got {type(global_tokens).__name__}")
    g = global_tokens.to(device)
    if g.dtype != torch.bool:
        if g.is_floating_point() or g.dim() != 1:
            raise ValueError(
                "global_tokens must be bool [N] or [B, N] (True = global) or 1-D integer "
                f"positions, got dtype {g.dtype} shape {tuple(g.shape)}"
            )
        if g.numel() and (int(g.min()) < 0 or int(g.max()) >= n):
            raise ValueError(f"global token positions must lie in [0, {n}), got {g.tolist()}")
        flags = torch.zeros(n, dtype=torch.bool, device=device)
        flags[g] = True
        g = flags
    if g.shape not in ((n,), (batch, n)):
        raise ValueError(
            f"global_tokens must have shape [N] = ({n},) or [B, N] = ({batch}, {n}), got "
            f"{tuple(g.shape)}"
        )
    return g.expand(batch, n)


@KINDS.register("longformer")
class LongformerAttention(EfficientKind):
    """Sliding window of ``window`` plus global tokens (self-attention: ``M == N``); the
    attention kind ``"longformer"``.

    Args:
        window: as :class:`~attnkit.efficient.sliding_window.SlidingWindowAttention`
            (default 256, the kind's registered default).
        global_tokens: bool ``[L]`` or ``[B, L]`` (True = global), or 1-D integer positions;
            ``None``: the first token.

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; any bool
    mask; causal: a query sees no later key, global or not): ``q, k, v`` ``[B, H, L, d]``,
    ``[B, H_kv, L, d]``, ``[B, H_kv, L, d_v]`` (or 3-D) → :class:`~attnkit.AttentionOutput` with
    ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> LongformerAttention(window=8)(x, x, x).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "longformer"
    taxonomy = TAXONOMY

    def __init__(self, window: int = 256, global_tokens: Tensor | None = None) -> None:
        super().__init__()
        self.window = check_positive_int("window", window)
        self.global_tokens = global_tokens

    def attend(self, call: EfficientCall) -> AttentionOutput:
        call.require_self_attention(self.name)
        global_tokens = self.global_tokens
        b, h, _, n = call.shape
        if n == 0:
            return call.output(call.q.new_zeros(b, h, 0, call.v.shape[-1]))
        flags = _global_flags(global_tokens, b, n, call.q.device)  # [B, N]
        count = int(flags.sum(-1).max())
        # Global positions per batch element, padded with the out-of-range index n.
        order = torch.sort((~flags).to(torch.int8), dim=-1, stable=True).indices[
            :, :count
        ]  # [B, G]
        valid = flags.gather(-1, order)  # [B, G]
        positions = torch.where(valid, order, torch.full_like(order, n))
        safe = positions.clamp(max=n - 1)
        idx = safe[:, None, :, None]
        q_global = call.q.gather(2, idx.expand(b, h, count, call.q.shape[-1]))
        k_global = call.k.gather(2, idx.expand(b, h, count, call.k.shape[-1]))
        v_global = call.v.gather(2, idx.expand(b, h, count, call.v.shape[-1]))

        # Every query against the global keys (which are then left out of its band).
        rows = torch.arange(n, device=call.q.device)
        key_ok = valid[:, None, None, :]  # [B, 1, 1, G]
        if call.causal:
            key_ok = key_ok & (positions[:, None, None, :] <= rows[:, None])
        if call.mask is not None:
            full = call.mask.expand(b, call.mask.shape[1], call.mask.shape[2], n)
            key_ok = key_ok & full.gather(-1, safe[:, None, None, :].expand(*full.shape[:3], count))
        right = 0 if call.causal else self.window - 1
        context = banded_attention(
            call.q,
            call.k,
            call.v,
            left=self.window - 1,
            right=right,
            scale=call.scale,
            mask=call.mask,
            excluded_keys=flags,
            extra_keys=k_global,
            extra_values=v_global,
            extra_allowed=key_ok,
        )

        # The global queries against every key: rows of dense attention, O(G·N).
        if count:
            allowed = valid[:, None, :, None].expand(b, 1, count, n)
            if call.causal:
                allowed = allowed & (rows <= positions[:, None, :, None])
            if call.mask is not None:
                full = call.mask.expand(*call.mask.shape[:2], n, n)
                full = full.expand(b, *full.shape[1:])
                allowed = allowed & full.gather(
                    2, safe[:, None, :, None].expand(b, full.shape[1], count, n)
                )
            dense = attention(q_global, call.k, call.v, mask=allowed, scale=call.scale).context
            # Scatter into a buffer with one spare row, where the padding slots land.
            buffer = torch.cat([context, context.new_zeros(b, h, 1, context.shape[-1])], 2)
            target = positions[:, None, :, None].expand(b, h, count, context.shape[-1])
            context = buffer.scatter(2, target, dense)[:, :, :n]
        return call.output(context)

    def extra_repr(self) -> str:
        return f"window={self.window}"


def longformer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int,
    global_tokens: Tensor | None = None,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """:class:`LongformerAttention` as a function (options: :class:`KindOptions`).

    Args:
        q: queries ``[B, H, L, d]`` (or ``[B, L, d]``; self-attention).
        k: keys ``[B, H_kv, L, d]``.
        v: values ``[B, H_kv, L, d_v]``.
        window: keys of each query's sliding window.
        global_tokens: bool ``[L]`` or ``[B, L]`` (True = global), or integer positions;
            ``None``: the first token.
        **options: :class:`~attnkit.efficient._inputs.KindOptions` (``mask``, ``causal``,
            ``return_weights``, ...).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, L, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 256, 16)
        >>> longformer_attention(x, x, x, window=64, global_tokens=torch.tensor([0])).context.shape
        torch.Size([2, 4, 256, 16])
    """
    return LongformerAttention(window, global_tokens)(q, k, v, **options)
