"""attnkit against the libraries users would otherwise pick, side by side in one process.

    python benchmarks/peers.py                      # every comparison; writes docs/benchmarks.md
    python benchmarks/peers.py --quick              # tiny sizes, 1 repetition: checks the script
    python benchmarks/peers.py --only mha,lsh --no-write

The rows are built in benchmarks/peer_rows.py. Peers are installed for the benchmark only,
pinned to the versions measured, with ``--no-deps`` because local-attention and x-transformers
pull hyper-connections / torch-einops-utils, which need torch >= 2.5 and would upgrade an older
torch; the other names are their small pure-Python dependencies (``pip install -e .[bench]``
does the same where torch is already >= 2.5)::

    pip install --no-deps entmax==1.3 nystrom-attention==0.0.14 performer-pytorch==1.1.4 linformer==0.2.3 reformer-pytorch==1.4.4 local-attention==1.11.2 x-transformers==2.31.10 einops==0.8.2 einx==0.4.3 frozendict==2.5.1 loguru==0.7.3 torch-einops-utils==0.2.0 hyper-connections==0.4.11 axial-positional-embedding==0.3.12 product-key-memory==0.3.0 colt5-attention==0.11.2

Each row runs attnkit and its peer(s) on the same inputs (same weights copied in where the peer is
a module), interleaved (A, B, A, B, …; common.interleaved_medians), 1 thread by default
(``--threads``). "attnkit/peer" is the ratio of median times, < 1 = attnkit faster. Memory is the
peak RSS of one call beyond the RSS before it, in a fresh process per (row, configuration,
implementation): the process makes the call once at full size (lazy initialisation, torch.compile),
releases free heap memory (malloc_trim) and resets its high-water mark (/proc/self/clear_refs),
then makes the call again; a baseline process stops before the second call
(common.peak_memory_mib). "agree" is the largest absolute difference of attnkit's output from the
peer's, or from a float64 reference where the peer computes something different by design.

Rows (``--only NAME``), B = 1, H = 8, d = 64, fp32 unless stated; "fwd" runs under no_grad,
"fwd+bwd" backpropagates a dense all-ones gradient of the output to the inputs (and parameters).
Rows measured before that (their "Measured" line does not say "dense gradient") backpropagated
``output.sum()``, whose gradient is one value broadcast by stride 0; a ``Linear`` that receives it
copies it before its matrix products, and a peer that slices its output (nystrom-attention's
``out[:, -n:]``) had a dense gradient where attnkit had the broadcast one:

* ``mha``: ``ak.MultiHeadAttention(512, 8, batch_first=True)`` loaded with the state_dict of
  ``torch.nn.MultiheadAttention(512, 8, batch_first=True)``, self-attention x [2, n, 512],
  n = 512, 1024, 2048, need_weights True (torch's default, weights averaged over heads) and False;
  fwd in eval mode (torch takes its native fast path there), fwd+bwd in train mode (dropout 0).
* ``encoder``: ``ak.layers.TransformerEncoderLayer(512, 8, 2048, dropout, batch_first=True)``
  loaded from torch's, one training step (forward, mean-square loss, backward, SGD step) on
  x [B, n, 512], (B, n) = (8, 128), (4, 512), dropout 0.1 and 0.0; "agree" compares eval-mode
  outputs (dropout draws differ by design).
* ``weights``: ``ak.attention(q, k, v, return_weights=True)`` vs the materialised formula
  (``w = softmax(q kᵀ/√d)``, ``w v``, both returned) and vs SDPA without weights; fwd,
  n = 512, 1024, 2048.
* ``sdpa``: ``ak.attention`` default vs ``F.scaled_dot_product_attention``, n = 1024, 4096,
  causal and not, fwd and fwd+bwd.
* ``entmax``: ``ak.attention(align="sparsemax" | "entmax15")`` vs ``entmax.sparsemax`` /
  ``entmax.entmax15`` applied to the materialised scores, n = 512 … 8192, fwd and fwd+bwd (the
  peer is skipped where its estimated peak exceeds ``--max-gib``).
* ``nystrom``: ``nystrom_attention.NystromAttention(dim=512, dim_head=64, heads=8,
  num_landmarks=64, pinv_iterations=6, residual=False)`` vs its own projections (weights copied)
  around ``attnkit.efficient.nystrom_attention(landmarks=64, pinv_iterations=6)``,
  n = 1024, 4096, 16384, fwd+bwd.
* ``performer``: ``performer_pytorch.FastAttention(64, nb_features=256, causal=…)`` vs
  ``attnkit.efficient.performer_attention`` with the same random features ω [256, 64]
  (attnkit's ``orthogonal_gaussian``, copied into the peer's buffer), n = 1024, 4096, 16384,
  causal and not, fwd+bwd; "agree" also gives both errors from exact attention in float64
  (the peer adds 1e-4 to every feature). The peer's causal path is its CPU fallback
  (``causal_linear_attention_noncuda``), the one users get without CUDA.
* ``linformer``: ``linformer.LinformerSelfAttention(dim=512, seq_len=n, k=256, heads=8)`` vs the
  same projections and E, F (copied) around ``attnkit.efficient.linformer_attention``,
  n = 1024, 4096, 16384, fwd+bwd.
* ``sliding_window``: ``local_attention.LocalAttention(window_size=256, look_backward=1,
  look_forward=0 if causal else 1, exact_windowsize=True)`` (every query sees the keys within
  256 positions, 257 with its own: a true sliding window) vs
  ``attnkit.efficient.sliding_window_attention(window=257)`` (the same keys), n = 1024, 4096,
  16384, causal and not, fwd+bwd.
* ``lsh``: ``reformer_pytorch.LSHAttention(bucket_size=64, n_hashes=1, causal=…,
  attend_across_buckets=False)`` vs ``attnkit.efficient.lsh_attention(q, q, v, bucket_size=64,
  n_rounds=1)`` (shared QK, n/64 buckets in both; queries attend their own bucket in their
  chunk and the previous one), n = 2048, 8192, causal and not, fwd+bwd. The checked call uses
  the same rotations in both (later calls draw new ones in the peer); "agree" also gives both
  errors from exact shared-QK attention in float64.
* ``softcap``: ``ak.attention(score_mod=30·tanh(s/30))`` vs ``x_transformers.attend.Attend(
  softclamp_logits=True, logit_softclamp_value=30)`` and vs ``torch.compile(flex_attention)``
  with the same score_mod, n = 2048, 4096, 8192, fwd only (Flex has no CPU backward).
* ``additive``: ``ak.attention(score=ak.scores.Additive(64, 64, 256))`` vs the same score
  materialised (``score(q, k).softmax(-1) @ v``), H = 1, n = 512, 1024, 2048, fwd+bwd.
* ``decode``: greedy decoding of benchmarks/decode.py's model (256-d, 4 layers, rotary) with the
  KV cache vs recomputing the whole prefix per token, prompts 256 and 1024, 128 new tokens.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from peer_rows import BY_NAME, GIB, ROWS, Peer, Row

HERE = Path(__file__).resolve()
#: the docstring's pip line (one source for the docs section)
PIP = next(line.strip() for line in __doc__.splitlines() if "pip install --no-deps" in line)


# --- measuring --------------------------------------------------------------------------------


def release_and_reset_peak() -> None:
    """Give free heap memory back to the OS and restart the peak-RSS count (VmHWM) here."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the high-water mark (Linux >= 4.0)
        f.write("5")


