"""The alignment rows of docs/results.md from a Hansards run's evaluation, and the best reading's
predicted links for the gold's test part as ``docs/results/<config>.test.pharaoh``.

``attnkit eval RUN_DIR`` (beam as configured) scores every alignment reading of the run's model
(naive attention, Shift-Att with its layers/heads chosen on gold sentences 1–100, the alignment
head; :mod:`attnkit.tasks.alignment_methods`) on the test part (101–447) and saves them in
``RUN_DIR/eval-test.json``; this prints one markdown row per reading and writes the links of the
reading chosen on the development part: 347 lines, gold sentences 101–447 in order, ``i-j`` with
``i`` the 0-based English and ``j`` the 0-based French position in the gold's tokenisation.

    attnkit eval runs/hansards-transformer-alignment-head
    python benchmarks/alignment_links.py runs/hansards-transformer-alignment-head
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnkit.config import load_config
from attnkit.tasks.translation import METHOD_NAMES

TEST_SENTENCES = 347  # Hansards gold sentences 101–447


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args()
    results = json.loads((args.run_dir / "eval-test.json").read_text(encoding="utf-8"))
    alignment = results.get("alignment")
    if alignment is None:
        raise SystemExit(f"{args.run_dir}/eval-test.json has no alignment readings (not Hansards?)")
    name = load_config(args.run_dir / "config.yaml").name
    print(
        f"{name}: step {results['step']}, test BLEU {results['bleu']:.2f} (beam {results['beam_size']})"
    )
    print("| reading | AER dev (1–100) | AER test (101–447) | layers / heads |\n|---|---|---|---|")
    for method, scores in alignment["methods"].items():
        where = ""
        if "layers" in scores:
            where = f"layers {scores['layers']}, heads {scores['heads'] or 'averaged'}"
        best = " (best on dev)" if method == alignment["best_on_dev"] else ""
        print(
            f"| {METHOD_NAMES[method]}{best} | {scores['dev_aer']:.3f} | {scores['aer']:.3f} | "
            f"{where} |"
        )
    links = alignment["test_links"]
    if len(links) != TEST_SENTENCES:
        raise SystemExit(f"expected {TEST_SENTENCES} test sentences, got {len(links)}")
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{name}.test.pharaoh"
    target.write_text("\n".join(links) + "\n", encoding="utf-8")
    print(f"wrote {target} ({METHOD_NAMES[alignment['best_on_dev']]}, {len(links)} lines)")


if __name__ == "__main__":
    main()
