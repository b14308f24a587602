"""The classification trainer: a task trains in the shared loop, resumes bit-exactly,
and its results carry the uniform-attention ablation column, checked against a hand computation.

A toy task stands in for the real ones (each has its own tests): sequences of ordinary tokens with
one marker token, labelled by which marker it is — attention pooling must find the marker.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor, nn

import attnkit as ak
from attnkit.cli import main
from attnkit.config import TASKS, validate
from attnkit.tasks.base import Task
from attnkit.tasks.memory_qa import MemoryNetworkModelConfig
from attnkit.train import train

MARKERS = (10, 11, 12)


@TASKS.register("markers")  # a task of this test's own: registering one is all it takes
class MarkerTask(Task):
    classes = ("ten", "eleven", "twelve")
    models = (MemoryNetworkModelConfig,)  # only its embed_dim is read

    def load(self):
        g = torch.Generator().manual_seed(self.config.seed)
        splits = {}
        for split, n in (("train", 192), ("valid", 48), ("test", 60)):
            length = torch.randint(3, 9, (n,), generator=g)
            label = torch.randint(0, 3, (n,), generator=g)
            rows = []
            for i in range(n):
                tokens = torch.randint(1, 10, (int(length[i]),), generator=g)
                where = int(torch.randint(0, int(length[i]), (1,), generator=g))
                tokens[where] = MARKERS[int(label[i])]
                rows.append((tuple(tokens.tolist()), int(label[i])))
            splits[split] = rows
        return splits

    def label(self, example):
        return example[1]

    def fit(self, train):
        state = {"vocabulary": 13}
        self.restore(state)
        return state

    def restore(self, state):
        self.vocabulary = state["vocabulary"]

    def collate(self, examples):
        width = max(len(e[0]) for e in examples)
        tokens = torch.zeros(len(examples), width, dtype=torch.long)
        for i, (t, _) in enumerate(examples):
            tokens[i, : len(t)] = torch.tensor(t)
        return {"tokens": tokens}

    def build_model(self):
        return AttentionPooling(self.vocabulary, self.config.model.embed_dim, len(self.classes))


class AttentionPooling(nn.Module):
    """Embeddings, one learned query attending over them (through the engine), a linear layer."""

    def __init__(self, vocabulary: int, dim: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, dim, padding_idx=0)
        self.query = nn.Parameter(torch.randn(1, 1, dim))
        self.out = nn.Linear(dim, classes)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        mask = (tokens != 0)[:, None, :]
        q = self.query.expand(len(tokens), 1, -1)
        context = ak.attention(q, x, x, score="dot", mask=mask).context[:, 0]
        return self.out(context)


@pytest.fixture
def marker_task():
    return MarkerTask


def _config(**train):
    return validate(
        {
            "name": "marker",
            "seed": 1,
            "data": {"corpus": "markers"},
            "model": {"kind": "memory_network", "embed_dim": 16},
            "train": {"steps": 120, "batch_size": 16, "lr": 0.05, "log_every": 40, **train},
        }
    )


def _uniform_reference(model: AttentionPooling, examples) -> float:
    """Accuracy with the attention replaced by 1/|tokens| on each token, computed by hand."""
    correct = 0
    with torch.no_grad():
        for tokens, label in examples:
            x = model.embed(torch.tensor(tokens)).double()
            logits = model.out.weight.double() @ x.mean(0) + model.out.bias.double()
            correct += int(int(logits.argmax()) == label)
    return correct / len(examples)


def test_a_task_trains_and_reports_the_uniform_ablation_column(marker_task, tmp_path, capsys):
    run = train(_config(), runs_dir=tmp_path, quiet=True, log=lambda _: None)
    results = json.loads((run.path / "results.json").read_text())
    assert results["examples"] == 60
    assert results["accuracy"] >= 0.9  # attention pooling finds the marker
    model, step = run.load_model()
    assert step == 120
    test = MarkerTask(run.config).load()["test"]
    expected = _uniform_reference(model, test)
    assert results["uniform_attention"]["accuracy"] == pytest.approx(expected, abs=1e-12)
    assert 0.0 <= results["macro_f1"] <= 1.0 and (run.path / "report.html").is_file()
    # the run directory alone (task.json) is enough to evaluate it again
    assert main(["eval", str(run.path), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"accuracy    {results['accuracy']:.4f}" in printed
    assert main(["translate", str(run.path), "hello"]) == 2
    assert "translate needs a translation run" in capsys.readouterr().err


def test_an_interrupted_task_run_resumes_bit_exactly(marker_task, tmp_path):
    config = _config(steps=12, checkpoint_every=4)
    whole = train(config, runs_dir=tmp_path / "a", quiet=True, log=lambda _: None)
    part = train(config, runs_dir=tmp_path / "b", stop_after=5, quiet=True, log=lambda _: None)
    resumed = train(config, resume=part.path, quiet=True, log=lambda _: None)
    a = load_file(str(whole.path / "checkpoints" / "step-00000012.safetensors"))
    b = load_file(str(resumed.path / "checkpoints" / "step-00000012.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_model_objective_replaces_cross_entropy(marker_task, tmp_path):
    from attnkit.tasks.trainer import objective

    model = AttentionPooling(13, 4, 3)
    inputs, labels = {"tokens": torch.tensor([[1, 10, 0], [11, 2, 3]])}, torch.tensor([0, 1])
    assert torch.equal(objective(model, inputs, labels), F.cross_entropy(model(**inputs), labels))
    model.objective = lambda inputs, labels: torch.tensor(7.0)
    assert float(objective(model, inputs, labels)) == 7.0


def test_model_kind_must_fit_the_corpus():
    with pytest.raises(ValueError, match="the karate corpus takes model kind gat; got 'han'"):
        validate(
            {
                "name": "x",
                "data": {"corpus": "karate"},
                "model": {"kind": "han"},
                "train": {"steps": 1},
            }
        )


def test_data_parallel_refuses_a_batch_some_process_would_not_share(marker_task, tmp_path):
    from attnkit.run import Run
    from attnkit.tasks.trainer import ClassificationJob
    from attnkit.train import check_shards

    config = _config(batch_size=191)  # 192 training examples: a last batch of one
    job = ClassificationJob(config)
    with Run.create(config, runs_dir=tmp_path, job=job) as run:
        assert job.prepare(run, print) == 2
    check_shards(config, job, 1)  # one process takes every batch
    with pytest.raises(ValueError, match="leaves a batch of 1"):
        check_shards(config, job, 2)
