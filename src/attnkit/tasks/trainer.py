"""Training and evaluating a classification :class:`~attnkit.tasks.Task` in the shared loop.

The loop, checkpoints, exact resume, data parallelism and the final report are
:mod:`attnkit.train`'s; :class:`ClassificationJob` gives them a task's batches, objective and
evaluation (the :class:`~attnkit.tasks.job.Job` of every corpus without a job of its own). The batch of step ``t`` depends only on
``(seed, t)``: epoch ``t // batches_per_epoch`` is a permutation of the training examples drawn
from a generator seeded with ``(seed, epoch)``, so a resumed run sees the batches an
uninterrupted one would.

A model may follow its own validations: after each one, a model with a method
``after_validation(metrics)`` receives the metrics (MemN2N's linear start re-inserts its
softmaxes when the validation loss stops decreasing). On the CPU the loop validates the trained
module itself, before the checkpoint of that step, so what the method changes in the model's
buffers is saved and a resumed run follows the uninterrupted one (under CUDA the loop validates
a CPU copy, which such a change would not reach).

The final evaluation reports accuracy and macro-F1 on the test split, and the same metrics with
the model's attention replaced by uniform weights (survey §4.1: "the importance of the attention
mechanism can be tested by replacing it with another mechanism and observing whether the overall
performance of the model decreases"), from the same checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.config import RunConfig
from attnkit.evaluate.ablation import ablate
from attnkit.evaluate.metrics import accuracy, macro_f1
from attnkit.layers.attention import exact_kinds
from attnkit.tasks.base import Task, task_for
from attnkit.tasks.job import Job, Log, Presentation, RunDirectory, Term


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
    """A classification task's part in the training pipeline (see :class:`~attnkit.tasks.job.Job`):
    batches of a seeded permutation per epoch, the model's objective, accuracy and macro-F1 with
    the uniform-attention column."""

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.task = task_for(config)

    def load(self) -> Mapping[str, Sequence[Any]]:
        examples = evaluation_slice(self.config, self.task.load())
        for split in ("train", "valid", "test"):
            if not examples.get(split):
                raise ValueError(f"{self.config.data.corpus}: the {split!r} split is empty")
        return examples

    def learnt(self) -> dict[str, Any]:
        return self.task.fit(self.examples["train"])

    def restore(self, state: dict[str, Any]) -> None:
        self.task.restore(state)

    def build_model(self) -> nn.Module:
        return self.task.build_model()

    def prepare(self, run: RunDirectory, log: Log) -> int:
        size, batch = len(self.examples["train"]), self.config.train.batch_size
        self.per_epoch = math.ceil(size / batch)
        return self.per_epoch

    def smallest_batch(self) -> int:
        size, batch = len(self.examples["train"]), self.config.train.batch_size
        return min(size, batch, size % batch or batch)  # an epoch's last batch may be short

    def batch(self, step: int) -> list[Any]:
        """The training examples of ``step``: a slice of its epoch's seeded permutation."""
        train, size = self.examples["train"], self.config.train.batch_size
        epoch, index = divmod(step, self.per_epoch)
        order = epoch_order(len(train), self.config.seed, epoch)
        return [train[i] for i in order[index * size : (index + 1) * size].tolist()]

    def loss(self, model: nn.Module, batch: Sequence[Any]) -> dict[str, Term]:
        labels = torch.tensor([self.task.label(e) for e in batch], dtype=torch.long)
        mean = objective(model, self.task.collate(batch), labels)
        return {"loss": Term(count=torch.tensor(float(len(labels))), mean=mean)}

    def valid(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics; a model with a method ``after_validation(metrics)`` is then given
        them (a training procedure that follows the validation loss: linear start)."""
        metrics = classification_metrics(model, self.task, self.examples["valid"], self._eval_batch)
        module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        told = getattr(module, "after_validation", None)
        if callable(told):
            told(metrics)
        return metrics

    def evaluate(
        self,
        model: nn.Module,
        examples: Sequence[Any],
        *,
        beam_size: int | None = None,
        quiet: bool = True,
    ) -> dict[str, Any]:
        return evaluate_classifier(
            model, self.task, examples, self._eval_batch, ablation=self.task.ablation_column
        )

    @property
    def _eval_batch(self) -> int:
        return self.task.eval_batch_size or self.config.train.batch_size

    def present(self, model: nn.Module, directory: Path) -> Presentation:
        """The first eight test examples with their predicted class, and the task's
        artifacts (attention maps)."""
        task, test = self.task, self.examples["test"][:8]
        with torch.no_grad():
            logits = model(**task.collate(test))
        samples = [
            {
                "input": task.describe(e),
                "label": task.classes[task.label(e)],
                "predicted": task.classes[int(p)],
            }
            for e, p in zip(test, logits.argmax(-1).tolist(), strict=True)
        ]
        images = task.artifacts(model, self.examples["test"], directory)
        return Presentation(results={"samples": samples}, images=images)

    def summary(self, results: Mapping[str, Any]) -> dict[str, Any]:
        rows = {
            "test examples": results["examples"],
            "test accuracy": f"{results['accuracy']:.4f}",
            "test macro-F1": f"{results['macro_f1']:.4f}",
        }
        if "uniform_attention" in results:
            uniform = results["uniform_attention"]["accuracy"]
            rows["uniform attention: accuracy"] = f"{uniform:.4f}"
        return rows

    def describe_results(self, results: Mapping[str, Any]) -> list[str]:
        uniform = results.get("uniform_attention")

        def beside(key: str) -> str:
            return f"   (uniform attention {uniform[key]:.4f})" if uniform else ""

        return [
            f"{results['examples']} examples",
            f"  accuracy    {results['accuracy']:.4f}{beside('accuracy')}",
            f"  macro-F1    {results['macro_f1']:.4f}{beside('macro_f1')}",
            f"  loss        {results['loss']:.4f}",
        ]

    def headline(self, results: Mapping[str, Any]) -> str:
        uniform = results.get("uniform_attention")
        return (
            f"test accuracy {results['accuracy']:.4f} (macro-F1 {results['macro_f1']:.4f}) on "
            f"{results['examples']} examples"
            + (f"; uniform attention {uniform['accuracy']:.4f}" if uniform else "")
        )


def evaluate_classifier(
    model: nn.Module,
    task: Task,
    examples: Sequence[Any],
    batch_size: int = 64,
    *,
    ablation: bool = True,
) -> dict[str, Any]:
    """Test metrics of ``model`` and, with ``ablation``, the same with uniform attention (the
    ablation column, ``"uniform_attention"``)."""
    results: dict[str, Any] = {"examples": len(examples)}
    started = time.perf_counter()
    results.update(classification_metrics(model, task, examples, batch_size))
    if not ablation:
        results["eval_seconds"] = round(time.perf_counter() - started, 1)
        return results
    # efficient attention kinds form no weights for the ablation to replace: they run exact
    # inside, so their uniform replacement is computed too (it does not depend on the kind)
    with exact_kinds(model), ablate(model, mode="uniform"):
        uniform = classification_metrics(model, task, examples, batch_size)
    results["uniform_attention"] = uniform
    results["eval_seconds"] = round(time.perf_counter() - started, 1)
    return results
