"""Point-to-point exchange around a ring of ranks, overlapped with computation.

Each rank sends to ``rank + 1`` and receives from ``rank - 1`` (mod W). :meth:`Ring.shift` posts
the non-blocking ``isend``/``irecv`` pairs and returns at once, so the caller computes on the
block it holds while the next one travels; :meth:`Shift.wait` then returns the received tensors.
A failure of either half of a step (a dead or hung peer) is re-raised as a
:class:`~attnkit.distributed.process_group.PeerFailureError` naming the ranks and the message:
posting the messages fails at once when the peer's connection is already closed ("Connection
closed by peer"), waiting for them when it closes, or times out, while they travel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.distributed as dist
from torch import Tensor

from attnkit.distributed.process_group import PeerFailureError


class Shift:
    """Messages in flight: the tensors sent to the next rank and those coming from the previous."""

    def __init__(self, ring: Ring, what: str, works: list, received: list[Tensor]) -> None:
        self.ring, self.what, self.works, self.received = ring, what, works, received

    def wait(self) -> list[Tensor]:
        """Block until this shift's messages arrived (and were sent); the received tensors."""
        try:
            for work in self.works:
                work.wait()
        except RuntimeError as error:  # gloo/NCCL failures are RuntimeError (DistBackendError)
            raise self.ring.failure(self.what, error) from error
        return self.received


class Ring:
    """The ring of ranks of ``group``; tags keep concurrent messages of one pair apart (gloo
    matches messages by source and tag; every rank creates the same shifts in the same order, so
    their tags agree)."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.next = (self.rank + 1) % self.world_size
        self.prev = (self.rank - 1) % self.world_size
        self._next_global = (
            dist.get_global_rank(group, self.next) if group is not None else self.next
        )
        self._prev_global = (
            dist.get_global_rank(group, self.prev) if group is not None else self.prev
        )
        self._count = 0

    def shift(self, tensors: Sequence[Tensor], what: str) -> Shift:
        """Send ``tensors`` to the next rank and receive same-shaped ones from the previous."""
        ops, received = [], []
        for tensor in tensors:
            tag = self._count
            self._count += 1
            buffer = tensor.new_empty(tensor.shape)
            # One batch of sends and receives: NCCL needs them issued together to avoid a deadlock
            # between two ranks that both send first; gloo simply posts them in order.
            ops.append(dist.P2POp(dist.irecv, buffer, self._prev_global, self.group, tag))
            ops.append(
                dist.P2POp(dist.isend, tensor.contiguous(), self._next_global, self.group, tag)
            )
            received.append(buffer)
        try:
            works = dist.batch_isend_irecv(ops)
        except RuntimeError as error:  # the peer's connection closed before this step
            raise self.failure(what, error) from error
        return Shift(self, what, works, received)

    def failure(self, what: str, error: BaseException) -> PeerFailureError:
        """The error of a failed step of this ring: ``what`` was awaited from the previous rank,
        ``error`` is the backend's."""
        return PeerFailureError(
            f"rank {self.rank} of {self.world_size} (ring attention) waited for {what} from rank "
            f"{self.prev} and sent to rank {self.next}, and the exchange failed: a peer died, "
            "hangs, or did not answer within the process group's timeout (set it with "
            "attnkit.distributed.init_process_group(timeout=...)). Backend error: "
            f"{str(error).strip()[:300]}"
        )
