"""Attention hooks: the one official way to observe (or change) every engine call.

Every attention computation goes through :func:`attnkit.attention`, which validates its arguments
into an :class:`~attnkit.core.call.AttentionCall` and then asks this module whether anyone is
watching. Hooks are scoped like ``torch.nn.attention.sdpa_kernel`` scopes backend choice: a
``contextvars.ContextVar`` holds the active hooks, ``with attention_hooks(*hooks):`` adds them and
restores the previous value in ``finally``. So hooks are per context: a thread (or asyncio task)
that enters no scope runs its attention untouched, even when it shares modules with one that
records.

A hook is any callable ``hook(call, module, run) -> AttentionOutput``:

* ``call``: the validated call (4-D tensors, resolved score and alignment, structured mask);
* ``module``: the name (as in ``model.named_modules()``) of the innermost watched module running
  when the call was made, or ``None`` for a scope without a model;
* ``run(call, backend=None)``: computes a call — the same one, or a changed one (e.g. asking for
  its weights) — through the hooks entered before this one and then the engine's backend.
  ``run.chosen`` is the backend that computes the call as it was made (see :class:`Run`).

The hook returns the output the caller receives. Recording (:func:`attnkit.interpret.record`),
ablation (:func:`attnkit.evaluate.ablate`), head importance and adversarial attention are hooks;
``attnkit.layers.exact_kinds`` is the scope :func:`exact_attention` below. Nothing rebinds
functions or writes a module's attributes: module attribution uses torch's own
``register_forward_pre_hook`` / ``register_forward_hook``, removed when the scope ends.

Example::

    >>> calls = []
    >>> def count(call, module, run):
    ...     calls.append((module, call.shape))
    ...     return run(call)
    >>> with ak.attention_hooks(count, model=mha):
    ...     mha(x, x, x)
    >>> calls  # [("", (2, 4, 5, 5))]: the model itself is named ""
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any, Protocol

from torch import nn

from attnkit.core.backend import Backend
from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.checks import checked_output

#: which modules a scope watches: ``None`` (all), names / ``fnmatch`` patterns of
#: ``model.named_modules()``, or a predicate ``fn(name, module) -> bool``.
ModuleSelection = Iterable[str] | Callable[[str, nn.Module], bool] | None


class Run(Protocol):
    """Computes an attention call: through the hooks entered earlier, then a backend
    (``backend`` if given, else the engine's choice among the backends allowed here).

    ``chosen`` is the backend that computes the call as it was made: before ``run`` computes
    it, the engine's pick (the first allowed backend that does not decline it); after, the one
    that did compute it — the same unless the pick declined only while running (a kernel that
    failed to compile), when the next backend computed it. The same call with only
    ``return_weights`` changed runs on it too when it can return weights (same arithmetic, and
    one draw of any sampling).
    """

    chosen: Backend

    def __call__(self, call: AttentionCall, backend: str | None = None) -> AttentionOutput: ...


class AttentionHook(Protocol):
    """``hook(call, module, run) -> AttentionOutput``: sees one engine call (module docstring).

    Any callable of this signature is one; :func:`attention_hooks` scopes it.

    Example::

        >>> shapes = []
        >>> def count(call, module, run):  # an AttentionHook
        ...     shapes.append(tuple(call.q.shape))
        ...     return run(call)
        >>> with ak.attention_hooks(count):
        ...     _ = ak.attention(torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8))
        >>> shapes  # the call in canonical 4-D form [B, H, M, d_q]
        [(2, 1, 5, 8)]
    """

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        """See (or change) one call.

        Args:
            call: the validated call: ``q [B, H, M, d_q]``, ``k [B, H, N, d_k]``,
                ``v [B, H, N, d_v]``, the resolved score and alignment, the structured mask.
            module: the name of the innermost watched module running, or ``None`` for a scope
                without a model.
            run: ``run(call, backend=None)`` computes a call (this one or a changed one) through
                the hooks entered before this one and the engine's backend.

        Returns:
            The :class:`~attnkit.AttentionOutput` the caller receives.
        """
        ...


@dataclass(frozen=True, eq=False)
class _Scope:
    hooks: tuple[AttentionHook, ...]
    names: dict[int, str] | None  # id(module) -> its name; None: every call, module None


_SCOPES: ContextVar[tuple[_Scope, ...]] = ContextVar("attnkit_attention_hooks", default=())
# the watched modules running now, innermost last (pushed by forward pre-hooks)
_RUNNING: ContextVar[tuple[int, ...]] = ContextVar("attnkit_running_modules", default=())
# modules whose efficient attention kind runs as exact attention (see exact_attention)
_EXACT: ContextVar[frozenset[int]] = ContextVar("attnkit_exact_attention", default=frozenset())
# Scopes open in any context of the process. A plain global, read before the ContextVars: while
# it is 0 no context can be observed, and ``torch.compile`` (which cannot trace ContextVar.get)
# guards on its value, so code compiled with no scope open is recompiled when one opens.
_OPEN_SCOPES = 0
_OPEN_LOCK = threading.Lock()


@contextmanager
def _counted() -> Iterator[None]:
    global _OPEN_SCOPES
    with _OPEN_LOCK:
        _OPEN_SCOPES += 1
    try:
        yield
    finally:
        with _OPEN_LOCK:
            _OPEN_SCOPES -= 1


def observed() -> bool:
    """Whether any hook is active in this context (one ContextVar read).

    Modules that compute attention outside :func:`attnkit.attention` for speed (a fused
    segment softmax, a cached decoder step) go through it when this is true, so hooks see them.
    """
    return _OPEN_SCOPES > 0 and bool(_SCOPES.get())


def select_modules(model: nn.Module, modules: ModuleSelection) -> dict[nn.Module, str]:
    """The modules of ``model`` a scope watches, each with its name in ``named_modules()``.

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


