"""Zachary's karate club: semi-supervised node classification with a graph attention network.

Data (real, from an installed package; nothing is downloaded): ``networkx.karate_club_graph()``,
the friendship network of the 34 members of a university karate club observed by Zachary (1977,
"An information flow model for conflict and fission in small groups"): 78 undirected edges
(members who interacted outside the club). The label of a member is the node's ``club`` attribute,
the faction he or she joined when the club split: ``"Mr. Hi"`` (the instructor's, node 0) or
``"Officer"`` (the administrator's, node 33); networkx records 17 members in each. The edge weights
(counts of contexts of interaction) are ignored: GAT attends over an unweighted neighbourhood.

Setup (transductive, as GCN/GAT on citation graphs): the whole graph, with every node's features,
is seen in training; only the labels of the training nodes are used. The graph has no node
attributes, so the features are one-hot identities ``X = I_34`` (Kipf & Welling 2017's featureless
setting). An example is a node id; a batch is a list of ids, and the model returns their rows.

Split (deterministic; ``config.seed`` picks it): for each faction, its leader (node 0 or 33, the
labelled nodes of Kipf & Welling's karate demonstration) and ``TRAIN_PER_CLASS - 1`` other members
drawn with ``random.Random(f"karate/{seed}")`` are the training nodes; the next
``VALID_PER_CLASS`` members drawn per faction are validation nodes; the remaining 18 are the test
nodes. So 8 labelled training nodes (4 per class), 8 validation, 18 test (9 per class).
``data.max_examples`` is not used: the split is fixed by the paper-style protocol above.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import networkx as nx
import torch
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection
from attnkit.models.gat_classifier import GATClassifier
from attnkit.tasks.base import Task

#: labelled training nodes per faction (its leader included)
TRAIN_PER_CLASS = 4
#: validation nodes per faction
VALID_PER_CLASS = 4
#: node ids of the factions' leaders: the instructor "Mr. Hi" and the club's officer (John A.)
LEADERS = {"Mr. Hi": 0, "Officer": 33}


def karate_graph() -> tuple[list[str], Tensor]:
    """``(clubs, edge_index)``: each member's ``club`` (index = node id) and the edges ``[2, 156]``
    (both directions of each of the 78 friendships), from ``networkx.karate_club_graph()``."""

    graph = nx.karate_club_graph()
    clubs = [graph.nodes[i]["club"] for i in range(graph.number_of_nodes())]
    pairs = sorted((min(u, v), max(u, v)) for u, v in graph.edges())
    both = [(u, v) for u, v in pairs] + [(v, u) for u, v in pairs]
    edge_index = torch.tensor(both, dtype=torch.long).T.contiguous()  # [2, E], row 0 = source
    return clubs, edge_index


def karate_split(clubs: Sequence[str], seed: int) -> dict[str, list[int]]:
    """The node ids of ``"train"``, ``"valid"``, ``"test"`` (see the module docstring)."""
    rng = random.Random(f"karate/{seed}")  # str seeds are hashed with SHA-512: stable
    split: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    for club in sorted(set(clubs)):
        leader = LEADERS[club]
        if clubs[leader] != club:
            raise ValueError(
                f"node {leader} should lead {club!r}, but its club is {clubs[leader]!r}"
            )
        others = [i for i, c in enumerate(clubs) if c == club and i != leader]
        rng.shuffle(others)
        train_end = TRAIN_PER_CLASS - 1
        split["train"] += [leader, *others[:train_end]]
        split["valid"] += others[train_end : train_end + VALID_PER_CLASS]
        split["test"] += others[train_end + VALID_PER_CLASS :]
    return {name: sorted(ids) for name, ids in split.items()}


class GATModelConfig(ModelSection):
    """Graph attention network (Veličković et al. 2018): two GAT layers."""

    kind: Literal["gat"] = "gat"
    hidden_dim: int = Field(8, ge=1, description="per head")
    heads: int = Field(8, ge=1)
    output_heads: int = Field(
        1, ge=1, description="heads of the output layer, averaged (GAT eq. 6)"
    )
    dropout: float = Field(
        0.6, ge=0.0, lt=1.0, description="on each layer's input and on the attention weights"
    )
    negative_slope: float = Field(0.2, ge=0.0, description="of the LeakyReLU in the score")
    layer: Literal["gat", "gatv2"] = Field(
        "gat", description="GAT's static attention or GATv2's dynamic one (Brody et al. 2022)"
    )

    uniform_attention: bool = Field(
        False,
        description="attend uniformly over each neighbourhood, natively on the edge list (the "
        "uniform-attention baseline; train.attention: uniform does it through the engine, "
        "O(N²))",
    )

    def describe(self) -> str:
        """``"Graph attention network (...): two GAT layers"``, or GATv2 layers with ``layer``."""
        if self.layer == "gat":
            return super().describe()
        return "Graph attention network v2 (Brody et al. 2022): two GATv2 layers"

    def architecture(self) -> dict[str, Any]:
        # GAT is what every run had before the key existed: leaving it out keeps the
        # fingerprints of those runs' checkpoints; uniform attention changes no tensor
        keys = super().architecture()
        if keys["layer"] == "gat":
            del keys["layer"]
        del keys["uniform_attention"]
        return keys


@TASKS.register("karate")
class KarateClub(Task):
    """Which faction each member of Zachary's karate club joined, from the friendship graph."""

    classes = ("Mr. Hi", "Officer")
    models = (GATModelConfig,)

    def load(self) -> Mapping[str, Sequence[Any]]:
        self._clubs, self._edge_index = karate_graph()
        return karate_split(self._clubs, self.config.seed)

    def _graph(self) -> tuple[list[str], Tensor]:
        if not hasattr(self, "_clubs"):
            self._clubs, self._edge_index = karate_graph()
        return self._clubs, self._edge_index

    def label(self, example: Any) -> int:
        clubs, _ = self._graph()
        if isinstance(example, bool) or not isinstance(example, int):
            raise TypeError(f"a karate example is a node id (int), got {type(example).__name__}")
        if not 0 <= example < len(clubs):
            raise ValueError(f"node id must be in [0, {len(clubs)}), got {example}")
        return self.classes.index(clubs[example])

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        return {"nodes": torch.tensor(list(examples), dtype=torch.long)}

    def build_model(self) -> nn.Module:
        section = self.model_config
        clubs, edge_index = self._graph()
        return GATClassifier(
            torch.eye(len(clubs)),  # one-hot identities: the graph has no node attributes
            edge_index,
            num_classes=len(self.classes),
            hidden_dim=section.hidden_dim,
            heads=section.heads,
            output_heads=section.output_heads,
            dropout=section.dropout,
            negative_slope=section.negative_slope,
            variant=section.layer,
            uniform_attention=section.uniform_attention,
        )

    def describe(self, example: Any) -> str:
        return f"member {example} of the karate club"
