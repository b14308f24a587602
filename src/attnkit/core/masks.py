"""Masks: which keys each query may attend to.

Convention everywhere: a boolean mask with ``True`` = may attend (as
``torch.nn.functional.scaled_dot_product_attention``), broadcastable to ``[B, H, M, N]``.

Masks come in two forms that describe the same thing:

- tensors (``causal``, ``sliding_window``, ``padding``) to pass as ``mask=``;
- mask_mods ``mask_mod(b, h, q_idx, kv_idx) -> bool`` with FlexAttention's signature (``causal_mod``,
  ``sliding_window_mod``, ``padding_mod``), combined with ``and_masks`` / ``or_masks`` and passed as
  ``mask_mod=``. Mods written for ``torch.nn.attention.flex_attention`` work unchanged, as long as
  they use tensor operations (attnkit calls them once on broadcast index grids, not per element).

Causal masks with ``M != N`` are aligned bottom-right: query ``i`` stands at key position
``i' = i + N - M``, so the last query sees every key (what KV-cache decoding needs). For M=2, N=5
that keeps ``[[1,1,1,1,0],[1,1,1,1,1]]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def index_grids(
    batch: int,
    heads: int,
    m: int,
    n: int,
    device: torch.device | str | None = None,
    extra: int = 0,
    q_offset: int = 0,
    kv_offset: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Index tensors ``b, h, q_idx, kv_idx`` shaped to broadcast to ``[B, H, M, N]``.

    ``q_idx`` runs over ``q_offset … q_offset + M - 1`` and ``kv_idx`` likewise (blocks of a larger
    problem); ``extra`` trailing singleton dimensions are appended (1 for multi-dimensional scores
    ``[B, H, M, N, d_v]``).

    Args:
        batch: ``B``.
        heads: ``H``.
        m: ``M``, the number of queries.
        n: ``N``, the number of keys.
        device: where the indices are made.
        extra: trailing singleton dimensions appended to each.
        q_offset: the first query's index.
        kv_offset: the first key's index.

    Returns:
        ``(b [B, 1, 1, 1], h [1, H, 1, 1], q_idx [1, 1, M, 1], kv_idx [1, 1, 1, N])`` (int64).

    Example::

        >>> b, h, q_idx, kv_idx = ak.masks.index_grids(2, 4, 3, 5, q_offset=10)
        >>> q_idx.flatten().tolist(), kv_idx.shape
        ([10, 11, 12], torch.Size([1, 1, 1, 5]))
    """
    tail = (1,) * extra
    b = torch.arange(batch, device=device).view(batch, 1, 1, 1, *tail)
    h = torch.arange(heads, device=device).view(1, heads, 1, 1, *tail)
    q_idx = torch.arange(q_offset, q_offset + m, device=device).view(1, 1, m, 1, *tail)
    kv_idx = torch.arange(kv_offset, kv_offset + n, device=device).view(1, 1, 1, n, *tail)
    return b, h, q_idx, kv_idx


def create_mask(
    mask_mod: MaskMod,
    batch: int,
    heads: int,
    m: int,
    n: int,
    device: torch.device | str | None = None,
) -> Tensor:
    """Evaluate ``mask_mod`` on every (b, h, q_idx, kv_idx): a bool tensor broadcastable to
    ``[B, H, M, N]`` (dimensions the mod ignores stay of size 1).

    Args:
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor`` (FlexAttention's signature).
        batch: ``B``.
        heads: ``H``.
        m: ``M``, the number of queries.
        n: ``N``, the number of keys.
        device: where the mask is made.

    Returns:
        Bool tensor broadcastable to ``[B, H, M, N]``; True = may attend.

    Example::

        >>> ak.masks.create_mask(ak.masks.causal_mod(), 2, 4, 3, 3).shape  # b, h ignored
        torch.Size([1, 1, 3, 3])
    """
    out = mask_mod(*index_grids(batch, heads, m, n, device))
    if not isinstance(out, Tensor) or out.dtype != torch.bool:
        raise TypeError(f"mask_mod must return a bool tensor, got {type(out).__name__}")
    return out


def causal_mod(offset: int = 0) -> MaskMod:
    """mask_mod: query ``i`` may attend key ``j`` when ``j <= i + offset``.

    ``offset = N - M`` aligns bottom-right (attnkit's causal); ``offset = 0`` is top-left
    (SDPA's ``is_causal``).

    Args:
        offset: the key position of query 0.

    Returns:
        The mask_mod.

    Example::

        >>> ak.masks.create_mask(ak.masks.causal_mod(), 1, 1, 3, 3)[0, 0]
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True,  True,  True]])
    """

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx + offset

    return mod


