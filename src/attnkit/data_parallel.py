"""Data-parallel training on PyTorch's own engine: ``torchrun`` + DistributedDataParallel.

``torchrun --nproc-per-node N -m attnkit train CONFIG.yaml`` starts N processes; each reads its
rank from the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...), joins
the process group (gloo: attnkit's training loop runs on the CPU), and trains a DDP-wrapped model
on its share of every global batch: rows ``rank, rank + N, ...`` of the batch a single process
would use at that step. Losses are normalised by the *global* number of target tokens (and of
supervised attention rows), so the averaged gradient is exactly the single-process gradient of the
same global batch. Rank 0 alone writes the run directory, metrics, checkpoints and reports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn

from attnkit.data.batching import Batch


@dataclass(frozen=True)
class DataParallel:
    """This process's place in a data-parallel run (``world == 1``: a single process)."""

    rank: int = 0
    world: int = 1

    @classmethod
    def from_environment(cls, timeout: timedelta = timedelta(minutes=30)) -> DataParallel:
        """Join the process group torchrun describes in the environment (if ``WORLD_SIZE > 1``).

        ``timeout`` bounds every collective: a rank that died or hangs makes the others fail
        with an error instead of waiting forever."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=timeout)
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` under DistributedDataParallel (rank 0's parameters are broadcast)."""
        if self.world == 1:
            return model
        return nn.parallel.DistributedDataParallel(model)

    def shard(self, batch: Batch) -> Batch:
        """This rank's rows of the global batch: ``rank::world``."""
        if self.world == 1:
            return batch
        rows = slice(self.rank, None, self.world)
        return replace(
            batch,
            **{
                f.name: getattr(batch, f.name)[rows]
                for f in fields(batch)
                if isinstance(getattr(batch, f.name), Tensor)
            },
        )

    def total(self, value: Tensor) -> Tensor:
        """The sum of ``value`` over ranks (a new tensor)."""
        value = value.detach().clone()
        if self.world > 1:
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def share_text(self, text: str) -> str:
        """Rank 0's ``text`` on every rank (a run directory's path)."""
        if self.world == 1:
            return text
        size = torch.tensor([len(text.encode())])
        dist.broadcast(size, 0)
        data = torch.zeros(int(size), dtype=torch.uint8)
        if self.is_main:
            data = torch.tensor(list(text.encode()), dtype=torch.uint8)
        dist.broadcast(data, 0)
        return bytes(data.tolist()).decode()

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
