"""Checks of a translation batch, shared by the models: bad input fails here with a message
naming what was expected and what was given, not deep inside an embedding or a GRU."""

from __future__ import annotations

import torch
from torch import Tensor


def check_batch(
    source: Tensor,
    source_lengths: Tensor,
    target_in: Tensor | None = None,
    *,
    vocab_sizes: tuple[int, int] | None = None,
) -> None:
    """Raise ``TypeError``/``ValueError`` unless the batch fits together.

    Args:
        source: ``[B, S]`` integer ids, ``S >= 1``.
        source_lengths: ``[B]`` with ``1 <= length <= S``.
        target_in: ``[B, T]`` integer ids, ``T >= 1`` (optional).
        vocab_sizes: ``(source, target)`` vocabulary sizes the ids must lie below.
    """
    named = [("source", source), ("source_lengths", source_lengths)]
    if target_in is not None:
        named.append(("target_in", target_in))
    for name, t in named:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{name} must hold integer ids (long), got dtype {t.dtype}")
    if source.dim() != 2 or source.shape[1] == 0:
        raise ValueError(f"source must be [B, S] with S >= 1, got shape {tuple(source.shape)}")
    if source_lengths.shape != (source.shape[0],):
        raise ValueError(
            f"source_lengths must be [B] = [{source.shape[0]}], got {tuple(source_lengths.shape)}"
        )
    if source.shape[0] and (
        int(source_lengths.min()) < 1 or int(source_lengths.max()) > source.shape[1]
    ):
        raise ValueError(
            f"source_lengths must lie in [1, S={source.shape[1]}], got "
            f"[{int(source_lengths.min())}, {int(source_lengths.max())}]"
        )
    if target_in is not None and (
        target_in.dim() != 2 or target_in.shape[0] != source.shape[0] or target_in.shape[1] == 0
    ):
        raise ValueError(
            f"target_in must be [B, T] with B={source.shape[0]} and T >= 1, got "
            f"{tuple(target_in.shape)}"
        )
    if vocab_sizes is None:
        return
    for name, ids, size in (
        ("source", source, vocab_sizes[0]),
        ("target_in", target_in, vocab_sizes[1]),
    ):
        if ids is not None and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
            raise ValueError(
                f"{name} ids must lie in [0, {size}) (the vocabulary size), got "
                f"[{int(ids.min())}, {int(ids.max())}]"
            )
