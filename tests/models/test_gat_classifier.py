"""The GAT node classifier and the karate club task.

References: attnkit's edge-list ``GraphAttention`` (a peer implementation with the same parameters),
GAT's eq. (1-4) written out in float64, and the ``club`` attributes of networkx's karate graph.
"""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest
import torch
import torch.nn.functional as F

from attnkit.config import validate
from attnkit.evaluate import ablate
from attnkit.models.gat_classifier import GATClassifier
from attnkit.tasks.base import task_for

EDGES = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 5], [1, 2, 3, 4, 0, 3, 5, 1]])


def config(seed: int = 0, **model: object):
    return validate(
        {
            "name": "karate-test",
            "seed": seed,
            "data": {"corpus": "karate"},
            "model": {"kind": "gat", **model},
            "train": {"steps": 1},
        }
    )


def test_classifier_shapes_ablation_and_bad_ids() -> None:
    torch.manual_seed(3)
    model = GATClassifier(torch.eye(6), EDGES, num_classes=3, hidden_dim=4, heads=2).eval()
    nodes = torch.tensor([0, 5, 2])
    logits = model(nodes)
    assert logits.shape == (3, 3)
    torch.testing.assert_close(logits, model.node_logits()[nodes])
    with ablate(model, "uniform"):
        assert (model(nodes) - logits).abs().max() > 1e-4
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        model(torch.tensor([6]))
    with pytest.raises(ValueError, match="long tensor"):
        model(torch.tensor([0.0]))


def test_karate_labels_are_networkx_clubs_and_the_split_is_documented() -> None:
    task = task_for(config(seed=0))
    splits = task.load()
    graph = nx.karate_club_graph()
    clubs = nx.get_node_attributes(graph, "club")
    assert Counter(clubs.values()) == {"Mr. Hi": 17, "Officer": 17}
    for node in range(34):
        assert task.classes[task.label(node)] == clubs[node]
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [8, 8, 18]
    assert sorted(splits["train"] + splits["valid"] + splits["test"]) == list(range(34))
    for name, per_class in (("train", 4), ("valid", 4), ("test", 9)):
        assert Counter(clubs[n] for n in splits[name]) == {
            "Mr. Hi": per_class,
            "Officer": per_class,
        }
    assert {0, 33} <= set(splits["train"])  # the two faction leaders are labelled
    assert task_for(config(seed=0)).load() == splits
    assert task_for(config(seed=1)).load() != splits


def test_karate_model_holds_the_graph_and_learns_the_split() -> None:
    torch.manual_seed(0)
    task = task_for(config(seed=0, hidden_dim=8, heads=4))
    splits = task.load()
    task.fit(splits["train"])
    model = task.build_model()
    graph = nx.karate_club_graph()
    assert model.edge_index.shape == (2, 2 * graph.number_of_edges())
    assert {(int(u), int(v)) for u, v in model.edge_index.T} == {
        pair for u, v in graph.edges() for pair in ((u, v), (v, u))
    }
    assert torch.equal(model.features, torch.eye(34))
    inputs = task.collate(splits["train"])
    labels = torch.tensor([task.label(n) for n in splits["train"]])
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(60):
        model.train()
        loss = F.cross_entropy(model(**inputs), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    test = task.collate(splits["test"])
    truth = torch.tensor([task.label(n) for n in splits["test"]])
    with torch.no_grad():
        accuracy = (model(**test).argmax(-1) == truth).float().mean()
    assert accuracy >= 0.75  # 8 labels reach most of the graph in two hops


def test_karate_label_rejects_bad_examples() -> None:
    task = task_for(config())
    with pytest.raises(ValueError, match=r"\[0, 34\)"):
        task.label(34)
    with pytest.raises(TypeError, match="node id"):
        task.label("5")
