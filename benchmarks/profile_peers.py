"""Where the time of a close peer row goes: torch.profiler's operator table for attnkit and its peer.

    python benchmarks/profile_peers.py                     # MHA fwd with weights, n = 1024
    python benchmarks/profile_peers.py --row encoder       # encoder training step, dropout 0.1
    python benchmarks/profile_peers.py --row weights --n 512   # weights vs the materialised formula
    python benchmarks/profile_peers.py --row softcap --n 2048  # score_mod vs compiled Flex (fwd)
    python benchmarks/profile_peers.py --row performer --n 1024 [--causal]  # an efficient kind
    python benchmarks/profile_peers.py --quick             # small sizes: checks the script

A ratio near 1.0 against torch says both sides spend their time in the same kernels. This script
shows it: it builds the row's two calls exactly as benchmarks/peer_rows.py does (same inputs and
weights), warms each up, profiles ``--repeats`` calls of each (1 thread), and prints, per side,
the operators by self CPU time with their share, then the share spent in matrix products
(``addmm``, ``mm``, ``bmm``, ``baddbmm``, ``linear``'s GEMM) and the rest. What is not GEMM is what
attnkit could still win back; what is GEMM runs the same MKL/oneDNN kernels on both sides.
"""

from __future__ import annotations

import argparse

import peer_rows
import torch
from torch.profiler import ProfilerActivity, profile

#: the efficient rows this script profiles, each as its row in peer_rows.py builds it (fwd+bwd)
EFFICIENT = (
    "nystrom",
    "nystrom_residual",
    "performer",
    "performer_relu",
    "linformer",
    "sliding_window",
    "local_blocks",
)
GEMM = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation")


def table(fn, repeats: int, top: int) -> tuple[str, float, float]:
    """The profiler's operator table of ``repeats`` calls, and the GEMM and total self CPU time."""
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            fn()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    gemm = sum(e.self_cpu_time_total for e in events if e.key in GEMM)
    return events.table(sort_by="self_cpu_time_total", row_limit=top), gemm, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--row",
        choices=["mha", "encoder", "weights", "softcap", "alibi", *EFFICIENT],
        default="mha",
    )
    parser.add_argument(
        "--causal", action="store_true", help="the causal configuration (EFFICIENT)"
    )
    parser.add_argument(
        "--n",
        type=int,
        help="sequence length (default 1024 mha, 128 encoder, 512 weights, 2048 softcap/alibi)",
    )
    parser.add_argument("--mode", choices=["fwd", "fwd+bwd"], default="fwd")
    parser.add_argument("--weights", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.row == "mha":
        cfg = {
            "n": args.n or (64 if args.quick else 1024),
            "weights": args.weights,
            "mode": args.mode,
        }
        build, peer = peer_rows.build_mha, "torch"
    elif args.row == "encoder":
        n = args.n or (16 if args.quick else 128)
        cfg = {"batch": 2 if args.quick else 8, "n": n, "dropout": 0.1, "mode": "fwd+bwd"}
        build, peer = peer_rows.build_encoder, "torch"
    elif args.row == "weights":
        # the peer is the materialised formula, the row's closest one (SDPA returns no weights)
        cfg = {"n": args.n or (64 if args.quick else 512)}
        build, peer = peer_rows.build_weights, "naive"
    elif args.row in ("softcap", "alibi"):
        # forward only: compiled FlexAttention has no CPU backward (peers.py says the same)
        cfg = {"n": args.n or (128 if args.quick else 2048)}
        build = peer_rows.build_softcap if args.row == "softcap" else peer_rows.build_alibi
        peer = "flex"
    else:
        # an efficient kind against its package: the row's first configuration of that causality
        row = peer_rows.BY_NAME[args.row]
        configs = row.configs(args.quick)
        cfg = next((c for c in configs if c.get("causal", False) == args.causal), configs[0])
        cfg = {**cfg, "n": args.n or cfg["n"]}
        build, peer = row.build, next(iter(row.peers))
    repeats = 1 if args.quick else args.repeats
    shares = {}
    for impl in ("attnkit", peer):
        text, gemm, total = table(build(impl, cfg), repeats, args.top)
        shares[impl] = (gemm, total)
        print(f"== {impl}: {args.row} {cfg}\n{text}")
    for impl, (gemm, total) in shares.items():
        print(
            f"{impl}: self CPU {total / 1e3 / repeats:.1f} ms per call, GEMM "
            f"{gemm / 1e3 / repeats:.1f} ms ({100 * gemm / max(total, 1):.0f}%), rest "
            f"{(total - gemm) / 1e3 / repeats:.1f} ms"
        )


if __name__ == "__main__":
    main()
