"""Efficient attention: forward+backward time and peak memory of each efficient kind against exact
attention (attnkit's engine and raw SDPA).

    python benchmarks/efficient.py            # n = 1024 … 32768, H = 8, d = 64, fp32 (long)
    python benchmarks/efficient.py --quick    # small sizes, to check the script itself

Prints one markdown table per pass (non-causal; causal for the kinds that have it). Times are
milliseconds, medians of interleaved repetitions in one run (compare ratios, not absolute times
across runs); memory is peak RSS beyond the inputs in MiB, in a fresh process per configuration
(see common.py). Exact attention is skipped above ``--max-exact-n`` (its time grows as n²).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak
from attnkit import efficient

HERE = Path(__file__).resolve()
D, HEADS = 64, 8
WINDOW, FEATURES, LANDMARKS, BLOCK, BUCKET, PROJECTED = 256, 256, 64, 64, 64, 256

#: name → (function(q, k, v, causal) -> context, supports causal)
KINDS: dict[str, tuple[Callable[..., torch.Tensor], bool]] = {}


def _kind(name: str, causal_ok: bool):
    def register(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        KINDS[name] = (fn, causal_ok)
        return fn

    return register


@_kind("exact (attnkit)", True)
def _exact(q, k, v, causal):
    return ak.attention(q, k, v, causal=causal).context


@_kind("exact (SDPA)", True)
def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


@_kind(f"sliding_window w={WINDOW}", True)
def _window(q, k, v, causal):
    return efficient.sliding_window_attention(q, k, v, window=WINDOW, causal=causal).context


@_kind(f"longformer w={WINDOW} +1 global", True)
def _longformer(q, k, v, causal):
    return efficient.longformer_attention(q, k, v, window=WINDOW, causal=causal).context


@_kind(f"bigbird b={BLOCK}", True)
def _bigbird(q, k, v, causal):
    return efficient.bigbird_attention(q, k, v, block=BLOCK, causal=causal).context


@_kind("linear", True)
def _linear(q, k, v, causal):
    return efficient.linear_attention(q, k, v, causal=causal).context


_OMEGA = efficient.orthogonal_gaussian(FEATURES, D, generator=torch.Generator().manual_seed(0))


@_kind(f"performer m={FEATURES}", True)
def _performer(q, k, v, causal):
    return efficient.performer_attention(q, k, v, projection=_OMEGA, causal=causal).context


@_kind(f"linformer k={PROJECTED}", False)
def _linformer(q, k, v, causal):
    g = torch.Generator().manual_seed(0)
    e = torch.randn(PROJECTED, k.shape[-2], generator=g) / PROJECTED**0.5
    return efficient.linformer_attention(q, k, v, key_projection=e).context


@_kind(f"nystrom m={LANDMARKS}", False)
def _nystrom(q, k, v, causal):
    return efficient.nystrom_attention(q, k, v, landmarks=LANDMARKS).context


@_kind(f"lsh c={BUCKET} 1 round", True)
def _lsh(q, k, v, causal):
    return efficient.lsh_attention(q, q, v, bucket_size=BUCKET, causal=causal).context


def runner(spec: dict) -> Callable[[], object]:
    """A zero-argument forward+backward of one kind on one configuration."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, spec["n"], D, generator=g).requires_grad_() for _ in range(3))
    fn, _ = KINDS[spec["kind"]]

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v, spec["causal"]).sum().backward()

    return forward_backward


def measure(payload: str) -> None:
    """Subprocess entry: run one configuration once (or only its set-up) and print peak RSS."""
    spec = json.loads(payload)
    fn = runner(spec)
    runner({**spec, "n": 8})()  # warm-up of libraries and thread pools, in both processes
    if not spec["baseline"]:
        fn()
    print(common.maxrss_mib())


def fmt(x: float | None, scale: float = 1.0) -> str:
    return "—" if x is None else f"{x * scale:.0f}" if x * scale >= 10 else f"{x * scale:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--max-exact-n", type=int, default=32768, help="skip exact above this n")
    parser.add_argument("--no-memory", action="store_true", help="times only")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return

    sizes = [256, 512] if args.quick else [1024, 4096, 16384, 32768]
    repeats = 2 if args.quick else 3
    print(f"Measured on: {common.machine()}.\n")
    print(
        f"Forward+backward, B=1, H={HEADS}, d={D}, fp32. Times: ms (median of interleaved "
        "repetitions); memory: peak RSS beyond the inputs, MiB (fresh process each). "
        "Ratio: exact (attnkit) time / this kind's time.\n"
    )
    for causal in (False, True):
        names = [name for name, (_, ok) in KINDS.items() if ok or not causal]
        header = ["kind"] + [f"n={n} ms" for n in sizes] + [f"n={n} MiB" for n in sizes]
        header += [f"speed-up n={sizes[-1]}"]
        cells: dict[str, list[str]] = {name: [] for name in names}
        mems: dict[str, list[str]] = {name: [] for name in names}
        speedup: dict[str, str] = {}
        for n in sizes:
            chosen = [x for x in names if not (x.startswith("exact") and n > args.max_exact_n)]
            fns = {x: runner({"kind": x, "n": n, "causal": causal}) for x in chosen}
            times = common.interleaved_medians(fns, repeats if n <= 4096 else 1)
            for name in names:
                cells[name].append(fmt(times.get(name), 1e3))
                mem = None
                if name in times and not args.no_memory:
                    spec = {"kind": name, "n": n, "causal": causal}
                    mem = common.peak_memory_mib(str(HERE), spec)
                mems[name].append(fmt(mem))
                if n == sizes[-1]:
                    base = times.get("exact (attnkit)")
                    own = times.get(name)
                    speedup[name] = "—" if base is None or own is None else f"{base / own:.2f}x"
            print(f"done n={n} causal={causal}", file=sys.stderr, flush=True)
        lines = [
            f"## {'Causal' if causal else 'Non-causal'}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for name in names:
            row = [name, *cells[name], *mems[name], speedup[name]]
            lines.append("| " + " | ".join(row) + " |")
        print("\n".join(lines) + "\n", flush=True)


if __name__ == "__main__":
    main()
