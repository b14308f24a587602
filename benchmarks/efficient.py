"""Efficient attention: forward+backward time and peak memory of each kind against exact attention
(attnkit's engine ``ak.attention`` and raw ``F.scaled_dot_product_attention``).

    python benchmarks/efficient.py            # n = 1024, 4096, 16384, 32768; H = 8, d = 64, fp32
    python benchmarks/efficient.py --quick    # n = 256, 1024, one repetition: checks the script

Each kind runs with the hyperparameters of its registered name (``attention="NAME"``: the kind
class's defaults, see src/attnkit/efficient/__init__.py); Linformer and Synthesizer, whose registered modules have a
fixed maximum length, are built with ``max_length = n``. Times are medians of interleaved
repetitions in one run (A, B, C, A, B, C, …; see common.py), so compare ratios, never absolute
times across runs; memory is the peak RSS (VmHWM) of a fresh process running one forward+backward,
minus that of a baseline process that does everything but the call. The full run writes its
tables into docs/benchmarks.md (section "Efficient attention", through the shared results file
benchmarks/results/benchmarks.json, which keeps the other scripts' sections) and the plot
docs/img/efficient.png.

Targets, for every linear-complexity kind: peak memory at n = 16384 at most 5x that at
n = 4096, and forward+backward at n = 16384 at least 5x faster than exact SDPA.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak
from attnkit.core.kinds import create_kind
from attnkit.efficient.linformer import LinformerAttention
from attnkit.efficient.performer import PerformerAttention
from attnkit.efficient.synthesizer import SynthesizerAttention

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
PLOT = ROOT / "docs" / "img" / "efficient.png"
D, HEADS = 64, 8
#: the largest n of the quadratic Synthesizer (its scores and, random, its parameters are n x n)
SYNTHESIZER_MAX_N = 4096


@dataclass(frozen=True)
class Kind:
    """One benchmarked attention: how to build it for length ``n``, and its cost class."""

    name: str
    build: Callable[[int], Callable[..., torch.Tensor]]  # n -> f(q, k, v, causal) -> context
    complexity: str  # "O(n²)", "O(n)", "O(n log n)"
    causal: bool = True  # has a causal form
    max_n: int | None = None

    @property
    def linear(self) -> bool:
        return self.complexity != "O(n²)"


def _registered(name: str) -> Callable[[int], Callable[..., torch.Tensor]]:
    kind = create_kind(name)
    return lambda n: lambda q, k, v, causal: kind(q, k, v, causal=causal).context


def _module(make: Callable[[int], torch.nn.Module]) -> Callable[[int], Callable[..., torch.Tensor]]:
    def build(n: int) -> Callable[..., torch.Tensor]:
        torch.manual_seed(0)
        module = make(n)
        return lambda q, k, v, causal: module(q, k, v, causal=causal).context

    return build


KINDS = [
    Kind(
        "exact (attnkit)",
        lambda n: lambda q, k, v, causal: ak.attention(q, k, v, causal=causal).context,
        "O(n²)",
    ),
    Kind(
        "exact (SDPA)",
        lambda n: lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "O(n²)",
    ),
    Kind("sliding_window", _registered("sliding_window"), "O(n)"),
    Kind("longformer", _registered("longformer"), "O(n)"),
    Kind("bigbird", _registered("bigbird"), "O(n)"),
    Kind("linear", _registered("linear"), "O(n)"),
    Kind("performer", _module(lambda n: PerformerAttention(D)), "O(n)"),
    Kind("nystrom", _registered("nystrom"), "O(n)", causal=False),
    Kind("lsh", _registered("lsh"), "O(n log n)"),
    Kind(
        "linformer",
        _module(lambda n: LinformerAttention(max_length=n)),
        "O(n)",
        causal=False,
    ),
    Kind(
        "synthesizer_dense",
        _module(lambda n: SynthesizerAttention("dense", n, HEADS, D)),
        "O(n²)",
        max_n=SYNTHESIZER_MAX_N,
    ),
]
BY_NAME = {kind.name: kind for kind in KINDS}
_DEFAULT = {name: create_kind(name) for name in ("sliding_window", "bigbird", "performer",
            "nystrom", "lsh", "linformer")}  # fmt: skip
SETTINGS = (
    f"window {_DEFAULT['sliding_window'].window} (Longformer: + the first token global), BigBird "
    f"blocks of {_DEFAULT['bigbird'].block} (3 window, 1 global, 2 random), Performer "
    f"{_DEFAULT['performer'].num_features} features, Nyström {_DEFAULT['nystrom'].landmarks} "
    f"landmarks, LSH chunks of {_DEFAULT['lsh'].bucket_size} with 1 round, Linformer k = "
    f"{_DEFAULT['linformer'].projected_length}, dense Synthesizer (hidden = d)"
)


def runner(spec: dict) -> Callable[[], object]:
    """A zero-argument forward+backward of one kind on one configuration."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, spec["n"], D, generator=g).requires_grad_() for _ in range(3))
    fn = BY_NAME[spec["kind"]].build(spec["n"])

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v, spec["causal"]).sum().backward()

    return forward_backward


