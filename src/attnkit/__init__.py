"""attnkit: attention mechanisms in deep learning — complete, exact and fast, on PyTorch.

    >>> import attnkit as ak
    >>> out = ak.attention(q, k, v, score="additive" or ak.scores.Additive(...), align="softmax")

See README.md and docs/core.md for the map from the survey's equations to this API.
"""

from attnkit import (
    data,
    distributed,
    efficient,
    evaluate,
    interpret,
    layers,
    mechanisms,
    models,
    taxonomy,
)
from attnkit.core import align, masks, scores
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention, explain
from attnkit.core.general import GeneralAttention
from attnkit.core.hooks import AttentionHook, attention_hooks
from attnkit.core.merge import merge_attention
from attnkit.mechanisms.multi_head import MultiHeadAttention

__version__ = "0.1.0"

__all__ = [
    "AttentionHook",
    "AttentionOutput",
    "GeneralAttention",
    "MultiHeadAttention",
    "__version__",
    "align",
    "attention",
    "attention_hooks",
    "data",
    "distributed",
    "efficient",
    "evaluate",
    "explain",
    "interpret",
    "layers",
    "masks",
    "mechanisms",
    "merge_attention",
    "models",
    "scores",
    "taxonomy",
]
