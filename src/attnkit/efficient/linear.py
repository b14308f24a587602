"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs: Fast Autoregressive
Transformers with Linear Attention", eq. 4-9): softmax's ``exp(q·k)`` replaced by a kernel
``φ(q)·φ(k)`` with ``φ(x) = elu(x) + 1``, so the sum over keys factors out:

    V'_i = φ(Q_i)^T Σ_j φ(K_j) V_j^T  /  φ(Q_i)^T Σ_j φ(K_j)                       (eq. 5)

O(N·m·d_v) time and memory instead of O(M·N); causal (eq. 8-9) by chunked prefix sums, and the
recurrent form (eq. 18-20, :func:`linear_attention_step`) for decoding. The kernel computation is
:mod:`attnkit.core.kernel` (shared with Performer and fast weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.kernel import (
    TAXONOMY,
    LinearAttentionState,
    elu_feature_map,
    kernel_attention,
    kernel_attention_step,
)
from attnkit.core.kinds import KINDS
from attnkit.efficient._inputs import EfficientCall, EfficientKind, KindOptions, check_positive_int

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "TAXONOMY",
    "LinearAttention",
    "LinearAttentionState",
    "elu_feature_map",
    "kernel_attention",
    "linear_attention",
    "linear_attention_step",
]


def linear_attention_step(
    q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState | None = None
) -> tuple[Tensor, LinearAttentionState]:
    """Causal linear attention as an RNN, one token: ``q``, ``k`` ``[B, H, d]``, ``v [B, H, d_v]``
    → ``(output [B, H, d_v], state)`` (Katharopoulos et al. eq. 18-20). Feeding tokens
    ``0 … L-1`` gives the outputs of ``linear_attention(q, k, v, causal=True)``.

    Args:
        q: the token's query ``[B, H, d]``.
        k: its key ``[B, H, d]``.
        v: its value ``[B, H, d_v]``.
        state: the state after the earlier tokens (``None``: none yet).

    Returns:
        ``(output [B, H, d_v], state)``: the state includes this token.

    Example::

        >>> state = None
        >>> for t in range(3):
        ...     out, state = linear_attention_step(torch.randn(2, 4, 8), torch.randn(2, 4, 8),
        ...                                        torch.randn(2, 4, 6), state)
        >>> out.shape, state.s.shape
        (torch.Size([2, 4, 6]), torch.Size([2, 4, 8, 6]))"""
    return kernel_attention_step(elu_feature_map(q), elu_feature_map(k), v, state)


@KINDS.register("linear")
class LinearAttention(EfficientKind):
    """Linear attention with ``φ = elu + 1`` (eq. 5; causal eq. 9 by chunked prefix sums); the
    attention kind ``"linear"`` (no parameters).

    Args:
        chunk: positions per chunk of the causal prefix sums (memory/speed trade-off only).

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; the mask is
    key padding only, ``scale`` is not used: the kernel replaces the scaled dot product):
    ``q [B, H, M, d]`` or ``[B, M, d]``, ``k [B, H_kv, N, d]``, ``v [B, H_kv, N, d_v]`` →
    :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 64, 8)
        >>> LinearAttention()(x, x, x, causal=True).context.shape
        torch.Size([2, 4, 64, 8])
    """

    name = "linear"
    taxonomy = TAXONOMY

    def __init__(self, chunk: int = 64) -> None:
        super().__init__()
        self.chunk = check_positive_int("chunk", chunk)

    def attend(self, call: EfficientCall) -> AttentionOutput:
        context = kernel_attention(
            elu_feature_map(call.q),
            elu_feature_map(call.k),
            call.v,
            causal=call.causal,
            key_mask=call.key_mask(self.name),
            chunk=self.chunk,
        )
        return call.output(context)

    def extra_repr(self) -> str:
        return f"chunk={self.chunk}"


def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, *, chunk: int = 64, **options: Unpack[KindOptions]
) -> AttentionOutput:
    """:class:`LinearAttention` as a function (options: :class:`KindOptions`).

    Args:
        q: queries ``[B, H, M, d]`` (or ``[B, M, d]``).
        k: keys ``[B, H_kv, N, d]`` (or ``[B, N, d]``).
        v: values ``[B, H_kv, N, d_v]`` (or ``[B, N, d_v]``).
        chunk: positions per chunk of the causal prefix sums.
        **options: :class:`~attnkit.efficient._inputs.KindOptions` (``mask``, ``causal``,
            ``return_weights``, ...).

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context [B, H, M, d_v]``.

    Example::

        >>> x = torch.randn(2, 4, 256, 32)
        >>> linear_attention(x, x, x, causal=True).context.shape
        torch.Size([2, 4, 256, 32])
    """
    return LinearAttention(chunk)(q, k, v, **options)
