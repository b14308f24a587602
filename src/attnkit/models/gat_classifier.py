"""Graph attention network for transductive node classification (Veličković et al. 2018, §3.3).

Two graph attention layers over one fixed graph (GAT eq. 1-6)::

    h' = ELU(‖_{k=1..K} Σ_{j∈N(i)} α^k_ij W^k h_j)        hidden layer, K heads concatenated (5)
    z  = 1/K' Σ_{k=1..K'} Σ_{j∈N(i)} α^k_ij W^k h'_j       output layer, K' heads averaged     (6)

with ``α_ij = softmax_{j∈N(i)}(LeakyReLU(a^T [W h_i ‖ W h_j]))`` (eq. 3) and dropout on each
layer's input and on the normalised attention coefficients, as in the paper's Cora setup.

The layers are :class:`attnkit.mechanisms.GraphAttention` (segment softmax over the edge list,
``O(E·K)``); inside ``attnkit.interpret.record`` or ``attnkit.evaluate.ablate`` they attend through
the engine, so the uniform-attention column of a run replaces their ``α_ij`` too.

Shapes: N nodes, F input features, K heads, F' features per head, C classes, B query nodes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.mechanisms.graph import (
    GraphAttention,
    GraphAttentionV2,
    check_graph,
)

#: the layer of each variant: GAT's static attention, GATv2's dynamic attention
LAYERS = {"gat": GraphAttention, "gatv2": GraphAttentionV2}


class GATClassifier(nn.Module):
    """Two-layer GAT node classifier over a fixed graph held as buffers (transductive setting).

    Args:
        features: node features ``X [N, F]`` (one-hot identities for a featureless graph).
        edge_index: ``[2, E]`` long, the graph's directed edges (both directions of an undirected
            edge); self-loops are added by the layers.
        num_classes: ``C``.
        hidden_dim: ``F'`` per head of the hidden layer.
        heads: ``K`` of the hidden layer (concatenated).
        output_heads: ``K'`` of the output layer (averaged, GAT eq. 6).
        dropout: on each layer's input and on the attention weights (the paper: 0.6).
        negative_slope: of the LeakyReLU in the score (the paper: 0.2).
        variant: ``"gat"`` (Veličković et al. 2018) or ``"gatv2"`` (Brody et al. 2022: the
            same network with GATv2's dynamic attention, eq. 7 of theirs).
        uniform_attention: every layer attends uniformly over each neighbourhood
            (``α_ij = 1/|N(i)|``): the same network without what its attention learns.

    ``forward(nodes [B]) -> logits [B, C]``: the whole graph is propagated (attention needs
    every neighbour), then the rows of the asked nodes are returned.

    Example::

        >>> edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
        >>> model = GATClassifier(torch.eye(3), edges, num_classes=2, hidden_dim=4, heads=2)
        >>> model(torch.tensor([0, 2])).shape
        torch.Size([2, 2])
    """

    features: Tensor
    edge_index: Tensor

    def __init__(
        self,
        features: Tensor,
        edge_index: Tensor,
        num_classes: int,
        hidden_dim: int = 8,
        heads: int = 8,
        output_heads: int = 1,
        dropout: float = 0.6,
        negative_slope: float = 0.2,
        variant: str = "gat",
        uniform_attention: bool = False,
    ) -> None:
        super().__init__()
        if variant not in LAYERS:
            raise ValueError(f"variant must be one of {', '.join(LAYERS)}, got {variant!r}")
        layer = LAYERS[variant]
        if features.dim() != 2:
            raise ValueError(f"features must be [N, F], got {tuple(features.shape)}")
        check_graph("GATClassifier", features, edge_index, features.shape[1])
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.register_buffer("features", features.float())
        self.register_buffer("edge_index", edge_index.long())
        self.dropout = dropout
        self.hidden = layer(
            features.shape[1],
            hidden_dim,
            heads,
            concat=True,
            negative_slope=negative_slope,
            dropout=dropout,
            uniform=uniform_attention,
        )
        self.output = layer(
            heads * hidden_dim,
            num_classes,
            output_heads,
            concat=False,
            negative_slope=negative_slope,
            dropout=dropout,
            uniform=uniform_attention,
        )

    def node_logits(self) -> Tensor:
        """Logits of every node ``[N, C]``."""
        h = F.dropout(self.features, self.dropout, self.training)
        h = F.elu(self.hidden(h, self.edge_index).nodes)  # eq. (5), ELU as in the paper
        h = F.dropout(h, self.dropout, self.training)
        return self.output(h, self.edge_index).nodes  # eq. (6): heads averaged

    def forward(self, nodes: Tensor) -> Tensor:
        """Logits ``[B, C]`` of the nodes ``nodes [B]`` (long ids)."""
        n = self.features.shape[0]
        if not isinstance(nodes, Tensor) or nodes.dtype != torch.long or nodes.dim() != 1:
            given = f"{nodes.dtype} {tuple(nodes.shape)}" if isinstance(nodes, Tensor) else nodes
            raise ValueError(f"GATClassifier expects node ids as a long tensor [B], got {given}")
        if nodes.numel() and (nodes.min() < 0 or nodes.max() >= n):
            raise ValueError(
                f"node ids must be in [0, {n}), got {int(nodes.min())}..{int(nodes.max())}"
            )
        return self.node_logits()[nodes]
