"""Efficient (sub-quadratic) attention: sliding window, Longformer, BigBird, linear, Performer,
Linformer, Nyström, LSH (Reformer), and Synthesizer.

Every kind takes attnkit's call conventions (``q [B, H, M, d]``, ``k``/``v [B, H_kv, N, ·]`` or
3-D; bool masks with True = may attend; bottom-right ``causal``) and returns an
:class:`attnkit.AttentionOutput`. Each is a class (a configured kind object for
``MultiHeadAttention(attention=...)``, e.g. ``LinformerAttention(max_length=8192)``) and a function
of the same algorithm. Each class registers its name in the one attention-kind
registry (:data:`attnkit.core.kinds.KINDS`: ``attention="linear"``, ...) with
``@KINDS.register``; importing this package imports them all. A name builds a new kind object
with that class's default hyperparameters (window 256, 256 random features, 64 landmarks, blocks
and buckets of 64, maximum length 4096 projected to 256); for other settings pass a configured
object: ``MultiHeadAttention(64, 4, attention=LinformerAttention(max_length=8192,
projected_length=256))``. See docs/efficient.md.
"""

from attnkit.efficient.bigbird import BigBirdAttention, bigbird_attention, bigbird_blocks
from attnkit.efficient.linear import (
    LinearAttention,
    LinearAttentionState,
    linear_attention,
    linear_attention_step,
)
from attnkit.efficient.linformer import LinformerAttention, linformer_attention
from attnkit.efficient.longformer import LongformerAttention, longformer_attention
from attnkit.efficient.lsh import LSHAttention, lsh_attention
from attnkit.efficient.nystrom import NystromAttention, nystrom_attention
from attnkit.efficient.performer import (
    PerformerAttention,
    orthogonal_gaussian,
    performer_attention,
    redraw_performer_features,
)
from attnkit.efficient.sliding_window import SlidingWindowAttention, sliding_window_attention
from attnkit.efficient.synthesizer import SynthesizerAttention

__all__ = [
    "BigBirdAttention",
    "LSHAttention",
    "LinearAttention",
    "LinearAttentionState",
    "LinformerAttention",
    "LongformerAttention",
    "NystromAttention",
    "PerformerAttention",
    "SlidingWindowAttention",
    "SynthesizerAttention",
    "bigbird_attention",
    "bigbird_blocks",
    "linear_attention",
    "linear_attention_step",
    "linformer_attention",
    "longformer_attention",
    "lsh_attention",
    "nystrom_attention",
    "orthogonal_gaussian",
    "performer_attention",
    "redraw_performer_features",
    "sliding_window_attention",
]
