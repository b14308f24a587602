"""Ring attention on 1 and 2 local processes: time per forward+backward step and peak memory.

    python benchmarks/distributed.py            # B=1, H=8, d=64, fp32; n = 4096, 16384 (minutes)
    python benchmarks/distributed.py --quick    # tiny sizes, to check the script itself
    python benchmarks/distributed.py --backend reference --lengths 12288 --no-causal
                                                # a materialising backend near the RAM limit

``--backend reference`` forces the engine's materialising backend for every ring block (scores
and weights of a whole ``[m, n/W]`` block in memory), which stands in for an attention kernel
whose memory grows with the square of the length a process holds: there one process runs out of
memory long before W processes do.

Each configuration runs in a fresh Python process that forks its W ranks (gloo, one thread
each), so no measurement inherits another's memory. Per rank: the median wall time of a
forward+backward step (ranks synchronised by a barrier before each step; the slowest rank
counts), and the peak resident memory (VmHWM) — absolute, and the growth beyond the resident
memory just before the first step (imports and the rank's inputs already there), i.e. what the
attention itself needs. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit.distributed as akd

HERE = Path(__file__).resolve()
B, H, D = 1, 8, 64


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _rank(
    rank: int, world: int, n: int, causal: bool, repeats: int, backend: str | None = None
) -> dict:
    g = torch.Generator().manual_seed(rank)
    m = akd.padded_length(n, world) // world
    q, k, v = (torch.randn(B, H, m, D, generator=g).requires_grad_(True) for _ in range(3))
    tq, tk, tv = (t[..., :2, :].detach().clone().requires_grad_(True) for t in (q, k, v))
    akd.ring_attention(tq, tk, tv, causal=causal, backend=backend).context.sum().backward()
    before = _rss_bytes()
    times = []
    for _ in range(repeats):
        for t in (q, k, v):
            t.grad = None
        dist.barrier()
        start = time.perf_counter()
        out = akd.ring_attention(q, k, v, causal=causal, length=n, backend=backend).context
        out.sum().backward()
        dist.barrier()  # the step ends when the slowest rank is done
        times.append(time.perf_counter() - start)
    peak = akd.rss_peak_bytes()
    return {"seconds": statistics.median(times), "peak": peak, "growth": peak - before}


def run_one(world: int, n: int, causal: bool, repeats: int, backend: str | None = None) -> dict:
    results = akd.launch_local(_rank, world, n, causal, repeats, backend, timeout=3600)
    for r in results:
        if r.error is not None:
            raise RuntimeError(f"rank {r.rank}: {r.error}")
    values = [r.value for r in results]
    return {
        "world": world,
        "n": n,
        "causal": causal,
        "seconds": max(v["seconds"] for v in values),
        "peak_mib": max(v["peak"] for v in values) / 2**20,
        "growth_mib": max(v["growth"] for v in values) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--backend", help="force this engine backend for every ring block")
    parser.add_argument("--lengths", help="comma-separated n (default 4096,16384)")
    parser.add_argument("--no-causal", action="store_true", help="non-causal only")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # "world,n,causal": run in this process
    args = parser.parse_args()
    if args.one:
        world, n, causal = args.one.split(",")
        row = run_one(int(world), int(n), causal == "1", args.repeats, args.backend)
        print(json.dumps(row))
        return
    configs = [(4096, False), (4096, True), (16384, True)]
    if args.quick:
        configs = [(256, False), (256, True)]
    if args.lengths:
        lengths = [int(n) for n in args.lengths.split(",")]
        configs = [(n, c) for n in lengths for c in ((False,) if args.no_causal else (False, True))]
    print(f"Machine: {common.machine()}")
    backend = f", backend {args.backend}" if args.backend else ""
    print(f"B={B}, H={H}, d={D}, fp32, gloo, 1 thread per process{backend}\n")
    print("| n | causal | processes | ms per fwd+bwd step | peak RSS MiB/process | growth MiB |")
    print("|---|---|---|---|---|---|")
    for n, causal in configs:
        for world in (1, 2):
            spec = f"{world},{n},{int(causal)}"
            forced = ["--backend", args.backend] if args.backend else []
            done = subprocess.run(
                [sys.executable, str(HERE), "--one", spec, "--repeats", str(args.repeats), *forced],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"| {n} | {'yes' if causal else 'no'} | {world} | {1000 * row['seconds']:.0f} "
                f"| {row['peak_mib']:.0f} | {row['growth_mib']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
