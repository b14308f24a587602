"""The general attention model as math on tensors: scores, alignments, masks, the engine."""

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.general import GeneralAttention

__all__ = ["AttentionOutput", "GeneralAttention", "attention"]
