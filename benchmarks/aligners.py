"""Statistical word aligners on the Hansards gold (docs/results.md, "Statistical aligners"):
IBM Model 1 and fast_align's reparameterized IBM Model 2, each direction and symmetrized.

Every aligner is trained (unsupervised, as statistical aligners are run) on the 100,970 training
pairs plus the text of the 447 gold test sentences and of the 37 trial sentences (no links), in
``attnkit.data.hansards``' normalisation — the data and tokenisation of IBM Model 1's row in
docs/results.md, plus the trial text. ``en→fr`` links each French word
to at most one English word, ``fr→en`` the reverse (its links turned into ``(english, french)``);
the symmetrizations combine the two (``attnkit.data.symmetrize``). Printed per row: the AER of
the development part (gold sentences 1-100, the only part used for choices) and of the test part
(101-447), and the training time of the direction(s) the row needs. The last lines name the
development part's best row and its test AER.

    python benchmarks/aligners.py [--root ../shared/data/hansards-en-fr] [--iterations 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from attnkit.data import FastAlign, IBMModel1, load_hansards
from attnkit.data.corpus import Example
from attnkit.data.hansards import normalize_gold_token
from attnkit.data.symmetrize import SYMMETRIZATIONS, transpose_links
from attnkit.evaluate import corpus_alignment_error_rate

Links = frozenset[tuple[int, int]]


def aer(predicted: Sequence[set[tuple[int, int]]], examples: Sequence[Example]) -> float:
    return corpus_alignment_error_rate(
        predicted, [e.sure for e in examples], [e.possible for e in examples]
    )


def trial_pairs(root: Path) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The 37 trial sentence pairs' text, tokens normalised as the gold test sentences'."""
    sides = [
        (root / "gold" / name).read_text(encoding="utf-8").splitlines()
        for name in ("trial.e", "trial.f")
    ]
    return [
        (tuple(map(normalize_gold_token, e.split())), tuple(map(normalize_gold_token, f.split())))
        for e, f in zip(*sides, strict=True)
    ]


def directions(
    make: Callable[[], IBMModel1 | FastAlign],
    pairs: list[tuple[tuple[str, ...], tuple[str, ...]]],
    gold: list[Example],
    iterations: int,
) -> tuple[list[Links], list[set[tuple[int, int]]], float, float, str]:
    """Both directions' links of the gold sentences, ``(english, french)``, and fit times."""
    start = time.perf_counter()
    forward_model = make().fit(pairs, iterations=iterations)
    forward_seconds = time.perf_counter() - start
    start = time.perf_counter()
    backward_model = make().fit([(f, e) for e, f in pairs], iterations=iterations)
    backward_seconds = time.perf_counter() - start
    forward = [forward_model.align(e.source, e.target) for e in gold]
    backward = [transpose_links(backward_model.align(e.target, e.source)) for e in gold]
    note = ""
    if isinstance(forward_model, FastAlign):
        note = f"λ {forward_model.tension:.2f} / {backward_model.tension:.2f}"
    return forward, backward, forward_seconds, backward_seconds, note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="../shared/data/hansards-en-fr", type=Path)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    data = load_hansards(args.root)
    pairs = [(e.source, e.target) for split in ("train", "valid", "test") for e in data[split]]
    pairs += trial_pairs(args.root)
    valid, test = data["valid"], data["test"]
    gold = valid + test
    print(
        f"{len(pairs):,} training pairs; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__}; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    aligners: dict[str, Callable[[], IBMModel1 | FastAlign]] = {
        "IBM Model 1": IBMModel1,
        "fast_align (EM)": FastAlign,
        "fast_align (VB, α = 0.01)": lambda: FastAlign(alpha=0.01),
    }
    rows = []
    print("| method | links | AER dev (1-100) | AER test (101-447) | time (s) | note |")
    print("|---|---|---|---|---|---|")
    for name, make in aligners.items():
        forward, backward, t_forward, t_backward, note = directions(
            make, pairs, gold, args.iterations
        )
        candidates = {"en→fr": forward, "fr→en": backward}
        seconds = {"en→fr": t_forward, "fr→en": t_backward}
        for method, combine in SYMMETRIZATIONS.items():
            candidates[method] = [combine(a, b) for a, b in zip(forward, backward, strict=True)]
            seconds[method] = t_forward + t_backward
        for links_name, links in candidates.items():
            dev = aer(links[: len(valid)], valid)
            result = aer(links[len(valid) :], test)
            rows.append((dev, result, name, links_name))
            print(
                f"| {name} | {links_name} | {dev:.3f} | {result:.3f} | "
                f"{seconds[links_name]:.0f} | {note} |"
            )
    best = min(rows)
    print(
        f"best on the development part: {best[2]}, {best[3]} (dev {best[0]:.3f}) -> "
        f"test AER {best[1]:.3f}"
    )
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
