"""Graph attention (Veličković et al. 2018, "Graph Attention Networks"; Brody et al. 2022, "How
Attentive are Graph Attention Networks?"): each node attends to its neighbours.

On a graph the admissible keys of node ``i`` are its neighbours ``N(i)`` (with ``i`` itself when
self-loops are added). GAT scores an edge ``j → i`` additively and normalises over ``N(i)``:

    e_ij = LeakyReLU(a^T [W h_i ‖ W h_j])                            (GAT, eq. 1-3)
    α_ij = softmax_{j ∈ N(i)}(e_ij),   h_i' = Σ_{j ∈ N(i)} α_ij W h_j  (eq. 3-4)

Because ``a^T [W h_i ‖ W h_j] = a_t^T W h_i + a_s^T W h_j`` and LeakyReLU is monotone, the ranking
of the neighbours is the same for every query node ("static" attention). GATv2 moves the
non-linearity inside, making it the survey's additive score ``w^T act(W_1 q + W_2 k)``:

    e_ij = a^T LeakyReLU(W_t h_i + W_s h_j),   h_i' = Σ_j α_ij W_s h_j   (GATv2, eq. 7)

which can rank neighbours differently for every query node ("dynamic" attention). With ``K``
heads the results are concatenated (hidden layers) or averaged (the last layer) (GAT eq. 5-6).

Graphs are edge lists, never dense ``N × N`` masks: the softmax over each neighbourhood is a
segment softmax over the edges grouped by target node — a per-node maximum
(``scatter_reduce(..., "amax")``) subtracted for numerical stability, ``exp``, a per-node sum by
``index_add_`` — so time and memory are ``O(E·K)``.

Conventions (PyTorch Geometric's): ``edge_index [2, E]`` long, row 0 the source ``j``, row 1 the
target ``i``; a message flows ``j → i``, and node ``i`` attends over its incoming edges.

Shapes: N nodes, E edges, K heads, F input features, F' output features per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.hooks import observed


@dataclass(frozen=True, kw_only=True)
class GraphAttentionOutput(AttentionOutput):
    """What a graph attention layer returns: an :class:`~attnkit.AttentionOutput` whose context
    is the new node features, plus the edges attended over (keyword-only).

    Attributes:
        context: new node features ``[N, K·F']`` (concatenated heads) or ``[N, F']``
            (averaged); also :attr:`nodes`.
        edge_index: the edges attended over ``[2, E']`` (the input's, with self-loops added).
        weights: ``α_ij`` per edge and head ``[E', K]`` (a graph's weights are per edge, not a
            ``[B, H, M, N]`` matrix), before dropout; they sum to one over each node's incoming
            edges.

    Example::

        >>> gat = ak.mechanisms.GraphAttention(4, 8, num_heads=2)
        >>> out = gat(torch.randn(3, 4), torch.tensor([[0, 1, 2], [1, 2, 0]]))
        >>> out.nodes.shape, out.edge_index.shape  # 3 edges + 3 self-loops
        (torch.Size([3, 16]), torch.Size([2, 6]))
    """

    edge_index: Tensor

    @property
    def nodes(self) -> Tensor:
        """The new node features (``context``)."""
        return self.context


def check_graph(name: str, x: Tensor, edge_index: Tensor, in_features: int) -> None:
    """Raise unless ``x [N, F]`` and ``edge_index`` is a long ``[2, E]`` of node ids ``< N``."""
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[-1] != in_features:
        given = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} expects node features [N, F={in_features}], got {given}")
    if not isinstance(edge_index, Tensor) or edge_index.dtype != torch.long:
        kind = edge_index.dtype if isinstance(edge_index, Tensor) else type(edge_index).__name__
        raise ValueError(f"{name} expects edge_index as a torch.long tensor, got {kind}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(
            f"{name} expects edge_index [2, E] (sources, targets), got {tuple(edge_index.shape)}"
        )
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= x.shape[0]):
        raise ValueError(
            f"{name} expects node ids in [0, {x.shape[0]}), got ids from "
            f"{int(edge_index.min())} to {int(edge_index.max())}"
        )


def add_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The edges without existing self-loops, then one loop ``i → i`` per node (so each node is in
    its own neighbourhood exactly once, as GAT's ``N(i)`` includes ``i``)."""
    kept = edge_index[:, edge_index[0] != edge_index[1]]
    loops = torch.arange(num_nodes, device=edge_index.device).expand(2, -1)
    return torch.cat([kept, loops], 1)


