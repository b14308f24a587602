"""Nyström attention (Xiong et al. 2021, "Nyströmformer: A Nyström-Based Algorithm for
Approximating Self-Attention", eq. 14-15): softmax attention approximated through ``m`` landmarks,

    Ŝ V = softmax(Q K̃^T·s) · (softmax(Q̃ K̃^T·s))^+ · (softmax(Q̃ K^T·s) V)          (eq. 15)

where the landmarks ``Q̃``, ``K̃`` are the means of ``m`` contiguous segments of the queries and keys
(§3.3; segment sizes differ by at most one when ``m`` does not divide the length) and ``^+`` is the
Moore–Penrose pseudo-inverse by the iteration of Razavi et al. (eq. 16, §3.4):

    Z_0 = A^T / (‖A‖_1 ‖A‖_∞),   Z_{j+1} = ¼ Z_j (13 I - A Z_j (15 I - A Z_j (7 I - A Z_j)))

Cost O((M + N)·m + m³) instead of O(M·N). With ``m = N`` landmarks (one key each) and enough
iterations it is exact softmax attention. A key-padding mask removes keys from the last factor
and from the key landmarks' means; a landmark with no admissible key is removed. Nyström
attention mixes all keys into every landmark, so it cannot be causal (``causal=True`` is refused).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.efficient._inputs import (
    EfficientCall,
    EfficientKind,
    KindOptions,
    check_positive_int,
    masked_softmax,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

TAXONOMY: dict[str, str | list[str]] = {"scoring": "Scaled-Multiplicative", "alignment": "Global"}


def segment_means(x: Tensor, landmarks: int, keep: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Means of ``landmarks`` contiguous segments of ``x [B, H, L, d]`` over the rows ``keep``
    (bool broadcastable to ``[B, H, L]``) → ``([B, H, m, d], nonempty [B', H', m])``."""
    length = x.shape[-2]
    segment = torch.arange(length, device=x.device) * landmarks // max(length, 1)
    assign = (segment == torch.arange(landmarks, device=x.device)[:, None]).to(x.dtype)  # [m, L]
    if keep is not None:
        assign = assign * keep.unsqueeze(-2).to(x.dtype)  # [B', H', m, L]
    counts = assign.sum(-1)
    means = (assign @ x) / counts.clamp_min(1).unsqueeze(-1)
    return means, counts > 0


def iterative_pinv(a: Tensor, iterations: int) -> Tensor:
    """Moore–Penrose pseudo-inverse of each ``a [..., m, m]`` by eq. 16 (Razavi et al. 2014)."""
    scale = a.abs().sum(-2).amax(-1) * a.abs().sum(-1).amax(-1)  # ‖A‖_1 ‖A‖_∞
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    z = a.transpose(-1, -2) / scale[..., None, None]
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


class NystromAttention(EfficientKind):
    """Nyström approximation of ``softmax(scale·q·k^T) v`` through ``landmarks`` landmarks
    (eq. 15); the attention kind ``"nystrom"`` (no parameters).

    Args:
        landmarks: ``m`` (at most ``min(M, N)`` are used: a segment holds at least one row).
        pinv_iterations: iterations of eq. 16 (the paper: 6).

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; key-padding
    masks only, not causal): ``q [B, H, M, d]`` or ``[B, M, d]``, ``k [B, H_kv, N, d]``,
    ``v [B, H_kv, N, d_v]`` → :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> NystromAttention(landmarks=8)(x, x, x).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "nystrom"
    taxonomy = TAXONOMY

    def __init__(self, landmarks: int = 64, pinv_iterations: int = 6) -> None:
        super().__init__()
        self.landmarks = check_positive_int("landmarks", landmarks)
        self.pinv_iterations = check_positive_int("pinv_iterations", pinv_iterations)

    def attend(self, call: EfficientCall) -> AttentionOutput:
        if call.causal:
            raise ValueError(
                "nystrom attention cannot be causal: every landmark averages keys from the whole "
                "sequence; use 'linear', 'performer' or 'sliding_window' for causal attention"
            )
        b, h, m_len, n = call.shape
        if m_len == 0 or n == 0:
            return call.output(call.q.new_zeros(b, h, m_len, call.v.shape[-1]))
        count = min(self.landmarks, m_len, n)
        keep = call.key_mask(self.name)  # [B', H', 1, N] or None
        keep_rows = None if keep is None else keep[..., 0, :]
        q_land, _ = segment_means(call.q, count)
        k_land, k_ok = segment_means(call.k, count, keep_rows)
        land_ok = k_ok.unsqueeze(-2)  # [B', H', 1, m]: landmarks with an admissible key
        s = call.scale
        kernel_1 = masked_softmax((call.q @ k_land.transpose(-1, -2)) * s, land_ok)  # [B,H,M,m]
        kernel_2 = masked_softmax((q_land @ k_land.transpose(-1, -2)) * s, land_ok)  # [B,H,m,m]
        kernel_3 = masked_softmax((q_land @ call.k.transpose(-1, -2)) * s, keep)  # [B,H,m,N]
        pinv = iterative_pinv(kernel_2, self.pinv_iterations)
        return call.output(kernel_1 @ (pinv @ (kernel_3 @ call.v)))

    def extra_repr(self) -> str:
        return f"landmarks={self.landmarks}, pinv_iterations={self.pinv_iterations}"


def nystrom_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    landmarks: int = 64,
    pinv_iterations: int = 6,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """:class:`NystromAttention` as a function (options: :class:`KindOptions`).

    Args:
        q: queries ``[B, H, M, d]`` (or ``[B, M, d]``).
        k: keys ``[B, H_kv, N, d]`` (or ``[B, N, d]``).
        v: values ``[B, H_kv, N, d_v]`` (or ``[B, N, d_v]``).
        landmarks: ``m``.
        pinv_iterations: iterations of eq. 16.
        **options: :class:`~attnkit.efficient._inputs.KindOptions` (key padding only, not causal).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 200, 16)
        >>> nystrom_attention(x, x, x, landmarks=32).context.shape
        torch.Size([2, 4, 200, 16])
    """
    return NystromAttention(landmarks, pinv_iterations)(q, k, v, **options)
