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

Optional depthwise-convolution residual on the values (the default of the ``nystrom-attention``
package, ``residual=True``, and of the authors' code): each head adds a 1-D convolution of its
values along the sequence, ``out_i += Σ_t w_h[t] · v_{i + t - K//2}`` (kernel ``K``, 33 there; zero
padding at both ends, masked-out keys' values read as zeros, as the package does), a local
correction of the low-rank estimate. It needs ``M = N`` (self-attention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.kinds import KINDS
from attnkit.efficient._inputs import (
    EfficientCall,
    EfficientKind,
    KindOptions,
    check_call,
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
    if keep is None and length % landmarks == 0:
        # equal segments: a reshape and a sum (no [m, L] assignment matrix to build and
        # multiply); dividing the [m, d] sums, not the rows, keeps the backward to one expand
        size = length // landmarks
        means = x.unflatten(-2, (landmarks, size)).sum(-2) / size
        return means, torch.ones(landmarks, dtype=torch.bool, device=x.device)
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


def value_residual(v: Tensor, weight: Tensor, keep: Tensor | None = None) -> Tensor:
    """The depthwise-convolution residual on the values: ``v [B, H, N, d_v]`` convolved along the
    sequence, per head, with ``weight [H, 1, K, 1]`` (an ``nn.Conv2d(H, H, (K, 1), groups=H)``
    weight, ``K`` odd), zero-padded to keep ``N`` positions; keys outside ``keep`` (bool
    broadcastable to ``[B, H, 1, N]``) read as zeros. Returns ``[B, H, N, d_v]``."""
    if keep is not None:
        v = torch.where(keep.transpose(-1, -2), v, torch.zeros((), dtype=v.dtype))
    size = weight.shape[-2]
    return F.conv2d(v, weight.to(v.dtype), padding=(size // 2, 0), groups=v.shape[1])


def _check_residual_weight(weight: object, heads: int) -> Tensor:
    if not isinstance(weight, Tensor):
        raise TypeError(
            f"residual_weight must be a Tensor [H, 1, K, 1], got {type(weight).__name__}"
        )
    shape = tuple(weight.shape)
    if (
        weight.dim() != 4
        or shape[0] != heads
        or shape[1] != 1
        or shape[3] != 1
        or shape[2] % 2 != 1
    ):
        raise ValueError(
            f"residual_weight must be a depthwise Conv2d weight [H={heads}, 1, K, 1] with K odd, "
            f"got shape {shape}"
        )
    return weight


def _landmark_product(q_land: Tensor, k_land: Tensor, w: Tensor, iterations: int) -> Tensor:
    """``(softmax(Q̃ K̃^T))^+ · W`` (eq. 15's middle factor times the last): ``q_land [.., m, d]``
    already scaled, ``k_land [.., m, d]``, ``w [.., m, d_v]``."""
    return iterative_pinv(torch.softmax(q_land @ k_land.transpose(-1, -2), -1), iterations) @ w


class _UnmaskedNystrom(torch.autograd.Function):
    """Eq. 15 without a mask, on segments of equal size, with the backward written out.

    Autograd through the formula allocates, beside the gradients it must return, the softmaxes'
    input gradients, a copy of each landmark mean's gradient spread over its segment and the sum
    of the two gradients reaching ``q`` and ``k`` (the scores and the landmarks): eleven
    ``[.., N, ·]`` tensors, each a fresh allocation written once. Here, with ``Ŝ1 = Q K̃ᵀ·s``,
    ``K1 = softmax(Ŝ1)``, ``K3 = softmax(Q̃ K^T·s)``, ``W = K3 V``, ``P = K2^+ W`` and the
    context ``C = K1 P``, there are five::

        δP = K1ᵀ δC                 δŜ1 = K1 ∘ (δC Pᵀ − Σ_d δC_d C_d)      # in place
        δW, δQ̃, δK̃  from  P = (softmax(Q̃ K̃ᵀ·s))^+ W   ([m, m]: autograd's graph)
        δV = K3ᵀ δW                 δŜ3 = K3 ∘ (δW Vᵀ − Σ_d δW_d W_d)      # in place
        δQ = spread(δQ̃)·s/l + δŜ1 K̃·s       δK = spread(δK̃)/l + δŜ3ᵀ Q̃·s   # one baddbmm each

    where the softmaxes' row sums ``Σ_j K_j δK_j`` are the ``[.., ·, d]`` products of the
    gradient and the output (``c = a v``, as in ``core/dense.py``), and spread(x) repeats each
    landmark's row over the ``l`` rows of its segment. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, q, k, v, scale, count, iterations):  # type: ignore[no-untyped-def, override]
        q_size, k_size = q.shape[-2] // count, k.shape[-2] // count
        # the scale on the [m, d] landmarks, not on the [M, d] queries: s·(Q K̃ᵀ) = Q (s·K̃)ᵀ
        q_land = q.unflatten(-2, (count, q_size)).sum(-2).mul_(scale / q_size)
        k_land = k.unflatten(-2, (count, k_size)).sum(-2).div_(k_size)
        scores = q @ (k_land * scale).transpose(-1, -2)  # [B, H, M, m]
        kernel_1 = torch.softmax(scores, -1, out=scores)
        scores = q_land @ k.transpose(-1, -2)  # [B, H, m, N]
        kernel_3 = torch.softmax(scores, -1, out=scores)
        w = kernel_3 @ v
        # the [m, m] part through the pseudo-inverse keeps autograd's graph (its 6 iterations
        # are 24 small products forward, 48 backward): built here, used once by the backward
        needs_grad = any(ctx.needs_input_grad[:3])
        with torch.set_grad_enabled(needs_grad):
            small = [t.detach().requires_grad_(needs_grad) for t in (q_land, k_land, w)]
            product = _landmark_product(*small, iterations)
        p = product.detach()
        context = kernel_1 @ p
        ctx.save_for_backward(q, k, v, q_land, k_land, kernel_1, kernel_3, w, p, context)
        ctx.small = (small, product) if needs_grad else None
        ctx.options = (scale, count)
        return context

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_context):  # type: ignore[no-untyped-def, override]
        q, k, v, q_land, k_land, kernel_1, kernel_3, w, p, context = ctx.saved_tensors
        scale, count = ctx.options
        d_p = kernel_1.transpose(-1, -2) @ d_context
        d_s1 = d_context @ p.transpose(-1, -2)  # δK1 [B, H, M, m], then δŜ1 in its place
        d_s1.sub_(_row_dots(d_context, context)).mul_(kernel_1)
        small, product = ctx.small
        # retain_graph: a backward of the outer graph may run again (retain_graph=True there)
        d_q_land, d_k_land, d_w = torch.autograd.grad(product, small, d_p, retain_graph=True)
        d_v = kernel_3.transpose(-1, -2) @ d_w
        d_s3 = d_w @ v.transpose(-1, -2)  # δK3 [B, H, m, N], then δŜ3 in its place
        d_s3.sub_(_row_dots(d_w, w)).mul_(kernel_3)
        d_q_land = d_q_land + d_s3 @ k
        d_k_land = d_k_land + (d_s1.transpose(-1, -2) @ q).mul_(scale)
        d_q = _spread(d_q_land * (scale / (q.shape[-2] // count)), q.shape)
        d_q.flatten(0, -3).baddbmm_(d_s1.flatten(0, -3), (k_land * scale).flatten(0, -3))
        d_k = _spread(d_k_land / (k.shape[-2] // count), k.shape)
        d_k.flatten(0, -3).baddbmm_(d_s3.transpose(-1, -2).flatten(0, -3), q_land.flatten(0, -3))
        return d_q, d_k, d_v, None, None, None


def _row_dots(a: Tensor, b: Tensor) -> Tensor:
    """``Σ_d a_d b_d`` of each row of ``a, b [.., R, d]`` → ``[.., R, 1]``: as products of
    ``[1, d] × [d, 1]`` matrices, which write no ``[.., R, d]`` product (a quarter of the time
    of ``(a * b).sum(-1)`` at ``R = 16384``, 8 heads, ``d = 64``, measured on one thread)."""
    return (a.unsqueeze(-2) @ b.unsqueeze(-1)).squeeze(-1)


def _spread(landmarks: Tensor, shape: torch.Size) -> Tensor:
    """Each landmark's row ``[.., m, d]`` repeated over its segment: a new ``shape [.., L, d]``
    tensor (``L`` a multiple of ``m``)."""
    count, length = landmarks.shape[-2], shape[-2]
    spread = landmarks.unsqueeze(-2).expand(*landmarks.shape[:-1], length // count, shape[-1])
    return spread.reshape(shape)


def _nystrom(
    call: EfficientCall, landmarks: int, pinv_iterations: int, residual_weight: Tensor | None
) -> AttentionOutput:
    """Eq. 15 on a checked call (plus the value residual when a weight is given)."""
    if call.causal:
        raise ValueError(
            "nystrom attention cannot be causal: every landmark averages keys from the whole "
            "sequence; use 'linear', 'performer' or 'sliding_window' for causal attention"
        )
    b, h, m_len, n = call.shape
    if residual_weight is not None:
        call.require_self_attention("nystrom attention with the value residual")
        _check_residual_weight(residual_weight, h)
    if m_len == 0 or n == 0:
        return call.output(call.q.new_zeros(b, h, m_len, call.v.shape[-1]))
    count = min(landmarks, m_len, n)
    keep = call.key_mask("nystrom")  # [B', H', 1, N] or None
    same_heads = call.q.shape[:2] == call.k.shape[:2] == call.v.shape[:2]
    if keep is None and same_heads and m_len % count == 0 and n % count == 0:
        context = _UnmaskedNystrom.apply(call.q, call.k, call.v, call.scale, count, pinv_iterations)
        if residual_weight is not None:
            context = context + value_residual(call.v, residual_weight)
        return call.output(context)
    # the scale folded into the queries once ([M, d]) instead of into three score matrices
    q = call.q * call.scale
    q_land, _ = segment_means(q, count)
    if keep is None:
        # no mask: plain softmaxes (nothing is -inf, so no landmark mask and no NaN repair)
        k_land, _ = segment_means(call.k, count)
        kernel_1 = torch.softmax(q @ k_land.transpose(-1, -2), -1)  # [B, H, M, m]
        kernel_2 = torch.softmax(q_land @ k_land.transpose(-1, -2), -1)  # [B, H, m, m]
        kernel_3 = torch.softmax(q_land @ call.k.transpose(-1, -2), -1)  # [B, H, m, N]
    else:
        k_land, k_ok = segment_means(call.k, count, keep[..., 0, :])
        land_ok = k_ok.unsqueeze(-2)  # [B', H', 1, m]: landmarks with an admissible key
        kernel_1 = masked_softmax(q @ k_land.transpose(-1, -2), land_ok)
        kernel_2 = masked_softmax(q_land @ k_land.transpose(-1, -2), land_ok)
        kernel_3 = masked_softmax(q_land @ call.k.transpose(-1, -2), keep)
    pinv = iterative_pinv(kernel_2, pinv_iterations)
    context = kernel_1 @ (pinv @ (kernel_3 @ call.v))
    if residual_weight is not None:
        context = context + value_residual(call.v, residual_weight, keep)
    return call.output(context)


@KINDS.register("nystrom")
class NystromAttention(EfficientKind):
    """Nyström approximation of ``softmax(scale·q·k^T) v`` through ``landmarks`` landmarks
    (eq. 15); the attention kind ``"nystrom"`` (no parameters unless ``residual``).

    Args:
        landmarks: ``m`` (at most ``min(M, N)`` are used: a segment holds at least one row).
        pinv_iterations: iterations of eq. 16 (the paper: 6).
        residual: add the depthwise-convolution residual on the values (module doc; the
            ``nystrom-attention`` package's default): a parameter ``res_conv``, an
            ``nn.Conv2d(H, H, (K, 1), padding=(K // 2, 0), groups=H, bias=False)`` as in that
            package (its ``state_dict`` key is the same), built for ``num_heads`` heads.
        residual_conv_kernel: ``K`` (odd; the package's default 33).
        num_heads: ``H`` for the residual; ``None``: given by the
            :class:`~attnkit.MultiHeadAttention` that runs it (:meth:`bind`).

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; key-padding
    masks only, not causal): ``q [B, H, M, d]`` or ``[B, M, d]``, ``k [B, H_kv, N, d]``,
    ``v [B, H_kv, N, d_v]`` → :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> NystromAttention(landmarks=8)(x, x, x).context.shape
        torch.Size([2, 4, 64, 8])
        >>> NystromAttention(landmarks=8, residual=True, num_heads=4)(x, x, x).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "nystrom"
    taxonomy = TAXONOMY
    res_conv: nn.Conv2d | None

    def __init__(
        self,
        landmarks: int = 64,
        pinv_iterations: int = 6,
        *,
        residual: bool = False,
        residual_conv_kernel: int = 33,
        num_heads: int | None = None,
    ) -> None:
        super().__init__()
        self.landmarks = check_positive_int("landmarks", landmarks)
        self.pinv_iterations = check_positive_int("pinv_iterations", pinv_iterations)
        if not isinstance(residual, bool):
            raise TypeError(f"residual must be a bool, got {type(residual).__name__}")
        self.residual = residual
        kernel = check_positive_int("residual_conv_kernel", residual_conv_kernel)
        if kernel % 2 != 1:
            raise ValueError(f"residual_conv_kernel must be odd, got {kernel}")
        self.residual_conv_kernel = kernel
        self.num_heads = None if num_heads is None else check_positive_int("num_heads", num_heads)
        self.res_conv = None
        if residual and self.num_heads is not None:
            self.res_conv = self._conv(self.num_heads)

    def _conv(self, heads: int) -> nn.Conv2d:
        size = self.residual_conv_kernel
        return nn.Conv2d(heads, heads, (size, 1), padding=(size // 2, 0), groups=heads, bias=False)

    def bind(self, num_heads: int, head_dim_k: int, head_dim_v: int) -> NystromAttention:
        """Build the residual convolution for ``num_heads`` heads (if ``residual`` and no
        ``num_heads`` was given; else check it)."""
        super().bind(num_heads, head_dim_k, head_dim_v)
        if self.num_heads is None:
            self.num_heads = num_heads
            if self.residual:
                self.res_conv = self._conv(num_heads)
        elif self.num_heads != num_heads:
            raise ValueError(
                f"this NystromAttention was built for num_heads={self.num_heads}, but the module "
                f"has num_heads={num_heads}; leave num_heads out to take the module's"
            )
        return self

    def attend(self, call: EfficientCall) -> AttentionOutput:
        weight = None
        if self.residual:
            if self.res_conv is None:
                raise ValueError(
                    "this NystromAttention has no residual convolution yet: give num_heads, or "
                    "run it in a MultiHeadAttention (which gives its head count)"
                )
            weight = self.res_conv.weight
        return _nystrom(call, self.landmarks, self.pinv_iterations, weight)

    def extra_repr(self) -> str:
        extra = f", residual_conv_kernel={self.residual_conv_kernel}" if self.residual else ""
        return f"landmarks={self.landmarks}, pinv_iterations={self.pinv_iterations}" + extra


def nystrom_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    landmarks: int = 64,
    pinv_iterations: int = 6,
    residual_weight: Tensor | None = None,
    **options: Unpack[KindOptions],
) -> AttentionOutput:
    """:class:`NystromAttention` as a function (options: :class:`KindOptions`).

    Args:
        q: queries ``[B, H, M, d]`` (or ``[B, M, d]``).
        k: keys ``[B, H_kv, N, d]`` (or ``[B, N, d]``).
        v: values ``[B, H_kv, N, d_v]`` (or ``[B, N, d_v]``).
        landmarks: ``m``.
        pinv_iterations: iterations of eq. 16.
        residual_weight: the value residual's depthwise convolution weight ``[H, 1, K, 1]``
            (``K`` odd; e.g. ``nystrom_attention.NystromAttention(...).res_conv.weight``), or
            ``None`` for no residual.
        **options: :class:`~attnkit.efficient._inputs.KindOptions` (key padding only, not causal).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 200, 16)
        >>> nystrom_attention(x, x, x, landmarks=32).context.shape
        torch.Size([2, 4, 200, 16])
    """
    call = check_call(NystromAttention.name, q, k, v, **options)
    landmarks = check_positive_int("landmarks", landmarks)
    pinv_iterations = check_positive_int("pinv_iterations", pinv_iterations)
    return _nystrom(call, landmarks, pinv_iterations, residual_weight)
