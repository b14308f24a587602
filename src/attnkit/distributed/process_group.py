"""Process groups that fail loudly: creation with a timeout, and the error a dead peer raises.

Every blocking wait of ``torch.distributed`` (rendezvous, collectives, point-to-point receives)
gives up after the process group's ``timeout``. PyTorch's default is 30 minutes for gloo (10 for
NCCL): a run whose peer crashed or hangs sits idle that long. :func:`init_process_group` makes the
timeout an explicit argument, and attnkit's own communication (ring attention) turns the backend's
low-level failure ("Connection reset by peer", "Timed out waiting 3000ms for recv") into a
:class:`PeerFailureError` that says which rank waited for which peer, and for what.
"""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist
from torch import nn

#: default timeout of :func:`init_process_group`, in seconds
DEFAULT_TIMEOUT = 300.0


class PeerFailureError(RuntimeError):
    """A peer rank died, hung, or did not answer within the process group's timeout.

    Example::

        >>> issubclass(PeerFailureError, RuntimeError)
        True
    """


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it for a socket bound to port 0), for a
    ``tcp://host:port`` rendezvous of processes on one machine.

    Args:
        host: the interface to bind.

    Returns:
        The port number.

    Example::

        >>> 0 < free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _as_timedelta(timeout: float | datetime.timedelta) -> datetime.timedelta:
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"timeout must be seconds (float) or a datetime.timedelta, got {type(timeout).__name__}"
        )
    if not seconds > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {seconds}")
    return datetime.timedelta(seconds=seconds)


def default_backend(cuda_available: bool | None = None) -> str:
    """The process-group backend for this machine: ``"nccl"`` when CUDA is available (NCCL moves
    GPU tensors directly between GPUs), else ``"gloo"`` (CPU tensors).

    Args:
        cuda_available: ``None`` asks ``torch.cuda.is_available()``.

    Returns:
        ``"nccl"`` or ``"gloo"``.

    Example::

        >>> default_backend(cuda_available=False)
        'gloo'
    """
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    return "nccl" if cuda_available else "gloo"


def init_process_group(
    backend: str | None = None,
    *,
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    timeout: float | datetime.timedelta = DEFAULT_TIMEOUT,
) -> None:
    """Join the default process group, with a timeout on every blocking wait.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; ``None`` picks NCCL when CUDA is available, else gloo.
        init_method: ``"tcp://host:port"`` or ``"file:///path"``; ``None`` reads torchrun's
            environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``).
        rank, world_size: this process's rank and the number of processes (``None``: from the
            environment, as torchrun sets them).
        timeout: seconds (or a ``timedelta``) after which a wait for a peer — the rendezvous, a
            collective, a receive — fails instead of hanging; a dead peer's closed connection
            fails at once.

    Example::

        >>> init_process_group(init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
        ...                    world_size=1, timeout=30)
        >>> torch.distributed.get_world_size()
        1
        >>> torch.distributed.destroy_process_group()  # before another group in this process
    """
    if dist.is_initialized():
        raise RuntimeError(
            "the default process group is already initialised; call "
            "torch.distributed.destroy_process_group() first"
        )
    delta = _as_timedelta(timeout)
    if backend is None:
        backend = default_backend()
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or None, got {backend!r}")
    options: dict[str, object] = {"backend": backend, "timeout": delta}
    if init_method is not None:
        options["init_method"] = init_method
    if rank is not None:
        options["rank"] = rank
    if world_size is not None:
        options["world_size"] = world_size
    dist.init_process_group(**options)  # type: ignore[arg-type]


def rank_and_size(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """``(rank within group, group size)``; ``(0, 1)`` when torch.distributed is not initialised
    (one process, nothing to communicate)."""
    if not (dist.is_available() and dist.is_initialized()):
        if group is not None:
            raise RuntimeError("a group was given but torch.distributed is not initialised")
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def all_reduce_gradients(module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Sum every parameter's gradient over ``group`` (in place).

    With the sequence split over ranks (context parallelism), each rank's backward gives the
    gradient of its own positions' share of the loss; their sum is the gradient of the whole
    loss (normalise the loss by the *global* number of positions). Parameters without a gradient
    on every rank are summed as zeros, so all ranks issue the same collectives.

    Args:
        module: whose parameters' ``.grad`` are summed.
        group: the ranks (``None``: the default group).

    Example::

        >>> def work(rank, world_size):  # on each rank
        ...     linear = torch.nn.Linear(2, 1, bias=False)
        ...     torch.nn.init.ones_(linear.weight)
        ...     linear(torch.full((1, 2), float(rank + 1))).sum().backward()
        ...     all_reduce_gradients(linear)
        ...     return linear.weight.grad.tolist()
        >>> [result.value for result in ak.distributed.launch_local(work, 2)]
        [[[3.0, 3.0]], [[3.0, 3.0]]]
    """
    _, world = rank_and_size(group)
    if world == 1:
        return
    for p in module.parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group)