def measure(payload: str) -> None:
    """Subprocess entry: run one configuration once (or only its set-up) and print peak RSS."""
    spec = json.loads(payload)
    fn = runner(spec)
    runner({**spec, "n": 128})()  # warm-up of libraries and thread pools, in both processes
    if not spec["baseline"]:
        fn()
    print(common.maxrss_mib())


def fmt(x: float | None, scale: float = 1.0) -> str:
    if x is None:
        return "—"
    x *= scale
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def run(sizes: list[int], repeats: int, causal: bool, args) -> dict:
    """Times (s) and memories (MiB) of every kind at every size: {name: {n: value}}."""
    kinds = [
        k for k in KINDS if (k.causal or not causal) and (not args.kinds or k.name in args.kinds)
    ]
    times: dict[str, dict[int, float]] = {k.name: {} for k in kinds}
    mems: dict[str, dict[int, float | None]] = {k.name: {} for k in kinds}
    for n in sizes:
        chosen = [
            k
            for k in kinds
            if (k.max_n is None or n <= k.max_n)
            and not (k.name.startswith("exact") and n > args.max_exact_n)
        ]
        fns = {k.name: runner({"kind": k.name, "n": n, "causal": causal}) for k in chosen}
        # above 4096 the code paths are warm from the smaller sizes; a warm-up at full size would
        # double the minutes exact attention takes there
        big = n > 4096
        measured = common.interleaved_medians(fns, 1 if big else repeats, warmup=0 if big else 1)
        for name, t in measured.items():
            times[name][n] = t
            if not args.no_memory:
                spec = {"kind": name, "n": n, "causal": causal}
                mems[name][n] = common.peak_memory_mib(str(HERE), spec, timeout=3600)
        print(
            f"n={n} causal={causal}: "
            + ", ".join(f"{name} {t * 1e3:.0f} ms" for name, t in measured.items()),
            file=sys.stderr,
            flush=True,
        )
    return {"times": times, "mems": mems}


def tables(result: dict, sizes: list[int], pair: tuple[int, int], speed_n: int) -> list[str]:
    times, mems = result["times"], result["mems"]
    sdpa = times.get("exact (SDPA)", {})
    header = ["kind", "cost"] + [f"n={n}" for n in sizes]
    rows_t, rows_m, rows_r = [], [], []
    for name in times:
        kind = BY_NAME[name]
        rows_t.append([name, kind.complexity] + [fmt(times[name].get(n), 1e3) for n in sizes])
        rows_m.append([name, kind.complexity] + [fmt(mems[name].get(n)) for n in sizes])
        speed = [
            f"{sdpa[n] / times[name][n]:.2f}x" if n in sdpa and n in times[name] else "—"
            for n in sizes
        ]
        small, large = (mems[name].get(m) for m in pair)
        growth = f"{large / small:.2f}x" if small and large is not None else "—"
        rows_r.append([name, kind.complexity, *speed, growth])
    return [
        "Forward+backward time, ms:",
        "",
        common.table(header, rows_t),
        "",
        "Peak memory beyond the inputs, MiB:",
        "",
        common.table(header, rows_m),
        "",
        f"Ratios: speed-up over exact SDPA (SDPA time / this kind's time) at each n, and memory "
        f"growth from n={pair[0]} to n={pair[1]} (linear cost: about 4x; quadratic: about 16x, "
        "less where fixed costs dominate):",
        "",
        common.table(
            ["kind", "cost", *(f"speed-up n={n}" for n in sizes), f"MiB {pair[1]}/{pair[0]}"],
            rows_r,
        ),
        "",
    ]


