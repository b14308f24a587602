"""The ``attnkit`` command.

Parsing imports nothing heavy: ``attnkit --help``, ``attnkit --version`` and ``attnkit COMMAND
--help`` answer without importing PyTorch; each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from attnkit import __version__


def _demo(args: argparse.Namespace) -> int:
    from attnkit.demo import run

    return run(runs_dir=args.runs_dir, overrides=args.set, quiet=args.quiet)


def _train(args: argparse.Namespace) -> int:
    from attnkit.config import load_config

    config = load_config(args.config, args.set)  # validated before torch is imported
    from attnkit.train import train

    run = train(
        config,
        runs_dir=args.runs_dir,
        run_dir=args.run_dir,
        resume=args.resume,
        stop_after=args.stop_after,
        quiet=args.quiet,
        timeout=args.timeout,
    )
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for the run
        print(f"run directory: {run.path}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import json

    from attnkit.checkpoint import atomic_write
    from attnkit.config import load_config
    from attnkit.run import Run

    config = load_config(args.config, args.set) if args.config else None
    run = Run.open(args.run_dir, config)
    model, step = run.load_model(args.checkpoint)
    examples = run.job.examples
    if args.split not in examples:
        raise ValueError(f"--split must be one of {', '.join(examples)}, got {args.split!r}")
    results = run.job.evaluate(model, examples[args.split], beam_size=args.beam, quiet=args.quiet)
    results["step"] = step
    atomic_write(run.path / f"eval-{args.split}.json", json.dumps(results, indent=1))
    size, *lines = run.job.describe_results(results)
    print(f"{run.path.name} step {step}, {args.split} split, {size}")
    for line in lines:
        print(line)
    return 0


def _translate(args: argparse.Namespace) -> int:
    from attnkit.data.tokenize import detokenize, tokenize
    from attnkit.evaluate.translation import translate
    from attnkit.report import Alignment, format_matrix
    from attnkit.run import Run
    from attnkit.tasks.translation import TranslationJob

    run = Run.open(args.run_dir)
    if not isinstance(run.job, TranslationJob):
        raise ValueError(
            f"{run.path}: a {run.config.data.corpus} run classifies; translate needs a "
            "translation run (use attnkit eval)"
        )
    vocabularies = run.job.vocabularies
    model, _ = run.load_model()
    for sentence in args.sentences:
        source = tokenize(sentence, "en")
        if not source:
            raise ValueError(f"nothing to translate in {sentence!r}")
        [(target, weights)] = translate(
            model,
            vocabularies,
            [source],
            beam_size=args.beam or run.config.decode.beam_size,
            max_length=run.config.decode.max_length,
        )
        print(detokenize(target, "fr"))
        if not args.no_attention:
            known = [w if w in vocabularies.source else f"{w}(unk)" for w in source]
            print(format_matrix(Alignment(known, [*target, "<eos>"], weights)))
    return 0


def _info(args: argparse.Namespace) -> int:
    import platform

    import torch

    from attnkit.core.align import ALIGNS, LocalPredictive, build_align
    from attnkit.core.engine import explain
    from attnkit.core.scores import Location, build_score

    print(f"attnkit {__version__}, torch {torch.__version__}, Python {platform.python_version()}")
    print(
        f"machine: {platform.machine()}, {torch.get_num_threads()} threads, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    d = args.dim
    if args.score == "location":
        score = Location(d, args.keys)
    else:
        score = build_score(args.score, d, d)
    if ALIGNS.get(args.align) is LocalPredictive:
        align = LocalPredictive(d, args.window)
    else:
        align = build_align(args.align, d, d)
    dtype = getattr(torch, args.dtype)
    q = torch.empty(args.batch, args.heads, args.queries, d, device="meta", dtype=dtype)
    k = torch.empty(args.batch, args.heads, args.keys, d, device="meta", dtype=dtype)
    v = torch.empty(
        args.batch, args.heads, args.keys, args.value_dim or d, device="meta", dtype=dtype
    )
    print(
        explain(
            q,
            k,
            v,
            score=score,
            align=align,
            causal=args.causal,
            dropout=args.dropout,
            return_weights=args.weights,
            summary=args.summary,
            backend=args.backend,
        )
    )
    return 0


def _zoo(args: argparse.Namespace) -> int:
    from attnkit.zoo import render

    print(render())
    return 0


def _explain(args: argparse.Namespace) -> int:
    from attnkit.run import explain_run

    path = explain_run(args.run_dir, args.input, output=args.output, beam_size=args.beam)
    print(f"attention viewer: {path}")
    return 0


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number > 0), got {text!r}") from None
    if not seconds > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text}")
    return seconds


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir", default="runs", help="where run directories go (default runs)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a configuration key, e.g. --set train.steps=100",
    )
    parser.add_argument("--quiet", action="store_true", help="plain log lines, no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnkit", description="Attention mechanisms in deep learning, on PyTorch."
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="train English→French translation with Bahdanau attention (~5 min), show its "
        "alignments",
        description="Trains a GRU encoder–decoder with additive (Bahdanau) attention on the "
        "bundled Tatoeba pairs, prints held-out BLEU, translates a few sentences with their "
        "alignment matrices, and writes an HTML report and PNG heatmaps into "
        "runs/demo-<timestamp>/.",
    )
    _run_options(demo)
    demo.set_defaults(func=_demo)

    train = commands.add_parser("train", help="train a run configuration (YAML)")
    train.add_argument("config", help="a YAML run configuration, e.g. configs/demo.yaml")
    _run_options(train)
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue this run from its newest checkpoint (bit-exact)",
    )
    train.add_argument(
        "--run-dir", default=None, help="write the run here (default: RUNS_DIR/<name>-<timestamp>)"
    )
    train.add_argument(
        "--stop-after",
        type=int,
        default=None,
        metavar="STEP",
        help="stop after this step with a checkpoint (resume later)",
    )
    train.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=1800.0,
        metavar="SECONDS",
        help="under torchrun: how long a process waits for the others (a collective) before it "
        "stops with an error naming the failure (default 1800)",
    )
    train.set_defaults(func=_train)

    evaluate = commands.add_parser(
        "eval",
        help="evaluate a run's newest checkpoint: BLEU, loss, and AER where gold alignments exist",
    )
    evaluate.add_argument("run_dir", help="a run directory")
    evaluate.add_argument("--split", default="test", help="valid or test (default test)")
    evaluate.add_argument("--beam", type=int, default=None, help="beam size (default: config)")
    evaluate.add_argument("--checkpoint", default=None, help="a checkpoint JSON (default newest)")
    evaluate.add_argument(
        "--config", default=None, help="check this configuration's architecture against the run's"
    )
    evaluate.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key of --config"
    )
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    evaluate.set_defaults(func=_eval)

    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run and print their alignment matrices",
    )
    translate.add_argument("run_dir", help="a run directory")
    translate.add_argument("sentences", nargs="+", help="English sentences")
    translate.add_argument("--beam", type=int, default=None, help="beam size (default: config)")
    translate.add_argument(
        "--no-attention", action="store_true", help="print only the translations"
    )
    translate.set_defaults(func=_translate)

    info = commands.add_parser(
        "info", help="versions, and which backend runs a given attention call and why"
    )
    info.add_argument("--score", default="scaled_dot", help="score name (default scaled_dot)")
    info.add_argument("--align", default="softmax", help="alignment name (default softmax)")
    info.add_argument("--batch", type=int, default=1)
    info.add_argument("--heads", type=int, default=8)
    info.add_argument("--queries", type=int, default=4096, help="M (default 4096)")
    info.add_argument("--keys", type=int, default=4096, help="N (default 4096)")
    info.add_argument("--dim", type=int, default=64, help="d_q = d_k (default 64)")
    info.add_argument("--value-dim", type=int, default=None, help="d_v (default: --dim)")
    info.add_argument("--window", type=int, default=10, help="D of local alignments")
    info.add_argument(
        "--dtype", default="float32", choices=["float16", "bfloat16", "float32", "float64"]
    )
    info.add_argument("--causal", action="store_true")
    info.add_argument("--weights", action="store_true", help="ask for the attention weights")
    info.add_argument("--dropout", type=float, default=0.0)
    info.add_argument("--summary", choices=["column_sum", "entropy", "argmax"], default=None)
    info.add_argument("--backend", default=None, help="force a backend and see if it can run")
    info.set_defaults(func=_info)

    explain = commands.add_parser(
        "explain",
        help="translate an input with a trained run and write its attention maps as one "
        "self-contained interactive HTML page",
    )
    explain.add_argument("run_dir", help="a run directory")
    explain.add_argument("--input", required=True, help="an English sentence")
    explain.add_argument("--output", default=None, help="HTML path (default: in the run dir)")
    explain.add_argument("--beam", type=int, default=None, help="beam size (default: config)")
    explain.set_defaults(func=_explain)

    zoo = commands.add_parser(
        "zoo", help="every mechanism with its taxonomy row (survey Table 3) and what it is"
    )
    zoo.set_defaults(func=_zoo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and --version end here, before torch
    from attnkit.checkpoint import CheckpointError
    from attnkit.distributed.process_group import PeerFailureError

    try:
        return int(args.func(args))
    except (CheckpointError, PeerFailureError) as error:
        # an unusable run or checkpoint, or a dead or silent peer under torchrun: one line, code 1
        print(f"attnkit {args.command}: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as error:  # bad configuration or arguments: exit code 2
        print(f"attnkit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnkit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
