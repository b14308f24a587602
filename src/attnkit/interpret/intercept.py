"""Seeing (and changing) the attention computed inside a model's modules, without editing them.

Every attnkit module computes its attention through one function, :func:`attnkit.attention`, and
that function asks ``attnkit.core.engine.choose_backend`` how to run each call. While an
:class:`EngineSession` is active, that lookup is wrapped: when a call is made inside one of the
session's modules (a forward pre-hook / forward hook pair keeps a stack of the running modules),
the session's :meth:`~EngineSession.intercept` receives the call and a ``run`` function that
computes any call on the backend the engine would choose. Recording (``interpret.record``) and
ablation (``evaluate.ablate``) are two such sessions. Sessions nest: the one entered last sees
what the ones entered before it produce.

This catches every engine call of attnkit modules and of user modules that call
``ak.attention`` themselves, whatever name the function was imported under, because the
engine itself looks ``choose_backend`` up at call time.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any, Protocol, TypeVar

from torch import nn

import attnkit.core.engine as engine
from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.interpret.torch_modules import through_attnkit

#: which modules a session watches: ``None`` (all), names / ``fnmatch`` patterns of
#: ``model.named_modules()``, or a predicate ``fn(name, module) -> bool``.
ModuleSelection = Iterable[str] | Callable[[str, nn.Module], bool] | None


class Run(Protocol):
    """Computes an attention call (on ``backend`` if given, else the engine's choice).

    ``chosen`` is the backend the engine picked for the intercepted call; the same call with
    only ``return_weights`` changed runs there too when that backend can return weights.
    """

    chosen: engine.Backend

    def __call__(self, call: AttentionCall, backend: str | None = None) -> AttentionOutput: ...


class _Runner:
    def __init__(self, fn: Callable[..., AttentionOutput], chosen: engine.Backend) -> None:
        self.fn, self.chosen = fn, chosen

    def __call__(self, call: AttentionCall, backend: str | None = None) -> AttentionOutput:
        return self.fn(call, backend)


_SESSIONS: list[EngineSession] = []
SessionT = TypeVar("SessionT", bound="EngineSession")
_ORIGINAL_CHOOSE = engine.choose_backend


def select_modules(model: nn.Module, modules: ModuleSelection) -> dict[nn.Module, str]:
    """The modules of ``model`` a session watches, each with its name in ``named_modules()``.

    Raises ``ValueError`` when a name or pattern matches no module, listing the valid names.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    named = list(model.named_modules())
    if modules is None:
        return {m: name for name, m in named}
    if callable(modules):
        return {m: name for name, m in named if modules(name, m)}
    if isinstance(modules, str):
        modules = [modules]
    chosen: dict[nn.Module, str] = {}
    for pattern in modules:
        hits = [(name, m) for name, m in named if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            valid = ", ".join(repr(name) for name, _ in named[:30])
            raise ValueError(f"no module of the model is named {pattern!r}; modules: {valid}")
        chosen.update({m: name for name, m in hits})
    return chosen


class EngineSession(ABC):
    """Base of a context manager that intercepts the engine calls made inside selected modules.

    Subclasses implement :meth:`intercept`; the call is attributed to the innermost selected
    module running when it is made. Subclasses that set ``reroute_torch_attention`` also reach
    the selected ``torch.nn.MultiheadAttention`` modules, which then run through
    ``ak.MultiHeadAttention`` (see :mod:`attnkit.interpret.torch_modules`).
    """

    reroute_torch_attention = False

    def __init__(self, model: nn.Module, modules: ModuleSelection = None) -> None:
        self.model = model
        self.watched = select_modules(model, modules)
        self._stack: list[str] = []
        self._handles: list[Any] = []
        self._exit_stack = ExitStack()

    def current(self) -> str | None:
        """Name of the innermost selected module now running (``None`` outside them)."""
        return self._stack[-1] if self._stack else None

    @abstractmethod
    def intercept(self, name: str, call: AttentionCall, run: Run) -> AttentionOutput:
        """Compute ``call``, made inside module ``name``; ``run`` computes any call."""

    def _hook_modules(self) -> None:
        for module, name in self.watched.items():

            def push(m: nn.Module, _args: Any, name: str = name) -> None:
                self._stack.append(name)  # first: the pop hook runs even if this raises
                if not getattr(m, "forms_weights", True):
                    # an efficient kind computes no weights, so nothing would be recorded or
                    # replaced: a silent no-op would report the model itself as its ablation
                    raise ValueError(
                        f"{type(self).__name__}: module {name!r} runs the efficient attention "
                        f"kind {m.attention!r}, which forms no attention weights to see or "
                        "replace; select other modules, or run it as exact attention inside "
                        "`with attnkit.layers.exact_kinds(model):`"
                    )

            def pop(_m: nn.Module, _args: Any, _out: Any) -> None:
                self._stack.pop()

            self._handles.append(module.register_forward_pre_hook(push))
            # always_call: the stack stays right when a forward raises
            self._handles.append(module.register_forward_hook(pop, always_call=True))

    def __enter__(self: SessionT) -> SessionT:
        self._hook_modules()
        if self.reroute_torch_attention:
            torch_modules = [m for m in self.watched if isinstance(m, nn.MultiheadAttention)]
            self._exit_stack.enter_context(through_attnkit(torch_modules))
        if not _SESSIONS:
            engine.choose_backend = _choose_backend
        _SESSIONS.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()
        self._exit_stack.close()
        _SESSIONS.remove(self)
        if not _SESSIONS:
            engine.choose_backend = _ORIGINAL_CHOOSE


def sessions_active() -> bool:
    """Whether any session is watching: modules that compute attention outside
    :func:`attnkit.attention` for speed go through it then, so the sessions see their calls."""
    return bool(_SESSIONS)


def _choose_backend(call: AttentionCall, backend: str | None = None) -> engine.Backend:
    """``engine.choose_backend`` while sessions are active: the chosen backend, whose ``run``
    passes through every session that has one of its modules running."""
    chosen = _ORIGINAL_CHOOSE(call, backend)
    active = [(s, name) for s in _SESSIONS if (name := s.current()) is not None]
    if not active:
        return chosen

    def base(c: AttentionCall, backend: str | None = None) -> AttentionOutput:
        if backend is None and (c is call or (chosen.weights and _same_but_weights(c, call))):
            return chosen.run(c)  # the user's backend (forced or chosen), same arithmetic
        return _ORIGINAL_CHOOSE(c, backend).run(c)

    run: Run = _Runner(base, chosen)
    for session, name in active:  # the last entered session is outermost
        run = _bind(session, name, run)
    return dataclasses.replace(chosen, run=run)


def _same_but_weights(a: AttentionCall, b: AttentionCall) -> bool:
    return all(
        getattr(a, f.name) is getattr(b, f.name)
        for f in dataclasses.fields(AttentionCall)
        if f.name != "return_weights"
    )


def _bind(session: EngineSession, name: str, inner: Run) -> Run:
    def run(c: AttentionCall, backend: str | None = None) -> AttentionOutput:
        def forward(c2: AttentionCall, backend2: str | None = None) -> AttentionOutput:
            # a backend an outer session asked for (e.g. "reference", so the weights are in the
            # autograd graph) holds for the calls this session makes too
            return inner(c2, backend2 if backend2 is not None else backend)

        return session.intercept(name, c, _Runner(forward, inner.chosen))

    return _Runner(run, inner.chosen)


def weights_call(call: AttentionCall) -> AttentionCall:
    """``call`` asking for its weights, nothing else changed."""
    return dataclasses.replace(call, return_weights=True)
