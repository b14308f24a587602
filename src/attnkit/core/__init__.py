"""The general attention model as math on tensors: scores, alignments, masks, the engine."""

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention, backends, explain
from attnkit.core.general import GeneralAttention
from attnkit.core.hooks import AttentionHook, attention_hooks, observed

__all__ = [
    "AttentionHook",
    "AttentionOutput",
    "GeneralAttention",
    "attention",
    "attention_hooks",
    "backends",
    "explain",
    "observed",
]
