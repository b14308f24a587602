"""Shared benchmark machinery: machine description, interleaved timing, subprocess peak memory.

Timings are medians of interleaved repetitions (implementation A, B, C, A, B, C, …) taken in one
run, so slow drifts of a shared machine hit every implementation alike; compare ratios, never
absolute times across runs. Peak memory is measured in a fresh subprocess per configuration as
the peak RSS (VmHWM) of the run minus that of a baseline process that does everything but the
attention call (imports, allocating the inputs, a tiny warm-up).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

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


def peak_memory_mib(script: str, spec: dict, timeout: float = 1800) -> float | None:
    """Peak memory of one configuration beyond its baseline: run ``script --measure SPEC`` twice
    in fresh processes, with and without the call, and subtract. None if the run failed (for
    example, out of memory)."""
    results = []
    for baseline in (True, False):
        payload = json.dumps({**spec, "baseline": baseline})
        try:
            done = subprocess.run(
                [sys.executable, script, "--measure", payload],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0:
            return None
        results.append(float(done.stdout.strip().splitlines()[-1]))
    return max(0.0, results[1] - results[0])
