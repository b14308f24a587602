"""Export of recorded attention for other tools: bertviz's format.

bertviz's ``head_view(attention, tokens)`` and ``model_view`` take what a Hugging Face model
returns with ``output_attentions=True``: a sequence with one tensor per layer, each
``[batch, heads, L, L]`` with batch 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor


def to_bertviz(
    maps: Mapping[str, Tensor] | Sequence[Tensor], *, batch_index: int = 0
) -> tuple[Tensor, ...]:
    """Per-layer attention in bertviz's format.

    Args:
        maps: one map per layer, bottom first (``recorder.maps()``), or a mapping
            ``{name: map}`` in layer order; each ``[B, H, L, L]``, ``[H, L, L]`` or ``[L, L]``.
        batch_index: which example of the batch to export.

    Returns:
        a tuple of detached CPU float32 tensors ``[1, H, L, L]``, one per layer.

    Example::

        >>> from bertviz import head_view  # not a dependency of attnkit
        >>> head_view(to_bertviz(rec.maps()), tokens)
    """
    layers = list(maps.values()) if isinstance(maps, Mapping) else list(maps)
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
        out.append(w.detach().float().cpu())
    return tuple(out)
