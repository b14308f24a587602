"""Where an explanation command keeps its work: the options every command takes and the store
``RUNS/explanation/<experiment>/`` of trained models (safetensors) and results (JSON), reused
when present so that an interrupted command resumes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.explanation.data import Corpus
from attnkit.explanation.training import Setting, build_model
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier


@dataclass
class Options:
    """What every command takes: the data folder, the runs folder (``RUNS``), the seed, the
    ``--quick`` slice, where progress lines go, whether long loops (training epochs, fine-tuning,
    measures) show a progress bar, and for ``jain-wallace`` a subset of its corpora and encoders
    (``None``: all)."""

    data: Path
    runs: Path
    seed: int = 0
    quick: bool = False
    log: Callable[[str], None] = field(default=print)
    corpora: tuple[str, ...] | None = None
    encoders: tuple[str, ...] | None = None
    progress: bool = False


def new_figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` drawn by the Agg canvas: no pyplot, no global backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` (PNG), atomically: a reader never sees half a file."""
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, format="png", dpi=dpi)
    tmp.replace(path)
    return path


class Store:
    """``RUNS/explanation/<experiment>/``: trained models (safetensors) and results (JSON),
    reused when present so that a command resumes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def result(self, name: str) -> dict[str, Any] | None:
        path = self.root / f"{name}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def save_result(self, name: str, value: dict[str, Any]) -> None:
        path = self.root / f"{name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
        tmp.replace(path)

    def model(
        self,
        name: str,
        corpus: Corpus,
        setting: Setting,
        fit: Callable[[], tuple[AdditiveAttentionClassifier, dict[str, float]]],
    ) -> tuple[AdditiveAttentionClassifier, dict[str, float]]:
        from safetensors.torch import load_file, save_file

        weights, info = self.root / f"{name}.safetensors", self.result(f"{name}.train")
        if weights.is_file() and info is not None:
            model = build_model(corpus, setting)
            model.load_state_dict(load_file(str(weights)))
            return model.eval(), info
        model, metrics = fit()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
        self.save_result(f"{name}.train", metrics)
        return model, metrics
