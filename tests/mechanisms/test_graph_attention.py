"""GAT and GATv2 against the papers' equations on a dense adjacency, and at scale on edge lists.

The reference builds the dense ``N × N`` adjacency of a small graph and, for every head and node
``i``, scores each neighbour ``j ∈ N(i)`` by the paper's formula in float64 —
GAT (Veličković et al. eq. 1-4): ``LeakyReLU(a^T [W h_i ‖ W h_j])``; GATv2 (Brody et al. eq. 7):
``a^T LeakyReLU(W_t h_i + W_s h_j)`` — takes the softmax over the neighbourhood and sums the
messages; heads are concatenated or averaged (GAT eq. 5-6).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.graph import (
    GAT,
    GraphAttention,
    GraphAttentionV2,
    segment_softmax,
)

F64 = torch.float64
TOL = 1e-10
# 6 nodes: a directed graph with a node (5) that has no incoming edge but its loop, an existing
# self-loop (2 → 2) that must not be counted twice, and a repeated neighbourhood size.
EDGES = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 5, 1], [1, 2, 0, 0, 0, 3, 2, 4, 4]])


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def dense_reference(layer, x: Tensor, edges: Tensor) -> tuple[Tensor, dict]:
    """(nodes, {(j, i): α_ij per head}) from the equations on a dense adjacency."""
    n, heads, fo = x.shape[0], layer.num_heads, layer.out_features
    adjacency = torch.zeros(n, n, dtype=torch.bool)  # adjacency[i, j]: j is a neighbour of i
    adjacency[edges[1], edges[0]] = True
    if layer.self_loops:
        adjacency |= torch.eye(n, dtype=torch.bool)
    slope = layer.negative_slope
    out = torch.zeros(n, heads, fo, dtype=F64)
    alphas: dict[tuple[int, int], Tensor] = {}
    for k in range(heads):
        cols = slice(k * fo, (k + 1) * fo)
        if isinstance(layer, GraphAttentionV2):
            ws = x @ layer.source_linear.weight[cols].T + layer.source_linear.bias[cols]
            wt = x @ layer.target_linear.weight[cols].T + layer.target_linear.bias[cols]
            messages = ws
        else:
            wh = x @ layer.linear.weight[cols].T
            a = torch.cat([layer.attention_target[k], layer.attention_source[k]])
            messages = wh
        for i in range(n):
            neighbours = adjacency[i].nonzero().flatten().tolist()
            if not neighbours:
                continue
            if isinstance(layer, GraphAttentionV2):
                e = torch.stack(
                    [layer.attention[k] @ F.leaky_relu(wt[i] + ws[j], slope) for j in neighbours]
                )
            else:
                e = torch.stack(
                    [F.leaky_relu(a @ torch.cat([wh[i], wh[j]]), slope) for j in neighbours]
                )
            alpha = torch.softmax(e, 0)
            for a_ij, j in zip(alpha, neighbours, strict=True):
                alphas.setdefault((j, i), torch.zeros(heads, dtype=F64))[k] = a_ij
                out[i, k] += a_ij * messages[j]
    nodes = out.flatten(1) if layer.concat else out.mean(1)
    return nodes + layer.bias, alphas


def check_against_reference(layer, x: Tensor, edges: Tensor) -> None:
    got = layer(x, edges)
    nodes, alphas = dense_reference(layer, x, edges)
    close(got.nodes, nodes)
    pairs = [tuple(e) for e in got.edge_index.T.tolist()]
    assert sorted(pairs) == sorted(alphas)  # every neighbour once, self-loop included once
    for column, pair in enumerate(pairs):
        close(got.weights[column], alphas[pair])


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("kind", [GraphAttention, GraphAttentionV2])
def test_matches_dense_equations(kind, concat: bool) -> None:
    torch.manual_seed(0)
    layer = kind(4, 3, num_heads=2, concat=concat).double()
    with torch.no_grad():
        layer.bias.normal_()
    check_against_reference(layer, randn(6, 4, seed=1), EDGES)


def test_shared_weights_and_no_self_loops() -> None:
    torch.manual_seed(1)
    v2 = GraphAttentionV2(4, 3, num_heads=2, share_weights=True, self_loops=False).double()
    assert v2.source_linear is v2.target_linear
    check_against_reference(v2, randn(6, 4, seed=2), EDGES)
    gat = GraphAttention(4, 3, self_loops=False).double()
    out = gat(randn(6, 4, seed=3), EDGES)
    close(out.nodes[5], gat.bias)  # node 5 has no incoming edge: no message at all


def test_weights_sum_to_one_per_node_and_survive_huge_scores() -> None:
    torch.manual_seed(2)
    layer = GraphAttention(4, 3, num_heads=2).double()
    with torch.no_grad():
        layer.attention_source.mul_(1e4)
        layer.attention_target.mul_(1e4)
    x = randn(6, 4, seed=4)
    out = layer(x, EDGES)
    assert torch.isfinite(out.nodes).all() and torch.isfinite(out.weights).all()
    totals = torch.zeros(6, 2, dtype=F64).index_add_(0, out.edge_index[1], out.weights)
    close(totals, torch.ones(6, 2, dtype=F64))
    check_against_reference(layer, x, EDGES)


def test_segment_softmax_equals_masked_softmax() -> None:
    scores, segment = randn(9, 3, seed=5), EDGES[1]
    got = segment_softmax(scores, segment, 6)
    for i in range(6):
        rows = segment == i
        if rows.any():
            close(got[rows], torch.softmax(scores[rows], 0))


def test_relabelling_nodes_relabels_the_output() -> None:
    torch.manual_seed(3)
    layer = GraphAttentionV2(4, 3, num_heads=2).double()
    x = randn(6, 4, seed=6)
    perm = torch.randperm(6)  # new id of old node i is inverse[i]
    inverse = torch.argsort(perm)
    out = layer(x, EDGES).nodes
    close(layer(x[perm], inverse[EDGES]).nodes, out[perm])


def test_large_sparse_graph_runs_without_dense_matrices() -> None:
    """60 000 nodes: a dense N × N mask would need 3.6e9 entries; the edge list needs 3e5."""
    g = torch.Generator().manual_seed(7)
    n, e = 60_000, 240_000
    edges = torch.randint(0, n, (2, e), generator=g)
    layer = GraphAttentionV2(8, 4, num_heads=2)
    out = layer(torch.randn(n, 8, generator=g), edges)
    assert out.nodes.shape == (n, 8) and out.weights.shape[0] <= e + n
    totals = torch.zeros(n, 2).index_add_(0, out.edge_index[1], out.weights)
    torch.testing.assert_close(totals, torch.ones(n, 2))


def test_gradcheck() -> None:
    torch.manual_seed(4)
    layer = GraphAttentionV2(3, 2, num_heads=2).double()
    x = randn(6, 3, seed=8).requires_grad_()
    assert gradcheck(lambda t: layer(t, EDGES).nodes, (x,))
    gat = GraphAttention(3, 2, num_heads=2).double()
    assert gradcheck(lambda t: gat(t, EDGES).nodes, (x,))


def test_dropout_only_in_training() -> None:
    torch.manual_seed(5)
    layer = GraphAttention(4, 3, dropout=0.5).double()
    x = randn(6, 4, seed=9)
    layer.eval()
    close(layer(x, EDGES).nodes, dense_reference(layer, x, EDGES)[0])
    layer.train()
    assert not torch.allclose(layer(x, EDGES).nodes, layer.eval()(x, EDGES).nodes)


def test_taxonomy() -> None:
    row = ak.taxonomy.describe(GAT(4, 3, num_heads=4)).names()
    assert row["scoring"] == {"Additive"} and row["query_multiplicity"] == {"Multi-Head"}
    assert row["query_type"] == {"Self-Attentive"} and row["alignment"] == {"Global"}
    assert ak.taxonomy.describe(GAT(4, 3)).names()["query_multiplicity"] == {"Singular"}


def test_bad_input_names_expected_and_given() -> None:
    layer = GraphAttention(4, 3)
    with pytest.raises(ValueError, match=r"node features \[N, F=4\], got \(6, 5\)"):
        layer(torch.randn(6, 5), EDGES)
    with pytest.raises(ValueError, match=r"edge_index \[2, E\] \(sources, targets\), got \(3, 9\)"):
        layer(torch.randn(6, 4), torch.zeros(3, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"torch\.long tensor, got torch\.int32"):
        layer(torch.randn(6, 4), EDGES.int())
    with pytest.raises(ValueError, match=r"node ids in \[0, 5\), got ids from 0 to 5"):
        layer(torch.randn(5, 4), EDGES)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        GraphAttention(4, 3, num_heads=0)


def test_agrees_with_pytorch_geometric() -> None:  # pragma: no cover - optional peer library
    # PyG is no dependency of attnkit, nor in [dev]: `make test` installs it best-effort. The
    # "optional:" prefix puts the reason in the summary of optional-dependency skips.
    pyg = pytest.importorskip(
        "torch_geometric.nn",
        reason="optional: torch_geometric is not installed, so the interop test with PyTorch "
        "Geometric's GATConv/GATv2Conv is skipped (`make test` tries `pip install "
        "torch_geometric`; without network or on a failed install it stays absent)",
    )
    GATConv, GATv2Conv = pyg.GATConv, pyg.GATv2Conv

    torch.manual_seed(6)
    x = randn(6, 4, seed=10).float()
    ours = GraphAttention(4, 3, num_heads=2)
    theirs = GATConv(4, 3, heads=2)
    linear = getattr(theirs, "lin", None) or theirs.lin_src  # renamed across PyG versions
    with torch.no_grad():
        linear.weight.copy_(ours.linear.weight)
        theirs.att_src.copy_(ours.attention_source.unsqueeze(0))
        theirs.att_dst.copy_(ours.attention_target.unsqueeze(0))
        theirs.bias.copy_(ours.bias)
    torch.testing.assert_close(ours(x, EDGES).nodes, theirs(x, EDGES))
    ours2, theirs2 = GraphAttentionV2(4, 3, num_heads=2), GATv2Conv(4, 3, heads=2)
    with torch.no_grad():
        theirs2.lin_l.weight.copy_(ours2.source_linear.weight)
        theirs2.lin_l.bias.copy_(ours2.source_linear.bias)
        theirs2.lin_r.weight.copy_(ours2.target_linear.weight)
        theirs2.lin_r.bias.copy_(ours2.target_linear.bias)
        theirs2.att.copy_(ours2.attention.unsqueeze(0))
        theirs2.bias.copy_(ours2.bias)
    torch.testing.assert_close(ours2(x, EDGES).nodes, theirs2(x, EDGES))


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("kind", [GraphAttention, GraphAttentionV2])
def test_record_sees_graph_attention_and_changes_nothing(kind, concat: bool) -> None:
    """Inside an interpretation session the layer attends through the engine: the same nodes and
    per-edge weights as the equations, and the recorded ``[1, K, N, N]`` map holds ``α_ij`` at
    row ``i`` (target), column ``j`` (source)."""
    torch.manual_seed(3)
    layer = kind(5, 4, num_heads=3, concat=concat).double()
    x = randn(6, 5, seed=4)
    with ak.interpret.record(layer) as rec:
        check_against_reference(layer, x, EDGES)
        out = layer(x, EDGES)
    recorded = rec[""]
    assert recorded.shape == (1, 3, 6, 6)
    source, target = out.edge_index
    close(recorded[0][:, target, source].T, out.weights)
    close(recorded.sum(-1), torch.ones(1, 3, 6, dtype=F64))  # every node has its self-loop


def test_uniform_ablation_of_graph_attention_averages_the_neighbours() -> None:
    torch.manual_seed(5)
    layer = GraphAttention(5, 4, num_heads=2, concat=True).double()
    x = randn(6, 5, seed=6)
    with ak.evaluate.ablate(layer, "uniform"):
        got = layer(x, EDGES).nodes
    adjacency = torch.zeros(6, 6, dtype=F64)
    adjacency[EDGES[1], EDGES[0]] = 1.0
    adjacency.fill_diagonal_(1.0)  # self-loops, each counted once
    wh = (x @ layer.linear.weight.T).view(6, 2, 4)
    mean = torch.einsum("ij,jkf->ikf", adjacency / adjacency.sum(-1, keepdim=True), wh)
    close(got, mean.flatten(1) + layer.bias)
    assert not torch.allclose(layer(x, EDGES).nodes, got)
