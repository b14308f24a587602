"""Taxonomy mechanisms built from the core (survey §3.1 and §3.3): one concept per module.

Feature-related (§3.1): co-attention, rotatory attention, attention-via-attention, hierarchical
attention, multi-representational attention. Query-related (§3.3): self-attentive queries,
multi-head, multi-hop and capsule-based attention. Beyond sequences (seed 001): convolutional
attention in ``vision`` (squeeze-and-excitation, CBAM, non-local, criss-cross, dual attention).
Each composes with any score and alignment and
declares its place in ``attnkit.taxonomy``.
"""

from attnkit.mechanisms import vision
from attnkit.mechanisms.attention_via_attention import (
    AttentionViaAttention,
    AttentionViaAttentionOutput,
)
from attnkit.mechanisms.capsule import CapsuleAttention, CapsuleOutput, capsule_loss
from attnkit.mechanisms.co_attention import (
    AlternatingCoAttention,
    BilinearAffinity,
    CoAttentionOutput,
    ConcatAffinity,
    InteractiveCoAttention,
    MultiGrainedCoAttention,
    ParallelCoAttention,
)
from attnkit.mechanisms.hierarchical import (
    HierarchicalAttention,
    HierarchicalAttentionOutput,
    IdentityEncoder,
    RecurrentEncoder,
)
from attnkit.mechanisms.multi_head import MultiHeadAttention
from attnkit.mechanisms.multi_hop import (
    AttentiveQueryTransform,
    LinearQueryTransform,
    MultiHopAttention,
    MultiHopOutput,
)
from attnkit.mechanisms.multi_representational import MultiRepresentationalAttention
from attnkit.mechanisms.rotatory import MultiHopRotatoryAttention, RotatoryAttention, RotatoryOutput
from attnkit.mechanisms.self_attentive import (
    ConstantQueryAttention,
    LearnedQueryAttention,
    SelfAttention,
)
from attnkit.mechanisms.vision import (
    CBAMChannelAttention,
    CBAMSpatialAttention,
    ConvolutionalBlockAttention,
    CrissCrossAttention,
    DualAttention,
    DualChannelAttention,
    DualPositionAttention,
    NonLocalBlock,
    RecurrentCrissCrossAttention,
    SqueezeExcitation,
)

__all__ = [
    "AlternatingCoAttention",
    "AttentionViaAttention",
    "AttentionViaAttentionOutput",
    "AttentiveQueryTransform",
    "BilinearAffinity",
    "CBAMChannelAttention",
    "CBAMSpatialAttention",
    "CapsuleAttention",
    "CapsuleOutput",
    "CoAttentionOutput",
    "ConcatAffinity",
    "ConstantQueryAttention",
    "ConvolutionalBlockAttention",
    "CrissCrossAttention",
    "DualAttention",
    "DualChannelAttention",
    "DualPositionAttention",
    "HierarchicalAttention",
    "HierarchicalAttentionOutput",
    "IdentityEncoder",
    "InteractiveCoAttention",
    "LearnedQueryAttention",
    "LinearQueryTransform",
    "MultiGrainedCoAttention",
    "MultiHeadAttention",
    "MultiHopAttention",
    "MultiHopOutput",
    "MultiHopRotatoryAttention",
    "MultiRepresentationalAttention",
    "NonLocalBlock",
    "ParallelCoAttention",
    "RecurrentCrissCrossAttention",
    "RecurrentEncoder",
    "RotatoryAttention",
    "RotatoryOutput",
    "SelfAttention",
    "SqueezeExcitation",
    "capsule_loss",
    "vision",
]
