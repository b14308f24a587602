"""The measured results tables of docs/results.md, from finished run directories.

Each run directory (written by ``attnkit train`` / ``attnkit demo``) holds its resolved
configuration, its per-step metrics and its final test evaluation (``results.json``); this prints
one markdown row per run — translation runs: model, data, steps, test BLEU, test AER, training
time; classification runs (survey Table 3 models): model, data, steps, test accuracy, macro-F1,
the same with uniform attention (the ablation column, survey §4.1), training time. Translation
runs come first, each kind under its own header.

    python benchmarks/results_table.py runs/demo-2026... runs/hansards-bahdanau-2026...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnkit.report import describe_model
from attnkit.run import Run, read_metrics

TRANSLATION_HEADER = (
    "| config | model | data | steps × batch | test BLEU | test AER | training time |\n"
    "|---|---|---|---|---|---|---|"
)
CLASSIFICATION_HEADER = (
    "| config | model | data | steps × batch | test accuracy | test macro-F1 | "
    "uniform attention: accuracy (macro-F1) | training time |\n|---|---|---|---|---|---|---|---|"
)


def row(run_dir: Path) -> str:
    run = Run.open(run_dir)
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    c = run.config
    seconds = sum(m.get("seconds", 0.0) for m in read_metrics(run_dir))
    start = f"| {c.name} | {describe_model(c)}"
    steps = f"{c.train.steps} × {c.train.batch_size}"
    if not c.is_translation:
        uniform = results["uniform_attention"]
        return (
            f"{start} | {c.data.corpus} ({results['examples']} test examples) | {steps} | "
            f"{results['accuracy']:.4f} | {results['macro_f1']:.4f} | {uniform['accuracy']:.4f} "
            f"({uniform['macro_f1']:.4f}) | {seconds / 60:.1f} min |"
        )
    supervised = (
        f", supervised attention λ={c.train.supervised_weight} ({c.data.supervision})"
        if c.train.supervised_weight
        else ""
    )
    aer = f"{results['aer']:.3f}" if "aer" in results else "–"
    return (
        f"{start}{supervised} | {c.data.corpus} | {steps} | {results['bleu']:.2f} (beam "
        f"{results['beam_size']}, {results['sentences']} sent.) | {aer} | {seconds / 60:.1f} min |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    runs = [(Run.open(d).config.is_translation, d) for d in args.run_dirs]
    for translation, header in ((True, TRANSLATION_HEADER), (False, CLASSIFICATION_HEADER)):
        chosen = [d for t, d in runs if t == translation]
        if chosen:
            print(header)
            for run_dir in chosen:
                print(row(run_dir))
            print()


if __name__ == "__main__":
    main()
