"""The alignment error rate of a Tatoeba-trained run's attention on the Hansards gold
(docs/interpret.md's worked example on the `attnkit demo` model; survey §4.2, intrinsic evaluation).

The demo model translates English → French, the direction of the Och & Ney Hansards gold
(sure/possible links; Mihalcea & Pedersen 2003). It is fed each reference French sentence of the
test part (gold sentences 101-447) under forced decoding and every French word is linked to the
English word it attends most (``attnkit.tasks.translation.evaluate_run``, the pipeline behind
the Hansards rows of docs/results.md). The gold tokens are only lowercased and NFC-normalised,
one token in, one token out, so every link position is unchanged; accents are kept, since the
Tatoeba vocabularies have them (the Hansards runs' normalisation strips them because their
training text has none). Words the run's vocabularies lack are read as ``<unk>``, as the model
reads any unknown word. The run never saw parliamentary text: the numbers measure its attention
under a domain shift, which the printed vocabulary coverage quantifies.

Also printed, for scale: a position-proportional diagonal (French word ``j`` of ``T`` linked to
English word ``round((j + ½)·S/T − ½)``), which needs no model at all.

    python benchmarks/demo_aer.py runs/demo-<timestamp> [--root ../shared/data/hansards-en-fr]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from attnkit.data.corpus import Example
from attnkit.data.hansards import VALID_SENTENCES, load_hansards_gold
from attnkit.data.tokenize import normalize_text
from attnkit.evaluate import corpus_alignment_error_rate
from attnkit.run import Run
from attnkit.tasks.translation import evaluate_run


def gold_test_part(root: Path) -> list[Example]:
    """Gold sentences 101-447, tokens lowercased with their accents, links unchanged."""
    linked = load_hansards_gold(root)  # links parsed and checked against the token files
    english = (root / "gold" / "test.e").read_text(encoding="utf-8").splitlines()
    french = (root / "gold" / "test.f").read_text(encoding="utf-8").splitlines()
    examples = []
    for gold, e_line, f_line in zip(linked, english, french, strict=True):
        source = tuple(normalize_text(token) for token in e_line.split())
        target = tuple(normalize_text(token) for token in f_line.split())
        if (len(source), len(target)) != (len(gold.source), len(gold.target)):
            raise RuntimeError(f"token counts changed by lowercasing: {e_line!r} / {f_line!r}")
        examples.append(Example(source, target, sure=gold.sure, possible=gold.possible))
    return examples[VALID_SENTENCES:]


def diagonal(source_length: int, target_length: int) -> set[tuple[int, int]]:
    """Links ``(source, target)`` of the position-proportional diagonal."""
    scale = source_length / target_length
    return {
        (min(source_length - 1, max(0, round((j + 0.5) * scale - 0.5))), j)
        for j in range(target_length)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a run directory, e.g. runs/demo-<timestamp>")
    parser.add_argument("--root", default="../shared/data/hansards-en-fr", type=Path)
    parser.add_argument("--beam", type=int, default=1, help="beam of the BLEU translations")
    args = parser.parse_args()

    run = Run.open(args.run_dir)
    model, step = run.load_model()
    vocab = run.job.vocabularies
    examples = gold_test_part(args.root)

    def coverage(side: str) -> str:
        vocabulary = vocab.source if side == "source" else vocab.target
        tokens = [t for e in examples for t in getattr(e, side)]
        known = sum(t in vocabulary.stoi for t in tokens)
        return f"{known / len(tokens):.1%} of {len(tokens):,}"

    start = time.perf_counter()
    result = evaluate_run(model, vocab, examples, run.config, beam_size=args.beam)
    seconds = time.perf_counter() - start
    baseline = corpus_alignment_error_rate(
        [diagonal(len(e.source), len(e.target)) for e in examples],
        [e.sure for e in examples],
        [e.possible for e in examples],
    )
    print(f"run {run.path.name}, checkpoint step {step}: {run.config.model.kind} model")
    print(f"Hansards gold test part: {len(examples)} sentences (gold lines 101-447)")
    print(
        f"gold tokens in the run's vocabularies: English {coverage('source')}, "
        f"French {coverage('target')}"
    )
    print(f"attention AER (forced decoding, argmax): {result['aer']:.3f}")
    print(f"position-proportional diagonal AER:      {baseline:.3f}")
    print(
        f"BLEU {result['bleu']:.2f} (beam {args.beam}, max {run.config.decode.max_length} "
        f"tokens), teacher-forced loss {result['loss']:.3f}; {seconds:.0f} s"
    )


if __name__ == "__main__":
    main()
