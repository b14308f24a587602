"""Does the attention of a trained translation run matter? (survey §4.1, extrinsic evaluation)

Evaluates a run's newest checkpoint on one split as trained, then with its attention weights
replaced inside every attention module (``attnkit.evaluate.ablate``): uniform over the admissible
source words, a random distribution, the weights permuted across source positions. Prints a
markdown table of BLEU, teacher-forced loss and — where the split has gold links — the AER of the
attention weights under forced decoding.

    python benchmarks/attention_ablation.py runs/demo-20261122-... [--split test] [--beam 1]
"""

from __future__ import annotations

import argparse
import time

from attnkit.evaluate import ablate
from attnkit.run import Run
from attnkit.tasks.translation import evaluate_run, load_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--split", default="test")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--modes", default="uniform,random,permuted")
    args = parser.parse_args()

    run = Run.open(args.run_dir)
    model, step = run.load_model()
    examples = load_examples(run.config)[args.split]
    rows = []
    for mode in ["none", *args.modes.split(",")]:
        start = time.perf_counter()
        if mode == "none":
            result = evaluate_run(
                model, run.job.vocabularies, examples, run.config, beam_size=args.beam
            )
        else:
            with ablate(model, mode, seed=0):
                result = evaluate_run(
                    model, run.job.vocabularies, examples, run.config, beam_size=args.beam
                )
        rows.append((mode, result, time.perf_counter() - start))
    print(
        f"{run.path.name}, step {step}, {args.split} split ({rows[0][1]['sentences']} sentences), "
        f"beam {args.beam}\n"
    )
    has_aer = "aer" in rows[0][1]
    print("| attention | BLEU | loss | " + ("AER | " if has_aer else "") + "seconds |")
    print("|---|---|---|" + ("---|" if has_aer else "") + "---|")
    for mode, result, seconds in rows:
        aer = f"{result['aer']:.3f} | " if has_aer else ""
        name = "as trained" if mode == "none" else mode
        print(f"| {name} | {result['bleu']:.2f} | {result['loss']:.3f} | {aer}{seconds:.0f} |")


if __name__ == "__main__":
    main()
