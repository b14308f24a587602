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

import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, DataConfig, RunConfig
from attnkit.data.planetoid import PlanetoidGraph, load_planetoid
from attnkit.early_stopping import EarlyStopping
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
    # the engine sees a graph layer as one dense N × N call (O(N²·K): ~3 s a layer on Cora),
    # so the uniform column comes from the natively uniform model (model.uniform_attention,
    # the reproductions' uniform variant) instead of an ablation of this checkpoint
    ablation_column: ClassVar[bool] = False

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

    @classmethod
    def run_peer(cls, config: RunConfig) -> dict[str, Any] | None:
        """PyTorch Geometric's ``GATConv`` (``GATv2Conv`` for ``model.layer: gatv2``) trained
        with this configuration's hyper-parameters, seed and early stopping: ``{"accuracy",
        "seconds_per_epoch", "epochs", "library"}``, or None when torch_geometric is absent."""
        try:
            import torch_geometric
            from torch_geometric.nn import GATConv, GATv2Conv
        except ImportError:
            return None
        task = cls(config)
        g, m, t = task.graph, config.model, config.train
        conv = GATv2Conv if m.layer == "gatv2" else GATConv
        torch.manual_seed(config.seed)
        hidden = conv(g.features.shape[1], m.hidden_dim, heads=m.heads, dropout=m.dropout,
                      negative_slope=m.negative_slope)
        output = conv(m.hidden_dim * m.heads, g.num_classes, heads=m.output_heads, concat=False,
                      dropout=m.dropout, negative_slope=m.negative_slope)
        model = nn.ModuleList([hidden, output])

        def logits() -> Tensor:
            h = F.dropout(g.features, m.dropout, model.training)
            h = F.elu(hidden(h, g.edge_index))
            return output(F.dropout(h, m.dropout, model.training), g.edge_index)

        optimizer = torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        with tempfile.TemporaryDirectory() as scratch:
            stopper = EarlyStopping(t.patience or t.steps, Path(scratch))
            started, epochs = time.perf_counter(), 0
            while epochs < t.steps and not stopper.stopped:
                model.train()
                loss = F.cross_entropy(logits()[g.train_mask], g.labels[g.train_mask])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                epochs += 1
                model.eval()
                with torch.no_grad():
                    out = logits()
                valid = {
                    "loss": float(F.cross_entropy(out[g.valid_mask], g.labels[g.valid_mask])),
                    "accuracy": float((out[g.valid_mask].argmax(-1) == g.labels[g.valid_mask])
                                      .double().mean()),
                }
                stopper.update(epochs, valid, model)
            seconds = time.perf_counter() - started
            stopper.best_into(model)
        model.eval()
        with torch.no_grad():
            predicted = logits()[g.test_mask].argmax(-1)
        accuracy = float((predicted == g.labels[g.test_mask]).double().mean())
        return {
            "accuracy": accuracy,
            "seconds_per_epoch": seconds / max(epochs, 1),
            "epochs": epochs,
            "library": f"torch_geometric {torch_geometric.__version__} {conv.__name__}",
        }
