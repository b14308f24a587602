"""Renamed names that keep working: each use warns once per call site with a
``DeprecationWarning`` naming the replacement.

The attention viewer was called "explain" (``attnkit explain``, ``attnkit.run.explain_run``, ...)
while :func:`attnkit.explain` reports the engine's backends; the viewer is now "view", and its old
names are served from here until they are removed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

#: why the viewer's names changed, said with every warning
WHY = "'explain' names the engine's backend report (ak.explain) only"


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (a ``DeprecationWarning``).

    Args:
        old: the old name, as users wrote it (``"attnkit.run.explain_run"``).
        new: its replacement (``"attnkit.run.view_run"``).
        stacklevel: as :func:`warnings.warn`'s, counted from the caller of this function.
    """
    warnings.warn(f"{old} is deprecated: use {new} ({WHY})", DeprecationWarning, stacklevel)


def renamed_attributes(
    module: str, renamed: Mapping[str, tuple[str, Callable[[], Any]]]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) serving old names: ``renamed[old] = (new name, a
    function returning the object)``; the object is imported only when the old name is used.

    Args:
        module: the module's name, for the warning and the AttributeError.
        renamed: the old attribute names, each with its new name and a loader.

    Returns:
        The ``__getattr__`` to assign in the module.
    """

    def __getattr__(name: str) -> Any:
        if name not in renamed:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new, load = renamed[name]
        warn_renamed(f"{module}.{name}", new)
        return load()

    return __getattr__
