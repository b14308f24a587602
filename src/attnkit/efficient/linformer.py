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
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.kinds import KINDS
from attnkit.efficient._inputs import (
    EfficientCall,
    EfficientKind,
    KindOptions,
    check_call,
    check_positive_int,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

TAXONOMY: dict[str, str | list[str]] = {"scoring": "Scaled-Multiplicative", "alignment": "Global"}


def _project_length(projection: Tensor, x: Tensor) -> Tensor:
    """``projection [k, N] · x [B, H, N, d]`` → ``[B, H, k, d]``. When ``x``'s heads lie side by
    side in memory (head views of one ``[B, N, H·d]`` projection, as a multi-head module splits
    them), as one product of the ``[k, N]`` projection with all heads' columns at once: a GEMM
    with ``H·d`` columns instead of ``H`` GEMMs with ``d`` each, and the gradient comes back in
    ``x``'s layout."""
    _, h, _, d = x.shape
    if h > 1 and x.stride(1) == d and x.stride(-1) == 1:
        packed = x.transpose(1, 2).flatten(-2)  # a view: [B, N, H·d]
        return (projection @ packed).unflatten(-1, (h, d)).transpose(1, 2)
    return projection @ x


def _project_and_attend(
    call: EfficientCall, key_projection: Tensor, value_projection: Tensor | None
) -> AttentionOutput:
    """Eq. 7 on a checked call: softmax attention over ``E K`` and ``F V``."""
    if call.causal:
        raise ValueError(
            "linformer attention cannot be causal: its length projections mix every position, "
            "future ones included, into each projected key; use 'linear', 'performer' or "
            "'sliding_window' for causal attention"
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
    projected_k = _project_length(e, keys)  # [B, H, k, d]
    projected_v = _project_length(f, values)  # [B, H, k, d_v]
    out = attention(
        call.q, projected_k, projected_v, scale=call.scale, return_weights=call.return_weights
    )
    return call.output(out.context, out.weights)


def linformer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_projection: Tensor,
    value_projection: Tensor | None = None,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """Softmax attention over length-projected keys and values (eq. 7).

    Args:
        q: ``[B, H, M, d]`` or ``[B, M, d]``.
        k: ``[B, H_kv, N, d]``.
        v: ``[B, H_kv, N, d_v]``.
        key_projection: ``E [k, n]`` with ``n >= N`` (its first ``N`` columns are used).
        value_projection: ``F [k, n]`` (default: ``E``, key-value sharing).
        options: :class:`~attnkit.efficient._inputs.KindOptions`; the mask is key padding only,
            ``causal`` must be False (Linformer's projections mix future positions into every
            key), ``return_weights`` gives the ``[B, H, M, k]`` weights over the projected keys.

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]`` (and ``weights``).

    Example::

        >>> e = torch.randn(64, 1024) / 32
        >>> x = torch.randn(2, 4, 1000, 16)
        >>> linformer_attention(x, x, x, key_projection=e).context.shape
        torch.Size([2, 4, 1000, 16])
    """
    call = check_call(LinformerAttention.name, q, k, v, **options)
    return _project_and_attend(call, key_projection, value_projection)


@KINDS.register("linformer")
class LinformerAttention(EfficientKind):
    """Linformer's learned length projections ``E`` (and ``F``) for inputs up to ``max_length``;
    the attention kind ``"linformer"``.

    Args:
        max_length: ``n``, the longest key sequence accepted (default 4096, the kind's
            registered default).
        projected_length: ``k``, the number of projected keys (the paper: 128-256).
        share_key_value: one projection for keys and values.
        device, dtype: of the projections.

    Parameters: ``key_projection [k, n]`` (and ``value_projection [k, n]``), initialised
    ``N(0, 1/k)`` (the Johnson–Lindenstrauss scaling of the paper's Theorem 1); they do not
    depend on the head sizes, so they are drawn here (one pair shared by all heads: the paper's
    headwise sharing).

    Example::

        >>> kind = LinformerAttention(max_length=8192, projected_length=256)
        >>> mha = ak.MultiHeadAttention(64, 4, batch_first=True, attention=kind)
    """

    name = "linformer"
    taxonomy = TAXONOMY

    def __init__(
        self,
        max_length: int = 4096,
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

    def attend(self, call: EfficientCall) -> AttentionOutput:
        return _project_and_attend(call, self.key_projection, self.value_projection)

    def extra_repr(self) -> str:
        return (
            f"max_length={self.max_length}, projected_length={self.projected_length}, "
            f"share_key_value={self.value_projection is None}"
        )
