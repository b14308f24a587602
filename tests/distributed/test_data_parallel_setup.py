"""How a data-parallel training process sets itself up, without a GPU: the
backend choice (NCCL with CUDA, gloo without), the device from ``LOCAL_RANK``, DDP's
``device_ids``, moving batches, the timeout, and which errors become a clear
``PeerFailureError`` (item 4). ``torch.distributed`` and CUDA are replaced by recorders where a
GPU would be needed; the 2-process runs are in tests/run/test_data_parallel.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import attnkit.data_parallel as dp
from attnkit.cli import build_parser
from attnkit.data.batching import Batch
from attnkit.data_parallel import DataParallel, training_device
from attnkit.distributed import PeerFailureError, default_backend

GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:34180: Connection reset by peer. This is typically caused by a remote worker "
    "hanging or bugs in the application."
)
GLOO_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 4000ms for recv operation to complete"
)


def test_the_backend_is_nccl_with_cuda_and_gloo_without():
    assert default_backend(cuda_available=True) == "nccl"
    assert default_backend(cuda_available=False) == "gloo"
    assert default_backend() == ("nccl" if torch.cuda.is_available() else "gloo")


def test_the_device_is_the_local_rank_s_gpu_under_nccl_and_the_cpu_under_gloo():
    assert training_device("nccl", 0) == torch.device("cuda", 0)
    assert training_device("nccl", 3) == torch.device("cuda", 3)
    assert training_device("gloo", 3) == torch.device("cpu")
    with pytest.raises(ValueError, match="backend must be 'gloo' or 'nccl', got 'mpi'"):
        training_device("mpi", 0)
    with pytest.raises(ValueError, match="LOCAL_RANK must be >= 0, got -1"):
        training_device("nccl", -1)


class _Recorder:
    """Stands in for what would need a GPU or peers: records the calls."""

    def __init__(self, monkeypatch, cuda: bool) -> None:
        self.calls: list[tuple] = []
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("LOCAL_RANK", "1")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "set_device", lambda d: self.calls.append(("set", d)))
        monkeypatch.setattr(dist, "is_initialized", lambda: False)
        monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
        monkeypatch.setattr(
            dp, "init_process_group", lambda b, timeout: self.calls.append(("init", b, timeout))
        )
        monkeypatch.setattr(
            nn.parallel,
            "DistributedDataParallel",
            lambda module, **kw: self.calls.append(("ddp", kw)) or module,
        )


def test_under_torchrun_with_cuda_a_process_joins_nccl_on_its_local_gpu(monkeypatch):
    recorder = _Recorder(monkeypatch, cuda=True)
    parallel = DataParallel.from_environment(timeout=7)
    assert (parallel.rank, parallel.world) == (1, 2)
    assert parallel.device == torch.device("cuda", 1)
    # the device is set before NCCL's communicator exists
    assert recorder.calls == [("set", torch.device("cuda", 1)), ("init", "nccl", 7.0)]
    parallel.wrap(nn.Linear(2, 2))
    assert recorder.calls[-1] == ("ddp", {"device_ids": [1], "output_device": 1})


def test_under_torchrun_without_cuda_a_process_joins_gloo_on_the_cpu(monkeypatch):
    recorder = _Recorder(monkeypatch, cuda=False)
    parallel = DataParallel.from_environment(timeout=7)
    assert parallel.device == torch.device("cpu")
    assert recorder.calls == [("init", "gloo", 7.0)]  # no CUDA call
    model = nn.Linear(2, 2)
    parallel.wrap(model)
    assert recorder.calls[-1] == ("ddp", {})  # DDP on CPU parameters takes no device_ids
    batch = Batch(*(torch.ones(2, 3, dtype=torch.long) for _ in range(4)))
    assert parallel.place(batch) is batch  # nothing moved, nothing copied


def test_one_process_stays_on_the_cpu_and_joins_no_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    parallel = DataParallel.from_environment()
    assert (parallel.rank, parallel.world, parallel.device) == (0, 1, torch.device("cpu"))
    assert not dist.is_initialized()


def test_batches_move_to_the_device_whole():
    parallel = DataParallel(0, 2, torch.device("meta"))  # a device that needs no GPU
    source = torch.tensor([[4, 5, 6], [7, 8, 0]])
    batch = Batch(source, torch.tensor([3, 2]), source, source, alignment=None)
    moved = parallel.place(batch)
    assert isinstance(moved, Batch) and moved.alignment is None
    assert {t.device.type for t in (moved.source, moved.source_lengths, moved.target_out)} == {
        "meta"
    }
    assert moved.source.shape == (2, 3) and batch.source.device.type == "cpu"
    inputs, labels = parallel.place(({"tokens": source, "n": 3}, torch.tensor([1, 0])))
    assert inputs["tokens"].device.type == "meta" and inputs["n"] == 3
    assert labels.device.type == "meta"


def test_the_timeout_must_be_positive_seconds():
    with pytest.raises(ValueError, match=r"timeout must be > 0 seconds, got 0\.0"):
        DataParallel.from_environment(timeout=0)
    parser = build_parser()
    assert parser.parse_args(["train", "c.yaml"]).timeout == 1800.0
    assert parser.parse_args(["train", "c.yaml", "--timeout", "2.5"]).timeout == 2.5
    for bad in ("0", "-3", "nan", "soon"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["train", "c.yaml", "--timeout", bad])
        assert exit_info.value.code == 2


def test_a_failed_collective_becomes_one_clear_error_and_nothing_else_does():
    parallel = DataParallel(0, 2, timeout=4.0, stage="step 2 of 4")
    died = parallel.peer_failure(RuntimeError(GLOO_RESET))
    assert isinstance(died, PeerFailureError)
    assert str(died).startswith(
        "rank 0 of 2 (data-parallel training, step 2 of 4): communication with the other ranks "
        "failed — a peer's connection closed: a peer process died. Backend error: [/__w/"
    )
    silent = parallel.peer_failure(RuntimeError(GLOO_TIMEOUT))
    assert "no answer from a peer within 4 s (attnkit train --timeout SECONDS)" in str(silent)
    nccl = parallel.peer_failure(dist.DistBackendError("NCCL communicator was aborted"))
    assert "a peer process died, hangs, or did not answer within 4 s" in str(nccl)
    assert "\n" not in str(died) + str(silent) + str(nccl)  # one line each
    # the model's own errors, and anything in one process, stay as they are
    assert parallel.peer_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert parallel.peer_failure(ValueError(GLOO_RESET)) is None
    assert DataParallel().peer_failure(RuntimeError(GLOO_RESET)) is None


def test_a_rendezvous_that_fails_is_the_same_clear_error(monkeypatch):
    _Recorder(monkeypatch, cuda=False)

    def never_joined(backend, timeout):
        raise dist.DistStoreError("Timed out after 7 seconds waiting for clients. 1/2 joined.")

    monkeypatch.setattr(dp, "init_process_group", never_joined)
    with pytest.raises(PeerFailureError) as raised:
        DataParallel.from_environment(timeout=7)
    assert str(raised.value).startswith(
        "rank 1 of 2 (data-parallel training, joining the process group): communication with the "
        "other ranks failed — no answer from a peer within 7 s (attnkit train --timeout SECONDS)"
    )
    monkeypatch.setattr(dp, "init_process_group", lambda b, timeout: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # not a peer's failure: unchanged
        DataParallel.from_environment(timeout=7)
