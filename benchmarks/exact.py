"""Exact attention: attnkit's engine against raw SDPA, the naive materialised formula and Flex.

    python benchmarks/exact.py            # the full tables (long: tens of minutes on 2 cores)
    python benchmarks/exact.py --quick    # smaller sizes, to check the script itself

Prints markdown tables and writes them, with the machine's description and the targets of the
exact-engine issue, to docs/benchmarks.md. Times are medians of interleaved repetitions in one
run (compare ratios, not absolute times across runs); peak memory is measured per configuration
in fresh subprocesses (see common.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak

HERE = Path(__file__).resolve()
D, HEADS, D_HIDDEN = 64, 8, 256


#: the scores the memory and scores sections measure (``--scores``)
ONLY_SCORES: set[str] = set()
#: the alignments the scores section measures (``--aligns``)
ONLY_ALIGNS: set[str] = set()

SCORE_NAMES = (
    "scaled_dot",
    "dot",
    "general",
    "biased_general",
    "cosine",
    "activated_general",
    "location",
    "euclidean",
    "additive",
)


def make_score(name: str, d_hidden: int = D_HIDDEN) -> ak.scores.Score:
    torch.manual_seed(0)
    return {
        "scaled_dot": lambda: ak.scores.ScaledDot(),
        "additive": lambda: ak.scores.Additive(D, D, d_hidden),
        "general": lambda: ak.scores.General(D, D),
        "biased_general": lambda: ak.scores.BiasedGeneral(D, D),
        "activated_general": lambda: ak.scores.ActivatedGeneral(D, D),
        "cosine": lambda: ak.scores.Cosine(),
        "euclidean": lambda: ak.scores.Euclidean(),
        "dot": lambda: ak.scores.Dot(),
        "location": lambda: ak.scores.Location(D, 1 << 15),
    }[name]()


def naive(q, k, v, score, align: str = "softmax", causal: bool = False, score_mod=None):
    """The materialised formula, as a user would write it without attnkit."""
    e = score(q, k)
    if score_mod is not None:
        n = e.shape[-1]
        i = torch.arange(e.shape[-2]).view(-1, 1)
        j = torch.arange(n).view(1, -1)
        e = score_mod(e, 0, 0, i, j)
    if causal:
        m, n = e.shape[-2:]
        e = e.masked_fill(torch.ones(m, n, dtype=torch.bool).tril(n - m).logical_not(), -math.inf)
    if align == "softmax":
        a = e.softmax(-1)
    else:
        import entmax

        a = getattr(entmax, align)(e, dim=-1)
    return a @ v


def softcap(s, b, h, i, j):
    return 30 * torch.tanh(s / 30)


def inputs(n: int, heads: int, grad: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, n, D, generator=g).requires_grad_(grad) for _ in range(3)]


def runner(impl: str, spec: dict) -> Callable[[], object]:
    """A zero-argument callable running one implementation on one configuration."""
    n, heads, grad = spec["n"], spec["heads"], spec["mode"] == "fwd+bwd"
    q, k, v = inputs(n, heads, grad)
    score = make_score(spec["score"], spec.get("d_hidden", D_HIDDEN))
    align, causal = spec.get("align", "softmax"), spec.get("causal", False)
    score_mod = softcap if spec.get("score_mod") else None
    if impl == "attnkit":
        weights = spec.get("weights", False)

        def call():
            out = ak.attention(
                q,
                k,
                v,
                score=score,
                align=align,
                causal=causal,
                score_mod=score_mod,
                return_weights=weights,
            )
            return out.context
    elif impl == "sdpa":

        def call():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    elif impl == "naive":

        def call():
            return naive(q, k, v, score, align, causal, score_mod)
    elif impl == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        flex = torch.compile(flex_attention, dynamic=False)

        def call():
            return flex(q, k, v, score_mod=score_mod)
    elif impl == "write":  # the cost of writing a [B, H, M, N] tensor once

        def call():
            return torch.empty(1, heads, n, n).fill_(1.0)
    else:
        raise ValueError(impl)

    if not grad:

        def forward():
            with torch.no_grad():
                return call()

        return forward

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        call().sum().backward()

    return forward_backward


def measure(payload: str) -> None:
    """Subprocess entry: run one configuration once (or only its set-up) and print ru_maxrss."""
    spec = json.loads(payload)
    fn = runner(spec["impl"], spec)
    tiny = runner(spec["impl"], {**spec, "n": 8})
    tiny()  # warm-up of the libraries and thread pools, in both processes
    if not spec["baseline"]:
        fn()
    print(common.maxrss_mib())


def fmt_time(t: float | None) -> str:
    return "—" if t is None else f"{t * 1e3:.1f}"


def fmt_mem(m: float | None) -> str:
    return "—" if m is None else f"{m:.0f}"


#: the naive formula's peak over its score tensors' size, per alignment (measured at n=8192 and
#: 4096: sparsemax 16.9 GB, 1.5-entmax 6.8 GB, for 6.4 and 1.6 GB of fwd+bwd score tensors)
NAIVE_ALIGN_FACTOR = {"sparsemax": 2.7, "entmax15": 4.3}
#: the naive formula is not run beyond this (the machine has 24 GiB; a timing run that exceeds
#: it is killed with the whole script)
NAIVE_LIMIT = 20 * 2**30


def naive_bytes(spec: dict) -> float:
    """Rough peak of the naive formula, to skip what cannot fit in memory."""
    per = spec["heads"] * spec["n"] ** 2 * 4 * NAIVE_ALIGN_FACTOR.get(spec.get("align", ""), 1)
    if spec["score"] == "additive":
        per *= spec.get("d_hidden", D_HIDDEN)
    return per * (3 if spec["mode"] == "fwd+bwd" else 2)


def time_configs(specs: list[dict], impls: list[str], repeats: int) -> dict:
    fns = {}
    for impl in impls:
        spec = {**specs[0], "impl": impl}
        if impl == "naive" and naive_bytes(spec) > NAIVE_LIMIT:
            continue
        fns[impl] = runner(impl, spec)
    return common.interleaved_medians(fns, repeats)


def section_scaled_dot(sizes: list[int], repeats: int, quick: bool) -> tuple[list[str], list]:
    """scaled_dot: attnkit vs raw SDPA vs the naive formula; target (a)."""
    out: list[str] = []
    targets: list[tuple[str, str, bool | None]] = []
    # 1. scaled_dot: attnkit vs raw SDPA vs the naive formula.
    rows = []
    ratios_a = []
    for n in sizes:
        for causal in (False, True):
            for mode in ("fwd", "fwd+bwd"):
                spec = {
                    "n": n,
                    "heads": HEADS,
                    "score": "scaled_dot",
                    "causal": causal,
                    "mode": mode,
                }
                reps = repeats if n <= 4096 else 2
                times = time_configs([spec], ["attnkit", "sdpa", "naive"], reps)
                mems = {
                    impl: common.peak_memory_mib(str(HERE), {**spec, "impl": impl})
                    if impl in times
                    else None
                    for impl in ("attnkit", "sdpa", "naive")
                }
                ratio = times["sdpa"] / times["attnkit"]
                if mode == "fwd+bwd" and 1024 <= n <= 8192:
                    ratios_a.append(ratio)
                rows.append(
                    [
                        str(n),
                        "yes" if causal else "no",
                        mode,
                        fmt_time(times["attnkit"]),
                        fmt_time(times["sdpa"]),
                        fmt_time(times.get("naive")),
                        f"{ratio:.2f}",
                        fmt_mem(mems["attnkit"]),
                        fmt_mem(mems["sdpa"]),
                        fmt_mem(mems["naive"]),
                    ]
                )
                print(rows[-1], flush=True)
    out += [
        "## scaled_dot (B=1, H=8, d=64, fp32)",
        "",
        common.table(
            [
                "n",
                "causal",
                "pass",
                "attnkit ms",
                "SDPA ms",
                "naive ms",
                "SDPA/attnkit speed",
                "attnkit MiB",
                "SDPA MiB",
                "naive MiB",
            ],
            rows,
        ),
        "",
    ]
    if ratios_a:
        targets.append(
            (
                "(a) scaled_dot via ak.attention, n=1024–8192 fwd+bwd: >= 0.95x SDPA's speed",
                f"min {min(ratios_a):.2f}x",
                min(ratios_a) >= 0.95,
            )
        )
    return out, targets


def section_scores(sizes: list[int], repeats: int, quick: bool) -> tuple[list[str], list]:
    """Other scores and alignments vs the naive formula; target (b)."""
    out: list[str] = []
    targets: list[tuple[str, str, bool | None]] = []
    # 2. Other scores and alignments vs the naive formula.
    rows = []
    others = [
        ("additive", "softmax", 1),
        ("general", "softmax", HEADS),
        ("cosine", "softmax", HEADS),
        ("scaled_dot", "sparsemax", HEADS),
        ("scaled_dot", "entmax15", HEADS),
    ]
    for score, align, heads in [o for o in others if o[0] in ONLY_SCORES and o[1] in ONLY_ALIGNS]:
        # the sizes: n = 512 ... 8192 (additive's eager fwd+bwd at 8192 with d_w=256 is
        # a few minutes per run here; the naive formula is skipped where it needs over NAIVE_LIMIT)
        for n in [n for n in sizes if n <= 8192]:
            spec = {"n": n, "heads": heads, "score": score, "align": align, "mode": "fwd+bwd"}
            times = time_configs([spec], ["attnkit", "naive"], max(2, repeats - 2))
            mems = {
                impl: common.peak_memory_mib(str(HERE), {**spec, "impl": impl})
                if impl in times
                else None
                for impl in ("attnkit", "naive")
            }
            rows.append(
                [
                    score,
                    align,
                    str(heads),
                    str(n),
                    fmt_time(times["attnkit"]),
                    fmt_time(times.get("naive")),
                    fmt_mem(mems["attnkit"]),
                    fmt_mem(mems["naive"]),
                ]
            )
            print(rows[-1], flush=True)
            if score == "additive" and n == 2048:
                ok = (
                    mems["naive"] is not None
                    and mems["attnkit"] is not None
                    and mems["attnkit"] <= mems["naive"] / 10
                    and times["attnkit"] <= times["naive"]
                )
                targets.append(
                    (
                        "(b) additive n=2048 d_w=256 fwd+bwd: memory <= 1/10 naive, time <= naive",
                        f"{fmt_mem(mems['attnkit'])} vs {fmt_mem(mems['naive'])} MiB, "
                        f"{fmt_time(times['attnkit'])} vs {fmt_time(times.get('naive'))} ms",
                        ok,
                    )
                )
    out += [
        "## Other scores and alignments (fwd+bwd, B=1, d=64; additive d_w=256 with H=1, "
        "because the naive formula needs H·n²·d_w·4 bytes)",
        "",
        common.table(
            ["score", "align", "H", "n", "attnkit ms", "naive ms", "attnkit MiB", "naive MiB"], rows
        ),
        "",
    ]
    return out, targets


#: the eager tiled fwd+bwd of the additive score at n=16384 (1.4e11 hidden elements, d_w=64)
#: takes about half an hour on these 2 cores, longer when they are shared
MEMORY_TIMEOUT_S = 4 * 3600


def section_memory(sizes: list[int], repeats: int, quick: bool) -> tuple[list[str], list]:
    """Every score with softmax at the largest n: peak memory of fwd+bwd; target (c)."""
    out: list[str] = []
    targets: list[tuple[str, str, bool | None]] = []
    rows = []
    for score in [s for s in SCORE_NAMES if s in ONLY_SCORES]:
        n = sizes[-1]
        spec = {
            "n": n,
            "heads": HEADS,
            "score": score,
            "mode": "fwd+bwd",
            "impl": "attnkit",
            "d_hidden": 64,
        }
        mem = common.peak_memory_mib(str(HERE), spec, timeout=MEMORY_TIMEOUT_S)
        rows.append([score, str(n), fmt_mem(mem)])
        print(rows[-1], flush=True)
    out += [
        "## Every score with softmax, fwd+bwd, H=8, d=64 (additive d_w=64)",
        "",
        common.table(["score", "n", "peak MiB beyond inputs"], rows),
        "",
    ]
    targets.append(memory_target(rows))
    return out, targets


def memory_target(rows: list[list[str]]) -> tuple[str, str, bool]:
    """Target (c) from the memory table's rows ``[score, n, MiB]``."""
    n = max(int(r[1]) for r in rows)
    mib = {r[0]: (math.inf if r[2] == "—" else float(r[2])) for r in rows if int(r[1]) == n}
    worst = max(mib.values())
    return (
        f"(c) every score, n={n}, fwd+bwd: <= 512 MiB beyond the inputs",
        f"max {worst:.0f} MiB over " + ", ".join(f"{s} {m:.0f}" for s, m in mib.items()),
        worst <= 512 and all(s in mib for s in SCORE_NAMES),
    )


