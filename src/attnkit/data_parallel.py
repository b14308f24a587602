"""Data-parallel training on PyTorch's own engine: ``torchrun`` + DistributedDataParallel.

``torchrun --nproc-per-node N -m attnkit train CONFIG.yaml`` starts N processes; each reads its
rank from the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ...), joins the process group — NCCL when CUDA is available, gloo otherwise
(:func:`attnkit.distributed.default_backend`) — on device ``cuda:LOCAL_RANK`` (NCCL) or the CPU
(gloo), and trains a DDP-wrapped model on its share of every global batch: rows
``rank, rank + N, ...`` of the batch a single process would use at that step. Losses are
normalised by the *global* number of target tokens (and of supervised attention rows), so the
averaged gradient is exactly the single-process gradient of the same global batch. Rank 0 alone
writes the run directory, metrics, checkpoints and reports.

Every collective gives up after the process group's timeout (``attnkit train --timeout``); a
failed collective — a peer died, hangs, or did not answer in time — becomes one
:class:`~attnkit.distributed.PeerFailureError` naming this rank and the stage of training.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from attnkit.config import ConfigError
from attnkit.distributed.process_group import (
    PeerFailureError,
    _as_timedelta,
    default_backend,
    init_process_group,
)
from attnkit.tasks.job import Term

#: default timeout of a training run's collectives, in seconds (PyTorch's own default for gloo)
DEFAULT_TIMEOUT = 1800.0


def training_device(backend: str, local_rank: int) -> torch.device:
    """The device a data-parallel process trains on: ``cuda:local_rank`` under NCCL (one GPU per
    process of a machine; torchrun numbers a machine's processes ``LOCAL_RANK = 0, 1, ...``), the
    CPU under gloo."""
    if backend == "nccl":
        if local_rank < 0:
            raise ValueError(f"LOCAL_RANK must be >= 0, got {local_rank}")
        return torch.device("cuda", local_rank)
    if backend == "gloo":
        return torch.device("cpu")
    raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")


@dataclass
class DataParallel:
    """This process's place in a data-parallel run (``world == 1``: a single process, on the CPU).

    ``timeout`` is the process group's timeout in seconds (``None``: a group someone else
    created); ``stage`` says what the run is doing, for the error a failed collective raises."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    timeout: float | None = DEFAULT_TIMEOUT
    stage: str = field(default="setting up", compare=False)

    @classmethod
    def from_environment(cls, timeout: float = DEFAULT_TIMEOUT) -> DataParallel:
        """Join the process group torchrun describes in the environment (if ``WORLD_SIZE > 1``).

        ``timeout`` (seconds, > 0) bounds every collective: a rank that died or hangs makes the
        others fail with an error instead of waiting forever. One process keeps the CPU and
        joins no group."""
        seconds = _as_timedelta(timeout).total_seconds()  # refuses <= 0 even for one process
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(timeout=seconds)
        initialised = dist.is_initialized()
        backend = str(dist.get_backend()) if initialised else default_backend()
        device = training_device(backend, int(os.environ.get("LOCAL_RANK", "0")))
        if device.type == "cuda":
            # before the group exists: NCCL binds its communicator to the current device
            torch.cuda.set_device(device)
        if not initialised:
            rank = int(os.environ.get("RANK", "0"))
            joining = cls(rank, world, device, seconds, stage="joining the process group")
            try:
                init_process_group(backend, timeout=seconds)
            except Exception as error:  # the rendezvous failed: a peer never came, or died
                failure = joining.peer_failure(error)
                if failure is None:
                    raise
                raise failure from error
        return cls(
            dist.get_rank(),
            dist.get_world_size(),
            device,
            None if initialised else seconds,
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` (already on :attr:`device`) under DistributedDataParallel (rank 0's
        parameters are broadcast); on CUDA, DDP is told the one device this process uses."""
        if self.world == 1:
            return model
        if self.device.type == "cuda":
            return nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index], output_device=self.device.index
            )
        return nn.parallel.DistributedDataParallel(model)

    def place(self, batch: Any) -> Any:
        """``batch`` with its tensors on :attr:`device` (a :class:`Batch`, a tensor, or dicts,
        lists and tuples of them); on the CPU ``batch`` itself."""
        if self.device.type == "cpu":
            return batch
        return _to_device(batch, self.device)

    def on_cpu(self, model: nn.Module) -> nn.Module:
        """``model`` for the evaluation code, which builds its tensors on the CPU: ``model``
        itself on the CPU, else a CPU copy (training goes on with the original)."""
        if self.device.type == "cpu":
            return model
        return copy.deepcopy(model).cpu()

    def shard(self, batch: Any) -> Any:
        """This rank's rows of the global batch, ``rank::world``: of a list of examples, or of
        every tensor field of a dataclass (a :class:`~attnkit.data.batching.Batch`)."""
        if self.world == 1:
            return batch
        rows = slice(self.rank, None, self.world)
        if isinstance(batch, list):
            return batch[rows]
        return replace(
            batch,
            **{
                f.name: getattr(batch, f.name)[rows]
                for f in fields(batch)
                if isinstance(getattr(batch, f.name), Tensor)
            },
        )

    def total(self, value: Tensor) -> Tensor:
        """The sum of ``value`` over ranks (a new tensor, on :attr:`device`: NCCL reduces GPU
        tensors only)."""
        value = value.detach().clone()
        if self.world > 1:
            value = value.to(self.device)
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def combine(self, terms: Mapping[str, Term]) -> tuple[Tensor, dict[str, float]]:
        """The objective of this rank's share and the logged parts of the global batch, from a
        job's :class:`~attnkit.tasks.job.Term` s (see there): each term averaged over the global
        batch's ``count``, times the world size that DDP's gradient averaging divides out; a
        term with no item in any share is left out. The parts are every term's global average
        and ``"loss"``, the same on every rank."""
        scaled: dict[str, Tensor] = {}
        for name, term in terms.items():
            count = self.total(term.count)
            if term.sum is not None:
                scaled[name] = term.sum * (self.world / count.clamp_min(1))
            elif count > 0:
                assert term.mean is not None
                mean = term.mean
                scaled[name] = mean if self.world == 1 else mean * (term.count * self.world / count)
        loss: Tensor | None = None
        for name, value in scaled.items():
            weight = terms[name].weight
            weighted = value if weight == 1.0 else weight * value
            loss = weighted if loss is None else loss + weighted
        if loss is None:
            raise ValueError("the batch has no item to train on in any process")
        parts = {name: value for name, value in scaled.items() if name != "loss"}
        parts["loss"] = loss
        values = self.total(torch.stack([v.detach() for v in parts.values()])) / self.world
        return loss, dict(zip(parts, values.tolist(), strict=True))

    def barrier(self) -> None:
        """Wait until every rank is here (a no-op in one process)."""
        if self.world > 1:
            self.total(torch.zeros(1))

    def share_text(self, text: str) -> str:
        """Rank 0's ``text`` on every rank (a run directory's path)."""
        if self.world == 1:
            return text
        size = torch.tensor([len(text.encode())], device=self.device)
        dist.broadcast(size, 0)
        data = torch.zeros(int(size), dtype=torch.uint8, device=self.device)
        if self.is_main:
            data = torch.tensor(list(text.encode()), dtype=torch.uint8, device=self.device)
        dist.broadcast(data, 0)
        return bytes(data.tolist()).decode()

    def gather_text(self, text: str) -> list[str]:
        """Every rank's ``text``, in rank order (on one process ``[text]``)."""
        if self.world == 1:
            return [text]
        data = text.encode()
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        sizes = [torch.empty_like(size) for _ in range(self.world)]
        dist.all_gather(sizes, size)
        longest = max(int(s) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
        gathered = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(gathered, mine)
        return [bytes(g[: int(n)].tolist()).decode() for g, n in zip(gathered, sizes, strict=True)]

    def agree(self, settings: Mapping[str, Any]) -> None:
        """:class:`ConfigError` unless every rank was given the same ``settings`` (a run's
        resolved configuration: ranks with different seeds would shuffle different batches,
        with different sizes fail later in a collective). One line names each key that differs,
        e.g. ``seed: rank 0 has 0, rank 1 has 1``; every rank raises the same error.

        A SHA-256 of the settings (JSON, keys sorted) is compared first; the settings themselves
        travel only when the hashes differ."""
        if self.world == 1:
            return
        text = json.dumps(settings, sort_keys=True, default=str)
        digest = torch.tensor(
            list(hashlib.sha256(text.encode()).digest()), dtype=torch.uint8, device=self.device
        )
        digests = [torch.empty_like(digest) for _ in range(self.world)]
        dist.all_gather(digests, digest)
        if all(torch.equal(d, digests[0]) for d in digests):
            return
        flat = [_flatten(json.loads(other)) for other in self.gather_text(text)]
        problems = []
        for key in sorted(set().union(*flat)):
            values = [f.get(key, "<absent>") for f in flat]
            differ = [rank for rank, value in enumerate(values) if value != values[0]]
            if differ:
                shown = ", ".join(f"rank {r} has {values[r]!r}" for r in [0, *differ[:3]])
                more = f" (and {len(differ) - 3} more ranks)" if len(differ) > 3 else ""
                problems.append(f"{key}: {shown}{more}")
        raise ConfigError(
            f"the {self.world} data-parallel ranks were given different settings: "
            + "; ".join(problems)
            + " (start every rank with the same configuration and options)"
        )

    def peer_failure(self, error: BaseException) -> PeerFailureError | None:
        """The clear error for ``error`` if it is a failed collective of a multi-process run —
        a peer's connection closed, or a wait timed out — else ``None``.

        NCCL's failures are ``torch.distributed.DistError``; gloo's reach Python as a plain
        ``RuntimeError`` whose message starts with the gloo source file that raised it
        (``[.../gloo/transport/tcp/pair.cc:537] Read error ...: Connection reset by peer``,
        ``[.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 4000ms for recv``)."""
        if self.world == 1:
            return None
        from_gloo = isinstance(error, RuntimeError) and "/gloo/" in str(error)
        if not (isinstance(error, dist.DistError) or from_gloo):
            return None
        text = " ".join(str(error).split())
        within = (
            f"{self.timeout:g} s (attnkit train --timeout SECONDS)"
            if self.timeout is not None
            else "the process group's timeout"
        )
        if "timed out" in text.lower():
            what = f"no answer from a peer within {within}: a peer process hangs or is too slow"
        elif any(m in text for m in ("Connection reset", "Connection closed", "Broken pipe")):
            what = "a peer's connection closed: a peer process died"
        else:
            what = f"a peer process died, hangs, or did not answer within {within}"
        return PeerFailureError(
            f"rank {self.rank} of {self.world} (data-parallel training, {self.stage}): "
            f"communication with the other ranks failed — {what}. Backend error: {text[:300]}"
        )

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"hidden_dim": 8}}`` as ``{"model.hidden_dim": 8}``."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(
            value, **{f.name: _to_device(getattr(value, f.name), device) for f in fields(value)}
        )
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value
