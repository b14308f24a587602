"""Transformer building blocks: layers and stacks, position encodings, KV caches, decoding.

>>> from attnkit.layers import TransformerEncoderLayer, RotaryEmbedding, KVCache
"""

from attnkit.layers.alibi import ALiBi, alibi_slopes
from attnkit.layers.attention import LayerOutput, cross_attend, exact_kinds, self_attend
from attnkit.layers.kv_cache import (
    CrossAttentionCache,
    DecoderLayerCache,
    KVCache,
    reorder_caches,
)
from attnkit.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from attnkit.layers.relative_bias import RelativePositionBias, relative_position_bucket
from attnkit.layers.rotary import RotaryEmbedding
from attnkit.layers.segment_recurrence import (
    RecurrentTransformerLayer,
    RelativeMultiHeadAttention,
    TransformerXL,
    relative_sinusoids,
    update_memory,
)
from attnkit.layers.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    TransformerLayer,
)

__all__ = [
    "ALiBi",
    "CrossAttentionCache",
    "DecoderLayerCache",
    "KVCache",
    "LayerOutput",
    "LearnedPositionalEmbedding",
    "RecurrentTransformerLayer",
    "RelativeMultiHeadAttention",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "TransformerLayer",
    "TransformerXL",
    "alibi_slopes",
    "cross_attend",
    "exact_kinds",
    "relative_position_bucket",
    "relative_sinusoids",
    "reorder_caches",
    "self_attend",
    "update_memory",
]
