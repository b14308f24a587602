"""Nested tensors (``torch.nested``, strided or jagged layout) as padded batches.

torch's attention modules accept a nested batch of sequences of different lengths in their eval
fast path (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``). attnkit's modules accept
them in every mode: the sequences are padded to the longest, the padding is masked out as keys
(so no real position attends it), and the output is cut back to each sequence's length, as a
nested tensor of the input's layout. Positions past a sequence's end are computed and dropped.

Shapes (the legend of :mod:`attnkit`): B sequences, L the longest length, E features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class PaddedBatch:
    """A nested batch as a padded one.

    Attributes:
        values: ``[B, L, E]``, zeros past each sequence's end.
        lengths: each sequence's length (Python ints: they shape the nested output).
        padding: bool ``[B, L]``, ``True`` past a sequence's end (torch's ``key_padding_mask``
            convention: ``True`` = ignore).
        layout: ``torch.strided`` or ``torch.jagged``, the layout outputs are returned in.
    """

    values: Tensor
    lengths: tuple[int, ...]
    padding: Tensor
    layout: torch.layout

    def nested(self, padded: Tensor) -> Tensor:
        """``padded [B, L, ·]`` cut back to each sequence's length, nested like the input
        (differentiable: ``torch.nested.as_nested_tensor``)."""
        parts = [padded[i, :length] for i, length in enumerate(self.lengths)]
        return torch.nested.as_nested_tensor(parts, layout=self.layout)


def pad_nested(x: Tensor, name: str = "input") -> PaddedBatch:
    """A nested batch of sequences ``[L_i, E]`` as a :class:`PaddedBatch`.

    Args:
        x: a nested tensor of ``N`` sequences ``[L_i, E]`` (strided or jagged layout).
        name: what ``x`` is called in error messages.

    Returns:
        The padded batch (values ``[B, max L_i, E]``) with its lengths and padding mask.

    Example::

        >>> x = torch.nested.nested_tensor([torch.randn(3, 4), torch.randn(1, 4)])
        >>> batch = pad_nested(x)
        >>> batch.values.shape, batch.lengths
        (torch.Size([2, 3, 4]), (3, 1))
    """
    if not x.is_nested:
        raise TypeError(f"{name} must be a nested tensor, got a {x.layout} tensor")
    parts = x.unbind()
    if x.dim() != 3 or any(p.dim() != 2 for p in parts):
        raise ValueError(f"{name} must be a nested batch of sequences [L_i, E], got {x.dim()}-D")
    lengths = tuple(int(p.shape[0]) for p in parts)
    values = torch.nested.to_padded_tensor(x, 0.0)
    positions = torch.arange(values.shape[1], device=values.device)
    padding = positions >= torch.tensor(lengths, device=values.device)[:, None]
    return PaddedBatch(values, lengths, padding, x.layout)
