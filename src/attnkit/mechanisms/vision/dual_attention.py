"""Dual attention (Fu et al., 2019, "Dual Attention Network for Scene Segmentation", DANet).

Two self-attentions over one feature map ``A [C, h, w]`` (``N = h w``), added together:

**Position attention module** — ``B, C' [C/8, N]`` and ``D [C, N]`` by 1 x 1 convolutions:

    s_ji = exp(B_i · C_j) / Σ_{i=1}^N exp(B_i · C_j)                        (eq. 1)
    E_j  = α Σ_{i=1}^N (s_ji D_i) + A_j                                       (eq. 2)

**Channel attention module** — the channels of ``A`` themselves (``A_i ∈ R^N``):

    x_ji = exp(A_i · A_j) / Σ_{i=1}^C exp(A_i · A_j)                        (eq. 3)
    E_j  = β Σ_{i=1}^C (x_ji A_i) + A_j                                       (eq. 4)

``α`` and ``β`` are learned scalars initialised to 0 (the paper's "gradually learns to assign
more weight"), so both modules start as the identity. Each softmax is
:func:`attnkit.attention` with the unscaled dot score: position ``j`` (channel ``j``) is the query.

The paper's released code computes the channel attention as ``softmax(max_i(e) - e)`` with
``e_ji = A_j · A_i``; subtracting the row maximum alone would change nothing, but the *negated*
energy inverts the ranking — channels *least* similar to ``j`` get the largest weight — which is
not eq. (3). This module follows eq. (3).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.core.engine import attention
from attnkit.mechanisms.vision._checks import check_feature_map, check_positive


def _positions(x: Tensor) -> Tensor:
    """``[B, C, h, w]`` → one row per position ``[B, h w, C]``."""
    return x.flatten(2).transpose(1, 2)


class DualPositionAttention(nn.Module):
    """DANet's position attention: ``E_j = α Σ_i softmax_i(B_i · C_j) D_i + A_j`` (eq. 1-2).

    Args:
        channels: ``C``.
        key_channels: channels of ``B`` and ``C`` (default ``max(1, C // 8)``, the paper's).

    Shapes: ``A [B, C, h, w]`` → ``E [B, C, h, w]``; ``self.alpha`` is ``α`` (starts at 0).

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import DualPositionAttention
        >>> DualPositionAttention(16)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"scoring": "Multiplicative", "alignment": "Global", "query_type": "Self-Attentive"}

    def __init__(self, channels: int, key_channels: int | None = None) -> None:
        super().__init__()
        key_channels = key_channels or max(1, channels // 8)
        check_positive("DualPositionAttention", channels=channels, key_channels=key_channels)
        self.channels = channels
        self.key = nn.Conv2d(channels, key_channels, 1)  # B of eq. (1), indexed by i
        self.query = nn.Conv2d(channels, key_channels, 1)  # C of eq. (1), indexed by j
        self.value = nn.Conv2d(channels, channels, 1)  # D of eq. (2)
        self.alpha = nn.Parameter(torch.zeros(1))

    def forward(self, a: Tensor) -> Tensor:
        """``E = α · attention + A`` (eq. 2).

        Args:
            a: the feature map ``A [B, C, h, w]``.

        Returns:
            ``E [B, C, h, w]``.
        """
        check_feature_map("DualPositionAttention", a, self.channels)
        out = attention(
            _positions(self.query(a)),  # C_j: [B, N, C/8]
            _positions(self.key(a)),  # B_i
            _positions(self.value(a)),  # D_i: [B, N, C]
            score="dot",
        ).context  # Σ_i s_ji D_i: [B, N, C]
        return self.alpha * out.transpose(1, 2).reshape(a.shape) + a


class DualChannelAttention(nn.Module):
    """DANet's channel attention: ``E_j = β Σ_i softmax_i(A_i · A_j) A_i + A_j`` (eq. 3-4).

    No parameters but ``β``: the channels attend each other directly.

    Args:
        channels: ``C``.

    Shapes: ``A [B, C, h, w]`` → ``E [B, C, h, w]``; ``self.beta`` is ``β`` (starts at 0).

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import DualChannelAttention
        >>> DualChannelAttention(16)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"scoring": "Multiplicative", "alignment": "Global", "query_type": "Self-Attentive"}

    def __init__(self, channels: int) -> None:
        super().__init__()
        check_positive("DualChannelAttention", channels=channels)
        self.channels = channels
        self.beta = nn.Parameter(torch.zeros(1))

    def forward(self, a: Tensor) -> Tensor:
        """``E = β · attention + A`` (eq. 4).

        Args:
            a: the feature map ``A [B, C, h, w]``.

        Returns:
            ``E [B, C, h, w]``.
        """
        check_feature_map("DualChannelAttention", a, self.channels)
        channels = a.flatten(2)  # A_i ∈ R^N: [B, C, N], one row per channel
        out = attention(channels, channels, channels, score="dot").context  # eq. (3)-(4)
        return self.beta * out.reshape(a.shape) + a


class DualAttention(nn.Module):
    """DANet's dual attention: position and channel attention of one map, summed (Fu et al. §3).

    The paper fuses the two modules' outputs by element-wise sum, each after a convolution of its
    own; those convolutions (and the ones before) are the segmentation head's, so they are left
    to the network: this is ``PAM(A) + CAM(A)``.

    Args:
        channels: ``C``.
        key_channels: channels of the position attention's ``B``, ``C`` (default ``C // 8``).

    Shapes: ``A [B, C, h, w]`` → ``[B, C, h, w]`` (``2 A`` at initialisation, ``α = β = 0``).

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import DualAttention
        >>> DualAttention(16)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"query_type": "Self-Attentive"}

    def __init__(self, channels: int, key_channels: int | None = None) -> None:
        super().__init__()
        self.position = DualPositionAttention(channels, key_channels)
        self.channel = DualChannelAttention(channels)

    def forward(self, a: Tensor) -> Tensor:
        """``E_PAM + E_CAM``.

        Args:
            a: the feature map ``A [B, C, h, w]``.

        Returns:
            ``[B, C, h, w]``.
        """
        return self.position(a) + self.channel(a)
