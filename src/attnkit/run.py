"""A training run's directory: its configuration, what it learnt from its data, model,
checkpoints and metrics.

    runs/<name>-<timestamp>/
        config.yaml        the resolved configuration (defaults filled in)
        vocab.json         translation: source and target vocabularies
        task.json          classification: what the task learnt from its training split
        links.pharaoh      supervised attention: the aligner's links for the training pairs
        metrics.jsonl      one line per step ({"step", "loss", "nll", "lr", ...}) and per evaluation
        checkpoints/       step-XXXXXXXX.safetensors + .json (see attnkit.checkpoint)
        results.json       final evaluation (BLEU, AER, accuracy, ...)
        report.html        the run's report; heatmaps/ its alignment matrices as PNG

:class:`Run` opens one (refusing a configuration of another architecture before anything is
loaded), restores its job (:func:`attnkit.tasks.job_for`: what the run learnt, in the job's
:attr:`~attnkit.tasks.job.Job.state_file`), builds its model and loads its checkpoints.
:func:`explain_run` writes the attention viewer page of a translation run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from attnkit.checkpoint import CheckpointError, atomic_write, latest_checkpoint, read_checkpoint
from attnkit.config import (
    ConfigError,
    RunConfig,
    architecture,
    differing_keys,
    to_yaml,
    validate,
)
from attnkit.data.corpus import Vocabularies
from attnkit.data.tokenize import detokenize, tokenize
from attnkit.interpret.explain import explain, slug
from attnkit.interpret.viewer import write_viewer
from attnkit.report import describe_model
from attnkit.tasks import Job, Task, job_for
from attnkit.tasks.translation import TranslationJob, build_model, load_examples

# names this module had before translation became a task (attnkit.tasks.translation)
__all__ = [
    "Run",
    "Vocabularies",
    "build_model",
    "describe_model",
    "explain_run",
    "load_examples",
    "read_metrics",
    "truncate_metrics",
]


class Run:
    """A run directory: its configuration, its job (with what it learnt from the training
    split), model and checkpoints."""

    def __init__(self, path: Path, config: RunConfig, job: Job) -> None:
        self.path, self.config, self.job = path, config, job

    @property
    def vocabularies(self) -> Vocabularies:
        """A translation run's source and target vocabularies."""
        if not isinstance(self.job, TranslationJob):
            raise CheckpointError(
                f"{self.path}: a {self.config.data.corpus} run has no translation vocabularies"
            )
        return self.job.vocabularies

    @property
    def task(self) -> Task | None:
        """A classification run's :class:`~attnkit.tasks.Task` (``None`` for translation)."""
        task = getattr(self.job, "task", None)
        return task if isinstance(task, Task) else None

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @classmethod
    def create(
        cls,
        config: RunConfig,
        learnt: dict[str, Any],
        runs_dir: str | Path = "runs",
        path: str | Path | None = None,
        *,
        job: Job | None = None,
    ) -> Run:
        """A new run directory with the resolved configuration and what the job learnt from
        the training split (:meth:`~attnkit.tasks.job.Job.learnt`: a JSON-able dict), opened
        with ``job`` (default: a new one of ``config``)."""
        job = job or job_for(config)
        if path is None:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
            path = Path(runs_dir) / f"{config.name}-{stamp}"
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise ConfigError(f"run directory {str(path)!r} exists and is not empty (use --resume)")
        path.mkdir(parents=True, exist_ok=True)
        atomic_write(path / "config.yaml", to_yaml(config))
        atomic_write(path / job.state_file, json.dumps(learnt))
        return cls.open(path, job=job)

    @classmethod
    def open(
        cls, path: str | Path, config: RunConfig | None = None, *, job: Job | None = None
    ) -> Run:
        """Open an existing run; with ``config``, refuse it if the architecture differs. The
        run's state is restored into ``job`` (default: a new job of the configuration)."""
        path = Path(path)
        config_path = path / "config.yaml"
        if not config_path.is_file():
            raise CheckpointError(f"{config_path}: not a run directory (no config.yaml)")
        try:
            raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            raise CheckpointError(f"{config_path}: unreadable run configuration") from None
        saved = validate(raw, str(config_path))
        if config is not None:
            differences = differing_keys(architecture(saved), architecture(config))
            if differences:
                raise CheckpointError(
                    f"{config_path}: the given configuration's architecture differs: "
                    + "; ".join(differences)
                )
        config = config or saved
        job = job or job_for(config)
        state_path = path / job.state_file
        try:
            job.restore(_read_json(state_path))
        except ValueError as error:
            raise CheckpointError(f"{state_path}: not this run's state ({error})") from None
        return cls(path, config, job)

    def _build(self) -> nn.Module:
        return self.job.build_model()

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.config.seed)
        return self._build()

    def load_model(self, checkpoint: str | Path | None = None) -> tuple[nn.Module, int]:
        """The model of the newest (or the given) checkpoint, in eval mode, and its step."""
        path = checkpoint or latest_checkpoint(self.checkpoints)
        if path is None:
            raise CheckpointError(f"{self.checkpoints}: no checkpoint in this run")
        loaded = read_checkpoint(path, architecture(self.config))
        model = self._build()
        loaded.restore(model)
        return model.eval(), loaded.step


