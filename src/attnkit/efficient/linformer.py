"""Linformer attention (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity",
§4 eq. 7): keys and values are projected along the *length* axis to ``k`` rows before softmax
attention, so the score matrix is ``M × k`` instead of ``M × N``:

    head = softmax(scale · Q (E K)^T) (F V),    E, F ∈ R^{k × n}                    (eq. 7)

``E`` and ``F`` are learned and sized for a fixed maximum length ``n``; a shorter input uses their
first ``N`` columns (the paper pads to ``n``; padding with zero keys gives the same product),
a longer one is refused. Keys that a key-padding mask removes are zeroed before the projection.
Linformer mixes every position into every projected key, so it cannot be causal: ``causal=True``
is refused rather than silently leaking the future.

Parameter sharing (§4 "Additional Efficiency Techniques"): one ``E``/``F`` pair shared by all
heads (headwise sharing); ``share_key_value=True`` uses ``E`` for both (key-value sharing).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.scores import Score
from attnkit.efficient._inputs import check_call, check_positive_int

TAXONOMY: dict[str, str | list[str]] = {"scoring": "Scaled-Multiplicative", "alignment": "Global"}


def linformer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_projection: Tensor,
    value_projection: Tensor | None = None,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    score: str | Score | None = None,
    align: str | Align | None = None,
    dropout: float = 0.0,
    return_weights: bool = False,
) -> AttentionOutput:
    """Softmax attention over length-projected keys and values (eq. 7).

    Args:
        q: ``[B, H, M, d]`` or ``[B, M, d]``; k: ``[B, H_kv, N, d]``; v: ``[B, H_kv, N, d_v]``.
        key_projection: ``E [k, n]`` with ``n >= N`` (its first ``N`` columns are used).
        value_projection: ``F [k, n]`` (default: ``E``, key-value sharing).
        mask: key-padding only: bool (True = may attend) broadcastable to ``[B, H, 1, N]``.
        causal: must be False (Linformer's projections mix future positions into every key).
        scale, score, align, dropout: ``scaled_dot``/``dot``, ``softmax``, 0 only.
        return_weights: return the ``[B, H, M, k]`` weights over the projected keys.

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]`` (and ``weights``).

    Example::

        >>> e = torch.randn(64, 1024) / 32
        >>> x = torch.randn(2, 4, 1000, 16)
        >>> linformer_attention(x, x, x, key_projection=e).context.shape
        torch.Size([2, 4, 1000, 16])
    """
    if causal:
        raise ValueError(
            "linformer attention cannot be causal: its length projections mix every position, "
            "future ones included, into each projected key; use 'linear', 'performer' or "
            "'sliding_window' for causal attention"
        )
    call = check_call(
        "linformer",
        q,
        k,
        v,
        score=score,
        align=align,
        mask=mask,
        causal=False,
        scale=scale,
        dropout=dropout,
    )
    n = call.shape[3]
    value_projection = key_projection if value_projection is None else value_projection
    for name, p in (("key_projection", key_projection), ("value_projection", value_projection)):
        if not isinstance(p, Tensor) or p.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor [k, max_length], got {p!r:.60}")
        if n > p.shape[1]:
            raise ValueError(
                f"linformer was built for at most {p.shape[1]} keys ({name} {tuple(p.shape)}), "
                f"got N={n}"
            )
    keys, values = call.k, call.v
    keep = call.key_mask("linformer")
    if keep is not None:  # `where`: removed keys contribute nothing, not even NaN
        keep = keep.transpose(-1, -2)  # [B', H', N, 1]
        keys = torch.where(keep, keys, torch.zeros_like(keys))
        values = torch.where(keep, values, torch.zeros_like(values))
    e = key_projection[:, :n].to(keys.dtype)
    f = value_projection[:, :n].to(values.dtype)
    projected_k = e @ keys  # [B, H, k, d]
    projected_v = f @ values  # [B, H, k, d_v]
    out = attention(
        call.q, projected_k, projected_v, scale=call.scale, return_weights=return_weights
    )
    context, weights = out.context, out.weights
    if call.three_d:
        weights = None if weights is None else weights.squeeze(1)
        context = context.squeeze(1)
    return AttentionOutput(context=context, weights=weights)


linformer_attention.taxonomy = TAXONOMY  # type: ignore[attr-defined]


class LinformerAttention(nn.Module):
    """Linformer's learned length projections ``E`` (and ``F``) for inputs up to ``max_length``.

    Args:
        max_length: ``n``, the longest key sequence accepted.
        projected_length: ``k``, the number of projected keys (the paper: 128-256).
        share_key_value: one projection for keys and values.

    Parameters: ``key_projection [k, n]`` (and ``value_projection [k, n]``), initialised
    ``N(0, 1/k)`` (the Johnson–Lindenstrauss scaling of the paper's Theorem 1).
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        max_length: int,
        projected_length: int = 256,
        *,
        share_key_value: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.max_length = check_positive_int("max_length", max_length)
        self.projected_length = check_positive_int("projected_length", projected_length)
        std = 1 / math.sqrt(projected_length)
        shape = (projected_length, max_length)
        self.key_projection = nn.Parameter(torch.randn(shape, device=device, dtype=dtype) * std)
        if share_key_value:
            self.register_parameter("value_projection", None)
        else:
            self.value_projection = nn.Parameter(
                torch.randn(shape, device=device, dtype=dtype) * std
            )

    def forward(self, q: Tensor, k: Tensor, v: Tensor, **options: object) -> AttentionOutput:
        return linformer_attention(
            q,
            k,
            v,
            key_projection=self.key_projection,
            value_projection=self.value_projection,
            **options,  # type: ignore[arg-type]
        )

    def extra_repr(self) -> str:
        return (
            f"max_length={self.max_length}, projected_length={self.projected_length}, "
            f"share_key_value={self.value_projection is None}"
        )
