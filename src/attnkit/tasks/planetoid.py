"""Cora and Citeseer: transductive node classification with a graph attention network, as in
Veličković et al. (2018, §3.3 "Transductive learning") and Brody et al. (2022, GATv2).

Data: :func:`attnkit.data.planetoid.load_planetoid` — the Planetoid citation graphs of the
shared data folder (``data.root``, default ``../shared/data``, holds ``planetoid/``), with the
standard split of Yang et al. (2016): 20 labelled nodes per class for training (140 Cora, 120
Citeseer), 500 validation and 1,000 test nodes. The bag-of-words features are row-normalised, as
GAT's code does. An example is a node id; the whole graph is propagated at every step (attention
needs every neighbour) and the loss is read at the batch's nodes, so ``train.batch_size`` equal to
the training nodes is GAT's full-batch training (one step = one epoch).

Model: :class:`attnkit.models.gat_classifier.GATClassifier` (``model.kind: gat``): two layers,
8 heads × 8 features with ELU, then one head of C outputs; dropout 0.6 on each layer's input and
on the attention coefficients; ``model.layer: gatv2`` swaps in GATv2's dynamic attention. The
paper's optimisation (Adam, lr 0.005, L2 5e-4, early stopping with patience 100 on the validation
loss and accuracy) is ``train.lr``, ``train.weight_decay`` and ``train.patience``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, DataConfig
from attnkit.data.planetoid import PlanetoidGraph, load_planetoid
from attnkit.models.gat_classifier import GATClassifier
from attnkit.tasks.base import Task
from attnkit.tasks.karate import GATModelConfig

#: the shared data folder a reproduction reads when ``data.root`` is not given
SHARED_DATA = "../shared/data"


class PlanetoidData(DataConfig):
    """Which Planetoid graph, and where the shared data folder is."""

    graph: Literal["cora", "citeseer"] = Field("cora", description="the citation graph")


@TASKS.register("planetoid")
class Planetoid(Task):
    """The subject of each paper of a citation graph, from its words and its citations."""

    models = (GATModelConfig,)
    data_section = PlanetoidData
    architecture_data_keys: ClassVar[tuple[str, ...]] = ("corpus", "graph")
    # one pass over the graph gives every node's logits: evaluate a split in one batch
    eval_batch_size: ClassVar[int | None] = 1_000_000

    @property
    def classes(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(f"class {c}" for c in range(self.graph.num_classes))

    @property
    def graph(self) -> PlanetoidGraph:
        if not hasattr(self, "_graph"):
            root = Path(self.config.data.root or SHARED_DATA) / "planetoid"
            self._graph = load_planetoid(root, self.config.data.graph, normalize_features=True)
        return self._graph

    def load(self) -> Mapping[str, Sequence[Any]]:
        g = self.graph
        return {
            split: mask.nonzero().flatten().tolist()
            for split, mask in (
                ("train", g.train_mask),
                ("valid", g.valid_mask),
                ("test", g.test_mask),
            )
        }

    def label(self, example: Any) -> int:
        return int(self.graph.labels[example])

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        return {"nodes": torch.tensor(list(examples), dtype=torch.long)}

    def build_model(self) -> nn.Module:
        section, g = self.model_config, self.graph
        return GATClassifier(
            g.features,
            g.edge_index,
            num_classes=g.num_classes,
            hidden_dim=section.hidden_dim,
            heads=section.heads,
            output_heads=section.output_heads,
            dropout=section.dropout,
            negative_slope=section.negative_slope,
            variant=section.layer,
            uniform_attention=section.uniform_attention,
        )

    def describe(self, example: Any) -> str:
        return f"node {example} of {self.config.data.graph}"
