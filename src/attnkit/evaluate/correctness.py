"""Attention correctness (Liu et al. 2017; survey §4.2.1, eq. 46).

With feature vectors ``f_1 … f_n`` for regions ``R_1 … R_n`` and the human-annotated ground-truth
regions ``G``, the correctness of weights ``a`` is the attention mass on the ground truth:

    AC = Σ_{i : R_i ∈ G} a_i                                            (46)

It lies in [0, 1] for weights that sum to 1: 1 when the model attends only inside ``G``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def attention_correctness(weights: Tensor, gold_regions: Tensor | Sequence[int]) -> Tensor:
    """Eq. (46): the attention weight on the ground-truth regions.

    Args:
        weights: ``[..., N]`` attention over ``N`` regions (any leading axes: batch, queries).
        gold_regions: bool ``[..., N]`` broadcastable to ``weights`` (True = region in ``G``),
            or the indices of the regions in ``G`` (the same for every row).

    Returns:
        ``AC`` per row, ``[...]`` (a 0-D tensor for one row).

    Example::

        >>> attention_correctness(torch.tensor([0.5, 0.3, 0.2]), [0, 2])
        tensor(0.7000)
    """
    if not isinstance(weights, Tensor) or weights.dim() < 1:
        raise ValueError(
            f"weights must be a tensor [..., N], got {getattr(weights, 'shape', weights)}"
        )
    n = weights.shape[-1]
    if isinstance(gold_regions, Tensor) and gold_regions.dtype == torch.bool:
        gold = gold_regions.to(weights.device)
        try:
            torch.broadcast_shapes(gold.shape, weights.shape)
        except RuntimeError:
            raise ValueError(
                f"gold_regions {tuple(gold.shape)} does not broadcast to weights {tuple(weights.shape)}"
            ) from None
    else:
        index = torch.as_tensor(gold_regions, dtype=torch.long).flatten()
        if index.numel() and not (0 <= int(index.min()) and int(index.max()) < n):
            raise ValueError(f"gold region indices must be in [0, {n}), got {index.tolist()}")
        gold = torch.zeros(n, dtype=torch.bool, device=weights.device)
        gold[index.to(weights.device)] = True
    return (weights * gold).sum(-1)
