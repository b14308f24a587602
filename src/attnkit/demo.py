"""``attnkit demo``: the main job on the embedded default configuration.

Trains an English→French GRU encoder–decoder with Bahdanau (additive) attention on the Tatoeba
pairs bundled in the package (``attnkit/data/tatoeba_en_fr.tsv.gz``, CC-BY 2.0 France, see
``attnkit/data/TATOEBA_LICENSE.md``) in a few minutes on two CPU cores, then prints the held-out
BLEU, translates the seeds' running example "I love you." and a few more sentences with their
alignment matrices (target words as rows, source words as columns; seed 000 Fig. 1 shows je on I,
t' on you, aime on love), and writes ``report.html`` and PNG heatmaps into
``runs/demo-<timestamp>/``. The run's checkpoint serves ``attnkit eval`` and ``attnkit translate``.

The configuration is ``attnkit/demo.yaml`` (also ``configs/demo.yaml``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path

import torch
import yaml

from attnkit.config import RunConfig, apply_overrides, validate
from attnkit.data.tokenize import detokenize
from attnkit.report import Alignment, format_matrix
from attnkit.train import train

Log = Callable[[str], None]


def demo_config(overrides: Sequence[str] = ()) -> RunConfig:
    """The embedded default configuration, with ``key.path=value`` overrides."""
    raw = yaml.safe_load(files("attnkit").joinpath("demo.yaml").read_text(encoding="utf-8"))
    return validate(apply_overrides(raw, overrides, "demo.yaml"), "demo.yaml")


def run(
    *,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    quiet: bool = False,
    log: Log = print,
) -> int:
    """Train, evaluate, show the alignments; the last line printed names the report."""
    config = demo_config(overrides)
    log(
        f"attnkit demo: {config.model.style} attention, English→French on Tatoeba "  # type: ignore[union-attr]
        f"({config.train.steps} steps, {torch.get_num_threads()} threads)"
    )
    run_ = train(config, runs_dir=runs_dir, quiet=quiet, log=log)
    results = json.loads((run_.path / "results.json").read_text(encoding="utf-8"))
    for shown in results["showcase"]:
        weights = torch.tensor(shown["weights"]).reshape(len(shown["target"]), len(shown["source"]))
        log("")
        log(f"{detokenize(shown['source'], 'en')}  →  {detokenize(shown['target'], 'fr')}")
        log(format_matrix(Alignment(shown["source"], shown["target"], weights)))
    log("")
    log(f"held-out BLEU {results['bleu']:.2f} on {results['sentences']} test sentences")
    log(f'try: attnkit translate {run_.path} "I am hungry."')
    log(f"report: {run_.path / 'report.html'}")
    return 0
