"""Attention flow (Abnar & Zuidema 2020): maximum flow through the layers' attention graph.

The stack of layers is a directed acyclic graph: node ``(l, i)`` is token ``i`` after layer ``l``
(``l = 0`` the input), and an edge from ``(l, i)`` to ``(l - 1, j)`` has capacity ``Ã_l[i, j]``,
the residual-augmented attention of :func:`attnkit.interpret.rollout.residual_attention`. The flow
from output token ``i`` to input token ``j`` is the value of the maximum flow from ``(n, i)`` to
``(0, j)``. Unlike rollout (which multiplies), flow is limited by the narrowest edge of each path.
Computed with networkx (Edmonds–Karp), one max-flow per (output, input) pair: for short inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import torch
from networkx.algorithms.flow import edmonds_karp
from torch import Tensor

from attnkit.interpret.rollout import layer_maps


def attention_graph(fused: Sequence[Tensor]) -> nx.DiGraph:
    """The layer graph of residual-augmented maps ``[L, L]`` (bottom first); nodes ``(l, i)``."""
    graph = nx.DiGraph()
    for layer, weights in enumerate(fused, start=1):
        w = weights.detach().double().cpu().tolist()
        for i, row in enumerate(w):
            for j, capacity in enumerate(row):
                if capacity > 0:
                    graph.add_edge((layer, i), (layer - 1, j), capacity=capacity)
    return graph


def attention_flow(
    maps: Sequence[Tensor], *, head_fusion: str = "mean", residual: float = 0.5
) -> Tensor:
    """Attention flow from each top-layer token to each input token.

    Args:
        maps: one self-attention map per layer, bottom first, each ``[L, L]``, ``[H, L, L]`` or
            ``[B, H, L, L]``.
        head_fusion: ``"mean"`` (the paper), ``"max"`` or ``"min"`` over heads.
        residual: identity weight of the residual connection (0.5 in the paper).

    Returns:
        float64 ``[L, L]`` (``[B, L, L]`` batched): ``[i, j]`` = max flow from output token ``i``
        to input token ``j`` (not normalised; divide by the row sum for shares).

    Example::

        >>> maps = [torch.softmax(torch.randn(2, 5, 5), -1) for _ in range(3)]  # [H, L, L] each
        >>> attention_flow(maps).shape
        torch.Size([5, 5])
    """
    fused = layer_maps(maps, head_fusion, residual)
    if fused[0].dim() == 3:
        per_example = [
            attention_flow([f[b] for f in fused], residual=0.0) for b in range(len(fused[0]))
        ]
        return torch.stack(per_example)
    n_layers, length = len(fused), fused[0].shape[-1]
    graph = attention_graph(fused)
    flow = torch.zeros(length, length, dtype=torch.float64)
    for i in range(length):
        for j in range(length):
            source, sink = (n_layers, i), (0, j)
            if source in graph and sink in graph:
                flow[i, j] = nx.maximum_flow_value(graph, source, sink, flow_func=edmonds_karp)
    return flow