def section_targets(sizes: list[int], repeats: int, quick: bool) -> tuple[list[str], list]:
    """Targets (d)-(g): weights on demand, causal skipping, dot-form scores, Flex."""
    out: list[str] = []
    targets: list[tuple[str, str, bool | None]] = []
    # 4. (d) weights on demand, (e) causal block skipping, (f) dot-form scores on SDPA, (g) Flex.
    n4, n8 = (1024, 1024) if quick else (4096, 8192)
    base = {"n": n4, "heads": HEADS, "score": "activated_general", "mode": "fwd"}
    t = common.interleaved_medians(
        {
            "plain": runner("attnkit", base),
            "weights": runner("attnkit", {**base, "weights": True}),
            "write": runner("write", base),
        },
        repeats,
    )
    ok = t["weights"] <= 2.5 * t["plain"] + t["write"]
    targets.append(
        (
            f"(d) return_weights=True (activated_general, n={n4}): <= 2.5x without + write time",
            f"{fmt_time(t['weights'])} vs 2.5·{fmt_time(t['plain'])} + {fmt_time(t['write'])} ms",
            ok,
        )
    )

    spec = {"n": n8, "heads": HEADS, "score": "scaled_dot", "mode": "fwd", "score_mod": True}
    t = common.interleaved_medians(
        {"full": runner("attnkit", spec), "causal": runner("attnkit", {**spec, "causal": True})},
        max(2, repeats - 2),
    )
    targets.append(
        (
            f"(e) tiled causal forward at n={n8} (soft-capping score_mod): <= 0.6x non-causal",
            f"{t['causal'] / t['full']:.2f}x",
            t["causal"] / t["full"] <= 0.6,
        )
    )

    for score in ("general", "biased_general", "cosine"):
        spec = {"n": n4, "heads": HEADS, "score": score, "mode": "fwd+bwd"}
        t = common.interleaved_medians(
            {
                "attnkit": runner("attnkit", spec),
                "sdpa": runner("sdpa", {**spec, "score": "scaled_dot"}),
            },
            repeats,
        )
        r = t["sdpa"] / t["attnkit"]
        targets.append(
            (f"(f) {score} at n={n4} fwd+bwd: >= 0.9x SDPA's speed", f"{r:.2f}x", r >= 0.9)
        )

    spec = {"n": n4, "heads": HEADS, "score": "scaled_dot", "mode": "fwd", "score_mod": True}
    try:
        t = common.interleaved_medians(
            {
                "attnkit": runner("attnkit", spec),
                "flex": runner("flex", spec),
                "naive": runner("naive", spec),
            },
            repeats,
        )
        r = t["flex"] / t["attnkit"]
        targets.append(
            (
                f"(g) tiled soft-capping score_mod at n={n4} fwd: >= 1.0x compiled Flex",
                f"{r:.2f}x (attnkit {fmt_time(t['attnkit'])}, Flex {fmt_time(t['flex'])}, "
                f"naive {fmt_time(t['naive'])} ms)",
                r >= 1.0,
            )
        )
    except Exception as error:  # compiled Flex needs a working inductor C++ toolchain
        targets.append(
            ("(g) tiled score_mod vs compiled Flex", f"Flex did not run: {error!r:.120}", None)
        )
    return out, targets


