"""A rank that fails or hangs makes the others raise a clear error within the timeout.

Rank 1 misbehaves before ring attention; rank 0 runs ring attention and must raise
``PeerFailureError`` naming the peer — at once when rank 1's process is gone (its connections
close), after the process group's timeout when rank 1 is alive but silent — never hang. Whether
the connection closes while rank 0's messages travel or before it posts them ("gone": rank 0
starts its step only once rank 1's process has ended), the error is the same.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest
import torch

import attnkit.distributed as akd

TIMEOUT = 3.0  # seconds: the process group's timeout
# rank 1's process id, shared with the forked ranks ("gone": rank 0 waits for that process)
_PEER_PID = multiprocessing.get_context("fork").Value("i", 0)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie, or reaped): its sockets are closed."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_until_gone() -> None:
    """Block until rank 1 announced itself and its process ended, then let the closed
    connection reach the process group (the step below must find it closed when posting)."""
    deadline = time.monotonic() + 3 * TIMEOUT
    while time.monotonic() < deadline and not (_PEER_PID.value and _ended(_PEER_PID.value)):
        time.sleep(0.01)
    time.sleep(0.5)


def _worker(rank: int, world: int, how: str) -> dict:
    x = torch.randn(1, 2, 4, 8)
    akd.ring_attention(x, x, x, causal=True)  # one healthy call first: the ring works
    if rank == 1:
        if how == "raises":
            raise RuntimeError("deliberate failure of rank 1")
        if how in ("exits", "gone"):
            _PEER_PID.value = os.getpid()
            os._exit(7)
        time.sleep(2 * TIMEOUT)  # "hangs": alive, but never sends
        return {}
    if how == "gone":
        _wait_until_gone()
    start = time.perf_counter()
    try:
        akd.ring_attention(x, x, x, causal=True)
    except akd.PeerFailureError as error:
        return {"error": str(error), "seconds": time.perf_counter() - start}
    return {"error": None}


@pytest.mark.parametrize("how", ["raises", "exits", "gone", "hangs"])
def test_a_failing_rank_makes_the_others_fail_clearly_within_the_timeout(how):
    _PEER_PID.value = 0
    start = time.perf_counter()
    results = akd.launch_local(_worker, 2, how, timeout=TIMEOUT, join_timeout=4 * TIMEOUT)
    survivor = results[0]
    assert survivor.error is None, survivor.error
    message = survivor.value["error"]
    assert message is not None, "rank 0 finished although its peer failed"
    assert "rank 0 of 2" in message and "from rank 1" in message and "timeout" in message
    assert survivor.value["seconds"] <= TIMEOUT + 2.0
    assert time.perf_counter() - start < 4 * TIMEOUT + 5  # nothing hung
    if how == "raises":
        assert "deliberate failure of rank 1" in results[1].error
    if how in ("exits", "gone"):
        assert results[1].exitcode == 7 and "without reporting" in results[1].error


def test_init_process_group_checks_its_arguments():
    with pytest.raises(ValueError, match=r"timeout must be > 0 seconds, got 0\.0"):
        akd.init_process_group("gloo", timeout=0.0)
    with pytest.raises(TypeError, match="timeout must be seconds"):
        akd.init_process_group("gloo", timeout="10")
    with pytest.raises(ValueError, match="backend must be 'gloo', 'nccl' or None, got 'mpi'"):
        akd.init_process_group("mpi")