def measure(payload: str) -> None:
    """Subprocess entry: one call at full size, reset the peak, then (unless baseline) a second
    call; print the peak RSS."""
    spec = json.loads(payload)
    torch.set_num_threads(spec["threads"])
    fn = BY_NAME[spec["row"]].build(spec["impl"], spec["cfg"])
    fn()
    release_and_reset_peak()
    if not spec["baseline"]:
        fn()
    print(common.maxrss_mib())


def malloc_env(args: argparse.Namespace) -> dict[str, str] | None:
    """With ``--mmap-threshold``, glibc serves every allocation from that size up by mmap and
    returns it to the OS when freed (a fixed threshold; the default one grows up to 32 MiB as
    large blocks are freed, and blocks below it stay in the heap, counted in the peak RSS)."""
    if args.mmap_threshold is None:
        return None
    return {"MALLOC_MMAP_THRESHOLD_": str(args.mmap_threshold)}


def max_abs(a: object, b: object) -> float:
    """Largest |a - b| over the tensors the two outputs share (a tuple's items pairwise)."""
    a_items = a if isinstance(a, tuple) else (a,)
    b_items = b if isinstance(b, tuple) else (b,)
    diffs = [
        (x.double() - y.double()).abs().max().item()
        for x, y in zip(a_items, b_items, strict=False)
        if isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape == y.shape
    ]
    return max(diffs) if diffs else math.nan