def _check_window(window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int (keys admitted per query), got {window!r}")


def sliding_window_mod(window: int, offset: int = 0) -> MaskMod:
    """mask_mod: query ``i`` (at key position ``i' = i + offset``) may attend key ``j`` when
    ``i' - window < j <= i'``: exactly ``window`` keys, itself included, none in the future.

    Args:
        window: keys admitted per query (>= 1).
        offset: the key position of query 0.

    Returns:
        The mask_mod.

    Example::

        >>> ak.masks.create_mask(ak.masks.sliding_window_mod(2), 1, 1, 3, 3)[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [0, 1, 1]], dtype=torch.int32)
    """
    _check_window(window)

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        position = q_idx + offset
        return (kv_idx <= position) & (kv_idx > position - window)

    return mod


def padding_mod(lengths: Tensor) -> MaskMod:
    """mask_mod: key ``j`` of batch element ``b`` exists when ``j < lengths[b]``.

    Args:
        lengths: int ``[B]``, the real keys of each batch element.

    Returns:
        The mask_mod.

    Example::

        >>> mod = ak.masks.padding_mod(torch.tensor([2, 3]))
        >>> ak.masks.create_mask(mod, 2, 1, 1, 3)[:, 0, 0]
        tensor([[ True,  True, False],
                [ True,  True,  True]])
    """

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < lengths.to(kv_idx.device)[b]

    return mod


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    """mask_mod admitting a key when every one of ``mask_mods`` does (FlexAttention's ``and_masks``).

    Args:
        *mask_mods: one or more mask_mods.

    Returns:
        Their conjunction, a mask_mod.

    Example::

        >>> mod = ak.masks.and_masks(ak.masks.causal_mod(), ak.masks.padding_mod(torch.tensor([2])))
        >>> ak.masks.create_mask(mod, 1, 1, 3, 3)[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
    if not mask_mods:
        raise ValueError("and_masks needs at least one mask_mod")

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = mask_mods[0](b, h, q_idx, kv_idx)
        for other in mask_mods[1:]:
            out = out & other(b, h, q_idx, kv_idx)
        return out

    return mod


def or_masks(*mask_mods: MaskMod) -> MaskMod:
    """mask_mod admitting a key when any one of ``mask_mods`` does (FlexAttention's ``or_masks``).

    Args:
        *mask_mods: one or more mask_mods.

    Returns:
        Their disjunction, a mask_mod.

    Example::

        >>> first_key = lambda b, h, q_idx, kv_idx: kv_idx == 0  # a global token
        >>> mod = ak.masks.or_masks(ak.masks.sliding_window_mod(1), first_key)
        >>> ak.masks.create_mask(mod, 1, 1, 3, 3)[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 0, 1]], dtype=torch.int32)
    """
    if not mask_mods:
        raise ValueError("or_masks needs at least one mask_mod")

    def mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = mask_mods[0](b, h, q_idx, kv_idx)
        for other in mask_mods[1:]:
            out = out | other(b, h, q_idx, kv_idx)
        return out

    return mod


def causal(m: int, n: int, device: torch.device | str | None = None) -> Tensor:
    """Causal mask aligned bottom-right, bool ``[M, N]`` (True = may attend).

    Args:
        m: ``M``, the number of queries (the last ``M`` of the ``N`` positions).
        n: ``N``, the number of keys.
        device: where the mask is made.

    Returns:
        Bool ``[M, N]``.

    Example::

        >>> ak.masks.causal(2, 5).int()
        tensor([[1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]], dtype=torch.int32)
    """
    return create_mask(causal_mod(n - m), 1, 1, m, n, device)[0, 0]


def sliding_window(m: int, n: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """Causal sliding-window mask aligned bottom-right, bool ``[M, N]``: query ``i`` sees keys
    ``j`` with ``i' - window < j <= i'`` where ``i' = i + N - M`` (exactly ``window`` keys).

    Args:
        m: ``M``, the number of queries.
        n: ``N``, the number of keys.
        window: keys admitted per query (>= 1).
        device: where the mask is made.

    Returns:
        Bool ``[M, N]``.

    Example::

        >>> ak.masks.sliding_window(2, 4, window=2).int()
        tensor([[0, 1, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    return create_mask(sliding_window_mod(window, n - m), 1, 1, m, n, device)[0, 0]


def padding(lengths: Tensor | Sequence[int], n: int) -> Tensor:
    """Key-padding mask from lengths: bool ``[B, 1, 1, N]``, True for the first ``lengths[b]`` keys.

    Works as ``mask=`` for 3-D and 4-D inputs alike.

    Args:
        lengths: int ``[B]`` (a tensor or a sequence), each in ``[0, N]``.
        n: ``N``, the number of keys.

    Returns:
        Bool ``[B, 1, 1, N]``.

    Example::

        >>> ak.masks.padding([2, 3], 4)[:, 0, 0]
        tensor([[ True,  True, False, False],
                [ True,  True,  True, False]])
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be a 1-D integer tensor [B], got dtype {lengths.dtype} "
            f"and shape {tuple(lengths.shape)}"
        )
    if (lengths < 0).any() or (lengths > n).any():
        raise ValueError(f"lengths must lie in [0, {n}], got {lengths.tolist()}")
    return (torch.arange(n, device=lengths.device) < lengths[:, None]).view(-1, 1, 1, n)


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    """Mean of the real rows of ``x [..., N, d]`` → ``[..., d]`` (``mask [..., N]``, True = real);
    zeros for a set with no real row, never NaN. Padded rows get no gradient, whatever they hold
    (``where``, not a multiplication).

    Args:
        x: ``[..., N, d]``.
        mask: bool ``[..., N]``, True = a real row; ``None``: every row.

    Returns:
        ``[..., d]``.

    Example::

        >>> x = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
        >>> ak.masks.masked_mean(x, torch.tensor([[True, True, False]]))
        tensor([[2., 3.]])
    """
    if mask is None:
        return x.mean(-2) if x.shape[-2] else x.sum(-2)
    total = torch.where(mask.unsqueeze(-1), x, torch.zeros_like(x)).sum(-2)
    return total / mask.sum(-1, keepdim=True).clamp_min(1).to(x.dtype)
