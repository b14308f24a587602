"""A rank that fails or hangs makes the others raise a clear error within the timeout.

Rank 1 misbehaves before ring attention; rank 0 runs ring attention and must raise
``PeerFailureError`` naming the peer — at once when rank 1's process is gone (its connections
close), after the process group's timeout when rank 1 is alive but silent — never hang.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

import attnkit.distributed as akd

TIMEOUT = 3.0  # seconds: the process group's timeout


def _worker(rank: int, world: int, how: str) -> dict:
    x = torch.randn(1, 2, 4, 8)
    akd.ring_attention(x, x, x, causal=True)  # one healthy call first: the ring works
    if rank == 1:
        if how == "raises":
            raise RuntimeError("deliberate failure of rank 1")
        if how == "exits":
            os._exit(7)
        time.sleep(2 * TIMEOUT)  # "hangs": alive, but never sends
        return {}
    start = time.perf_counter()
    try:
        akd.ring_attention(x, x, x, causal=True)
    except akd.PeerFailureError as error:
        return {"error": str(error), "seconds": time.perf_counter() - start}
    return {"error": None}


@pytest.mark.parametrize("how", ["raises", "exits", "hangs"])
def test_a_failing_rank_makes_the_others_fail_clearly_within_the_timeout(how):
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
    if how == "exits":
        assert results[1].exitcode == 7 and "without reporting" in results[1].error


def test_init_process_group_checks_its_arguments():
    with pytest.raises(ValueError, match=r"timeout must be > 0 seconds, got 0\.0"):
        akd.init_process_group("gloo", timeout=0.0)
    with pytest.raises(TypeError, match="timeout must be seconds"):
        akd.init_process_group("gloo", timeout="10")
    with pytest.raises(ValueError, match="backend must be 'gloo', 'nccl' or None, got 'mpi'"):
        akd.init_process_group("mpi")