def errors(out: object, reference: Tensor) -> tuple[float, float]:
    """Largest and mean |out - reference| (``out``'s first tensor)."""
    diff = ((out[0] if isinstance(out, tuple) else out).double() - reference.double()).abs()
    return diff.max().item(), diff.mean().item()


def available(peer: Peer) -> bool:
    try:
        return peer.module is None or importlib.util.find_spec(peer.module) is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        return False


def fmt_ms(t: float | None) -> str:
    return "—" if t is None else f"{t * 1e3:.1f}" if t < 10 else f"{t:.1f} s"


def fmt_mib(m: float | None) -> str:
    return "—" if m is None else f"{m:.0f}" if m >= 10 else f"{m:.1f}"


def describe(cfg: dict) -> str:
    hidden = {"mode", "tiny", "new"}
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k not in hidden)


def run_config(row: Row, cfg: dict, args: argparse.Namespace, memory: bool) -> list[list[str]]:
    """Time (interleaved), check and (optionally) measure one configuration: one table row per
    peer."""
    notes: dict[str, str] = {}
    for impl, peer in row.peers.items():
        if not available(peer):
            notes[impl] = f"peer not installed (pip install {peer.pip})"
        elif (gib := row.peer_gib(impl, cfg)) > args.max_gib:
            notes[impl] = f"peer skipped: needs ~{gib:.0f} GiB (> --max-gib {args.max_gib:.0f})"
    fns: dict[str, Callable[[], object]] = {}
    outputs: dict[str, object] = {}
    for impl in ["attnkit", *(p for p in row.peers if p not in notes)]:
        try:
            fns[impl] = row.build(impl, cfg)
            outputs[impl] = row.check(impl, cfg) if row.check else fns[impl]()
        except Exception as error:  # a peer (or Flex's compiler) failing must not stop the rest
            print(f"{row.name} {cfg} {impl}: {error!r}", file=sys.stderr)
            fns.pop(impl, None)
            peer = row.peers.get(impl)
            if peer is not None and peer.pip and isinstance(error, ImportError):
                notes[impl] = f"peer not installed (pip install {peer.pip}): {error}"
            else:
                notes[impl] = f"failed: {type(error).__name__}: {str(error)[:80]}"
    if "attnkit" in notes:
        return [[describe(cfg), cfg.get("mode", ""), notes["attnkit"], *["—"] * 6]]
    big = cfg.get("n", 0) > 4096
    repeats = min(args.repeats, 2) if big else args.repeats
    if row.max_repeats:
        repeats = min(repeats, row.max_repeats)
    # the first call above warmed every function unless the outputs came from ``check``
    times = common.interleaved_medians(fns, repeats, warmup=1 if row.check else 0)
    mems: dict[str, float | None] = {}
    for impl in fns:
        spec = {"row": row.name, "cfg": cfg, "impl": impl, "threads": args.threads}
        mems[impl] = (
            common.peak_memory_mib(str(HERE), spec, timeout=7200, env=malloc_env(args))
            if memory
            else None
        )
    reference = row.reference(cfg) if row.reference else None
    out = []
    for impl, peer in row.peers.items():
        if impl in notes:
            agree = notes[impl]
        elif reference is not None:
            ours, theirs = (errors(outputs[i], reference) for i in ("attnkit", impl))
            agree = (
                f"{max_abs(outputs['attnkit'], outputs[impl]):.1e}; vs float64 exact: max "
                f"{ours[0]:.1e} / {theirs[0]:.1e}, mean {ours[1]:.1e} / {theirs[1]:.1e}"
            )
        else:
            agree = f"{max_abs(outputs['attnkit'], outputs[impl]):.1e}"
        peer_t = times.get(impl)
        out.append(
            [
                describe(cfg),
                cfg.get("mode", "fwd+bwd"),
                peer.label,
                fmt_ms(times["attnkit"]),
                fmt_ms(peer_t),
                "—" if peer_t is None else f"{times['attnkit'] / peer_t:.2f}",
                fmt_mib(mems.get("attnkit")),
                fmt_mib(mems.get(impl)),
                agree,
            ]
        )
        print(" | ".join(out[-1]), flush=True)
        NUMBERS.setdefault(row.name, []).append(
            {
                "cfg": cfg,
                "peer": impl,
                "t": times["attnkit"],
                "t_peer": peer_t,
                "mib": mems.get("attnkit"),
                "mib_peer": mems.get(impl),
                "skipped": notes.get(impl),
            }
        )
    return out


