"""Predicted peak memory of an attention call, and the budget the engine keeps calls within.

Each backend declares ``memory(call, backward) -> bytes``: the peak of the memory its tensors
hold while it computes ``call`` — the outputs, every intermediate tensor and what autograd saves —
on top of the inputs, which exist before the call. With ``backward`` (autograd will differentiate
the call) the peak is over the forward and the backward pass together, the input gradients
included. The figures are those a ``TorchDispatchMode`` tally of tensor storages sees (each
tensor's bytes from the op that creates it until it is freed); scratch space inside a fused kernel
is not counted. ``tests/core/test_memory.py`` holds every backend's prediction to within 25% of
that tally over a range of sizes; ``tests/core/test_memory_compiled.py`` holds those of ``flex``
and ``additive``, whose buffers inductor allocates out of the tally's sight, to within 25% of the
peak RSS of a warm call in a fresh process.

The engine passes over a backend whose prediction exceeds the memory budget (the next, slower
one usually needs less); when every backend that takes a call exceeds it, the one predicted to
need least runs. The budget is, by precedence, the ``memory_budget=`` of the innermost
``ak.backends(...)`` scope, the environment variable ``ATTNKIT_MEMORY_BUDGET``, or
:data:`DEFAULT_FRACTION` of the memory available now (the device's free memory for CUDA tensors,
``MemAvailable`` of ``/proc/meminfo`` for the CPU). A budget is a number of bytes, a size with a
unit (``"512MiB"``, ``"8GB"``) or a percentage of the available memory (``"40%"``).

Shapes: B batch, H heads, M queries, N keys, D/Dv feature sizes.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from attnkit.core.call import AttentionCall, compute_dtype
from attnkit.core.scores import Score

#: the share of the available memory a call may use when no budget is set
DEFAULT_FRACTION = 0.5
#: the environment variable that sets the budget
BUDGET_VARIABLE = "ATTNKIT_MEMORY_BUDGET"
#: calls predicted below this never read the available memory (any machine has that much free)
SMALL = 16 << 20

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


@dataclass(frozen=True)
class Sizes:
    """The sizes of a call that memory depends on; tensor sizes in elements."""

    b: int
    h: int
    m: int
    n: int
    dq: int  # feature size of the query features (that the score's product reads)
    dk: int
    dv: int
    item: int  # bytes per element of the inputs
    compute: int  # bytes per element of the compute dtype (float32 for half inputs)

    @property
    def rows(self) -> int:
        """``B·H·M``: one number per query (lse, running max and sum)."""
        return self.b * self.h * self.m

    @property
    def scores(self) -> int:
        """``B·H·M·N``: one score (or weight) per query and key."""
        return self.b * self.h * self.m * self.n

    @property
    def queries(self) -> int:
        return self.b * self.h * self.m * self.dq

    @property
    def keys(self) -> int:
        return self.b * self.h * self.n * self.dk

    @property
    def values(self) -> int:
        return self.b * self.h * self.n * self.dv

    @property
    def context(self) -> int:
        return self.b * self.h * self.m * self.dv


def sizes(call: AttentionCall) -> Sizes:
    """:class:`Sizes` of ``call`` (``q [B, H, M, D]``, ``k [B, H, N, D]``, ``v [B, H, N, Dv]``)."""
    b, h, m, n = call.shape
    dq = call.q.shape[-1]
    query_proj = getattr(call.score, "query_proj", None)
    if isinstance(query_proj, torch.nn.Linear):  # W q of the general scores: D_k features
        dq = query_proj.out_features
    return Sizes(
        b,
        h,
        m,
        n,
        dq,
        call.k.shape[-1],
        call.v.shape[-1],
        call.q.element_size(),
        compute_dtype(call.q.dtype).itemsize,
    )


def feature_bytes(call: AttentionCall) -> int:
    """Bytes of the score's per-vector features ``q'``, ``k'`` when they are new tensors (a
    projection, a normalisation, a cast of half inputs to float32), else 0."""
    z = sizes(call)
    own = type(call.score).features is not Score.features
    if not own and z.compute == z.item:
        return 0
    return (z.queries + z.keys) * z.compute


def mask_bytes(call: AttentionCall) -> int:
    """Bytes of the bool ``[B|1, H|1, M, N]`` mask that ``call.full_mask()`` builds from
    ``causal`` and a ``mask_mod`` (0 when the mask is the user's tensor, or absent)."""
    if not (call.causal or call.mask_mod is not None):
        return 0
    b, h, m, n = call.shape
    lead = 1
    if call.mask is not None:
        lead = call.mask.shape[0] * call.mask.shape[1]
    if call.mask_mod is not None:
        lead = b * h  # a mod may read the batch and head indices
    return lead * m * n


def mask_elements(call: AttentionCall) -> int:
    """Elements of the one mask tensor a fused kernel is given: the bool mask, the causal
    ``[M, N]`` and a ``mask_mod``'s ``[B, H, M, N]``, broadcast with the float mask (0 when there
    is none of them)."""
    b, h, m, n = call.shape
    shapes = [tuple(t.shape) for t in (call.mask, call.bias) if t is not None]
    if call.causal:
        shapes.append((1, 1, m, n))
    if call.mask_mod is not None:
        shapes.append((b, h, m, n))
    if not shapes:
        return 0
    # 4-D shapes that broadcast (checked by prepare): the largest size of each dim, by hand
    # (torch.broadcast_shapes costs more than the rest of a small call's dispatch)
    return math.prod(max(dims) for dims in zip(*shapes, strict=True))


def parse_budget(value: int | str) -> int:
    """Bytes of a budget: an ``int`` of bytes, or a string: a size with an optional unit
    (``"2GiB"``, ``"512 MB"``) or a percentage of the available memory (``"40%"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(
            f"a memory budget is bytes (int) or a string like '2GiB' or '40%', got "
            f"{type(value).__name__}"
        )
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"a memory budget must be > 0 bytes, got {value}")
        return value
    text = value.strip().lower()
    percent = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", text)
    if percent:
        share = float(percent.group(1)) / 100
        if not 0 < share <= 1:
            raise ValueError(f"a memory budget in percent must be in (0, 100], got {value!r}")
        return max(1, int(share * available_memory()))
    size = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?", text)
    if not size or float(size.group(1)) <= 0:
        raise ValueError(
            f"a memory budget is bytes, a size like '2GiB' or '512MB', or a percentage like "
            f"'40%', got {value!r}"
        )
    return int(float(size.group(1)) * _UNITS[size.group(2) or ""])


_available: tuple[float, int] | None = None  # (when read, bytes): read again after a second


def process_available_memory() -> int | None:
    """Bytes this process can still allocate: the system's available memory (Linux's
    ``MemAvailable``), bounded by a container's limit (cgroup v2's ``memory.max`` less its
    ``memory.current``) and by the address-space limit (``ulimit -v``) less what the process
    maps; ``None`` where none is known."""
    bounds = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    bounds.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):  # "max" (no limit) is not a number
        cgroup = Path("/sys/fs/cgroup")
        limit = int((cgroup / "memory.max").read_text())
        bounds.append(max(0, limit - int((cgroup / "memory.current").read_text())))
    try:
        import resource
    except ImportError:  # not a Unix
        return min(bounds, default=None)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        mapped = 0
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open("/proc/self/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmSize:"):
                        mapped = int(line.split()[1]) * 1024
        bounds.append(max(0, soft - mapped))
    return min(bounds, default=None)


def available_memory(device: torch.device | None = None) -> int:
    """Bytes free now: the CUDA device's free memory, else what this process can still
    allocate (:func:`process_available_memory`: ``MemAvailable`` bounded by a container's limit
    and ``ulimit -v``; the free pages where none is known). The CPU figure is re-read at most
    once a second."""
    if device is not None and device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    global _available
    now = time.monotonic()
    if _available is not None and now - _available[0] < 1.0:
        return _available[1]
    free = process_available_memory()
    if free is None:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    _available = (now, free)
    return free


def default_budget(device: torch.device | None = None) -> int:
    """The budget without a scope: ``ATTNKIT_MEMORY_BUDGET`` if set, else
    :data:`DEFAULT_FRACTION` of :func:`available_memory`."""
    text = os.environ.get(BUDGET_VARIABLE)
    if text:
        try:
            return parse_budget(int(text) if text.strip().isdigit() else text)
        except (TypeError, ValueError) as error:
            raise ValueError(f"environment variable {BUDGET_VARIABLE}: {error}") from None
    return max(1, int(DEFAULT_FRACTION * available_memory(device)))


def format_bytes(count: int) -> str:
    """``count`` bytes for people: ``"12.0 MiB"``, ``"3.21 GiB"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            value = count / size
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{count} B"
