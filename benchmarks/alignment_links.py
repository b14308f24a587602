"""The alignment rows of docs/results.md from Hansards runs, and the best method's predicted links
for the gold's test part as ``docs/results/<config>.test.pharaoh``.

Every reading of the run's model (naive attention, Shift-Att with its layers/heads chosen on gold
sentences 1–100, the alignment head, alignment head × Shift-Att; each by argmax and by mutual
argmax: :mod:`attnkit.tasks.alignment_methods`) is scored on the development part (1–100) and
the test part (101–447). With ``--backward`` a French→English run of the same corpus
(``data.reverse: true``) is read too, and each direction's best argmax reading on the
development part is symmetrized with every method of :mod:`attnkit.data.symmetrize` (Koehn et al.
2003). One markdown row per method is printed; the links of the method with the lowest
development AER are written: 347 lines, gold sentences 101–447 in order, ``i-j`` with ``i`` the
0-based English and ``j`` the 0-based French position in the gold's tokenisation.

    python benchmarks/alignment_links.py runs/hansards-transformer-alignment-head \\
        --backward runs/hansards-transformer-alignment-head-fr-en

Reads the newest checkpoint of each run and needs the Hansards data at the runs' ``data.root``
(``--root`` overrides it); about 20 s per run on one core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from attnkit.data.corpus import Example
from attnkit.data.pharaoh import format_pharaoh
from attnkit.run import Run
from attnkit.tasks.alignment_methods import (
    MethodResult,
    best_on_dev,
    compare_alignment_methods,
    forced_attention,
    symmetrize_methods,
)
from attnkit.tasks.translation import load_examples, method_title

TEST_SENTENCES = 347  # Hansards gold sentences 101–447


def readings(
    run_dir: Path, root: str | None
) -> tuple[Run, dict[str, MethodResult], dict[str, list[Example]]]:
    """Every method of the run's newest checkpoint, scored on the gold's test and dev parts,
    with the run's examples."""
    run = Run.open(run_dir)
    if root is not None:
        run.config = run.config.model_copy(
            update={"data": run.config.data.model_copy(update={"root": root})}
        )
    model, step = run.load_model()
    examples = load_examples(run.config)
    dev, test = examples["valid"], examples["test"]
    if len(test) != TEST_SENTENCES:
        raise SystemExit(f"{run_dir}: expected {TEST_SENTENCES} test sentences, got {len(test)}")
    vocabularies = run.job.vocabularies
    methods = compare_alignment_methods(
        forced_attention(model, vocabularies, test),
        test,
        forced_attention(model, vocabularies, dev),
        dev,
    )
    print(f"\n{run.config.name} (step {step}, reverse={run.config.data.reverse})")
    print("| method | AER dev (1–100) | AER test (101–447) | Shift-Att layers / heads |")
    print("|---|---|---|---|")
    for name, result in methods.items():
        where = ""
        if result.choice is not None:
            heads = "averaged" if result.choice.heads is None else list(result.choice.heads)
            where = f"layers {list(result.choice.layers)}, heads {heads}"
        print(f"| {method_title(name)} | {result.dev_aer:.3f} | {result.aer:.3f} | {where} |")
    return run, methods, examples


def best_argmax(methods: dict[str, MethodResult]) -> MethodResult:
    """The argmax method (one link per target word) of lowest development AER."""
    argmax = {name: m for name, m in methods.items() if "+" not in name}
    return argmax[best_on_dev(argmax)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="an English→French Hansards run")
    parser.add_argument("--backward", type=Path, help="a French→English run (data.reverse)")
    parser.add_argument("--root", help="the hansards-en-fr directory, if not the runs' data.root")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    run, forward, examples = readings(args.run_dir, args.root)
    if run.config.data.reverse:
        raise SystemExit(f"{args.run_dir} translates French→English; give it as --backward")
    chosen = forward[best_on_dev(forward)]
    choices = [(chosen.dev_aer, method_title(chosen.method), chosen.links)]
    if args.backward is not None:
        back_run, backward, _ = readings(args.backward, args.root)
        if not back_run.config.data.reverse:
            raise SystemExit(f"--backward {args.backward}: not a French→English run")
        f, b = best_argmax(forward), best_argmax(backward)
        method, scores, links = symmetrize_methods(f, b, examples["test"], examples["valid"])
        print(
            f"\nsymmetrized: {method_title(f.method)} (English→French) with "
            f"{method_title(b.method)} (French→English)"
        )
        print("| symmetrization | AER dev (1–100) | AER test (101–447) |\n|---|---|---|")
        for name, score in scores.items():
            print(f"| {name} | {score['dev_aer']:.3f} | {score['aer']:.3f} |")
        choices.append((scores[method]["dev_aer"], f"both directions, {method}", links))
    dev_aer, title, links = min(choices, key=lambda choice: choice[0])
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{run.config.name}.test.pharaoh"
    target.write_text("\n".join(format_pharaoh(x) for x in links) + "\n", encoding="utf-8")
    print(f"\nwrote {target}: {title} (best on dev, AER {dev_aer:.3f}), {len(links)} lines")


if __name__ == "__main__":
    main()
