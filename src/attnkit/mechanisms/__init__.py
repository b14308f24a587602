"""Taxonomy mechanisms built from the core (survey §3.1 and §3.3): one concept per module.

Feature-related (§3.1): co-attention, rotatory attention, attention-via-attention, hierarchical
attention, multi-representational attention. Query-related (§3.3): self-attentive queries,
multi-head, multi-hop and capsule-based attention. Beyond sequences (docs/beyond-sequences.md): convolutional
attention in ``vision`` (squeeze-and-excitation, CBAM, non-local, criss-cross, dual attention),
sets (Set Transformer), latents (Perceiver), associative memory (modern Hopfield, fast weights) and
graphs (GAT, GATv2).
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
from attnkit.mechanisms.fast_weights import (
    FastWeightProgrammer,
    FastWeightState,
    delta_update_step,
    sum_update_step,
)
from attnkit.mechanisms.graph import GraphAttention, GraphAttentionOutput, GraphAttentionV2
from attnkit.mechanisms.hierarchical import (
    HierarchicalAttention,
    HierarchicalAttentionOutput,
    IdentityEncoder,
    RecurrentEncoder,
)
from attnkit.mechanisms.hopfield import Hopfield, HopfieldLayer, HopfieldPooling, hopfield_update
from attnkit.mechanisms.latent import LatentCrossAttention, LatentSelfAttention, PerceiverEncoder
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
from attnkit.mechanisms.sets import (
    InducedSetAttentionBlock,
    MultiheadAttentionBlock,
    PoolingByMultiheadAttention,
    SetAttentionBlock,
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
    "FastWeightProgrammer",
    "FastWeightState",
    "GraphAttention",
    "GraphAttentionOutput",
    "GraphAttentionV2",
    "HierarchicalAttention",
    "HierarchicalAttentionOutput",
    "Hopfield",
    "HopfieldLayer",
    "HopfieldPooling",
    "IdentityEncoder",
    "InducedSetAttentionBlock",
    "InteractiveCoAttention",
    "LatentCrossAttention",
    "LatentSelfAttention",
    "LearnedQueryAttention",
    "LinearQueryTransform",
    "MultiGrainedCoAttention",
    "MultiHeadAttention",
    "MultiHopAttention",
    "MultiHopOutput",
    "MultiHopRotatoryAttention",
    "MultiRepresentationalAttention",
    "MultiheadAttentionBlock",
    "NonLocalBlock",
    "ParallelCoAttention",
    "PerceiverEncoder",
    "PoolingByMultiheadAttention",
    "RecurrentCrissCrossAttention",
    "RecurrentEncoder",
    "RotatoryAttention",
    "RotatoryOutput",
    "SelfAttention",
    "SetAttentionBlock",
    "SqueezeExcitation",
    "capsule_loss",
    "delta_update_step",
    "hopfield_update",
    "sum_update_step",
    "vision",
]