#: per row, the measured numbers behind its table (the targets are computed from them)
NUMBERS: dict[str, list[dict]] = {}


def _worst(
    numbers: dict, row: str, peer: str, keep=lambda cfg: True, memory: bool = False
) -> tuple[float, str] | None:
    """The largest attnkit/peer ratio of time (or memory) over a row's matching configurations,
    and the configuration it occurs at; ``None`` when nothing was measured."""
    key, peer_key = ("mib", "mib_peer") if memory else ("t", "t_peer")
    found = [
        (r[key] / r[peer_key], describe(r["cfg"]) + f", {r['cfg'].get('mode', 'fwd+bwd')}")
        for r in numbers.get(row, [])
        if r["peer"] == peer and keep(r["cfg"]) and r[key] and r[peer_key]
    ]
    return max(found) if found else None


def _not_run(numbers: dict, row: str, peer: str, keep=lambda cfg: True) -> list[str]:
    """The matching configurations of a row where the peer was not run, each with the reason
    (e.g. its estimated memory exceeds the machine's)."""
    return [
        f"{describe(r['cfg'])}, {r['cfg'].get('mode', 'fwd+bwd')}: {r['skipped']}"
        for r in numbers.get(row, [])
        if r["peer"] == peer and keep(r["cfg"]) and r.get("skipped")
    ]


#: for a target a row misses, what was measured to explain it (shown only while it is missed)
WHY_MISSED: dict[str, str] = {}


def measured_on(blocks: dict[str, list[str]]) -> dict[str, str]:
    """Each row's date, read from its table's "Measured YYYY-MM-DD" line: rows not measured
    in a run keep their table, so they keep their own date."""
    found = {}
    for name, lines in blocks.items():
        match = next((m for line in lines if (m := re.match(r"Measured (\S+?):", line))), None)
        if match:
            found[name] = match.group(1)
    return found


