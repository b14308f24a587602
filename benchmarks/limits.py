"""How close to the machine: attnkit's attention against what this CPU can do at all.

    python benchmarks/limits.py             # n = 1024 ... 8192 (minutes; run it alone, 1 thread)
    python benchmarks/limits.py --quick     # tiny sizes, to check the script itself

Two limits are measured first, on this machine, in the same run:

* the GEMM throughput: FLOP/s of a large fp32 ``torch.mm`` (2048 x 2048, the best of the
  repetitions' medians);
* one element-wise pass: seconds per element of ``torch.exp`` and ``torch.tanh`` over a
  1 MiB block kept in cache (``out=`` a second 1 MiB block), repeated; of one ``torch.tanh``
  over a 64 MiB tensor, to show that the block size does not set the unit; of ``torch.tanh``
  compiled by inductor over the 1 MiB block (the vectorised tanh a compiled kernel gets); and of
  the additive kernel's own tanh, ``2σ(2x) − 1`` compiled the same way (the fastest tanh measured
  here, the unit in which the kernel's floor of passes is read).

Then each attention call is given as the fraction of the limit that applies to it:

* ``scaled_dot`` and ``general`` (and torch's SDPA, the anchor): the FLOPs of the products,
  ``4·B·H·M·N·D`` forward and ``12·B·H·M·N·D`` forward + backward (the two forward GEMMs and
  four backward ones, without recomputation), divided by the time, as a fraction of the GEMM
  throughput;
* ``additive``: the time as a number of tanh passes over the ``M·N·d_w`` hidden elements
  (a floor of about 1 for the forward and 2-3 for forward + backward: the backward recomputes
  tanh and forms ``1 - tanh²``), for the compiled kernel (backend ``additive``, what the engine
  runs from ``MIN_HIDDEN`` hidden units on; targets: <= 2 passes forward, <= 4 forward +
  backward) and for the eager tiled path (backend ``tiled``); the kernel is compiled in the
  warm-up round, outside the timing;
* ``sparsemax`` and ``1.5-entmax`` over scaled-dot scores: the time as a number of exp passes
  over the ``B·H·M·N`` scores, beside the GEMM fraction of their products.

Medians of interleaved repetitions (``common.interleaved_medians``), 1 thread by default. The
table is printed, then where each call stands (the spans of its fractions over the lengths, and
what would close each gap), and both are kept as the ``limits`` section of ``docs/benchmarks.md``
unless ``--no-write`` or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

import attnkit as ak
from attnkit.core.additive_kernel import tanh_by_sigmoid

#: elements of one cache-resident block (1 MiB of float32)
BLOCK = 1 << 18
#: elements of the large tensor of the unit check (64 MiB of float32)
LARGE = 1 << 24
#: the tanh pass the additive targets were set with: 0.18 s per 537M elements (n = 2048,
#: d_w = 128), in ns per element
TARGET_TANH_NS = 0.18e9 / (2048 * 2048 * 128)


def gemm_flops(size: int, repeats: int) -> float:
    """FLOP/s of ``torch.mm`` of two ``size x size`` float32 matrices (median of ``repeats``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    seconds = common.interleaved_medians({"mm": lambda: torch.mm(a, b, out=out)}, repeats)["mm"]
    return 2 * size**3 / seconds


def pass_seconds(fn: Callable[..., torch.Tensor], repeats: int, passes: int = 64) -> float:
    """Seconds per element of one ``fn(x, out=y)`` pass over a cache-resident 1 MiB block."""
    x, y = torch.rand(BLOCK) * 2 - 1, torch.empty(BLOCK)

    def run() -> None:
        for _ in range(passes):
            fn(x, out=y)

    return common.interleaved_medians({"pass": run}, repeats)["pass"] / (passes * BLOCK)


def compiled_pass_seconds(
    fn: Callable[[torch.Tensor], torch.Tensor], repeats: int, passes: int = 64
) -> float:
    """Seconds per element of ``torch.compile(fn)`` over a cache-resident 1 MiB block."""
    x = torch.rand(BLOCK) * 2 - 1
    tanh = torch.compile(fn, dynamic=False)
    tanh(x)  # compiled here, outside the timing

    def run() -> None:
        for _ in range(passes):
            tanh(x)

    return common.interleaved_medians({"pass": run}, repeats)["pass"] / (passes * BLOCK)


def large_pass_seconds(repeats: int, size: int = LARGE) -> float:
    """Seconds per element of one ``torch.tanh(x, out=y)`` over ``size`` elements at once."""
    x, y = torch.rand(size) * 2 - 1, torch.empty(size)
    seconds = common.interleaved_medians({"pass": lambda: torch.tanh(x, out=y)}, repeats)
    return seconds["pass"] / size


def timed(
    call: Callable[[], object], backward: bool, inputs: list[torch.Tensor]
) -> Callable[[], None]:
    """A function running ``call`` (and its backward from a fixed gradient when ``backward``)."""

    def run() -> None:
        for t in inputs:
            t.grad = None
        out = call()
        out = getattr(out, "context", out)  # attnkit returns an AttentionOutput
        if backward:
            out.backward(torch.ones_like(out))

    return run


def calls_for(q, k, v, x, general, additive) -> dict[str, Callable[[], object]]:  # type: ignore[no-untyped-def]
    """The calls of the table on ``q, k, v [B, H, N, D]`` and ``x [B, N, D]`` (one head)."""
    return {
        "sdpa (torch)": lambda: F.scaled_dot_product_attention(q, k, v),
        "scaled_dot": lambda: ak.attention(q, k, v),
        "general": lambda: ak.attention(q, k, v, score=general),
        "additive (H=1) compiled": lambda: ak.attention(
            x, x, x, score=additive, backend="additive"
        ),
        "additive (H=1) tiled": lambda: ak.attention(x, x, x, score=additive, backend="tiled"),
        "sparsemax": lambda: ak.attention(q, k, v, align="sparsemax"),
        "1.5-entmax": lambda: ak.attention(q, k, v, align="entmax15"),
    }


#: targets for the compiled additive kernel, in tanh passes: (forward, forward + backward)
ADDITIVE_TARGETS = (2.0, 4.0)


def rows_for(
    n: int, repeats: int, limits: dict[str, float], quick: bool, passes: dict[str, float]
) -> list[list[str]]:
    """Every call of the table at length ``n``: time (ms) and its fraction of the limit, which
    also goes into ``passes`` (keyed ``"n pass call"``): tanh passes for the additive calls, the
    GEMM fraction for the others, and exp passes for sparsemax and 1.5-entmax (``"... exp"``)."""
    torch.manual_seed(0)
    b, h, d = 1, 8, 64
    d_w = 64 if quick else 128
    rows = []
    for backward in (False, True):
        q, k, v = (torch.randn(b, h, n, d, requires_grad=backward) for _ in range(3))
        x = torch.randn(b, n, d, requires_grad=backward)  # one head for the additive score
        calls = calls_for(q, k, v, x, ak.scores.General(d, d), ak.scores.Additive(d, d, d_w))
        inputs = [q, k, v, x]
        fns = {name: timed(call, backward, inputs) for name, call in calls.items()}
        seconds = common.interleaved_medians(fns, repeats)
        products = (12 if backward else 4) * b * h * n * n * d
        for name, s in seconds.items():
            step = "fwd+bwd" if backward else "fwd"
            if name.startswith("additive"):
                count = s / (n * n * d_w * limits["tanh"])
                passes[f"{n} {step} {name}"] = count
                limit = f"{count:.1f} tanh passes over M·N·d_w"
                if name.endswith("compiled"):
                    limit += f" (target <= {ADDITIVE_TARGETS[int(backward)]:.0f})"
            else:
                fraction = products / s / limits["gemm"]
                passes[f"{n} {step} {name}"] = fraction
                limit = f"{100 * fraction:.0f}% of GEMM"
                if name in ("sparsemax", "1.5-entmax"):
                    exp_passes = s / (b * h * n * n * limits["exp"])
                    passes[f"{n} {step} {name} exp"] = exp_passes
                    limit += f"; {exp_passes:.0f} exp passes over M·N"
            rows.append([str(n), step, name, f"{1e3 * s:.1f}", limit])
            print(f"  n={n} {step} {name}: {rows[-1][3]} ms, {limit}", flush=True)
    return rows


def targets_unit_passes(limits: dict[str, float]) -> float:
    """Passes in the targets' unit per pass of this run's ``torch.tanh``: a pass in the targets'
    unit is cheaper, so the same time is more of them."""
    return 1e9 * limits["tanh"] / TARGET_TANH_NS


def additive_summary(
    sizes: list[int], passes: dict[str, float], limits: dict[str, float]
) -> list[str]:
    """One line per length: the compiled additive kernel's tanh passes against its targets, in
    this run's unit and in the unit the targets were set with, and against the eager tiled
    path."""
    to_target_unit = targets_unit_passes(limits)
    lines = []
    for n in sizes:
        parts = []
        for step, target in zip(("fwd", "fwd+bwd"), ADDITIVE_TARGETS, strict=True):
            compiled = passes[f"{n} {step} additive (H=1) compiled"]
            eager = passes[f"{n} {step} additive (H=1) tiled"]
            verdict = "met" if compiled <= target else "not met"
            theirs = compiled * to_target_unit
            their_verdict = "met" if theirs <= target else "not met"
            parts.append(
                f"{step} {compiled:.1f} tanh passes (target <= {target:.0f}: {verdict}; "
                f"{theirs:.1f} passes of {TARGET_TANH_NS:.2f} ns/element, the targets' unit: "
                f"{their_verdict}; eager tiled {eager:.1f}, {eager / compiled:.1f}x slower)"
            )
        lines.append(f"- additive kernel at n={n}: " + "; ".join(parts) + ".")
    return lines


def additive_targets(
    sizes: list[int], passes: dict[str, float], limits: dict[str, float]
) -> list[list]:
    """The Targets table's rows of the compiled additive kernel, at the targets' own length
    (n = 2048, or the largest measured below it): met only when met in both units."""
    n = max((x for x in sizes if x <= 2048), default=min(sizes))
    to_target_unit = targets_unit_passes(limits)
    rows = []
    for step, target in zip(("fwd", "fwd+bwd"), ADDITIVE_TARGETS, strict=True):
        ours = passes[f"{n} {step} additive (H=1) compiled"]
        theirs = ours * to_target_unit
        measured = (
            f"{ours:.1f} passes of {1e9 * limits['tanh']:.2f} ns/element (this run's torch.tanh); "
            f"{theirs:.1f} of {TARGET_TANH_NS:.2f} (the targets' unit)"
        )
        why = ""
        if theirs > target:
            kernel = ours * limits["tanh"] / limits["tanh_kernel"]
            why = (
                f"in the targets' unit: {theirs:.1f}; their {TARGET_TANH_NS:.2f} ns/element tanh "
                f"pass is {to_target_unit:.1f}x faster than torch.tanh on this CPU and "
                f"{1e9 * limits['tanh_kernel'] / TARGET_TANH_NS:.1f}x faster than the kernel's own "
                f"compiled 2σ(2x) − 1 ({1e9 * limits['tanh_kernel']:.2f} ns/element), in whose "
                f"unit the kernel takes {kernel:.1f} passes against a floor of about "
                f"{1 if step == 'fwd' else 3} (the limits section)"
            )
        name = f"limits: additive kernel {step} <= {target:.0f} tanh passes (n={n})"
        rows.append([name, measured, ours <= target and theirs <= target, why])
    return rows


def _span(values: list[float], fmt: Callable[[float], str]) -> str:
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def standing(sizes: list[int], passes: dict[str, float], limits: dict[str, float]) -> list[str]:
    """Where each call stands against its limit, from this run's figures, and what would close
    each gap (what the figures show about it)."""

    def of(names: tuple[str, ...], step: str, at: list[int] = sizes) -> list[float]:
        return [passes[f"{n} {step} {name}"] for n in at for name in names]

    pct = lambda x: f"{100 * x:.0f}"  # noqa: E731
    one = lambda x: f"{x:.1f}"  # noqa: E731
    whole = lambda x: f"{x:.0f}"  # noqa: E731
    exact, sdpa = ("scaled_dot", "general"), ("sdpa (torch)",)
    late = [n for n in sizes if n >= 2048] or sizes
    gap = max(
        passes[f"{n} {step} sdpa (torch)"] - passes[f"{n} {step} {name}"]
        for n in late
        for step in ("fwd", "fwd+bwd")
        for name in exact
    )
    compiled = ("additive (H=1) compiled",)
    eager = ("additive (H=1) tiled",)
    speedup = [
        passes[f"{n} {step} additive (H=1) tiled"] / passes[f"{n} {step} additive (H=1) compiled"]
        for n in sizes
        for step in ("fwd", "fwd+bwd")
    ]
    met = all(
        passes[f"{n} {step} additive (H=1) compiled"] <= target
        for n in sizes
        for step, target in zip(("fwd", "fwd+bwd"), ADDITIVE_TARGETS, strict=True)
    )
    entmax = ("sparsemax", "1.5-entmax")
    exp_passes = [passes[f"{n} {step} {name} exp"] for n in sizes for step in ("fwd", "fwd+bwd")
                  for name in entmax]  # fmt: skip
    tanh_ns, large_ns = 1e9 * limits["tanh"], 1e9 * limits["tanh_large"]
    compiled_ns, kernel_ns = 1e9 * limits["tanh_compiled"], 1e9 * limits["tanh_kernel"]
    to_kernel = limits["tanh"] / limits["tanh_kernel"]  # this run's passes -> kernel-tanh passes
    fastest = (
        ", the fastest tanh measured here"
        if kernel_ns <= min(tanh_ns, large_ns, compiled_ns)
        else ""
    )
    unit = (
        "so the block size does not set the unit"
        if 0.8 <= large_ns / tanh_ns <= 1.25
        else f"{tanh_ns / large_ns:.1f}× the block's rate: the block size changes the unit"
    )
    return [
        f"- **scaled_dot, general**: forward {_span(of(exact, 'fwd'), pct)}% of the GEMM rate "
        f"(SDPA {_span(of(sdpa, 'fwd'), pct)}%), forward + backward "
        f"{_span(of(exact, 'fwd+bwd'), pct)}% (SDPA {_span(of(sdpa, 'fwd+bwd'), pct)}%). Counted "
        "as 4 (12) n²·D GEMM FLOPs, the backward's recomputation of the scores (a fifth product) "
        "is not in the count, so about 86% (12/14) is the ceiling of forward + backward; what is "
        "left beside SDPA is the online softmax's row bookkeeping between the products, at most "
        f"{100 * gap:.0f} points below SDPA from n = {late[0]}.",
        f"- **additive**: the compiled block kernel (backend `additive`) takes "
        f"{_span(of(compiled, 'fwd'), one)} tanh passes forward and "
        f"{_span(of(compiled, 'fwd+bwd'), one)} forward + backward: targets (≤ 2 and ≤ 4) "
        f"{'met' if met else 'not met'}, {_span(speedup, one)}× faster than the eager `tiled` "
        f"path ({_span(of(eager, 'fwd'), one)} and {_span(of(eager, 'fwd+bwd'), one)} passes). "
        "Below one pass forward because the generated loop evaluates tanh as 2σ(2x) − 1, a "
        "vectorised exp and division (src/attnkit/core/additive_kernel.py), while the "
        f"reference pass, `torch.tanh` into a 1 MiB block, costs {tanh_ns:.2f} ns/element here "
        f"(one `torch.tanh` over a 64 MiB tensor: {large_ns:.2f} ns/element, {unit}). The "
        f"targets were set with {TARGET_TANH_NS:.2f} ns/element "
        f"(0.18 s per 537M elements), {tanh_ns / TARGET_TANH_NS:.1f}× less than measured here, "
        f"and inductor's vectorised tanh over the same block costs {compiled_ns:.2f} ns/element "
        f"({compiled_ns / TARGET_TANH_NS:.1f}× that figure): no tanh this run measured reaches it, "
        "so the passes above are in this run's unit, and the lines above give them in the "
        "targets' unit too.",
        f"- **additive, against its own floor**: in passes of the kernel's own tanh (2σ(2x) − 1 "
        f"compiled, {kernel_ns:.2f} ns/element{fastest}) the kernel takes "
        f"{_span([x * to_kernel for x in of(compiled, 'fwd')], one)} forward and "
        f"{_span([x * to_kernel for x in of(compiled, 'fwd+bwd')], one)} forward + backward. The "
        "floor is 1 forward (each hidden element's tanh once) and about 3 forward + backward: the "
        "backward evaluates tanh again, then forms (1 − tanh²)·w·δs per hidden element and adds it "
        "into the query-side and key-side sums, a second pass of element work. The targets' "
        f"{TARGET_TANH_NS:.2f} ns/element is {kernel_ns / TARGET_TANH_NS:.1f}× faster than this "
        f"tanh, so in their unit those floors are {kernel_ns / TARGET_TANH_NS:.1f} and "
        f"{3 * kernel_ns / TARGET_TANH_NS:.1f} passes: "
        + (
            "the forward + backward target (≤ 4) is below that floor on this CPU, and meeting it "
            "needs a faster tanh, not fewer passes."
            if 3 * kernel_ns / TARGET_TANH_NS > ADDITIVE_TARGETS[1]
            else "both targets lie above those floors on this CPU."
        ),
        f"- **sparsemax, 1.5-entmax**: {_span(of(entmax, 'fwd') + of(entmax, 'fwd+bwd'), pct)}% "
        f"of the GEMM rate, {_span(exp_passes, whole)} exp-pass equivalents over the M·N scores. "
        "The time is the threshold: per row, a sort of the N scores (the `entmax` package's "
        "exact, sort-based mappings, O(N log N) with data movement) on every block. A threshold "
        "by bisection (a fixed number of passes over the row, no sort) compiled per block like "
        "the additive kernel would bring it towards the ~10 element passes that bisection needs; "
        "not written.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--sizes", type=int, nargs="+", help="sequence lengths (override)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, help="interleaved repetitions (default 3)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes, repeats = ([64, 128], 1) if args.quick else ([1024, 2048, 4096, 8192], 3)
    sizes, repeats = args.sizes or sizes, args.repeats or repeats
    start = time.perf_counter()
    gemm_size = 256 if args.quick else 2048
    limits = {
        "gemm": gemm_flops(gemm_size, max(repeats, 3)),
        "exp": pass_seconds(torch.exp, max(repeats, 3)),
        "tanh": pass_seconds(torch.tanh, max(repeats, 3)),
        "tanh_large": large_pass_seconds(max(repeats, 3), BLOCK if args.quick else LARGE),
        "tanh_compiled": compiled_pass_seconds(torch.tanh, max(repeats, 3)),
        "tanh_kernel": compiled_pass_seconds(tanh_by_sigmoid, max(repeats, 3)),
    }
    lines = [
        "## How close to the machine",
        "",
        f"Limits measured in the same run: fp32 GEMM {limits['gemm'] / 1e9:.1f} GFLOP/s "
        f"(`torch.mm`, {gemm_size}²), one exp pass {1e9 * limits['exp']:.2f} ns/element, one tanh pass "
        f"{1e9 * limits['tanh']:.2f} ns/element (1 MiB cache-resident blocks; compiled by inductor "
        f"{1e9 * limits['tanh_compiled']:.2f}, and as the additive kernel evaluates it, 2σ(2x) − 1 "
        f"compiled, {1e9 * limits['tanh_kernel']:.2f}). B=1, H=8, D=64; "
        "the additive score one head, d_w=128, compiled (backend `additive`, which the engine "
        "chooses at these sizes) and eager (`tiled`). Reproduce: `python benchmarks/limits.py`.",
        "",
    ]
    passes: dict[str, float] = {}
    rows = [row for n in sizes for row in rows_for(n, repeats, limits, args.quick, passes)]
    lines.append(common.table(["n", "pass", "call", "ms", "of the limit"], rows))
    lines += ["", *additive_summary(sizes, passes, limits), ""]
    lines += ["Where each call stands and what would close the gap (measured in this run):", ""]
    lines += standing(sizes, passes, limits)
    print("\n".join(lines))
    print(f"({time.perf_counter() - start:.0f} s; {common.machine()})")
    if not (args.quick or args.no_write):
        note = f"{args.threads} thread(s), medians of {repeats} interleaved rounds."
        common.save_section("limits", lines, additive_targets(sizes, passes, limits), note)
        print("wrote", common.write_docs())


if __name__ == "__main__":
    main()
