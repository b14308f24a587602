"""The measured results table of docs/results.md, from finished run directories.

Each run directory (written by ``attnkit train`` / ``attnkit demo``) holds its resolved
configuration, its per-step metrics and its final test evaluation (``results.json``); this prints
one markdown row per run: model, data, steps, test BLEU, test AER, training time.

    python benchmarks/results_table.py runs/demo-2026... runs/hansards-bahdanau-2026...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnkit.run import Run, describe_model, read_metrics


def row(run_dir: Path) -> str:
    run = Run.open(run_dir)
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    c = run.config
    seconds = sum(m.get("seconds", 0.0) for m in read_metrics(run_dir))
    supervised = (
        f", supervised attention λ={c.train.supervised_weight} ({c.data.supervision})"
        if c.train.supervised_weight
        else ""
    )
    aer = f"{results['aer']:.3f}" if "aer" in results else "–"
    return (
        f"| {c.name} | {describe_model(c)}{supervised} | {c.data.corpus} | {c.train.steps} × "
        f"{c.train.batch_size} | {results['bleu']:.2f} (beam {results['beam_size']}, "
        f"{results['sentences']} sent.) | {aer} | {seconds / 60:.1f} min |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    print("| config | model | data | steps × batch | test BLEU | test AER | training time |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in args.run_dirs:
        print(row(run_dir))


if __name__ == "__main__":
    main()
