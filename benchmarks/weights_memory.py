"""Training memory and time of ``ak.MultiHeadAttention`` with ``need_weights=True``: the engine's
choice against the ``tiled`` backend forced.

    python benchmarks/weights_memory.py                 # n = 4096, 8192, 16384 (run it alone)
    python benchmarks/weights_memory.py --quick         # n = 256: checks the script

One training step of ``ak.MultiHeadAttention(512, 8, batch_first=True)`` at batch 1: forward with
``need_weights=True`` (torch's default: the weights averaged over heads are returned, as a user
logs or shows them), a loss of the output, backward. Memory: the peak RSS of the step beyond the RSS
of the same process stopped before it (the module, its input and torch's own), each in a fresh
process with ``MALLOC_MMAP_THRESHOLD_=131072`` (common.peak_memory_mib), for the engine's own
choice (``dense`` where its predicted peak fits the memory budget) and for ``tiled`` forced with
``ak.backends("tiled")``. Time: medians of interleaved steps of both in one process (1 thread),
up to ``--time-max-n``. The backend the engine picked is read from ``ak.explain`` of the call.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from contextlib import nullcontext
from pathlib import Path

import common
import torch

import attnkit as ak

E, HEADS = 512, 8
MMAP = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def step_fn(n: int, backend: str | None):
    torch.manual_seed(0)
    mha = ak.MultiHeadAttention(E, HEADS, batch_first=True)
    x = torch.randn(1, n, E, requires_grad=True)

    def step() -> None:
        with nullcontext() if backend is None else ak.backends(backend):
            out, _weights = mha(x, x, x, need_weights=True)
            out.square().mean().backward()  # the weights are returned (to log, to show), not trained
        x.grad = None
        mha.zero_grad(set_to_none=True)

    return step


def chosen_backend(n: int) -> str:
    """The backend the engine runs one head-split call of this size on, with gradients."""
    q = torch.randn(1, HEADS, n, E // HEADS, requires_grad=True)
    text = ak.explain(q, q, q, return_weights=True)
    found = re.search(r"runs on: (\w+)", text)
    return found.group(1) if found else "?"


def measure(spec: dict) -> None:
    """Child process: set up, then (unless baseline) run the step once; print the peak RSS."""
    torch.set_num_threads(1)
    step = step_fn(spec["n"], spec["backend"])
    if not spec["baseline"]:
        step()
    print(common.maxrss_mib())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="n = 256, one repetition")
    parser.add_argument("--sizes", type=int, nargs="+")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time-max-n", type=int, default=8192, help="time up to this n")
    args = parser.parse_args()
    if args.measure:
        measure(json.loads(args.measure))
        return
    torch.set_num_threads(1)
    sizes = args.sizes or ([256] if args.quick else [4096, 8192, 16384])
    repeats = 1 if args.quick else args.repeats
    script = str(Path(__file__).resolve())
    print(common.machine())
    header = [
        "n",
        "engine picks",
        "MiB (engine)",
        "MiB (tiled)",
        "ratio",
        "ms (engine)",
        "ms (tiled)",
        "ratio",
    ]
    rows = []
    for n in sizes:
        mib = {
            b: common.peak_memory_mib(script, {"n": n, "backend": b}, env=MMAP)
            for b in (None, "tiled")
        }
        times = {"engine": None, "tiled": None}
        if n <= args.time_max_n:
            times = common.interleaved_medians(
                {"engine": step_fn(n, None), "tiled": step_fn(n, "tiled")}, repeats
            )
        fmt = lambda v, none="failed": none if v is None else f"{v:,.0f}"  # noqa: E731
        ratio = lambda a, b: "—" if a is None or b is None else f"{a / b:.2f}"  # noqa: E731
        ms = {k: None if v is None else 1e3 * v for k, v in times.items()}
        rows.append(
            [
                f"{n:,}",
                chosen_backend(n),
                fmt(mib[None]),
                fmt(mib["tiled"]),
                ratio(mib[None], mib["tiled"]),
                fmt(ms["engine"], "not timed"),
                fmt(ms["tiled"], "not timed"),
                ratio(ms["engine"], ms["tiled"]),
            ]
        )
        print(common.table(header, rows[-1:]).splitlines()[-1], flush=True)
    print(common.table(header, rows))


if __name__ == "__main__":
    sys.exit(main())
