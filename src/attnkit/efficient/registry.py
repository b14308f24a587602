"""The efficient kinds' names in the one attention-kind registry (:mod:`attnkit.core.kinds`).

``MultiHeadAttention(attention="linformer")``, a config's ``attention: linformer`` and ``attnkit
info`` all resolve names there; each name builds a new kind object with that class's default
hyperparameters (window 256, 256 random features, 64 landmarks, blocks and buckets of 64, maximum
length 4096 projected to 256). For other settings pass a configured object instead of the name:
``MultiHeadAttention(64, 4, attention=LinformerAttention(max_length=8192, projected_length=256))``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from attnkit.core.kinds import AttentionKind, kind_names, register_kind
from attnkit.efficient.bigbird import BigBirdAttention
from attnkit.efficient.linear import LinearAttention
from attnkit.efficient.linformer import LinformerAttention
from attnkit.efficient.longformer import LongformerAttention
from attnkit.efficient.lsh import LSHAttention
from attnkit.efficient.nystrom import NystromAttention
from attnkit.efficient.performer import PerformerAttention
from attnkit.efficient.sliding_window import SlidingWindowAttention
from attnkit.efficient.synthesizer import SynthesizerAttention

# name → constructor of a kind object with its default hyperparameters (read once, into the
# registry: look names up with attnkit.core.kinds.kind_names / create_kind)
_EFFICIENT: dict[str, Callable[[], AttentionKind]] = {
    "sliding_window": SlidingWindowAttention,
    "longformer": LongformerAttention,
    "linear": LinearAttention,
    "nystrom": NystromAttention,
    "bigbird": BigBirdAttention,
    "lsh": LSHAttention,
    "linformer": LinformerAttention,
    "performer": PerformerAttention,
    "synthesizer_dense": partial(SynthesizerAttention, "dense"),
    "synthesizer_random": partial(SynthesizerAttention, "random"),
}


def register_efficient_kinds() -> list[str]:
    """Register every efficient kind in the one registry (idempotent: importing
    ``attnkit.efficient`` does it); returns the names registered now.

    Returns:
        The names registered by this call (empty when they already were).

    Example::

        >>> register_efficient_kinds()  # importing attnkit.efficient registered them
        []
    """
    known = set(kind_names())
    added = [name for name in _EFFICIENT if name not in known]
    for name in added:
        register_kind(name, _EFFICIENT[name])
    return added
