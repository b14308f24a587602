"""How a sequence is split over the ranks of a ring: contiguous or zig-zag chunks.

A sequence of ``n`` positions, padded to ``n_pad`` (a multiple of the number of chunks), is cut
into equal chunks. With W ranks:

- ``"contiguous"``: W chunks; rank r holds chunk r.
- ``"zigzag"``: 2W chunks; rank r holds chunks r and 2W-1-r (Brandon et al. 2023, "Striped
  Attention"; Zhu 2024 "ring-flash-attention"). Under a causal mask the work of a query grows
  with its position, so contiguous chunks leave rank 0 nearly idle while rank W-1 does ~2/W of all
  the work; pairing an early chunk with a late one gives every rank the same number of admissible
  (query, key) pairs: ``(2W - 1 - r) + r + 1 = 2W`` chunk pairs' worth of causal work on each.

Every rank holds the same number of positions, ``n_pad / W``, so the blocks passed around the ring
have one shape. Padding positions (``>= n``) are excluded as keys by :func:`ring_attention`'s
``length`` and dropped by :func:`unshard_sequence`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from attnkit.distributed.process_group import rank_and_size

LAYOUTS = ("contiguous", "zigzag")


@dataclass(frozen=True)
class Chunk:
    """Positions ``[start, start + size)`` of the sequence, held at local rows
    ``[local_start, local_start + size)`` of a rank's shard."""

    local_start: int
    start: int
    size: int


def _check_layout(layout: str) -> int:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return 2 if layout == "zigzag" else 1