SECTIONS = {
    "scaled_dot": section_scaled_dot,
    "scores": section_scores,
    "memory": section_memory,
    "targets": section_targets,
}


def parse_table(lines: list[str]) -> tuple[list[str], list[list[str]]] | None:
    """The header and rows of the markdown table among a section's lines (None if it has none)."""
    for line in lines:
        if line.startswith("| "):
            cells = [[c.strip() for c in row.strip("|").split("|")] for row in line.splitlines()]
            return cells[0], cells[2:]
    return None


def merge_saved(name: str, lines: list[str], targets: list, keys: int) -> tuple[list[str], list]:
    """``lines`` with the rows of the saved section ``name`` that this run did not measure (rows
    match by their first ``keys`` cells), sorted by those cells; saved targets not measured again
    are kept too. For measuring some sizes of a section without re-running the rest."""
    saved = json.loads(common.RESULTS.read_text()).get(name) if common.RESULTS.exists() else None
    new, old = parse_table(lines), parse_table(saved["lines"]) if saved else None
    if new is None or old is None or new[0] != old[0]:
        return lines, targets
    header, rows = new
    measured = {tuple(r[:keys]) for r in rows}
    rows = rows + [r for r in old[1] if tuple(r[:keys]) not in measured]
    groups: list[tuple[str, ...]] = []
    for r in old[1] + rows:  # the saved order of the groups (score, align, ...), then n
        if tuple(r[: keys - 1]) not in groups:
            groups.append(tuple(r[: keys - 1]))
    rows.sort(key=lambda r: (groups.index(tuple(r[: keys - 1])), int(r[keys - 1])))
    lines = [common.table(header, rows) if line.startswith("| ") else line for line in lines]
    names = {t[0] for t in targets}
    return lines, targets + [t for t in saved["targets"] if t[0] not in names]


