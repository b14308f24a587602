"""What the compiled backends (``flex``, ``additive``) do when ``torch.compile`` fails for a kind
of call: remember it (so that kind of call is declined from then on, without compiling again),
warn once, and decline, so the engine runs the call on the next backend (``tiled``)."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Hashable

from attnkit.core.backend import Declined

#: kinds of call remembered per backend at most (the oldest is forgotten first)
KEPT = 64


def remember(table: OrderedDict, key: Hashable, value: object, limit: int = KEPT) -> None:
    """``table[key] = value``, keeping the ``limit`` most recent keys."""
    table[key] = value
    while len(table) > limit:
        table.popitem(last=False)


def failure_reason(error: Exception) -> str:
    """One line naming the error: its type and the first line of its message (≤ 200 chars)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


def decline_after_failure(
    failed: OrderedDict, key: Hashable, error: Exception, kernel: str
) -> Declined:
    """Remember that compiling ``kernel`` (e.g. ``"FlexAttention"``) failed for the kind of call
    ``key``, warn, and return the ``Declined`` the engine moves on with."""
    reason = failure_reason(error)
    remember(failed, key, reason)
    warnings.warn(
        f"attnkit: compiling {kernel} failed ({reason}); this kind of call runs on the next "
        "backend (tiled) from now on",
        RuntimeWarning,
        stacklevel=3,
    )
    return Declined((f"compiling {kernel} for this kind of call failed: {reason}",))
