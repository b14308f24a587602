"""Shared benchmark machinery: machine description, interleaved timing, subprocess peak memory.

Timings are medians of interleaved repetitions (implementation A, B, C, A, B, C, …) taken in one
run, so slow drifts of a shared machine hit every implementation alike; compare ratios, never
absolute times across runs. Peak memory is measured in a fresh subprocess per configuration as
the peak RSS (VmHWM) of the run minus that of a baseline process that does everything but the
attention call (imports, allocating the inputs, a tiny warm-up).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch


def machine() -> str:
    """One line describing where the numbers were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}), Python {platform.python_version()}"
    )


def interleaved_medians(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1
) -> dict[str, float]:
    """Median seconds of each function over ``repeats`` interleaved rounds."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def maxrss_mib() -> float:
    """Peak resident memory of this process so far, MiB.

    Read from ``VmHWM`` of /proc/self/status where it exists: ``ru_maxrss`` survives ``fork`` +
    ``exec``, so a child started by a big parent would report the parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory_mib(
    script: str, spec: dict, timeout: float = 1800, env: dict[str, str] | None = None
) -> float | None:
    """Peak memory of one configuration beyond its baseline: run ``script --measure SPEC`` twice
    in fresh processes, with and without the call, and subtract. None if the run failed (for
    example, out of memory). ``env``: variables added to the processes' environment (e.g.
    glibc's ``MALLOC_MMAP_THRESHOLD_``)."""
    results = []
    for baseline in (True, False):
        payload = json.dumps({**spec, "baseline": baseline})
        try:
            done = subprocess.run(
                [sys.executable, script, "--measure", payload],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=None if env is None else {**os.environ, **env},
            )
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0:
            return None
        results.append(float(done.stdout.strip().splitlines()[-1]))
    return max(0.0, results[1] - results[0])


RESULTS = Path(__file__).resolve().parent / "results" / "benchmarks.json"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
#: the order of the sections in docs/benchmarks.md
SECTION_ORDER = ("exact/scaled_dot", "exact/scores", "exact/memory", "exact/targets", "decode")


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def save_section(name: str, lines: list[str], targets: list, note: str = "") -> None:
    """Keep one measured section (markdown lines and its targets) in the results file."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[name] = {
        "date": str(datetime.date.today()),
        "machine": machine(),
        "lines": lines,
        "targets": targets,
        "note": note,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))


def write_docs() -> Path:
    """docs/benchmarks.md from every section measured so far, each with its date."""
    results = json.loads(RESULTS.read_text())
    machines = sorted({section["machine"] for section in results.values()})
    out = [
        "# Benchmarks",
        "",
        "Machine: " + "; ".join(machines) + ".",
        "",
        "Times are milliseconds unless marked, medians of interleaved repetitions in one run; memory "
        "is peak RSS beyond the inputs in MiB, in a fresh process per configuration (see "
        "benchmarks/common.py). Compare ratios within a table, not absolute times across runs. "
        "Reproduce: `python benchmarks/exact.py [--sections scaled_dot,scores,memory,targets]`, "
        "`python benchmarks/decode.py`, `python benchmarks/efficient.py`, "
        "`OMP_NUM_THREADS=1 python benchmarks/efficient_quality.py --tasks listops|mqar`.",
        "",
    ]
    rows = []
    for name in sorted(results, key=lambda n: SECTION_ORDER.index(n) if n in SECTION_ORDER else 99):
        section = results[name]
        if section["lines"]:  # a section of targets only has its date in the Targets table
            out += section["lines"]
            note = f"_Measured {section['date']}. {section.get('note') or ''}_"
            out += [note.replace(" _", "_"), ""]
        # the processor, the machine's first words: the sections were not all measured on one
        processor = section["machine"].split(",")[0]
        for t, v, ok, *rest in section["targets"]:
            status = "—" if ok is None else ("met" if ok else "**not met**")
            # a target may carry its own date: a section whose rows are measured one at a time
            date = rest[1] if len(rest) > 1 and rest[1] else section["date"]
            rows.append([t, v, status, rest[0] if rest else "", f"{date}, {processor}"])
    header = ["target", "measured", "status", "why not met", "measured on"]
    out += ["## Targets", "", table(header, rows), ""]
    DOCS.write_text("\n".join(out))
    return DOCS