@contextmanager
def attention_hooks(
    *hooks: AttentionHook, model: nn.Module | None = None, modules: ModuleSelection = None
) -> Iterator[None]:
    """Run ``hooks`` on every :func:`attnkit.attention` call made in this context.

    Args:
        hooks: callables ``hook(call, module, run) -> AttentionOutput`` (module docstring).
            Within one scope, and between nested scopes, the hook given or entered last is
            outermost: it is called first, and its ``run`` reaches the ones before it.
        model: attribute each call to the innermost watched module of ``model`` running when
            it is made; calls made outside the watched modules do not reach the hooks. Without
            a model every call in the context reaches them, with ``module=None``.
        modules: which modules of ``model`` to watch: names or ``fnmatch`` patterns of
            ``model.named_modules()``, or a predicate ``fn(name, module)``; default all.

    A watched module that declares ``forms_weights = False`` (an efficient attention kind, which
    computes no weights through the engine) raises ``ValueError`` when it runs inside the scope:
    the hooks would see nothing of it.

    Yields:
        Nothing: the hooks are active inside the ``with`` block and removed after it.

    Example::

        >>> mha = ak.MultiHeadAttention(16, 4, batch_first=True)
        >>> seen = []
        >>> def note(call, module, run):
        ...     seen.append(module)
        ...     return run(call)
        >>> x = torch.randn(2, 5, 16)
        >>> with ak.attention_hooks(note, model=mha):
        ...     _ = mha(x, x, x)
        >>> seen  # the model itself is named ""
        ['']
    """
    for hook in hooks:
        if not callable(hook):
            raise TypeError(f"a hook must be callable(call, module, run), got {hook!r}")
    if model is None and modules is not None:
        raise ValueError("modules= selects modules of a model: pass model= too")
    watched = None if model is None else select_modules(model, modules)
    scope = _Scope(
        tuple(hooks), None if watched is None else {id(m): n for m, n in watched.items()}
    )
    handles = []
    for module, name in (watched or {}).items():
        handles.append(module.register_forward_pre_hook(_push(scope, name)))
        # always_call: the stack stays right when a forward raises
        handles.append(module.register_forward_hook(_pop(scope), always_call=True))
    token = _SCOPES.set((*_SCOPES.get(), scope))
    try:
        with _counted():
            yield
    finally:
        _SCOPES.reset(token)
        for handle in handles:
            handle.remove()


def _push(scope: _Scope, name: str) -> Callable[[nn.Module, Any], None]:
    def push(module: nn.Module, _args: Any) -> None:
        if scope not in _SCOPES.get():
            return  # another context runs the module: not watched there
        if not getattr(module, "forms_weights", True):
            raise ValueError(
                f"module {name!r} runs the efficient attention kind {module.attention!r}, which "
                "forms no attention weights for hooks to see or replace; select other modules, "
                "or run it as exact attention inside `with attnkit.layers.exact_kinds(model):`"
            )
        _RUNNING.set((*_RUNNING.get(), id(module)))

    return push