def targets(
    numbers: dict, dates: dict[str, str] | None = None
) -> list[tuple[str, str, bool | None, str, str | None]]:
    """The targets, each from the measured rows: (target, measured, met, why missed, the date
    its row was measured, from ``dates``, or None)."""
    out = []
    dates = dates or {}

    def add(
        text: str,
        worst: tuple[float, str] | None,
        limit: float,
        not_run: list[str] | None = None,
        *,
        row: str,
    ) -> None:
        if worst is None:
            out.append((text, "not measured", None, "", dates.get(row)))
        else:
            met = worst[0] <= limit
            why = "" if met else WHY_MISSED.get(text, "")
            measured = f"worst {worst[0]:.2f}x ({worst[1]})"
            if not_run:
                measured += "; the peer could not run at " + "; ".join(not_run)
            out.append((text, measured, met, why, dates.get(row)))

    weights = lambda cfg: cfg.get("weights") is True  # noqa: E731
    add(
        "18(a) MHA need_weights=True, time <= 1.1x torch",
        _worst(numbers, "mha", "torch", weights),
        1.1,
        row="mha",
    )
    add(
        "18(a) MHA need_weights=True, memory <= torch's",
        _worst(numbers, "mha", "torch", weights, memory=True),
        1.0,
        row="mha",
    )
    add(
        "18(b) return_weights, time <= the materialised formula",
        _worst(numbers, "weights", "naive"),
        1.0,
        row="weights",
    )
    at_2048 = lambda cfg: cfg.get("n") == 2048  # noqa: E731
    add(
        "18(b) return_weights at n=2048, <= 2.0x SDPA without weights",
        _worst(numbers, "weights", "sdpa", at_2048),
        2.0,
        row="weights",
    )
    dropout = lambda cfg: cfg.get("dropout", 0) > 0  # noqa: E731
    add(
        "18(c) encoder step, dropout 0.1, <= 1.05x torch",
        _worst(numbers, "encoder", "torch", dropout),
        1.05,
        row="encoder",
    )
    both = lambda cfg: cfg.get("mode") == "fwd+bwd"  # noqa: E731
    for align in ("sparsemax", "entmax15"):
        of = lambda cfg, align=align: both(cfg) and cfg.get("align") == align  # noqa: E731
        not_run = _not_run(numbers, "entmax", "entmax", of)
        add(
            f"18(d) {align} fwd+bwd, time <= entmax",
            _worst(numbers, "entmax", "entmax", of),
            1.0,
            not_run,
            row="entmax",
        )
        add(
            f"18(d) {align} fwd+bwd, memory <= entmax",
            _worst(numbers, "entmax", "entmax", of, memory=True),
            1.0,
            not_run,
            row="entmax",
        )
    add(
        "18(e) Nyström, time <= nystrom-attention",
        _worst(numbers, "nystrom", "peer"),
        1.0,
        row="nystrom",
    )
    causal = lambda cfg: cfg.get("causal") is True  # noqa: E731
    add(
        "18(e) causal LSH, time <= reformer-pytorch",
        _worst(numbers, "lsh", "peer", causal),
        1.0,
        row="lsh",
    )
    add(
        "18(e) causal LSH, memory <= 1.2x reformer-pytorch",
        _worst(numbers, "lsh", "peer", causal, memory=True),
        1.2,
        row="lsh",
    )
    add(
        "18(f) soft-capping score_mod fwd, time <= compiled Flex",
        _worst(numbers, "softcap", "flex"),
        1.0,
        row="softcap",
    )
    add(
        "18(f) soft-capping score_mod fwd, memory <= compiled Flex",
        _worst(numbers, "softcap", "flex", memory=True),
        1.0,
        row="softcap",
    )
    return out


HEADER = [
    "configuration",
    "pass",
    "peer",
    "attnkit ms",
    "peer ms",
    "attnkit/peer",
    "attnkit MiB",
    "peer MiB",
    "agree (max abs Δ)",
]


