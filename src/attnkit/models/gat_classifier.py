"""Graph attention network for transductive node classification (Veličković et al. 2018, §3.3).

Two graph attention layers over one fixed graph (GAT eq. 1-6)::

    h' = ELU(‖_{k=1..K} Σ_{j∈N(i)} α^k_ij W^k h_j)        hidden layer, K heads concatenated (5)
    z  = 1/K' Σ_{k=1..K'} Σ_{j∈N(i)} α^k_ij W^k h'_j       output layer, K' heads averaged     (6)

with ``α_ij = softmax_{j∈N(i)}(LeakyReLU(a^T [W h_i ‖ W h_j]))`` (eq. 3) and dropout on each
layer's input and on the normalised attention coefficients, as in the paper's Cora setup.

Why a dense layer: :class:`attnkit.mechanisms.GraphAttention` normalises each neighbourhood with its
own segment softmax over an edge list, outside :func:`attnkit.attention`, so
``attnkit.evaluate.ablate`` and ``attnkit.interpret.record`` (which intercept the engine) cannot see
it. :class:`DenseGraphAttention` has the same parameters and the same output, but computes the
neighbourhood softmax as one masked attention over all ``N × N`` node pairs through the engine:
queries are the target scores ``a_t·W h_i``, keys the source scores ``a_s·W h_j``, the score is
:class:`GraphAttentionScore` (``LeakyReLU(q + k)``), the mask is the adjacency with self-loops. That
costs ``O(N²·K)`` instead of ``O(E·K)``, which is nothing for the 34-node karate club graph and the
reason this model is meant for small graphs only.

Shapes: N nodes, F input features, K heads, F' features per head, C classes, B query nodes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.engine import attention
from attnkit.core.scores import Score
from attnkit.mechanisms.graph import (
    GraphAttention,
    GraphAttentionOutput,
    add_self_loops,
    check_graph,
)


class GraphAttentionScore(Score):
    """GAT's edge score as a score function: ``e_ij = LeakyReLU(q_i + k_j)`` (GAT eq. 1-3).

    With ``q_i = a_t^T W h_i`` and ``k_j = a_s^T W h_j`` (one number per node and head),
    ``q_i + k_j = a^T [W h_i ‖ W h_j]``, so this is exactly GAT's score, expressed as a pairwise
    function the engine (and so the ablation and recording sessions) can run.

    Shapes: ``q [..., M, 1]``, ``k [..., N, 1]`` → ``e [..., M, N]``.
    """

    registry_name = "graph_attention"
    taxonomy = {"scoring": "Additive"}

    def __init__(self, negative_slope: float = 0.2) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        if (d_query, d_key) != (1, 1):
            raise ValueError(
                "GraphAttentionScore takes one number per query and key (a_t·W h_i, a_s·W h_j), "
                f"got d_q={d_query}, d_k={d_key}"
            )

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        # [..., M, 1] + [..., 1, N]: the additive score of every pair, then GAT's LeakyReLU
        return F.leaky_relu(qf + kf.transpose(-2, -1), self.negative_slope)


def adjacency_mask(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Bool ``[N, N]``: entry ``(i, j)`` is True when ``j → i`` is an edge (``j ∈ N(i)``).

    Raises ``ValueError`` on repeated edges: a dense mask holds each pair once, while the edge-list
    layer would count a repeated edge twice, so the two would differ.
    """
    mask = torch.zeros(num_nodes, num_nodes, dtype=torch.bool, device=edge_index.device)
    mask[edge_index[1], edge_index[0]] = True
    if int(mask.sum()) != edge_index.shape[1]:
        raise ValueError(
            f"DenseGraphAttention needs a graph without repeated edges: {edge_index.shape[1]} "
            f"edges given, {int(mask.sum())} distinct"
        )
    return mask


class DenseGraphAttention(GraphAttention):
    """A :class:`~attnkit.mechanisms.GraphAttention` layer whose neighbourhood softmax runs
    through :func:`attnkit.attention` as a dense masked attention (see the module docstring).

    Same constructor, parameters and output as ``GraphAttention`` (a state dict moves between the
    two); ``weights`` are gathered back to one per edge. For small graphs: ``O(N²·K)`` memory.

    Example::

        >>> layer = DenseGraphAttention(4, 8, num_heads=2)
        >>> out = layer(torch.randn(3, 4), torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]]))
        >>> out.nodes.shape, out.weights.shape
        (torch.Size([3, 16]), torch.Size([7, 2]))
    """

    def forward(self, x: Tensor, edge_index: Tensor) -> GraphAttentionOutput:
        """Args: ``x [N, F]``, ``edge_index [2, E]`` (source ``j``, target ``i``).

        Returns: :class:`GraphAttentionOutput` with ``nodes [N, K·F']`` (or ``[N, F']``),
        the edges used ``[2, E']`` and ``α`` per edge and head ``[E', K]``.
        """
        check_graph(type(self).__name__, x, edge_index, self.in_features)
        n = x.shape[0]
        if self.self_loops:
            edge_index = add_self_loops(edge_index, n)
        mask = adjacency_mask(edge_index, n)
        wh = self.linear(x).unflatten(-1, (self.num_heads, self.out_features))  # [N, K, F']
        from_target = (wh * self.attention_target).sum(-1)  # a_t·W h_i  [N, K]
        from_source = (wh * self.attention_source).sum(-1)  # a_s·W h_j  [N, K]
        heads_first = (1, 0, 2)
        out = attention(
            from_target.T[None, :, :, None],  # queries [1, K, N, 1]
            from_source.T[None, :, :, None],  # keys    [1, K, N, 1]
            wh.permute(*heads_first)[None],  # values  [1, K, N, F']
            score=GraphAttentionScore(self.negative_slope),
            mask=mask[None, None],  # [1, 1, N, N]: only the neighbourhood N(i)
            scale=1.0,
            dropout=self.dropout if self.training else 0.0,  # GAT drops attention weights
            return_weights=True,
        )
        nodes = out.context[0].permute(*heads_first)  # [N, K, F']
        nodes = nodes.flatten(1) if self.concat else nodes.mean(1)  # GAT eq. (5) / (6)
        if self.bias is not None:
            nodes = nodes + self.bias
        assert out.weights is not None
        source, target = edge_index
        weights = out.weights[0][:, target, source].T  # [E', K]
        return GraphAttentionOutput(nodes, edge_index, weights)


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
    ) -> None:
        super().__init__()
        if features.dim() != 2:
            raise ValueError(f"features must be [N, F], got {tuple(features.shape)}")
        check_graph("GATClassifier", features, edge_index, features.shape[1])
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.register_buffer("features", features.float())
        self.register_buffer("edge_index", edge_index.long())
        self.dropout = dropout
        self.hidden = DenseGraphAttention(
            features.shape[1],
            hidden_dim,
            heads,
            concat=True,
            negative_slope=negative_slope,
            dropout=dropout,
        )
        self.output = DenseGraphAttention(
            heads * hidden_dim,
            num_classes,
            output_heads,
            concat=False,
            negative_slope=negative_slope,
            dropout=dropout,
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
