"""Planetoid Cora/Citeseer: counts of the README, PyG's assembly, and one-line errors."""

import collections
import pickle

import numpy as np
import pytest
import scipy.sparse
import torch

from attnkit.data.planetoid import adjacency_entries, load_planetoid, normalize_rows

# README of the planetoid folder: nodes, edges (undirected, as usually quoted), features, classes
README = {"cora": (2708, 5429, 1433, 7, 140), "citeseer": (3327, 4732, 3703, 6, 120)}
# the graph a model sees: both directions, no duplicates, no self-loops (PyG's Planetoid)
DIRECTED_EDGES = {"cora": 10556, "citeseer": 9104}


@pytest.fixture(scope="module")
def root(shared_data):
    path = shared_data / "planetoid"
    if not path.is_dir():
        pytest.skip(f"the shared data pack has no planetoid folder ({path})")
    return path


@pytest.fixture(scope="module")
def graphs(root):
    return {name: load_planetoid(root, name) for name in README}


@pytest.mark.parametrize("name", list(README))
def test_counts_match_the_readme(root, graphs, name):
    nodes, edges, features, classes, train = README[name]
    graph = graphs[name]
    assert graph.features.shape == (nodes, features)
    assert graph.features.dtype == torch.float32
    assert graph.labels.shape == (nodes,) and graph.labels.dtype == torch.long
    assert graph.num_classes == classes
    assert int(graph.labels.max()) == classes - 1
    assert adjacency_entries(root, name) == 2 * edges
    assert graph.edge_index.shape == (2, DIRECTED_EDGES[name])
    assert (int(graph.train_mask.sum()), int(graph.valid_mask.sum())) == (train, 500)
    assert int(graph.test_mask.sum()) == 1000


@pytest.mark.parametrize("name", list(README))
def test_split_is_the_standard_one(root, graphs, name):
    graph = graphs[name]
    train = graph.train_mask.nonzero().flatten()
    assert torch.equal(train, torch.arange(README[name][4]))  # the first len(y) nodes
    per_class = torch.bincount(graph.labels[graph.train_mask], minlength=graph.num_classes)
    assert per_class.tolist() == [20] * graph.num_classes
    valid = graph.valid_mask.nonzero().flatten()
    assert torch.equal(valid, torch.arange(len(train), len(train) + 500))
    test_ids = [int(line) for line in (root / f"ind.{name}.test.index").read_text().split()]
    assert set(graph.test_mask.nonzero().flatten().tolist()) == set(test_ids)
    masks = graph.train_mask.int() + graph.valid_mask.int() + graph.test_mask.int()
    assert int(masks.max()) == 1


@pytest.mark.parametrize("name", list(README))
def test_edges_are_the_adjacency_both_ways(root, graphs, name):
    with open(root / f"ind.{name}.graph", "rb") as handle:
        adjacency = pickle.load(handle, encoding="latin1")
    expected = {(i, j) for i, js in adjacency.items() for j in js if i != j}
    expected |= {(j, i) for i, j in expected}
    edges = [tuple(pair) for pair in graphs[name].edge_index.T.tolist()]
    assert len(edges) == len(set(edges))  # no duplicates
    assert set(edges) == expected
    assert all(i != j for i, j in edges)


@pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning")
@pytest.mark.parametrize("name", list(README))
def test_test_rows_follow_the_test_index(root, graphs, name):
    with open(root / f"ind.{name}.tx", "rb") as handle:
        tx = pickle.load(handle, encoding="latin1").toarray()
    with open(root / f"ind.{name}.ty", "rb") as handle:
        ty = pickle.load(handle, encoding="latin1")
    test_ids = [int(line) for line in (root / f"ind.{name}.test.index").read_text().split()]
    graph = graphs[name]
    for k in (0, 1, 500, len(test_ids) - 1):
        assert np.array_equal(graph.features[test_ids[k]].numpy(), tx[k])
        assert int(graph.labels[test_ids[k]]) == int(ty[k].argmax())
    padded = sorted(set(range(min(test_ids), max(test_ids) + 1)) - set(test_ids))
    assert len(padded) == (15 if name == "citeseer" else 0)
    for node in padded:  # Citeseer's isolated ids: zero features, in no split
        assert not graph.features[node].any()
        assert not (graph.train_mask[node] or graph.valid_mask[node] or graph.test_mask[node])


@pytest.mark.parametrize("name", list(README))
def test_equals_pytorch_geometric(root, graphs, name):
    planetoid = pytest.importorskip(
        "torch_geometric.io.planetoid", reason="optional: torch_geometric is not installed"
    )
    reference = planetoid.read_planetoid_data(str(root), name)
    graph = graphs[name]
    assert torch.equal(graph.features, reference.x)
    assert torch.equal(graph.labels, reference.y)
    assert torch.equal(graph.train_mask, reference.train_mask)
    assert torch.equal(graph.valid_mask, reference.val_mask)
    assert torch.equal(graph.test_mask, reference.test_mask)
    ours = {tuple(e) for e in graph.edge_index.T.tolist()}
    assert ours == {tuple(e) for e in reference.edge_index.T.tolist()}


