"""torch's attention masks (``torch.nn.MultiheadAttention``'s conventions) as attnkit's.

torch's masks say what may NOT be attended: a bool ``True`` ignores a key, a float mask is added
to the scores. The engine's say what may: bool ``True`` = may attend (SDPA's convention), float
added with ``-inf`` removing a key. :func:`engine_mask` turns the first into the second;
:func:`merge_masks` is ``torch.nn.MultiheadAttention.merge_masks``, torch's own convention kept.

Shapes (the legend of :mod:`attnkit`): B batch, H heads, M queries, N keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def merge_masks(
    num_heads: int, attn_mask: Tensor | None, key_padding_mask: Tensor | None, query: Tensor
) -> tuple[Tensor | None, int | None]:
    """``torch.nn.MultiheadAttention.merge_masks``: one mask and its type from torch's two.

    Type 1 is the ``key_padding_mask`` alone (returned as given); type 2 an ``attn_mask``,
    expanded to ``[B, H, M, M]``, and with both the sum of the two expanded masks (for bool
    masks their logical or, as torch: ``True`` = ignore). No mask gives ``(None, None)``.

    Args:
        num_heads: ``H``.
        attn_mask: ``[M, M]`` or ``[B·H, M, M]``, bool or float, or None.
        key_padding_mask: ``[B, M]``, bool or float, or None.
        query: ``[B, M, E]`` (batch first; only its shape is read).

    Returns:
        ``(merged_mask, mask_type)``: ``merged_mask`` ``[B, M]`` (type 1) or
        ``[B, H, M, M]`` (type 2), or None; ``mask_type`` 1, 2 or None.

    Example::

        >>> kpm = torch.tensor([[False, True]])
        >>> merged, kind = merge_masks(2, torch.zeros(2, 2, dtype=torch.bool), kpm,
        ...                            torch.randn(1, 2, 4))
        >>> kind, merged.shape
        (2, torch.Size([1, 2, 2, 2]))
    """
    if attn_mask is None:
        return (key_padding_mask, 1) if key_padding_mask is not None else (None, None)
    if query.dim() != 3:
        raise ValueError(f"merge_masks needs a batched query [B, M, E], got {tuple(query.shape)}")
    n, length, _ = query.shape
    if attn_mask.dim() == 3:
        merged = attn_mask.view(n, -1, length, length)  # [B·H, M, M] -> [B, H, M, M]
    else:
        merged = attn_mask.view(1, 1, length, length).expand(n, num_heads, -1, -1)
    if key_padding_mask is not None:
        padding = key_padding_mask.view(n, 1, 1, length).expand(-1, num_heads, -1, -1)
        merged = merged + padding  # bool + bool is or; float masks add, as torch's do
    return merged, 2


def check_torch_mask(
    name: str, mask: Tensor, shapes: list[tuple[int, ...]], query: Tensor
) -> Tensor:
    """``mask`` itself, checked: a bool or float tensor of one of ``shapes`` on ``query``'s
    device (``TypeError``/``ValueError`` naming ``name`` otherwise)."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise TypeError(
            f"{name} must be bool (True = ignore, torch's convention) or floating (added to the "
            f"scores), got dtype {mask.dtype}"
        )
    if tuple(mask.shape) not in shapes:
        expected = " or ".join(str(s) for s in shapes)
        raise ValueError(f"{name} must have shape {expected}, got {tuple(mask.shape)}")
    if mask.device != query.device:
        raise ValueError(
            f"{name} must be on the device of query ({query.device}), got {mask.device}"
        )
    return mask


def split_torch_mask(mask: Tensor, dtype: torch.dtype) -> tuple[Tensor | None, Tensor | None]:
    """A torch-convention mask as ``(allowed, bias)``: bool True = ignore becomes allowed =
    False; a float mask is a bias."""
    if mask.dtype == torch.bool:
        return ~mask, None
    return None, mask.to(dtype)


def and_allowed(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    """Keys both bool masks allow (``None`` allows every key)."""
    if a is None:
        return b
    return a if b is None else a & b


def add_bias(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    """The sum of two float masks (``None`` adds nothing)."""
    if a is None:
        return b
    return a if b is None else a + b


def engine_mask(allowed: Tensor | None, bias: Tensor | None, extra: int = 0) -> Tensor | None:
    """One mask for :func:`attnkit.attention` (bool, or float with ``-inf`` for removed keys)
    from the torch-convention parts of ``MultiHeadAttention._masks``, with ``extra`` admissible keys
    appended (``bias_k`` and the zero key, as torch pads)."""
    if extra:
        allowed = None if allowed is None else F.pad(allowed, (0, extra), value=True)
        bias = None if bias is None else F.pad(bias, (0, extra), value=0.0)
    if bias is None:
        return allowed
    if allowed is None:
        return bias
    return torch.where(allowed, bias, float("-inf"))  # broadcasts both: [B,1,1,N] with [1,1,M,N]