def targets(result: dict, pair: tuple[int, int], speed_n: int) -> list:
    times, mems = result["times"], result["mems"]
    out = []
    sdpa = times.get("exact (SDPA)", {}).get(speed_n)
    linear = [name for name in times if BY_NAME[name].linear]
    growth = {}
    for name in linear:
        small, large = (mems[name].get(m) for m in pair)
        growth[name] = None if not small or large is None else large / small
    known = {k: g for k, g in growth.items() if g is not None}
    worst = max(known, key=known.__getitem__) if known else None
    out.append(
        (
            f"(efficient) peak memory at n={pair[1]} <= 5x that at n={pair[0]}, every "
            "linear-complexity kind",
            "—"
            if worst is None
            else f"max {known[worst]:.2f}x ({worst}); "
            + ", ".join(f"{k} {g:.2f}x" for k, g in known.items()),
            None if len(known) < len(linear) else known[worst] <= 5,
        )
    )
    speeds = {
        name: sdpa / times[name][speed_n] for name in linear if sdpa and speed_n in times[name]
    }
    slowest = min(speeds, key=speeds.__getitem__) if speeds else None
    out.append(
        (
            f"(efficient) fwd+bwd at n={speed_n} >= 5x faster than exact SDPA, every "
            "linear-complexity kind",
            "—"
            if slowest is None
            else f"min {speeds[slowest]:.1f}x ({slowest}); "
            + ", ".join(f"{k} {s:.1f}x" for k, s in speeds.items()),
            None if len(speeds) < len(linear) else speeds[slowest] >= 5,
        )
    )
    return out


def plot(result: dict, sizes: list[int], path: Path, title: str) -> None:
    """Time and memory against n, log-log, one line per kind (exact attention dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label, scale in (
        (axes[0], "times", "forward+backward time, ms", 1e3),
        (axes[1], "mems", "peak memory beyond inputs, MiB", 1.0),
    ):
        for name, values in result[key].items():
            ns = [n for n in sizes if values.get(n) is not None]
            if not ns:
                continue
            style = {"exact (attnkit)": "--", "exact (SDPA)": ":"}.get(
                name, "-." if BY_NAME[name].complexity == "O(n²)" else "-"
            )
            ax.plot(
                ns,
                [max(values[n] * scale, 1e-2) for n in ns],
                style,
                marker="o",
                color="black" if name.startswith("exact") else None,
                alpha=0.9,
                label=name,
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="n = 256, 1024; 1 repetition")
    parser.add_argument("--causal", action="store_true", help="also the causal pass")
    parser.add_argument("--kinds", type=lambda s: s.split(","), help="comma-separated subset")
    parser.add_argument("--max-exact-n", type=int, default=32768, help="skip exact above this n")
    parser.add_argument("--no-memory", action="store_true", help="times only")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--plot", type=Path, help=f"plot path (default {PLOT.relative_to(ROOT)})")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    if args.kinds and (unknown := set(args.kinds) - set(BY_NAME)):
        raise SystemExit(f"unknown kinds {sorted(unknown)}; expected some of {list(BY_NAME)}")

    if args.quick:
        sizes, repeats, pair, speed_n = [256, 1024], 1, (256, 1024), 1024
    else:
        sizes, repeats, pair, speed_n = [1024, 4096, 16384, 32768], 3, (4096, 16384), 16384
    machine = common.machine()
    print(f"Measured on: {machine}.\n", flush=True)
    setup = (
        f"B=1, H={HEADS}, d={D}, fp32, forward+backward of the attention alone (inputs q, k, v "
        f"requiring grad). Settings: {SETTINGS}."
    )
    print(setup + "\n")
    lines = [
        "## Efficient attention against exact attention",
        "",
        f"{setup} Reproduce: `python benchmarks/efficient.py`. Exact attention is "
        "attnkit's engine (`ak.attention`) and raw `F.scaled_dot_product_attention`; Synthesizer "
        f"is quadratic by design and stops at n={SYNTHESIZER_MAX_N}.",
        "",
        f"![time and memory against n](img/{PLOT.name})",
        "",
    ]
    all_targets = []
    results = {}
    for causal in (False, True) if args.causal else (False,):
        result = run(sizes, repeats, causal, args)
        results["causal" if causal else "non-causal"] = result
        section = tables(result, sizes, pair, speed_n)
        lines += [f"### {'Causal' if causal else 'Non-causal'}", "", *section]
        print("\n".join(section), flush=True)
        if not causal:
            all_targets = targets(result, pair, speed_n)
            if args.quick:  # the targets are set at n = 4096 / 16384, not these sizes
                all_targets = [(f"[quick sizes] {t}", v, ok) for t, v, ok in all_targets]
            path = args.plot or (
                Path(tempfile.gettempdir()) / "efficient-quick.png" if args.quick else PLOT
            )
            plot(result, sizes, path, f"non-causal fwd+bwd, H={HEADS}, d={D}, fp32\n{machine}")
            print(f"plot: {path}")
    rows = [
        [t, v, "—" if ok is None else ("met" if ok else "**not met**")] for t, v, ok in all_targets
    ]
    print(common.table(["target", "measured", "status"], rows))
    if not args.quick and not args.no_write:
        common.save_section(
            "efficient", lines, all_targets, note="Times are medians; compare the ratios."
        )
        raw = ROOT / "benchmarks" / "results" / "efficient.json"
        raw.write_text(json.dumps({"machine": machine, "sizes": sizes, **results}, indent=1))
        print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