def segment_softmax(scores: Tensor, segment: Tensor, num_segments: int) -> Tensor:
    """Softmax of ``scores [E, K]`` over the edges of each segment (target node) ``segment [E]``.

    Reference: for every node ``i``, ``torch.softmax(scores[segment == i], 0)``. A per-node
    maximum is subtracted first, so large scores do not overflow; it is detached since the softmax
    does not depend on it (its gradient would be zero anyway, up to rounding).
    """
    heads = scores.shape[1]
    index = segment.unsqueeze(1).expand(-1, heads)
    floor = scores.new_full((num_segments, heads), float("-inf"))
    maximum = floor.scatter_reduce(0, index, scores.detach(), "amax", include_self=True)
    exp = torch.exp(scores - maximum[segment])
    total = exp.new_zeros(num_segments, heads).index_add_(0, segment, exp)
    return exp / total[segment]


class _GraphAttentionBase(nn.Module):
    """Shared aggregation of GAT and GATv2: heads, self-loops, segment softmax, concat/average."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_heads: int,
        concat: bool,
        negative_slope: float,
        dropout: float,
        self_loops: bool,
        bias: bool,
        uniform: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (
            ("in_features", in_features),
            ("out_features", out_features),
            ("num_heads", num_heads),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be a probability in [0, 1), got {dropout}")
        self.in_features, self.out_features, self.num_heads = in_features, out_features, num_heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.self_loops, self.uniform = self_loops, uniform
        size = num_heads * out_features if concat else out_features
        self.bias = nn.Parameter(torch.zeros(size)) if bias else None
        self.taxonomy = {
            "scoring": "Additive",
            # a softmax over every admissible key (the neighbourhood is the mask): soft/global
            "alignment": "Global",
            "query_type": "Self-Attentive",  # every node is a query over its neighbours
            "query_multiplicity": "Multi-Head" if num_heads > 1 else "Singular",
        }

    def _edge_scores(self, x: Tensor, source: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """``(e [E, K], messages [E, K, F'])`` for the edges ``source → target``."""
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor) -> GraphAttentionOutput:
        """Attend over each node's incoming edges.

        Args:
            x: node features ``[N, F]``.
            edge_index: ``[2, E]`` long, ``(source j, target i)`` per column.

        Returns:
            :class:`GraphAttentionOutput` (nodes, the edges used, ``α`` per edge and head).
        """
        check_graph(type(self).__name__, x, edge_index, self.in_features)
        n = x.shape[0]
        if self.self_loops:
            edge_index = add_self_loops(edge_index, n)
        source, target = edge_index
        scores, messages = self._edge_scores(x, source, target)
        if self.uniform:  # α_ij = 1/|N(i)|: the same layer without what its scores learn
            scores = torch.zeros_like(scores)
        if observed():  # attention hooks (record, ablate) watch: go through the engine they see
            out, weights = self._through_engine(scores, messages, edge_index, n)
        else:
            weights = segment_softmax(scores, target, n)  # α_ij over N(i)
            used = F.dropout(weights, self.dropout, self.training)  # GAT drops attention weights
            out = x.new_zeros(n, self.num_heads, self.out_features)
            out.index_add_(0, target, used.unsqueeze(-1) * messages)  # Σ_j α_ij W h_j
        out = out.flatten(1) if self.concat else out.mean(1)  # GAT eq. (5) / (6)
        if self.bias is not None:
            out = out + self.bias
        return GraphAttentionOutput(context=out, edge_index=edge_index, weights=weights)

    def _through_engine(
        self, scores: Tensor, messages: Tensor, edge_index: Tensor, n: int
    ) -> tuple[Tensor, Tensor]:
        """The same aggregation as one dense masked :func:`attnkit.attention` call over the
        ``N × N`` node pairs, so interpretation and ablation sessions see (and may change) it:
        zero queries and keys, and the edge scores as a float mask (``-inf`` off the graph), give
        ``softmax_j(e_ij)`` over ``N(i)``. ``O(N²·K)``: only while a session is active.

        Returns ``(nodes [N, K, F'], α per edge and head [E, K])``.
        """
        source, target = edge_index
        k, dtype = self.num_heads, scores.dtype
        counts = scores.new_zeros(n, n).index_put_(
            (target, source), scores.new_ones(source.shape), accumulate=True
        )
        # A repeated edge has identical copies: average them (so each gets its share of the
        # gradient) and count them by + log c_ij, as the edge-list softmax sums over each copy.
        share = counts[target, source][:, None]
        dense = scores.new_zeros(n, n, k).index_put(
            (target, source), scores / share, accumulate=True
        )
        bias = dense.permute(2, 0, 1) + counts.log()  # [K, N, N]: row i target, column j source
        # W h_j per source node, again the mean of its per-edge copies
        out_degree = torch.bincount(source, minlength=n).clamp_min(1).to(dtype)
        values = scores.new_zeros(n, k, self.out_features).index_add(0, source, messages)
        values = values / out_degree[:, None, None]
        zeros = scores.new_zeros(1, k, n, 1)
        out = attention(
            zeros,
            zeros,
            values.transpose(0, 1)[None],  # [1, K, N, F']
            score="dot",
            mask=bias[None],
            dropout=self.dropout if self.training else 0.0,  # GAT drops attention weights
            return_weights=True,
        )
        assert out.weights is not None
        weights = out.weights[0][:, target, source].T / share  # [E, K], a repeated edge's share
        return out.context[0].transpose(0, 1), weights

    def extra_repr(self) -> str:
        return (
            f"{self.in_features}, {self.out_features}, num_heads={self.num_heads}, "
            f"concat={self.concat}, self_loops={self.self_loops}, dropout={self.dropout}"
        )


class GraphAttention(_GraphAttentionBase):
    """Graph attention layer, GAT (Veličković et al. 2018): ``α_ij = softmax_j(LeakyReLU(a^T
    [W h_i ‖ W h_j]))`` over the neighbours, ``h_i' = ‖_k Σ_j α_ij^k W^k h_j`` (or the mean).

    Args:
        in_features: ``F``.
        out_features: ``F'`` per head.
        num_heads: ``K``.
        concat: concatenate the heads (``[N, K·F']``, hidden layers) or average them
            (``[N, F']``, the paper's output layer).
        negative_slope: of the LeakyReLU (the paper: 0.2).
        dropout: on the attention weights, in training mode only.
        uniform: ``α_ij = 1/|N(i)|`` whatever the scores (the uniform-attention baseline of
            the survey's §4.1, native to the edge list).
        self_loops: add ``i → i`` to every node (replacing existing loops): ``i ∈ N(i)``.
        bias: a learned bias added to the output.

    Parameters: ``linear`` (``W``, no bias), ``attention_source`` / ``attention_target``
    ``[K, F']``: the halves of ``a`` that multiply ``W h_j`` and ``W h_i``.

    Example::

        >>> gat = GraphAttention(4, 8, num_heads=2)
        >>> edges = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
        >>> out = gat(torch.randn(3, 4), edges)
        >>> out.nodes.shape, out.weights.shape   # 4 edges + 3 self-loops
        (torch.Size([3, 16]), torch.Size([7, 2]))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_heads: int = 1,
        *,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        self_loops: bool = True,
        bias: bool = True,
        uniform: bool = False,
    ) -> None:
        super().__init__(
            in_features,
            out_features,
            num_heads,
            concat,
            negative_slope,
            dropout,
            self_loops,
            bias,
            uniform,
        )
        self.linear = nn.Linear(in_features, num_heads * out_features, bias=False)
        self.attention_source = nn.Parameter(torch.empty(num_heads, out_features))
        self.attention_target = nn.Parameter(torch.empty(num_heads, out_features))
        nn.init.xavier_uniform_(self.linear.weight)
        nn.init.xavier_uniform_(self.attention_source)
        nn.init.xavier_uniform_(self.attention_target)

    def _edge_scores(self, x: Tensor, source: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        wh = self.linear(x).unflatten(-1, (self.num_heads, self.out_features))  # [N, K, F']
        # a^T [W h_i ‖ W h_j] = a_t·W h_i + a_s·W h_j: two scalars per node, not per edge
        from_source = (wh * self.attention_source).sum(-1)  # [N, K]
        from_target = (wh * self.attention_target).sum(-1)
        scores = F.leaky_relu(from_target[target] + from_source[source], self.negative_slope)
        return scores, wh[source]


class GraphAttentionV2(_GraphAttentionBase):
    """GATv2 (Brody et al. 2022): ``e_ij = a^T LeakyReLU(W_t h_i + W_s h_j)`` — dynamic attention,
    the additive score with the non-linearity between the projections and ``a``.

    Args:
        in_features: ``F``.
        out_features: ``F'`` per head.
        num_heads: ``K``.
        concat: concatenate the heads (``[N, K·F']``, hidden layers) or average them
            (``[N, F']``, an output layer).
        negative_slope: of the LeakyReLU (0.2).
        dropout: on the attention weights, in training mode only.
        uniform: ``α_ij = 1/|N(i)|`` whatever the scores (the uniform-attention baseline of
            the survey's §4.1, native to the edge list).
        self_loops: add ``i → i`` to every node (replacing existing loops): ``i ∈ N(i)``.
        bias: a learned bias added to the output.
        share_weights: one matrix for sources and targets (``W_s = W_t``).

    Parameters: ``source_linear`` (``W_s``, also the messages), ``target_linear`` (``W_t``),
    both with biases as in the reference implementation; ``attention`` ``[K, F']`` (``a``).

    Example::

        >>> gat = GraphAttentionV2(4, 8, num_heads=2, concat=False)
        >>> out = gat(torch.randn(3, 4), torch.tensor([[0, 1, 2], [1, 2, 0]]))
        >>> out.nodes.shape
        torch.Size([3, 8])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_heads: int = 1,
        *,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        self_loops: bool = True,
        bias: bool = True,
        share_weights: bool = False,
        uniform: bool = False,
    ) -> None:
        super().__init__(
            in_features,
            out_features,
            num_heads,
            concat,
            negative_slope,
            dropout,
            self_loops,
            bias,
            uniform,
        )
        self.source_linear = nn.Linear(in_features, num_heads * out_features)
        self.target_linear = (
            self.source_linear
            if share_weights
            else nn.Linear(in_features, num_heads * out_features)
        )
        self.attention = nn.Parameter(torch.empty(num_heads, out_features))
        nn.init.xavier_uniform_(self.attention)

    def _edge_scores(self, x: Tensor, source: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        shape = (self.num_heads, self.out_features)
        ws = self.source_linear(x).unflatten(-1, shape)  # [N, K, F']
        wt = self.target_linear(x).unflatten(-1, shape)
        # the non-linearity sits between W and a, so it is per edge: [E, K, F']
        hidden = F.leaky_relu(wt[target] + ws[source], self.negative_slope)
        return (hidden * self.attention).sum(-1), ws[source]


#: the papers' names
GAT = GraphAttention
GATv2 = GraphAttentionV2
