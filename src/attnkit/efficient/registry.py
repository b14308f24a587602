"""Names of the efficient attention kinds, and their registration with
:class:`attnkit.MultiHeadAttention` (``attention="NAME"``).

A kind is a function with :func:`attnkit.attention`'s call signature (``q, k, v, *, score, align,
mask, causal, dropout, return_weights``), so it needs fixed hyperparameters: the registered names
use the defaults below. For other settings, call the function or module directly
(``ak.efficient.sliding_window_attention(q, k, v, window=512)``).

Kinds with state of their own (Linformer's projections, Synthesizer's MLP or matrix, Performer's
random features, which each instance draws and may redraw) cannot be a plain function shared by
every module; they are listed in :data:`MODULE_KINDS` (constructors taking the head sizes) for a
``MultiHeadAttention`` that builds one per instance.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import nn

from attnkit.core.call import AttentionOutput
from attnkit.efficient import (
    bigbird,
    linear,
    linformer,
    longformer,
    lsh,
    nystrom,
    performer,
    sliding_window,
    synthesizer,
)
from attnkit.efficient.bigbird import bigbird_attention
from attnkit.efficient.linear import linear_attention
from attnkit.efficient.linformer import LinformerAttention
from attnkit.efficient.longformer import longformer_attention
from attnkit.efficient.lsh import lsh_kind
from attnkit.efficient.nystrom import nystrom_attention
from attnkit.efficient.performer import PerformerAttention
from attnkit.efficient.sliding_window import sliding_window_attention
from attnkit.efficient.synthesizer import SynthesizerAttention

#: hyperparameters of the registered names
DEFAULT_WINDOW = 256
DEFAULT_FEATURES = 256
DEFAULT_LANDMARKS = 64
DEFAULT_BLOCK = 64
DEFAULT_BUCKET_SIZE = 64
DEFAULT_MAX_LENGTH = 4096
DEFAULT_PROJECTED_LENGTH = 256

#: parameter-free kinds: name → function with the attention-kind signature
EFFICIENT_KINDS: dict[str, Callable[..., AttentionOutput]] = {
    "sliding_window": partial(sliding_window_attention, window=DEFAULT_WINDOW),
    "longformer": partial(longformer_attention, window=DEFAULT_WINDOW),
    "linear": linear_attention,
    "nystrom": partial(nystrom_attention, landmarks=DEFAULT_LANDMARKS),
    "bigbird": partial(bigbird_attention, block=DEFAULT_BLOCK),
    "lsh": partial(lsh_kind, bucket_size=DEFAULT_BUCKET_SIZE),
}


def _linformer(num_heads: int, head_dim_k: int, head_dim_v: int) -> nn.Module:
    return LinformerAttention(DEFAULT_MAX_LENGTH, DEFAULT_PROJECTED_LENGTH)


def _performer(num_heads: int, head_dim_k: int, head_dim_v: int) -> nn.Module:
    # features drawn from torch's global RNG, so ``torch.manual_seed`` before building the model
    # fixes them; redrawn only on request (``redraw_performer_features``), so a module's outputs
    # do not change between calls unless the training loop asks
    return PerformerAttention(head_dim_k, DEFAULT_FEATURES)


def _synthesizer(kind: str, num_heads: int, head_dim_k: int, head_dim_v: int) -> nn.Module:
    return SynthesizerAttention(kind, DEFAULT_MAX_LENGTH, num_heads, head_dim_k)


#: kinds with state per instance (parameters, or Performer's random features): name → constructor ``(num_heads, head_dim_k, head_dim_v) -> module``
#: whose ``forward`` has the attention-kind signature
MODULE_KINDS: dict[str, Callable[[int, int, int], nn.Module]] = {
    "linformer": _linformer,
    "performer": _performer,
    "synthesizer_dense": partial(_synthesizer, "dense"),
    "synthesizer_random": partial(_synthesizer, "random"),
}

#: each kind's place in the taxonomy (survey §3), as the modules declare it
KIND_TAXONOMY: dict[str, dict[str, str | list[str]]] = {
    "sliding_window": sliding_window.TAXONOMY,
    "longformer": longformer.TAXONOMY,
    "linear": linear.TAXONOMY,
    "performer": performer.TAXONOMY,
    "nystrom": nystrom.TAXONOMY,
    "bigbird": bigbird.TAXONOMY,
    "lsh": lsh.TAXONOMY,
    "linformer": linformer.TAXONOMY,
    "synthesizer_dense": synthesizer.TAXONOMY,
    "synthesizer_random": synthesizer.TAXONOMY,
}
for _name, _fn in EFFICIENT_KINDS.items():
    _fn.taxonomy = KIND_TAXONOMY[_name]  # type: ignore[attr-defined]


def register_efficient_kinds() -> list[str]:
    """Register every kind with ``MultiHeadAttention`` (idempotent): the parameter-free ones as
    functions, the ones with parameters as factories; returns the names registered now."""
    from attnkit.mechanisms.multi_head import (
        ATTENTION_FACTORIES,
        ATTENTION_KINDS,
        register_attention_kind,
    )

    added = []
    for name, fn in EFFICIENT_KINDS.items():
        if ATTENTION_KINDS.get(name) is fn:
            continue
        register_attention_kind(name, fn)
        added.append(name)
    for name, factory in MODULE_KINDS.items():
        if ATTENTION_FACTORIES.get(name) is factory:
            continue
        register_attention_kind(name, factory, factory=True)
        added.append(name)
    return added