#: cells that identify a row of each section's table (the last one is n), for --merge
ROW_KEYS = {"scaled_dot": 3, "scores": 4, "memory": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--scores", help="comma-separated scores (memory, scores sections)")
    parser.add_argument("--aligns", help="comma-separated alignments (scores section)")
    parser.add_argument("--sizes", help="comma-separated n to measure (default: 512 ... 16384)")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the saved rows of the sections' tables that this run does not measure",
    )
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    sizes = [512, 1024] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    ONLY_SCORES.update(args.scores.split(",") if args.scores else SCORE_NAMES)
    ONLY_ALIGNS.update(
        args.aligns.split(",") if args.aligns else ("softmax", "sparsemax", "entmax15")
    )
    if args.sizes:
        sizes = sorted(int(n) for n in args.sizes.split(","))
    repeats = 3 if args.quick else 5
    for name in args.sections.split(","):
        if name not in SECTIONS:
            raise SystemExit(f"unknown section {name!r}; expected one of: {', '.join(SECTIONS)}")
        lines, targets = SECTIONS[name](sizes, repeats, args.quick)
        if args.merge and name in ROW_KEYS:
            lines, targets = merge_saved(f"exact/{name}", lines, targets, ROW_KEYS[name])
            if name == "memory":  # the target is over every score's row, old and new
                table = parse_table(lines)
                targets = [memory_target(table[1])] if table else targets
        print("\n".join(lines), flush=True)
        if not args.no_write and not args.quick:
            common.save_section(f"exact/{name}", lines, targets)
    if not args.no_write and not args.quick:
        print(f"wrote {common.write_docs()}")


if __name__ == "__main__":
    main()
