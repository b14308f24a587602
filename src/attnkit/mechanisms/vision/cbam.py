"""CBAM: the Convolutional Block Attention Module (Woo et al., 2018): channel, then spatial attention.

Two attention maps are inferred from the features themselves and applied one after the other:

    M_c(F) = σ(MLP(AvgPool(F)) + MLP(MaxPool(F)))              channel attention  [C, 1, 1] (eq. 2)
    F'     = M_c(F) ⊗ F                                                                   (eq. 1)
    M_s(F') = σ(f^{7x7}([AvgPool(F'); MaxPool(F')]))           spatial attention  [1, h, w] (eq. 3)
    F''    = M_s(F') ⊗ F'                                                                 (eq. 1)

The channel MLP is shared by both pooled descriptors: ``MLP(v) = W_1 δ(W_0 v)`` with
``W_0 [C/r, C]``, ``W_1 [C, C/r]`` and ReLU ``δ``. The spatial pools run along the channel axis,
so ``[AvgPool; MaxPool]`` is a 2-channel map and ``f^{7x7}`` a 7 x 7 convolution to one channel
(padding keeps ``h x w``). Channel-first is the order the paper found best (its Table 4). Where
Squeeze-and-Excitation uses the average only, CBAM adds the max pool, "another important clue
about distinctive object features".

Both gates are sigmoids (no softmax), so the survey's alignment cell stays empty; the queries are
the features themselves (self-attentive).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.mechanisms.vision._checks import check_feature_map, check_positive


class CBAMChannelAttention(nn.Module):
    """CBAM's channel attention: ``M_c = σ(MLP(AvgPool(F)) + MLP(MaxPool(F)))`` (eq. 2).

    Args:
        channels: ``C``.
        reduction: ``r``: the shared MLP's hidden layer has ``max(1, C // r)`` units (paper: 16).

    Shapes: ``F [B, C, h, w]`` → ``M_c(F) ⊗ F [B, C, h, w]``; :meth:`attention_map` gives
    ``M_c [B, C, 1, 1]``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import CBAMChannelAttention
        >>> CBAMChannelAttention(16, reduction=4)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"query_type": "Self-Attentive"}

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        check_positive("CBAMChannelAttention", channels=channels, reduction=reduction)
        self.channels = channels
        hidden = max(1, channels // reduction)
        # one MLP for both descriptors (W_0, then ReLU, then W_1), eq. (2)
        self.mlp = nn.Sequential(
            nn.Linear(channels, hidden), nn.ReLU(), nn.Linear(hidden, channels)
        )

    def attention_map(self, features: Tensor) -> Tensor:
        """``M_c(F) [B, C, 1, 1]`` (eq. 2)."""
        check_feature_map("CBAMChannelAttention", features, self.channels)
        average = self.mlp(features.mean(dim=(2, 3)))  # [B, C]
        maximum = self.mlp(features.amax(dim=(2, 3)))
        return (average + maximum).sigmoid()[:, :, None, None]

    def forward(self, features: Tensor) -> Tensor:
        """``F' = M_c(F) ⊗ F`` (eq. 1).

        Args:
            features: ``F [B, C, h, w]``.

        Returns:
            ``F' [B, C, h, w]``.
        """
        return self.attention_map(features) * features


class CBAMSpatialAttention(nn.Module):
    """CBAM's spatial attention: ``M_s = σ(f^{7x7}([AvgPool(F); MaxPool(F)]))`` (eq. 3).

    Args:
        kernel_size: the convolution's size (odd; paper: 7, better than 3 in its Table 3).

    Shapes: ``F [B, C, h, w]`` (any ``C``) → ``M_s(F) ⊗ F [B, C, h, w]``; :meth:`attention_map`
    gives ``M_s [B, 1, h, w]``.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import CBAMSpatialAttention
        >>> CBAMSpatialAttention()(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"query_type": "Self-Attentive"}

    def __init__(self, kernel_size: int = 7) -> None:
        super().__init__()
        check_positive("CBAMSpatialAttention", kernel_size=kernel_size)
        if kernel_size % 2 == 0:
            raise ValueError(
                f"CBAMSpatialAttention: kernel_size must be odd (to keep h x w), got {kernel_size}"
            )
        # f^{7x7}: 2 pooled maps in, one attention logit per position out, eq. (3)
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2)

    def attention_map(self, features: Tensor) -> Tensor:
        """``M_s(F) [B, 1, h, w]`` (eq. 3)."""
        check_feature_map("CBAMSpatialAttention", features, None)
        pooled = torch.cat(
            [features.mean(dim=1, keepdim=True), features.amax(dim=1, keepdim=True)], dim=1
        )  # [AvgPool(F); MaxPool(F)] along channels: [B, 2, h, w]
        return self.conv(pooled).sigmoid()

    def forward(self, features: Tensor) -> Tensor:
        """``F'' = M_s(F) ⊗ F`` (eq. 1).

        Args:
            features: ``F [B, C, h, w]`` (any ``C``).

        Returns:
            ``F'' [B, C, h, w]``.
        """
        return self.attention_map(features) * features


class ConvolutionalBlockAttention(nn.Module):
    """CBAM: channel attention, then spatial attention on its output (Woo et al., eq. 1-3).

    Args:
        channels: ``C``.
        reduction: ``r`` of the channel MLP (paper: 16).
        kernel_size: the spatial convolution's size (paper: 7).

    Shapes: ``F [B, C, h, w]`` → ``F'' [B, C, h, w]``. In a ResNet block the paper applies CBAM to
    the residual branch before the addition; that addition belongs to the block, not here.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.vision import ConvolutionalBlockAttention
        >>> ConvolutionalBlockAttention(16, reduction=4)(torch.randn(2, 16, 5, 7)).shape
        torch.Size([2, 16, 5, 7])
    """

    taxonomy = {"query_type": "Self-Attentive"}

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__()
        self.channel = CBAMChannelAttention(channels, reduction)
        self.spatial = CBAMSpatialAttention(kernel_size)

    def forward(self, features: Tensor) -> Tensor:
        """``F'' = M_s(F') ⊗ F'`` with ``F' = M_c(F) ⊗ F`` (eq. 1).

        Args:
            features: ``F [B, C, h, w]``.

        Returns:
            ``F'' [B, C, h, w]``.
        """
        return self.spatial(self.channel(features))
