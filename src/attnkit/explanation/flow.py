"""Attention flow (Abnar & Zuidema 2020) from one source token, by scipy's max-flow: the map the
faithfulness table reads for a BERT-style classifier, from its ``[CLS]`` token."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

#: flow capacities are scaled to integers for scipy's max-flow: a resolution of 1e-7
FLOW_SCALE = 10**7


def cls_flow(maps: Sequence[Tensor], lengths: Sequence[int] | None = None) -> Tensor:
    """Attention flow (Abnar & Zuidema 2020) from the top layer's first token (``[CLS]``) to each
    input token, ``[B, N]`` float64: the layer graph of :func:`attnkit.interpret.attention_flow`
    (heads averaged, half residual: ``Ã_l[i, j]`` is the capacity from ``(l, i)`` to
    ``(l - 1, j)``), with the max-flow from that one source only and by scipy's Dinic algorithm
    on capacities rounded to multiples of ``1 / FLOW_SCALE`` (networkx's Edmonds–Karp over every
    pair took seconds per sentence). ``maps``: one ``[B, H, N, N]`` per layer, bottom first;
    ``lengths``: each example's real tokens (at the start; padding is left out of its graph)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    from attnkit.interpret.rollout import layer_maps

    fused = layer_maps(maps, "mean", 0.5)
    n_layers, (b, n) = len(fused), fused[0].shape[:2]
    flow = torch.zeros(b, n, dtype=torch.float64)
    for example in range(b):
        length = n if lengths is None else int(lengths[example])
        rows, cols, capacities = [], [], []
        for layer, weights in enumerate(fused, start=1):
            w = weights[example, :length, :length].detach().double().cpu().numpy()
            i, j = np.nonzero(w > 0)
            rows.append(layer * length + i)  # node (l, i) is l·length + i
            cols.append((layer - 1) * length + j)
            capacities.append(np.rint(w[i, j] * FLOW_SCALE).astype(np.int32))
        size = (n_layers + 1) * length
        graph = csr_matrix(
            (np.concatenate(capacities), (np.concatenate(rows), np.concatenate(cols))),
            shape=(size, size),
        )
        source = n_layers * length  # node (n_layers, 0)
        for j in range(length):
            value = maximum_flow(graph, source, j, method="dinic").flow_value
            flow[example, j] = value / FLOW_SCALE
    return flow