def padded_length(length: int, world_size: int, layout: str = "zigzag") -> int:
    """The smallest length ``>= length`` that ``layout`` splits evenly over ``world_size``.

    Args:
        length: the sequence length ``n``.
        world_size: the number of ranks ``W``.
        layout: ``"zigzag"`` (default) or ``"contiguous"``.

    Returns:
        ``n_pad >= n`` (zigzag: a multiple of ``2W``; contiguous: of ``W``).

    Example::

        >>> padded_length(10, 4), padded_length(10, 4, layout="contiguous")
        (16, 12)
    """
    chunks = _check_layout(layout) * world_size
    return -(-length // chunks) * chunks


def local_chunks(
    rank: int, world_size: int, local_length: int, layout: str = "zigzag"
) -> list[Chunk]:
    """The chunks rank ``rank`` holds when every rank holds ``local_length`` positions."""
    per_rank = _check_layout(layout)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if local_length % per_rank:
        raise ValueError(
            f"the zigzag layout splits each rank's {local_length} positions into 2 equal chunks; "
            f"pad the sequence with shard_sequence (got an odd local length {local_length})"
        )
    size = local_length // per_rank
    if layout == "contiguous":
        return [Chunk(0, rank * size, size)]
    return [Chunk(0, rank * size, size), Chunk(size, (2 * world_size - 1 - rank) * size, size)]


def local_positions(
    rank: int, world_size: int, local_length: int, layout: str = "zigzag", device=None
) -> Tensor:
    """Sequence positions of a shard's rows, ``[local_length]`` long.

    Args:
        rank: the shard's rank.
        world_size: the number of ranks ``W``.
        local_length: ``m``, the rows of the shard.
        layout: ``"zigzag"`` (default) or ``"contiguous"``.
        device (torch.device | str | None): of the result.

    Returns:
        Long ``[m]``.

    Example::

        >>> local_positions(0, 2, 4), local_positions(1, 2, 4)  # zigzag: 2 chunks per rank
        (tensor([0, 1, 6, 7]), tensor([2, 3, 4, 5]))
    """
    parts = [
        torch.arange(c.start, c.start + c.size, device=device)
        for c in local_chunks(rank, world_size, local_length, layout)
    ]
    return torch.cat(parts)


def shard_sequence(
    x: Tensor, *, rank: int, world_size: int, dim: int = -2, layout: str = "zigzag"
) -> Tensor:
    """The part of ``x`` that rank ``rank`` holds: ``x`` is zero-padded along ``dim`` to
    :func:`padded_length`, then cut by ``layout``.

    Args:
        x: the whole sequence, e.g. ``[B, H, n, d]`` (``dim=-2``) or ``[B, n, E]`` (``dim=1``).
        rank: this rank.
        world_size: the number of ranks ``W``.
        dim: the sequence dimension.
        layout: ``"zigzag"`` (default) or ``"contiguous"``.

    Returns:
        ``[..., n_pad / world_size, ...]``: the rank's chunks, concatenated in sequence order.

    Example::

        >>> x = torch.arange(8.0).view(1, 8, 1)
        >>> shard_sequence(x, rank=0, world_size=2, dim=1).flatten()
        tensor([0., 1., 6., 7.])
    """
    n = x.shape[dim]
    pad = padded_length(n, world_size, layout) - n
    if pad:
        dim_from_end = x.dim() - 1 - (dim % x.dim())
        x = F.pad(x, (0, 0) * dim_from_end + (0, pad))
    local_length = x.shape[dim] // world_size
    return torch.cat(
        [
            x.narrow(dim, c.start, c.size)
            for c in local_chunks(rank, world_size, local_length, layout)
        ],
        dim=dim,
    )


def unshard_sequence(
    shards: Sequence[Tensor], *, length: int, dim: int = -2, layout: str = "zigzag"
) -> Tensor:
    """Inverse of :func:`shard_sequence`: the whole sequence (first ``length`` positions) from
    every rank's shard, given in rank order.

    Args:
        shards: one shard per rank, in rank order.
        length: ``n``, the positions kept (the padding dropped).
        dim: the sequence dimension.
        layout: ``"zigzag"`` (default) or ``"contiguous"``.

    Returns:
        The whole sequence, ``n`` long along ``dim``.

    Example::

        >>> x = torch.arange(8.0).view(1, 8, 1)
        >>> shards = [shard_sequence(x, rank=r, world_size=2, dim=1) for r in range(2)]
        >>> torch.equal(unshard_sequence(shards, length=8, dim=1), x)
        True
    """
    world = len(shards)
    local_length = shards[0].shape[dim]
    pieces: list[tuple[int, Tensor]] = []
    for rank, shard in enumerate(shards):
        if shard.shape != shards[0].shape:
            raise ValueError(
                f"every shard must have one shape, got {tuple(shards[0].shape)} on rank 0 and "
                f"{tuple(shard.shape)} on rank {rank}"
            )
        for c in local_chunks(rank, world, local_length, layout):
            pieces.append((c.start, shard.narrow(dim, c.local_start, c.size)))
    whole = torch.cat([t for _, t in sorted(pieces, key=lambda p: p[0])], dim=dim)
    if not 0 < length <= whole.shape[dim]:
        raise ValueError(f"length must be in (0, {whole.shape[dim]}], got {length}")
    return whole.narrow(dim, 0, length)


def gather_sequence(
    x: Tensor,
    *,
    length: int,
    group: dist.ProcessGroup | None = None,
    dim: int = -2,
    layout: str = "zigzag",
) -> Tensor:
    """The whole sequence on every rank, from each rank's shard ``x`` (``all_gather``; not
    differentiable). For evaluation and tests; training never needs it.

    Args:
        x: this rank's shard.
        length: ``n``, the positions kept (the padding dropped).
        group: the ranks (``None``: the default group).
        dim: the sequence dimension.
        layout: ``"zigzag"`` (default) or ``"contiguous"``.

    Returns:
        The whole sequence, ``n`` long along ``dim``.

    Example::

        >>> def work(rank, world_size):  # on each rank
        ...     x = torch.arange(8.0).view(1, 8, 1)
        ...     shard = shard_sequence(x, rank=rank, world_size=world_size, dim=1)
        ...     return torch.equal(gather_sequence(shard, length=8, dim=1), x)
        >>> [result.value for result in ak.distributed.launch_local(work, 2)]
        [True, True]
    """
    _, world = rank_and_size(group)
    if world == 1:
        return unshard_sequence([x], length=length, dim=dim, layout=layout)
    shards = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(shards, x.contiguous(), group=group)
    return unshard_sequence(shards, length=length, dim=dim, layout=layout)
