"""Training and evaluating a classification :class:`~attnkit.tasks.Task` in the shared loop.

The loop, checkpoints, exact resume and data parallelism are :mod:`attnkit.train`'s; this module
gives it a task's batches, objective and evaluation. The batch of step ``t`` depends only on
``(seed, t)``: epoch ``t // batches_per_epoch`` is a permutation of the training examples drawn
from a generator seeded with ``(seed, epoch)``, so a resumed run sees the batches an
uninterrupted one would.

The final evaluation reports accuracy and macro-F1 on the test split, and the same metrics with
the model's attention replaced by uniform weights (survey §4.1: "the importance of the attention
mechanism can be tested by replacing it with another mechanism and observing whether the overall
performance of the model decreases"), from the same checkpoint.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.checkpoint import atomic_write
from attnkit.config import RunConfig
from attnkit.data_parallel import DataParallel
from attnkit.evaluate.ablation import ablate
from attnkit.evaluate.metrics import accuracy, macro_f1
from attnkit.layers.attention import exact_kinds
from attnkit.run import Run, read_metrics
from attnkit.tasks.base import Task, task_for
from attnkit.train import Job, Log


def epoch_order(size: int, seed: int, epoch: int) -> Tensor:
    """The order of ``size`` training examples in ``epoch`` (a seeded permutation)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(size, generator=generator)


def objective(model: nn.Module, inputs: dict[str, Tensor], labels: Tensor) -> Tensor:
    """The model's own training objective if it has one, else cross-entropy of its logits."""
    module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    own = getattr(module, "objective", None)
    if callable(own):
        return own(inputs, labels)
    return F.cross_entropy(model(**inputs), labels)


def predict(
    model: nn.Module, task: Task, examples: Sequence[Any], batch_size: int
) -> tuple[Tensor, Tensor, float]:
    """Predicted and true classes of ``examples`` and the mean cross-entropy of the logits."""
    predicted, labels, nll = [], [], 0.0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            logits = model(**task.collate(chunk))
            target = torch.tensor([task.label(e) for e in chunk])
            nll += float(F.cross_entropy(logits.double(), target, reduction="sum"))
            predicted.append(logits.argmax(-1))
            labels.append(target)
    return torch.cat(predicted), torch.cat(labels), nll / max(len(examples), 1)


def classification_metrics(
    model: nn.Module, task: Task, examples: Sequence[Any], batch_size: int
) -> dict[str, float]:
    """Cross-entropy loss, accuracy and macro-F1 of ``model`` on ``examples``."""
    if not examples:
        raise ValueError("cannot evaluate on an empty split")
    predicted, labels, loss = predict(model, task, examples, batch_size)
    return {
        "loss": loss,
        "accuracy": accuracy(predicted, labels),
        "macro_f1": macro_f1(predicted, labels, num_classes=len(task.classes)),
    }


def evaluation_slice(
    config: RunConfig, examples: Mapping[str, Sequence[Any]]
) -> dict[str, Sequence[Any]]:
    """``examples`` with the valid and test splits cut to ``data.max_eval_examples``."""
    cap = config.data.max_eval_examples
    return {k: (v if k == "train" or cap is None else v[:cap]) for k, v in examples.items()}