def _pop(scope: _Scope) -> Callable[[nn.Module, Any, Any], None]:
    def pop(module: nn.Module, _args: Any, _out: Any) -> None:
        running = _RUNNING.get()
        if scope in _SCOPES.get() and running and running[-1] == id(module):
            _RUNNING.set(running[:-1])

    return pop


class _Choice:
    """The backend computing one engine call, shared by every ``run`` of its hook chain."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend


class _Runner:
    """A :class:`Run`: ``fn`` with the backend computing the engine's call attached."""

    def __init__(
        self, fn: Callable[[AttentionCall, str | None], AttentionOutput], choice: _Choice
    ) -> None:
        self.fn, self.choice = fn, choice

    @property
    def chosen(self) -> Backend:
        return self.choice.backend

    def __call__(self, call: AttentionCall, backend: str | None = None) -> AttentionOutput:
        return self.fn(call, backend)


#: the engine's side: ``compute(call, backend, start)`` computes ``call`` on the backends
#: allowed for it (``backend`` if given), from ``start`` if given, and returns the backend
#: that computed it with the output
Compute = Callable[
    [AttentionCall, "str | None", "Backend | None"], "tuple[Backend, AttentionOutput]"
]


def run_hooked(
    call: AttentionCall, chosen: Backend, compute: Compute, backend: str | None = None
) -> AttentionOutput:
    """Compute ``call`` through the active hooks (the engine's side of this module).

    ``chosen`` is the backend the engine picked for ``call`` among those allowed for it
    (``backend``, the caller's ``backend=``, if given); ``compute`` computes any call a hook
    makes.
    """
    choice = _Choice(chosen)

    def base(c: AttentionCall, asked: str | None = None) -> AttentionOutput:
        if asked is None and c is call:
            ran, out = compute(c, backend, choice.backend)
            choice.backend = ran  # another if the pick declined while running
            return out
        if asked is None and _same_but_weights(c, call):
            # on the user's backend when it takes the change: same arithmetic, same draws (its
            # values passed its checks with the call as made; a preference does not count here)
            if not choice.backend.reasons(c, forced=True):
                return compute(c, backend, choice.backend)[1]
        return compute(c, asked, None)[1]

    run = _Runner(base, choice)
    running = _RUNNING.get()
    for scope in _SCOPES.get():  # entered first = innermost
        if scope.names is None:
            name = None
        else:
            name = next((scope.names[i] for i in reversed(running) if i in scope.names), None)
            if name is None:
                continue  # made outside the modules this scope watches
        for hook in scope.hooks:
            run = _bind(hook, name, run)
    return run(call)


def _bind(hook: AttentionHook, name: str | None, inner: _Runner) -> _Runner:
    def run(c: AttentionCall, backend: str | None = None) -> AttentionOutput:
        def forward(c2: AttentionCall, backend2: str | None = None) -> AttentionOutput:
            # a backend an outer hook asked for (e.g. "reference", so the weights are in the
            # autograd graph) holds for the calls this hook makes too
            return inner(c2, backend2 if backend2 is not None else backend)

        return checked_output(hook(c, name, _Runner(forward, inner.choice)), hook)

    return _Runner(run, inner.choice)


def _same_but_weights(a: AttentionCall, b: AttentionCall) -> bool:
    return all(
        getattr(a, f.name) is getattr(b, f.name)
        for f in fields(AttentionCall)
        if f.name != "return_weights"
    )


@contextmanager
def exact_attention(modules: Iterable[nn.Module]) -> Iterator[None]:
    """In this context, each of ``modules`` (``MultiHeadAttention`` with an efficient kind)
    computes exact attention through :func:`attnkit.attention` instead of its kind.

    The scope behind :func:`attnkit.layers.exact_kinds`; :func:`runs_exact` is what modules ask.
    """
    token = _EXACT.set(_EXACT.get() | {id(m) for m in modules})
    try:
        with _counted():
            yield
    finally:
        _EXACT.reset(token)


def runs_exact(module: nn.Module) -> bool:
    """Whether ``module`` is inside an :func:`exact_attention` scope of this context."""
    if _OPEN_SCOPES == 0:
        return False
    exact = _EXACT.get()
    return bool(exact) and id(module) in exact
