"""The statistical baseline of docs/results.md: IBM Model 1's alignment error rate on the Hansards
gold (Och & Ney sure/possible links), the aligner whose links train supervised attention.

EM (5 iterations, a NULL source word) on the 100,970 training pairs plus the text of the 447 gold
sentences (no links: unsupervised, as statistical aligners are run), then Viterbi links
(argmax source word per French word). Prints the AER of the development part (gold sentences
1-100) and of the test part (101-447).

    python benchmarks/ibm_model1_aer.py [--root ../shared/data/hansards-en-fr]
"""

from __future__ import annotations

import argparse
import time

from attnkit.data import IBMModel1, load_hansards
from attnkit.evaluate import corpus_alignment_error_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="../shared/data/hansards-en-fr")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    data = load_hansards(args.root)
    start = time.perf_counter()
    pairs = [(e.source, e.target) for split in ("train", "valid", "test") for e in data[split]]
    model = IBMModel1().fit(pairs, iterations=args.iterations)
    print(
        f"IBM Model 1, {args.iterations} EM iterations on {len(pairs)} pairs: "
        f"{time.perf_counter() - start:.0f} s"
    )
    for split in ("valid", "test"):
        examples = data[split]
        predicted = [model.align(e.source, e.target) for e in examples]
        aer = corpus_alignment_error_rate(
            predicted, [e.sure for e in examples], [e.possible for e in examples]
        )
        print(f"{split}: AER {aer:.3f} ({len(examples)} sentences)")


if __name__ == "__main__":
    main()