def run_row(row: Row, args: argparse.Namespace) -> list[str]:
    load = os.getloadavg()[0]
    rows = []
    every = row.configs(args.quick)
    configs = [c for c in every if c.get("n", 0) <= (args.max_n or math.inf)]
    for i, cfg in enumerate(configs):
        memory = not args.no_memory and (not args.quick or i == 0)
        rows += run_config(row, cfg, args, memory)
    repeats = min(args.repeats, row.max_repeats or args.repeats)
    how = (
        f"Measured {datetime.date.today()}: medians of {repeats} interleaved rounds (at most 2 "
        f"above n = 4096), {args.threads} thread(s), load average {load:.1f} at the start; "
        "fwd+bwd from a dense gradient"
    )
    if args.mmap_threshold is not None:
        how += f"; memory with MALLOC_MMAP_THRESHOLD_={args.mmap_threshold}"
    if len(configs) < len(every):
        how += f"; only n <= {args.max_n} this time (`--max-n`)"
    lines = [f"### {row.title}", "", how + ".", "", common.table(HEADER, rows), ""]
    if row.note:
        lines += [row.note, ""]
    return lines


RAW = HERE.parent / "results" / "peers.json"


def section(blocks: dict[str, list[str]]) -> list[str]:
    intro = (
        "attnkit against the implementation a user would otherwise reach for, each pair on the "
        "same inputs and weights in one process, interleaved (medians; each row says how many "
        "rounds, threads and what load). attnkit/peer is the ratio of "
        "times: < 1 = attnkit faster. Memory: peak RSS of one warm call beyond the RSS before it, "
        "in a fresh process per implementation. agree: the largest absolute difference of "
        "attnkit's output from the peer's (or from a float64 reference, where the peer differs "
        "by design). Configurations of each pair: the docstring of benchmarks/peers.py. "
        "Reproduce: install the peers (only for this benchmark; `--no-deps` keeps an older "
        f"torch from being upgraded): `{PIP}`, then `python benchmarks/peers.py "
        "[--only ROW,...] [--threads N]`."
    )
    out = ["## Against the libraries users would otherwise pick", "", intro, ""]
    for row in ROWS:
        out += blocks.get(row.name, [])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repetition")
    parser.add_argument("--only", type=lambda s: s.split(","), help="comma-separated rows")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, help="interleaved rounds (default 5; quick 1)")
    parser.add_argument("--no-memory", action="store_true", help="times only")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--max-n", type=int, help="skip configurations with a larger n")
    parser.add_argument(
        "--mmap-threshold",
        type=int,
        help="glibc MALLOC_MMAP_THRESHOLD_ (bytes) for the memory processes: large blocks go "
        "back to the OS when freed, so the peak RSS is closer to the tensors' (not the default)",
    )
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    parser.add_argument(
        "--max-gib",
        type=float,
        default=0.8 * ram,
        help="skip a peer whose estimated peak exceeds this (default 80%% of RAM)",
    )
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    if args.only and (unknown := set(args.only) - set(BY_NAME)):
        raise SystemExit(f"unknown rows {sorted(unknown)}; expected some of {list(BY_NAME)}")
    torch.set_num_threads(args.threads)
    args.repeats = args.repeats or (1 if args.quick else 5)
    print(f"Measured on: {common.machine()}.\n", flush=True)
    blocks = {}
    for row in ROWS:
        if args.only and row.name not in args.only:
            continue
        print(f"## {row.name}: {row.title}", flush=True)
        blocks[row.name] = run_row(row, args)
        print("\n".join(blocks[row.name]), flush=True)
    if args.quick or args.no_write:
        return
    saved = json.loads(RAW.read_text()) if RAW.exists() else {}
    numbers = saved.pop("_numbers", {})
    saved.update(blocks)  # rows not measured now keep their last measurement
    numbers.update(NUMBERS)
    RAW.write_text(json.dumps({**saved, "_numbers": numbers}, indent=1))
    lines = section(saved)
    common.save_section(
        "peers", lines, targets(numbers, measured_on(saved)), note=f"{args.threads} thread(s)."
    )
    print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
