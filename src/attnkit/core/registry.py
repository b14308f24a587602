"""The one way attnkit names things: a :class:`Registry` and its ``register`` decorator.

Scores, alignments, attention kinds, backends and tasks each have one registry, and each entry
joins it the same way, as Hugging Face's ``AttentionInterface.register`` does::

    @SCORES.register("additive", "concat")
    class Additive(Score): ...

    @KINDS.register("linear")
    class LinearAttention: ...

An entry is whatever its registry holds (a class, a factory, an object); the registry maps names
and aliases to it and nothing more. Built-in entries register when the module defining them is
imported, and each registry's package imports those modules explicitly (never by name), so a
reader and import-linter can follow every registration.

Registries of classes with a ``base`` (scores, alignments) also build objects from names:
resolving the name of a class that has learned parameters raises, because its sizes cannot be
guessed; such a class must be constructed by the caller and passed as an object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
E = TypeVar("E")


class Registry(Generic[T]):
    """Names (and aliases) of one kind of thing (``"score"``, ``"task"``, ...) mapped to entries.

    Args:
        kind: what an entry is, in messages (``"unknown score 'foo'; expected one of: ..."``).
        base: for registries of classes: the class every entry subclasses, and whose objects
            :meth:`resolve` passes through unchanged.
        module: where users find the classes (``"ak.scores"``), in messages.
    """

    def __init__(self, kind: str, base: type | None = None, module: str = "") -> None:
        self.kind = kind
        self.module = module
        self.base = base
        self._entries: dict[str, Any] = {}
        self._aliases: dict[str, str] = {}
        self._shared: dict[str, T] = {}  # one instance per stateless name (see ``resolve``)

    def register(self, name: str, *aliases: str) -> Callable[[E], E]:
        """Decorator: register the decorated class, function or object under ``name`` and its
        ``aliases``, and return it unchanged. A class also learns its ``registry_name``.

        Raises:
            TypeError: ``name`` or an alias is not a non-empty str.
            ValueError: a name or alias is already registered.
        """
        for key in (name, *aliases):
            if not isinstance(key, str) or not key:
                raise TypeError(f"a {self.kind} name must be a non-empty str, got {key!r}")

        def decorate(entry: E) -> E:
            for key in (name, *aliases):
                if key in self._entries or key in self._aliases:
                    raise ValueError(f"{self.kind} name {key!r} is already registered")
            self._entries[name] = entry
            for alias in aliases:
                self._aliases[alias] = name
            if isinstance(entry, type):
                entry.registry_name = name  # type: ignore[attr-defined]
            return entry

        return decorate

    def names(self) -> list[str]:
        """Canonical names, in registration order (aliases excluded)."""
        return list(self._entries)

    def values(self) -> list[Any]:
        """The entries, in registration order (for a registry whose order matters, e.g. the
        backends the engine tries first)."""
        return list(self._entries.values())

    def aliases(self) -> dict[str, str]:
        """Alias → canonical name."""
        return dict(self._aliases)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._aliases)

    def __iter__(self) -> Iterator[Any]:
        """The entries, in registration order (``names()`` gives their names)."""
        return iter(self.values())

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str) -> Any:
        """The entry registered under ``name`` or one of its aliases; ``ValueError`` listing the
        registered names otherwise."""
        canonical = self._aliases.get(name, name) if isinstance(name, str) else name
        if canonical not in self._entries:
            valid = ", ".join(sorted([*self._entries, *self._aliases])) or "(none registered)"
            raise ValueError(f"unknown {self.kind} {name!r}; expected one of: {valid}")
        return self._entries[canonical]

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
        """An object of this kind from a name or an object of ``base`` (returned unchanged).

        For the functional API: objects of names without state (no parameters, buffers that
        never change, not stochastic) are shared between calls, since building an ``nn.Module``
        per call costs more than a small attention call. Modules that own their score or
        alignment use :meth:`create`.
        """
        if self.base is None:
            raise TypeError(f"the {self.kind} registry holds no classes to resolve objects of")
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
