"""Name → class registries, so configuration files and the CLI can name scores and alignments.

A registry maps names (and aliases) to classes and nothing more (STYLE.md §8). Resolving a name of a
class that has learned parameters raises, because its sizes cannot be guessed: such a class must be
constructed by the caller and passed as an object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of classes of one kind (``"score"`` or ``"align"``)."""

    def __init__(self, kind: str, base: type, module: str) -> None:
        self.kind = kind
        self.module = module  # where users find the classes, e.g. "ak.scores"
        self.base = base
        self._classes: dict[str, type] = {}
        self._aliases: dict[str, str] = {}
        self._shared: dict[str, T] = {}  # one instance per stateless name (see ``resolve``)

    def register(self, name: str, *aliases: str) -> Callable[[type], type]:
        """Class decorator: register ``cls`` under ``name`` and its ``aliases``."""

        def decorate(cls: type) -> type:
            for key in (name, *aliases):
                if key in self._classes or key in self._aliases:
                    raise ValueError(f"{self.kind} name {key!r} is already registered")
            self._classes[name] = cls
            for alias in aliases:
                self._aliases[alias] = name
            cls.registry_name = name  # type: ignore[attr-defined]
            return cls

        return decorate

    def names(self) -> list[str]:
        """Canonical names, in registration order (aliases excluded)."""
        return list(self._classes)

    def aliases(self) -> dict[str, str]:
        """Alias → canonical name."""
        return dict(self._aliases)

    def get(self, name: str) -> type:
        """The class registered under ``name`` or one of its aliases."""
        canonical = self._aliases.get(name, name)
        if canonical not in self._classes:
            valid = ", ".join(sorted([*self._classes, *self._aliases]))
            raise ValueError(f"unknown {self.kind} {name!r}; expected one of: {valid}")
        return self._classes[canonical]

    def create(self, name: str) -> T:
        """A new object for the name of a class without learned parameters."""
        cls = self.get(name)
        if getattr(cls, "parametric", False):
            raise ValueError(
                f"{self.kind} {name!r} has learned parameters, so its sizes must be given: "
                f"construct {self.module}.{cls.__name__}(...) and pass the object instead "
                "of the name"
            )
        return cls()  # type: ignore[no-any-return]

    def resolve(self, spec: object) -> T:
        """An object of this kind from a name or an object (returned unchanged).

        For the functional API: objects of names without state (no parameters, buffers that
        never change, not stochastic) are shared between calls, since building an ``nn.Module``
        per call costs more than a small attention call. Modules that own their score or
        alignment use :meth:`create`.
        """
        if isinstance(spec, self.base):
            return spec  # type: ignore[return-value]
        if isinstance(spec, str):
            cls = self.get(spec)
            if getattr(cls, "stochastic", False) or getattr(cls, "parametric", False):
                return self.create(spec)
            if spec not in self._shared:
                self._shared[spec] = self.create(spec)
            return self._shared[spec]
        raise TypeError(
            f"{self.kind} must be a name (str) or a {self.module}.{self.base.__name__} object, "
            f"got {type(spec).__name__}"
        )
