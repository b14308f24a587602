"""``torch.nn.MultiheadAttention`` computed by attnkit's engine, so attention hooks see it.

torch's module computes its attention in one fused function, where no hook can see or replace the
weights or keep them in the autograd graph. :class:`attnkit.MultiHeadAttention` is a drop-in with
the same parameter names and conventions, so inside :func:`through_engine` a forward hook
(torch's ``register_forward_hook``; nothing is rebound) computes each torch module's call again
with a twin ``ak.MultiHeadAttention`` on the torch module's own parameters
(``torch.func.functional_call``). Every attention hook then sees the call under the torch module's
name. The twin's result either replaces the module's output (``replace=True``: ablation,
recording inside the autograd graph; same outputs up to rounding, gradients reach the same
parameters) or is only observed (``replace=False``: the module returns torch's own output, bit
for bit, and the twin runs without gradient or dropout, drawing nothing from the RNG).

The cost: the torch module's own forward still runs, so its attention is computed twice inside
the scope. Nested scopes on one module compute the twin once, replacing if any of them asks to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.func import functional_call

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.hooks import (
    AttentionHook,
    ModuleSelection,
    Run,
    attention_hooks,
    select_modules,
)
from attnkit.mechanisms.multi_head import MultiHeadAttention

# id(module) -> (the innermost scope routing it in this context, whether the twin replaces)
_ROUTED: ContextVar[tuple[tuple[int, object, bool], ...]] = ContextVar(
    "attnkit_torch_modules_routed", default=()
)


def attnkit_twin(module: nn.MultiheadAttention) -> MultiHeadAttention:
    """An ``ak.MultiHeadAttention`` with ``module``'s configuration, its parameters on the
    ``meta`` device (it is always called with ``module``'s parameters)."""
    return MultiHeadAttention(
        module.embed_dim,
        module.num_heads,
        dropout=module.dropout,
        bias=module.in_proj_bias is not None,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        kdim=module.kdim,
        vdim=module.vdim,
        batch_first=module.batch_first,
        device="meta",
    )


@contextmanager
def through_engine(modules: Sequence[nn.MultiheadAttention], *, replace: bool) -> Iterator[None]:
    """In this context, each of ``modules`` also computes its attention through attnkit's engine.

    Args:
        modules: ``torch.nn.MultiheadAttention`` modules.
        replace: the module returns the engine's result (in the autograd graph); else torch's
            own output, the engine's computed alongside without gradient.
    """
    for module in modules:
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"expected torch.nn.MultiheadAttention, got {type(module).__name__}")
    owner = object()
    routed = dict((i, (o, r)) for i, o, r in _ROUTED.get())
    handles = []
    for module in modules:
        outer = routed.get(id(module))
        routed[id(module)] = (owner, replace or (outer is not None and outer[1]))
        handles.append(
            module.register_forward_hook(_twin_hook(attnkit_twin(module), owner), with_kwargs=True)
        )
    token = _ROUTED.set(tuple((i, o, r) for i, (o, r) in routed.items()))
    try:
        yield
    finally:
        _ROUTED.reset(token)
        for handle in handles:
            handle.remove()


def _twin_hook(twin: MultiHeadAttention, owner: object) -> Any:
    def hook(
        module: nn.MultiheadAttention, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> Any:
        route = next(((o, r) for i, o, r in _ROUTED.get() if i == id(module)), None)
        if route is None or route[0] is not owner:
            return None  # not routed in this context, or an inner scope routes it
        tensors: dict[str, Tensor] = dict(module.named_parameters())
        tensors.update(module.named_buffers())
        if route[1]:
            twin.train(module.training)
            out: tuple[Tensor, Tensor | None] = functional_call(twin, tensors, args, kwargs)
            return out
        twin.train(False)  # observed only: no dropout draws, so the run's randomness is kept
        with torch.no_grad():
            functional_call(twin, tensors, args, kwargs)
        return None

    return hook


@contextmanager
def watch_model(
    hook: AttentionHook, model: nn.Module, modules: ModuleSelection = None, *, replace: bool
) -> Iterator[None]:
    """``attention_hooks(hook, model=model, modules=modules)``, with the watched
    ``torch.nn.MultiheadAttention`` modules computed through the engine (:func:`through_engine`)
    so ``hook`` sees them too."""
    torch_modules = [
        m for m in select_modules(model, modules) if isinstance(m, nn.MultiheadAttention)
    ]
    # routed first: its forward hook then runs while the scope still counts the module as running
    with through_engine(torch_modules, replace=replace):
        with attention_hooks(hook, model=model, modules=modules):
            yield


HookT = TypeVar("HookT", bound="ModelHook")


class ModelHook:
    """Base of an attention hook that is its own scope over a model's modules (``record``,
    ``ablate``): ``with hook:`` enters :func:`watch_model` with it; subclasses implement
    ``__call__(call, module, run)`` and say whether torch modules return the engine's output."""

    #: the watched ``torch.nn.MultiheadAttention`` modules return the engine's output
    replace_torch_outputs = False
    #: what the hook does to the calls, for the message when it saw none ("recorded", ...)
    what = "observed"

    def __init__(self, model: nn.Module, modules: ModuleSelection = None) -> None:
        select_modules(model, modules)  # refuse a selection that matches nothing now
        self.model, self.modules = model, modules
        self._scope: AbstractContextManager[None] | None = None

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        raise NotImplementedError

    def __enter__(self: HookT) -> HookT:
        if self._scope is not None:
            raise RuntimeError(f"this {type(self).__name__} is active already; make another")
        self._seen = 0
        self._scope = watch_model(
            self._counted, self.model, self.modules, replace=self.replace_torch_outputs
        )
        self._scope.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        scope, self._scope = self._scope, None
        if scope is not None:
            scope.__exit__(*exc)
        if exc[0] is None and not self._seen:
            # nothing reached the hook: say why when the model's attention is out of its sight
            check_attention_implementation(self.model, self.what)

    def _counted(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        self._seen += 1
        return self(call, module, run)


def check_attention_implementation(model: nn.Module, what: str = "recorded") -> None:
    """Raise when ``model`` holds a Hugging Face model whose attention does not run on attnkit.

    Such a model computes its attention in its own kernels, where no attention hook sees it: a
    recording (or head importance) over it would be empty without a word. Found by duck typing
    (a ``config._attn_implementation`` on the model or a submodule), so transformers is never
    imported here.
    """
    for name, module in model.named_modules():
        implementation = getattr(getattr(module, "config", None), "_attn_implementation", None)
        if isinstance(implementation, str) and implementation != "attnkit":
            where = f" (module {name!r})" if name else ""
            raise ValueError(
                f"no attention {what}: the Hugging Face model{where} runs "
                f"attn_implementation={implementation!r}, which attnkit cannot observe; load it "
                'with attn_implementation="attnkit" after `import attnkit.integrations.huggingface`'
            )