def test_row_normalisation_is_gcn_preprocessing(root):
    graph = load_planetoid(root, "citeseer", normalize_features=True)
    binary = load_planetoid(root, "citeseer").features.double()
    sums = binary.sum(dim=1, keepdim=True)
    expected = np.where(sums.numpy() > 0, binary.numpy() / np.maximum(sums.numpy(), 1), 0.0)
    assert np.allclose(graph.features.numpy(), expected, atol=1e-7, rtol=0)
    nonzero = sums.flatten() > 0
    assert torch.allclose(graph.features[nonzero].sum(dim=1), torch.ones(int(nonzero.sum())))
    assert int((~nonzero).sum()) > 0  # Citeseer's zero rows stay zero, not NaN
    assert not graph.features.isnan().any()
    assert torch.equal(normalize_rows(torch.zeros(2, 3)), torch.zeros(2, 3))


def _write_tiny(directory, name="cora", test_index="512\n510\n"):
    """A 513-node graph: 4 training nodes (2 classes), node 511 missing from the test ids."""

    def dump(part, value):
        with open(directory / f"ind.{name}.{part}", "wb") as handle:
            pickle.dump(value, handle, protocol=2)

    allx = np.zeros((510, 3), dtype=np.float32)
    allx[:, 0] = 1
    ally = np.zeros((510, 2), dtype=np.int32)
    ally[np.arange(510), np.arange(510) % 2] = 1
    dump("x", scipy.sparse.csr_matrix(allx[:4]))
    dump("y", ally[:4])
    dump("allx", scipy.sparse.csr_matrix(allx))
    dump("ally", ally)
    dump("tx", scipy.sparse.csr_matrix(np.array([[0, 0, 2], [0, 3, 0]], dtype=np.float32)))
    dump("ty", np.array([[0, 1], [1, 0]], dtype=np.int32))
    graph = collections.defaultdict(list, {0: [1, 1, 0], 1: [0], 510: [512]})
    dump("graph", graph)
    (directory / f"ind.{name}.test.index").write_text(test_index)


def test_tiny_graph_is_assembled_like_citeseer(tmp_path):
    _write_tiny(tmp_path)
    graph = load_planetoid(tmp_path, "cora")
    assert graph.num_nodes == 513
    assert graph.features[512].tolist() == [0, 0, 2]  # tx row 0 belongs to test id 512
    assert graph.features[510].tolist() == [0, 3, 0]
    assert graph.features[511].tolist() == [0, 0, 0]  # the missing id: a zero row
    assert graph.labels[512] == 1 and graph.labels[510] == 0
    assert graph.edge_index.tolist() == [[0, 1, 510, 512], [1, 0, 512, 510]]
    assert graph.test_mask.nonzero().flatten().tolist() == [510, 512]


def test_malformed_test_index_names_file_and_line(tmp_path):
    _write_tiny(tmp_path, test_index="512\nfive hundred\n")
    with pytest.raises(ValueError) as error:
        load_planetoid(tmp_path, "cora")
    message = str(error.value)
    assert "ind.cora.test.index: line 2: expected a node id (an integer)" in message
    assert "\n" not in message


def test_missing_file_is_named(tmp_path):
    _write_tiny(tmp_path)
    (tmp_path / "ind.cora.graph").unlink()
    with pytest.raises(FileNotFoundError, match=r"ind\.cora\.graph"):
        load_planetoid(tmp_path, "cora")


def test_truncated_pickle_is_one_line(tmp_path):
    _write_tiny(tmp_path)
    path = tmp_path / "ind.cora.allx"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError) as error:
        load_planetoid(tmp_path, "cora")
    assert str(error.value).startswith(f"{path}: expected a pickle")
    assert "\n" not in str(error.value)


class _RunsCode:
    def __reduce__(self):
        return (print, ("this must not run",))


def test_pickle_of_another_class_is_refused(tmp_path, capsys):
    _write_tiny(tmp_path)
    with open(tmp_path / "ind.cora.ally", "wb") as handle:
        pickle.dump(_RunsCode(), handle, protocol=2)
    with pytest.raises(ValueError, match=r"ind\.cora\.ally: expected a pickled numpy array"):
        load_planetoid(tmp_path, "cora")
    assert "this must not run" not in capsys.readouterr().out


def test_unknown_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="name must be one of"):
        load_planetoid(tmp_path, "pubmed")


def test_adjacency_outside_the_graph_is_named(tmp_path):
    _write_tiny(tmp_path)
    with open(tmp_path / "ind.cora.graph", "wb") as handle:
        pickle.dump(collections.defaultdict(list, {0: [1, 513]}), handle, protocol=2)
    with pytest.raises(
        ValueError, match=r"ind\.cora\.graph: expected node ids in \[0, 513\), got 513"
    ):
        load_planetoid(tmp_path, "cora")
