"""Early stopping on the validation split, with the rule of GAT's reference implementation
(Veličković et al. 2018, transductive set-up: "patience of 100 epochs" on the validation loss and
accuracy).

At each evaluation: if the accuracy did not fall below its best and the loss did not rise above
its best, the model is kept as the one to evaluate; if either improved, the count of evaluations
without progress restarts; otherwise it grows, and at ``patience`` training stops. A run without
an accuracy (translation) reads the loss alone.

The kept model is held in memory and written to ``RUN_DIR/best.safetensors`` (atomically) when a
checkpoint takes the counters (:meth:`EarlyStopping.state`), so a resumed run stops where the
uninterrupted one would, and an improving run does not write its weights at every evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from attnkit.checkpoint import CheckpointError, atomic_write

#: the run file holding the weights of the kept model
BEST_FILE = "best.safetensors"


class EarlyStopping:
    """GAT's early-stopping rule over a run's evaluations (see the module docstring).

    Args:
        patience: evaluations without progress before training stops.
        run_dir: where :data:`BEST_FILE` is written.
    """

    def __init__(self, patience: int, run_dir: Path) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience, self.path = patience, Path(run_dir) / BEST_FILE
        self.best_loss, self.best_accuracy = math.inf, -math.inf
        self.waited, self.best_step, self.stopped = 0, None, False
        self._best: dict[str, torch.Tensor] | None = None
        self._written = True  # whether the file holds the kept model

    def update(self, step: int, valid: Mapping[str, float], model: nn.Module) -> None:
        """Take the validation metrics of ``step`` (``"loss"``, and ``"accuracy"`` if any)."""
        loss = float(valid["loss"])
        accuracy = float(valid.get("accuracy", -math.inf))
        if accuracy >= self.best_accuracy or loss <= self.best_loss:
            if accuracy >= self.best_accuracy and loss <= self.best_loss:
                self._keep(step, model)
            self.best_accuracy = max(accuracy, self.best_accuracy)
            self.best_loss = min(loss, self.best_loss)
            self.waited = 0
        else:
            self.waited += 1
            self.stopped = self.waited >= self.patience

    def _keep(self, step: int, model: nn.Module) -> None:
        self._best = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        self.best_step, self._written = step, False

    def state(self) -> dict[str, Any]:
        """The counters, JSON-able (a checkpoint's ``extra``; infinities as ``None``), after
        writing the kept model if it changed since the last checkpoint. A checkpoint cut off
        after this write is harmless: training from the older checkpoint replays the same steps
        and keeps the same model again."""
        if self._best is not None and not self._written:
            atomic_write(self.path, save_tensors(self._best))
            self._written = True
        return {
            "best_loss": self.best_loss if math.isfinite(self.best_loss) else None,
            "best_accuracy": self.best_accuracy if math.isfinite(self.best_accuracy) else None,
            "waited": self.waited,
            "best_step": self.best_step,
            "stopped": self.stopped,
        }

    def restore(self, state: Mapping[str, Any] | None) -> None:
        """Take :meth:`state` back from a checkpoint, and the kept weights from the run."""
        if not state:
            return
        loss, accuracy = state.get("best_loss"), state.get("best_accuracy")
        self.best_loss = math.inf if loss is None else float(loss)
        self.best_accuracy = -math.inf if accuracy is None else float(accuracy)
        self.waited, self.stopped = int(state["waited"]), bool(state["stopped"])
        self.best_step = state.get("best_step")
        if self.best_step is not None:
            try:
                self._best = load_tensors(self.path.read_bytes())
            except (OSError, ValueError) as error:
                raise CheckpointError(
                    f"{self.path}: the model kept by early stopping (step {self.best_step}) is "
                    f"unreadable ({error})"
                ) from None

    def best_into(self, model: nn.Module) -> None:
        """Load the kept model into ``model`` (nothing kept: ``model`` stays as it is)."""
        if self._best is not None:
            model.load_state_dict(self._best)

    def describe(self) -> str:
        """One line: where training stopped and which model is evaluated."""
        if self.best_step is None:
            return "early stopping kept no model: the last one is evaluated"
        why = f"stopped after {self.patience} evaluations without progress; " if self.stopped else ""
        return f"early stopping: {why}evaluating the model of step {self.best_step}"
