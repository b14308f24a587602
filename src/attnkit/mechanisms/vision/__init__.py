"""Convolutional attention over ``[B, C, h, w]`` feature maps, one paper per module.

Channel attention: :class:`SqueezeExcitation` (Hu et al., 2018); CBAM's channel and spatial
attention (Woo et al., 2018). Attention over positions: the non-local block (Wang et al., 2018),
criss-cross attention (Huang et al., 2019), and DANet's position and channel attention (Fu et al.,
2019). The softmax attentions run through :func:`attnkit.attention`; each module declares its
place in ``attnkit.taxonomy``.
"""

from attnkit.mechanisms.vision.cbam import (
    CBAMChannelAttention,
    CBAMSpatialAttention,
    ConvolutionalBlockAttention,
)
from attnkit.mechanisms.vision.criss_cross import CrissCrossAttention, RecurrentCrissCrossAttention
from attnkit.mechanisms.vision.dual_attention import (
    DualAttention,
    DualChannelAttention,
    DualPositionAttention,
)
from attnkit.mechanisms.vision.non_local import NonLocalBlock
from attnkit.mechanisms.vision.squeeze_excitation import SqueezeExcitation

__all__ = [
    "CBAMChannelAttention",
    "CBAMSpatialAttention",
    "ConvolutionalBlockAttention",
    "CrissCrossAttention",
    "DualAttention",
    "DualChannelAttention",
    "DualPositionAttention",
    "NonLocalBlock",
    "RecurrentCrissCrossAttention",
    "SqueezeExcitation",
]
