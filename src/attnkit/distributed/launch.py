"""Run a function on W local processes joined in a process group, and collect every rank's result.

For tests, benchmarks and trying things out on one machine; across machines use ``torchrun``
(see docs/distributed.md). Unlike ``torch.multiprocessing.spawn``, which terminates all processes
when the first one fails, :func:`launch_local` lets the others run to their own end, so what
each surviving rank saw of a failed peer (an error, or a hang cut by the timeout) is reported.

Processes are forked (Linux): the function need not be importable, and no interpreter restarts
(importing torch takes seconds). Results travel as JSON text through a pipe.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from attnkit.distributed.process_group import free_port, init_process_group


@dataclass(frozen=True)
class RankResult:
    """What one rank returned (``value``, JSON-compatible) or raised (``error``: type and
    message), how long it ran, and its exit code (``None``: killed after the overall timeout).

    Attributes:
        rank: the process's rank.
        value: what ``fn`` returned (JSON-compatible), or ``None``.
        error: ``"Type: message"`` when ``fn`` raised, else ``None``.
        seconds: how long the rank ran.
        exitcode: the process's exit code (``None``: killed).

    Example::

        >>> results = launch_local(lambda rank, world_size: rank * 10, 2)
        >>> [(result.rank, result.value, result.error) for result in results]
        [(0, 0, None), (1, 10, None)]
    """

    rank: int
    value: Any = None
    error: str | None = None
    seconds: float | None = None
    exitcode: int | None = None


def _child(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    init_method: str,
    timeout: float,
    backend: str | None,
    args: tuple,
    conn: Any,
) -> None:
    torch.set_num_threads(1)  # W processes share the machine's cores
    start = time.perf_counter()
    report: dict[str, Any] = {"value": None, "error": None}
    try:
        init_process_group(
            backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout
        )
        report["value"] = fn(rank, world_size, *args)
    except BaseException as error:  # reported to the parent, whatever it is
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()
    report["seconds"] = time.perf_counter() - start
    conn.send_bytes(json.dumps(report, default=str).encode())
    conn.close()
    if report["error"] is None and dist.is_initialized():
        dist.destroy_process_group()


def launch_local(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 30.0,
    join_timeout: float | None = None,
    backend: str | None = None,
) -> list[RankResult]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` forked processes in one group.

    Args:
        fn: runs on every rank after ``init_process_group``; returns a JSON-compatible value.
        world_size: number of processes.
        timeout: the process group's timeout (seconds): a wait for a peer fails after it.
        join_timeout: seconds to wait for all processes before killing the rest (default
            ``2 · timeout + 30``).
        backend: ``"gloo"``/``"nccl"``/``None`` as in :func:`init_process_group`.

    Returns:
        One :class:`RankResult` per rank, in rank order.

    Example::

        >>> [result.value for result in launch_local(lambda rank, world_size: world_size, 2)]
        [2, 2]
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    context = multiprocessing.get_context("fork")
    init_method = f"tcp://127.0.0.1:{free_port()}"
    processes, pipes = [], []
    for rank in range(world_size):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_child,
            args=(fn, rank, world_size, init_method, timeout, backend, args, sender),
            daemon=True,
        )
        process.start()
        sender.close()
        processes.append(process)
        pipes.append(receiver)
    deadline = time.monotonic() + (2 * timeout + 30 if join_timeout is None else join_timeout)
    results = []
    for rank, (process, pipe) in enumerate(zip(processes, pipes, strict=True)):
        report = None
        remaining = max(0.0, deadline - time.monotonic())
        try:
            if pipe.poll(remaining):
                report = json.loads(pipe.recv_bytes().decode())
        except EOFError:  # the process died without reporting (os._exit, a signal)
            report = None
        process.join(max(0.0, min(5.0, deadline - time.monotonic())))
        if process.is_alive():
            process.kill()
            process.join()
            exitcode = None
        else:
            exitcode = process.exitcode
        if report is None:
            error = (
                f"rank {rank} exited with code {exitcode} without reporting"
                if exitcode is not None
                else f"rank {rank} was killed after the join timeout"
            )
            results.append(RankResult(rank, error=error, exitcode=exitcode))
        else:
            results.append(
                RankResult(rank, report["value"], report["error"], report["seconds"], exitcode)
            )
    return results


def rss_peak_bytes() -> int:
    """This process's peak resident memory (``VmHWM`` of /proc/self/status), in bytes.

    Returns:
        The peak in bytes.

    Example::

        >>> rss_peak_bytes() > 0
        True
    """
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM not found in /proc/self/status (Linux only)")
