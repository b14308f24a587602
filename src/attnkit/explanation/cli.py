"""The command ``python -m attnkit.explanation {jain-wallace,wiegreffe-pinter,faithfulness}``:
parses the options, runs the experiment (resuming from its store) and prints, last, one JSON
line ``{"experiment", "minutes", "result"}``."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attnkit.explanation.data import BABI_TASKS
from attnkit.explanation.faithfulness import run_faithfulness
from attnkit.explanation.jain_wallace import ENCODERS, run_jain_wallace
from attnkit.explanation.runs import Options
from attnkit.explanation.wiegreffe_pinter import run_wiegreffe_pinter


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnkit.explanation",
        description="Reproduce Jain & Wallace (2019) or Wiegreffe & Pinter (2019), or rank "
        "token-importance maps by ERASER's faithfulness on SST-2.",
    )
    parser.add_argument("experiment", choices=("jain-wallace", "wiegreffe-pinter", "faithfulness"))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny slice, for tests")
    parser.add_argument(
        "--corpora",
        nargs="+",
        choices=("sst", *(f"babi{task}" for task in BABI_TASKS)),
        help="jain-wallace only: these corpora (default all; --quick: sst babi1)",
    )
    parser.add_argument(
        "--encoders",
        nargs="+",
        choices=ENCODERS,
        help="jain-wallace only: these encoders (default all: " + " ".join(ENCODERS) + ")",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=("bilstm", "minilm"),
        default=("bilstm", "minilm"),
        help="faithfulness only: the models (default both)",
    )
    parser.add_argument(
        "--sentences",
        type=int,
        help="faithfulness only: how many SST-2 test sentences (a seeded sample; default 200)",
    )
    args = parser.parse_args(argv)
    if args.sentences is not None and args.sentences < 1:
        parser.error(f"--sentences must be a positive count, got {args.sentences}")
    if not args.data.is_dir():
        parser.error(f"--data must be the shared data folder, got {args.data} (not a directory)")
    torch.set_num_threads(1)
    options = Options(
        args.data,
        args.runs_dir,
        args.seed,
        args.quick,
        print,
        corpora=tuple(args.corpora) if args.corpora else None,
        encoders=tuple(args.encoders) if args.encoders else None,
        progress=not args.quick,
    )
    started = time.time()
    if args.experiment == "jain-wallace":
        result: Any = run_jain_wallace(options)
    elif args.experiment == "faithfulness":
        result = run_faithfulness(options, args.models, args.sentences)
    else:
        result = run_wiegreffe_pinter(options)
    minutes = (time.time() - started) / 60
    print(
        json.dumps({"experiment": args.experiment, "minutes": round(minutes, 2), "result": result})
    )
    return 0
