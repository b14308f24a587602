"""The ``attnkit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from attnkit import __version__


def _demo(args: argparse.Namespace) -> int:
    from attnkit.demo import run

    return run(steps=args.steps, seed=args.seed)


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