class ClassificationJob(Job):
    """A classification task's part in the training loop (see :class:`attnkit.train.Job`)."""

    def __init__(self, config: RunConfig) -> None:
        self.task = task_for(config)
        super().__init__(config, evaluation_slice(config, self.task.load()))
        for split in ("train", "valid", "test"):
            if not self.examples.get(split):
                raise ValueError(f"{config.data.corpus}: the {split!r} split is empty")

    def learnt(self) -> dict[str, Any]:
        return self.task.fit(self.examples["train"])

    def prepare(self, run: Run, parallel: DataParallel, log: Log) -> int:
        self.task = run.task  # restored from the run's task.json (the same state on every rank)
        size, batch = len(self.examples["train"]), self.config.train.batch_size
        remainder = size % batch  # the epoch's last batch
        if min(size, batch, remainder or batch) < parallel.world:
            raise ValueError(
                f"train.batch_size: each of the {parallel.world} processes needs an example of "
                f"every batch; batch_size={batch} with {size} training examples leaves a last "
                f"batch of {remainder or min(size, batch)}"
            )
        self.per_epoch = math.ceil(size / batch)
        return self.per_epoch

    def batch(self, step: int, parallel: DataParallel) -> tuple[dict[str, Tensor], Tensor]:
        train, size = self.examples["train"], self.config.train.batch_size
        epoch, index = divmod(step, self.per_epoch)
        order = epoch_order(len(train), self.config.seed, epoch)
        rows = order[index * size : (index + 1) * size].tolist()
        rows = rows[parallel.rank :: parallel.world]  # this rank's share of the global batch
        chosen = [train[i] for i in rows]
        labels = torch.tensor([self.task.label(e) for e in chosen], dtype=torch.long)
        return self.task.collate(chosen), labels

    def loss(
        self, model: nn.Module, batch: tuple[dict[str, Tensor], Tensor], parallel: DataParallel
    ) -> tuple[Tensor, dict[str, float]]:
        inputs, labels = batch
        loss = objective(model, inputs, labels)
        if parallel.world > 1:  # weight each rank's mean by its share of the global batch
            rows = torch.tensor(float(len(labels)))
            loss = loss * (rows * parallel.world / parallel.total(rows))
        value = parallel.total(loss.detach().reshape(1)) / parallel.world
        return loss, {"loss": float(value)}

    def valid(self, model: nn.Module) -> dict[str, float]:
        return classification_metrics(
            model, self.task, self.examples["valid"], self.config.train.batch_size
        )

    def finish(self, run: Run, model: nn.Module, log: Log, quiet: bool) -> dict[str, Any]:
        return finish_classification(run, model, self.examples, log=log)


def evaluate_classifier(
    model: nn.Module, task: Task, examples: Sequence[Any], batch_size: int = 64
) -> dict[str, Any]:
    """Test metrics of ``model`` and the same with uniform attention (the ablation column)."""
    results: dict[str, Any] = {"examples": len(examples)}
    started = time.perf_counter()
    results.update(classification_metrics(model, task, examples, batch_size))
    # efficient attention kinds form no weights for the ablation to replace: they run exact
    # inside, so their uniform replacement is computed too (it does not depend on the kind)
    with exact_kinds(model), ablate(model, mode="uniform"):
        uniform = classification_metrics(model, task, examples, batch_size)
    results["uniform_attention"] = uniform
    results["eval_seconds"] = round(time.perf_counter() - started, 1)
    return results


def finish_classification(
    run: Run, model: nn.Module, examples: Mapping[str, Sequence[Any]], *, log: Log = print
) -> dict[str, Any]:
    """Final evaluation on the test split, ``results.json``, the task's artifacts and the
    report."""
    from attnkit.report import write_report
    from attnkit.run import describe_model

    config, task = run.config, run.task
    results = evaluate_classifier(model, task, examples["test"], config.train.batch_size)
    results["train_seconds"] = round(sum(m.get("seconds", 0.0) for m in read_metrics(run.path)), 1)
    test = examples["test"][:8]
    with torch.no_grad():
        logits = model(**task.collate(test))
    results["samples"] = [
        {
            "input": task.describe(e),
            "label": task.classes[task.label(e)],
            "predicted": task.classes[int(p)],
        }
        for e, p in zip(test, logits.argmax(-1).tolist(), strict=True)
    ]
    images = task.artifacts(model, examples["test"], run.path / "heatmaps")
    atomic_write(run.path / "results.json", json.dumps(results, indent=1))
    uniform = results["uniform_attention"]
    summary = {
        "run": str(run.path),
        "model": describe_model(config),
        "data": f"{config.data.corpus}: {len(examples['train'])} training examples",
        "steps": config.train.steps,
        "training time": f"{results['train_seconds']:.0f} s",
        "test examples": results["examples"],
        "test accuracy": f"{results['accuracy']:.4f}",
        "test macro-F1": f"{results['macro_f1']:.4f}",
        "uniform attention: accuracy": f"{uniform['accuracy']:.4f}",
    }
    write_report(
        run.path / "report.html",
        title=f"attnkit run {run.path.name}",
        summary=summary,
        alignments=[],
        metrics=read_metrics(run.path),
        images=images,
    )
    log(
        f"test accuracy {results['accuracy']:.4f} (macro-F1 {results['macro_f1']:.4f}) on "
        f"{results['examples']} examples; uniform attention {uniform['accuracy']:.4f}"
    )
    return results
