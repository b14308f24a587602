"""Export of recorded attention for other tools: bertviz's format.

bertviz's ``head_view(attention, tokens)`` and ``model_view`` take what a Hugging Face model
returns with ``output_attentions=True``: a sequence with one tensor per layer, each
``[batch, heads, L, L]`` with batch 1. :func:`to_bertviz` takes a recorder, recorded maps, or a
Hugging Face model's output (``outputs.attentions``; a model running
``attn_implementation="attnkit"`` returns them from attnkit's engine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor


def to_bertviz(
    maps: Mapping[str, Tensor] | Sequence[Tensor] | Any,
    *,
    batch_index: int = 0,
    length: int | None = None,
) -> tuple[Tensor, ...]:
    """Per-layer attention in bertviz's format.

    Args:
        maps: one map per layer, bottom first (``recorder.maps()``), a mapping
            ``{name: map}`` in layer order, an :class:`~attnkit.interpret.AttentionRecorder`, or
            a Hugging Face model output with ``attentions``; each map ``[B, H, L, L]``,
            ``[H, L, L]`` or ``[L, L]``.
        batch_index: which example of the batch to export.
        length: keep the first ``length`` tokens (an example right-padded in its batch).

    Returns:
        a tuple of detached CPU float32 tensors ``[1, H, L, L]``, one per layer.

    Example::

        >>> from bertviz import head_view  # not a dependency of attnkit
        >>> head_view(to_bertviz(rec.maps()), tokens)
    """
    source: Any = maps
    if callable(getattr(source, "maps", None)):  # an AttentionRecorder
        maps = source.maps()
    elif getattr(source, "attentions", None) is not None:  # a transformers ModelOutput
        maps = source.attentions
    layers = list(maps.values()) if isinstance(maps, Mapping) else list(maps)
    if length is not None and (
        isinstance(length, bool) or not isinstance(length, int) or length < 1
    ):
        raise ValueError(f"length must be a positive int or None, got {length!r}")
    if any(not isinstance(w, Tensor) for w in layers):
        kinds = sorted({type(w).__name__ for w in layers})
        raise TypeError(
            f"expected one attention tensor per layer, got {kinds} (a Hugging Face model returns "
            'None when its attn_implementation gives no weights: use "attnkit" or "eager")'
        )
    if not layers:
        raise ValueError("need the attention of at least one layer, got none")
    out = []
    for i, w in enumerate(layers):
        if w.dim() == 2:
            w = w[None, None]
        elif w.dim() == 3:
            w = w[None]
        elif w.dim() == 4:
            if not -w.shape[0] <= batch_index < w.shape[0]:
                raise ValueError(
                    f"batch_index {batch_index} out of range for layer {i} {tuple(w.shape)}"
                )
            w = w[batch_index : batch_index + 1] if batch_index >= 0 else w[batch_index][None]
        else:
            raise ValueError(
                f"layer {i}: expected [B, H, L, L], [H, L, L] or [L, L], got {tuple(w.shape)}"
            )
        if length is not None:
            w = w[..., :length, :length]
        out.append(w.detach().float().cpu())
    return tuple(out)