def _read_json(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable run state ({error})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: the run state must be a JSON object")
    return state


def truncate_metrics(path: Path, step: int) -> None:
    """Keep metric lines up to ``step`` (a resumed run rewrites what came after its checkpoint)."""
    if not path.is_file():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["step"] <= step
    ]
    atomic_write(path, "".join(line + "\n" for line in kept))


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def explain_run(
    run_dir: str | Path,
    sentence: str,
    *,
    output: str | Path | None = None,
    beam_size: int | None = None,
) -> Path:
    """Translate ``sentence`` (English) with the run's newest checkpoint and write the attention
    viewer page for it (:func:`attnkit.interpret.explain.explain`, ``attnkit explain``).

    Args:
        run_dir: a translation run directory written by :func:`attnkit.train.train`.
        sentence: the English input, e.g. ``"I love you."``.
        output: where to write the page; default ``RUN_DIR/explain-<slug of the input>.html``.
        beam_size: beam width of the search; ``None``: the run's ``decode.beam_size``.

    Returns:
        the path of the HTML page (written atomically).

    Raises:
        ValueError: an input with no tokens, or a bad ``beam_size``.
        TypeError: an input that is not a str.
        attnkit.checkpoint.CheckpointError: ``run_dir`` is not a translation run or has no
            checkpoint.

    Example::

        >>> explain_run("runs/tiny-20261122-101500", "I love you.")
        PosixPath('runs/tiny-20261122-101500/explain-i-love-you.html')
    """
    if not isinstance(sentence, str):
        raise TypeError(f"the input must be a str, got {type(sentence).__name__}")
    source = tokenize(sentence, "en")
    if not source:
        raise ValueError(f"the input must contain at least one word, got {sentence!r}")
    if beam_size is not None and (
        isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1
    ):
        raise ValueError(f"beam_size must be a positive int or None, got {beam_size!r}")
    run = Run.open(run_dir)
    vocabularies = run.vocabularies
    model, step = run.load_model()
    config = run.config
    beam = config.decode.beam_size if beam_size is None else beam_size
    explanation = explain(
        model,
        vocabularies.source,
        vocabularies.target,
        source,
        beam_size=beam,
        max_length=config.decode.max_length,
    )
    translation = detokenize(explanation.translation, "fr")
    title = f"{run.path.name}: \u201c{sentence.strip()}\u201d \u2192 \u201c{translation}\u201d"
    notes = [
        f"model: {describe_model(config)}",
        f"checkpoint: step {step}; search: {'greedy' if beam == 1 else f'beam {beam}'}",
    ]
    # the viewer labels an unknown word "word(unk)": the labels that differ from the input
    unknown = [
        shown for shown, token in zip(explanation.source, source, strict=True) if shown != token
    ]
    if unknown:
        notes.append(f"not in the source vocabulary (read as <unk>): {', '.join(unknown)}")
    if not explanation.ended:
        notes.append(
            f"the search stopped at decode.max_length={config.decode.max_length} tokens "
            "before emitting <eos>"
        )
    notes.append(
        "cross-attention: rows are the target words emitted, columns the source words; "
        "decoder self-attention: rows and columns are the decoder's inputs (<bos> y1 … yn)"
    )
    path = Path(output) if output is not None else run.path / f"explain-{slug(sentence)}.html"
    return write_viewer(path, explanation.maps, title=title, notes="\n".join(notes))
