"""The ``attnkit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from attnkit import __version__


def _demo(args: argparse.Namespace) -> int:
    from attnkit.demo import run

    return run(steps=args.steps, seed=args.seed)


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnkit", description="Attention mechanisms in deep learning, on PyTorch."
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="a short showcase of the attention core")
    demo.add_argument("--steps", type=int, default=60, help="fitting steps (default 60)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(func=_demo)

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

    zoo = commands.add_parser(
        "zoo", help="every mechanism with its taxonomy row (survey Table 3) and what it is"
    )
    zoo.set_defaults(func=_zoo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError) as error:  # bad arguments: one line, exit code 2
        print(f"attnkit {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
