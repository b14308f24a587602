"""A training run's directory: its configuration, vocabularies, model, checkpoints and metrics.

    runs/<name>-<timestamp>/
        config.yaml        the resolved configuration (defaults filled in)
        vocab.json         translation: source and target vocabularies
        task.json          classification: what the task learnt from its training split
        links.pharaoh      supervised attention: the aligner's links for the training pairs
        metrics.jsonl      one line per step ({"step", "loss", "nll", "lr", ...}) and per evaluation
        checkpoints/       step-XXXXXXXX.safetensors + .json (see attnkit.checkpoint)
        results.json       final evaluation (BLEU, AER, ...)
        report.html        the run's report; heatmaps/ its alignment matrices as PNG

:class:`Run` opens one (refusing a configuration of another architecture before anything is
loaded), builds its model and loads its checkpoints; :func:`load_examples` and
:func:`build_model` turn a translation configuration into data and a model (a classification
task's come from its :class:`attnkit.tasks.Task`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
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
from attnkit.data.corpus import Example
from attnkit.data.vocabulary import Vocabulary


def load_examples(config: RunConfig) -> dict[str, list[Example]]:
    """The corpus of ``config.data``, split into "train", "valid" and "test"."""
    data = config.data
    if data.corpus == "tatoeba":
        from attnkit.data.tatoeba import load_tatoeba

        return load_tatoeba(max_length=data.max_length, max_pairs=data.max_pairs)
    from attnkit.data.hansards import load_hansards, missing_files

    root = Path(data.root or "")
    if not root.is_dir():
        raise ConfigError(f"data.root: no such directory {str(root)!r}")
    missing = missing_files(root)
    if missing:  # a configuration error, found before any file is read
        raise ConfigError(
            f"data.root: {str(root)!r} is not the hansards-en-fr directory (missing "
            f"{', '.join(str(root / name) for name in missing)})"
        )
    return load_hansards(root, max_length=data.max_length, max_pairs=data.max_pairs)


@dataclass
class Vocabularies:
    source: Vocabulary
    target: Vocabulary

    @classmethod
    def build(cls, examples: Sequence[Example], config: RunConfig) -> Vocabularies:
        d = config.data
        return cls(
            Vocabulary.build((e.source for e in examples), d.min_freq, d.max_vocab),
            Vocabulary.build((e.target for e in examples), d.min_freq, d.max_vocab),
        )

    def to_json(self) -> str:
        return json.dumps({"source": self.source.to_dict(), "target": self.target.to_dict()})

    @classmethod
    def read(cls, path: Path) -> Vocabularies:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(Vocabulary.from_dict(raw["source"]), Vocabulary.from_dict(raw["target"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"{path}: unreadable vocabulary ({error})") from None


def build_model(config: RunConfig, vocabularies: Vocabularies) -> nn.Module:
    """The model of ``config.model`` for these vocabularies (initialised from the global RNG)."""
    m = config.model
    sizes = (len(vocabularies.source), len(vocabularies.target))
    if m.kind == "rnn":
        from attnkit.models import RNNSeq2Seq

        return RNNSeq2Seq(
            *sizes,
            style=m.style,
            score=m.score,
            align=m.align,
            embed_dim=m.embed_dim,
            hidden_dim=m.hidden_dim,
            num_layers=m.num_layers,
            dropout=m.dropout,
            window=m.window,
            input_feeding=m.input_feeding,
            max_source_length=m.max_source_length,
        )
    from attnkit.models import TransformerSeq2Seq

    return TransformerSeq2Seq(
        *sizes,
        d_model=m.d_model,
        nhead=m.nhead,
        num_layers=m.num_layers,
        dim_feedforward=m.dim_feedforward,
        dropout=m.dropout,
        max_length=m.max_length,
        attention=m.attention,
        decoder_attention=m.decoder_attention,
    )


def describe_model(config: RunConfig) -> str:
    m = config.model
    if m.kind == "rnn":
        return f"{m.style} GRU encoder-decoder, {m.score} score, {m.align} alignment"
    if m.kind == "transformer":
        kinds = ""
        if (m.attention, m.decoder_attention) != ("exact", "exact"):
            kinds = f", {m.attention} encoder / {m.decoder_attention} decoder self-attention"
        return f"Transformer encoder-decoder, {m.num_layers} layers, {m.nhead} heads{kinds}"
    # the section's docstring names the model; its variant key (if any) says which one
    name = (type(m).__doc__ or m.kind).strip().splitlines()[0].rstrip(".")
    variant = getattr(m, "attention", None) or getattr(m, "style", None)
    if m.kind == "vit":  # its attention key is the kind of attention, exact unless chosen
        variant = None if m.attention == "exact" else f"{m.attention} attention"
    return f"{name} [{variant}]" if variant else name


class Run:
    """A run directory: its configuration, what it learnt from its data, model and checkpoints.

    A translation run has ``vocabularies``; a classification run has ``task`` (its
    :class:`attnkit.tasks.Task`, restored from ``task.json``)."""

    def __init__(
        self,
        path: Path,
        config: RunConfig,
        vocabularies: Vocabularies | None = None,
        task: Any = None,
    ) -> None:
        self.path, self.config, self._vocabularies, self.task = path, config, vocabularies, task

    @property
    def vocabularies(self) -> Vocabularies:
        if self._vocabularies is None:
            raise CheckpointError(
                f"{self.path}: a {self.config.data.corpus} run has no translation vocabularies"
            )
        return self._vocabularies

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
        learnt: Vocabularies | dict[str, Any],
        runs_dir: str | Path = "runs",
        path: str | Path | None = None,
    ) -> Run:
        """A new run directory with the resolved configuration and what was learnt from the
        training split: translation vocabularies, or a task's :meth:`~attnkit.tasks.Task.fit`
        state (a JSON-able dict)."""
        if path is None:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
            path = Path(runs_dir) / f"{config.name}-{stamp}"
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise ConfigError(f"run directory {str(path)!r} exists and is not empty (use --resume)")
        path.mkdir(parents=True, exist_ok=True)
        atomic_write(path / "config.yaml", to_yaml(config))
        if isinstance(learnt, Vocabularies):
            atomic_write(path / "vocab.json", learnt.to_json())
        else:
            atomic_write(path / "task.json", json.dumps(learnt))
        return cls.open(path)

    @classmethod
    def open(cls, path: str | Path, config: RunConfig | None = None) -> Run:
        """Open an existing run; with ``config``, refuse it if the architecture differs."""
        import yaml

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
        if config.is_translation:
            return cls(path, config, Vocabularies.read(path / "vocab.json"))
        from attnkit.tasks import task_for

        task = task_for(config)
        task.restore(_read_json(path / "task.json"))
        return cls(path, config, task=task)

    def _build(self) -> nn.Module:
        if self.task is not None:
            return self.task.build_model()
        return build_model(self.config, self.vocabularies)

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
        raise CheckpointError(f"{path}: unreadable task state ({error})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: task state must be a JSON object")
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
