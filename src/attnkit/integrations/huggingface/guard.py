"""Which Hugging Face models run on attnkit, and the refusal of every other one.

``attn_implementation="attnkit"`` works through transformers' attention interface: a model's
attention module looks its function up with
``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)``
and calls it. transformers accepts any registered name for any model without checking that the
model looks it up. BLOOM, DeBERTa-v2, XLNet and BigBird compute their own attention: loaded "on
attnkit" they never call it (BLOOM even turns non-causal: it adds the boolean mask built for the
name as a float). Falcon, GPT-Neo and MPT fail with a bare ``KeyError`` or ``AttributeError``.
So such a model is refused with one line (:func:`refusal`):

1. **When it is built** (``from_pretrained``, ``from_config``, a constructor), if the source of
   its class defines an attention module and never names the interface: the test transformers
   itself applies before it lets ``set_attn_implementation`` switch a model
   (``PreTrainedModel._can_set_attn_implementation``). transformers offers no hook at load for a
   registered implementation, so :func:`install` adds torch's global module-registration hook
   (``torch.nn.modules.module.register_module_module_registration_hook``): when a
   ``PreTrainedModel`` configured for ``"attnkit"`` registers its first submodule, its class is
   judged. The hook changes nothing; it only raises.
2. **At the end of its first forward**, when the source cannot tell (a class defined in a
   notebook, a file with no attention class of its own): if the model holds attention modules
   (a class named ``*Attention*`` or ``*Attn*``) and not one of its attention calls reached
   ``attnkit_attention_forward``, the forward raises, and so does every later one. A forward
   pre-hook and a forward hook on the model (torch's ``register_forward_pre_hook`` /
   ``register_forward_hook``) count the calls; they are removed after the first forward that
   reached attnkit, and they stand aside while ``torch.compile`` or ``torch.jit`` traces. A
   model whose source names the interface gets no hook at all.

:func:`check_model` applies the first test to a loaded model (``swap_attention`` and
``view_model`` call it), so a model whose configuration was switched after loading is refused
there too.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
import sys
import weakref
from typing import Any

import torch
from torch import nn

#: the name this guard watches for (``attention.ATTN_IMPLEMENTATION``)
IMPLEMENTATION = "attnkit"

# an attention module defined in the file of a model class (transformers' own pattern)
_ATTENTION_CLASS = re.compile(r"^class \w*Attention\w*\((?:torch\.)?nn\.Module\):", re.MULTILINE)

# next() per call of the attention function: the watched forwards compare two readings
_CALLS = itertools.count()
# models watched, each with its hooks' handles (a deep copy is watched without handles)
_WATCHED: weakref.WeakKeyDictionary[nn.Module, tuple[Any, ...]] = weakref.WeakKeyDictionary()
# models whose first forward reached attnkit (their hooks then do nothing, or are gone)
_CLEARED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
# for each watched model in a forward now, the counter at its start (a stack: forwards nest)
_STARTS: weakref.WeakKeyDictionary[nn.Module, list[int]] = weakref.WeakKeyDictionary()
_installed: list[Any] = []  # the registration hook's handle, once installed


def refusal(model: nn.Module | type) -> str:
    """The one line a model attnkit cannot run is refused with.

    Args:
        model: the model, or its class.

    Returns:
        ``"<class name> does not route its attention through ..."``.

    Example::

        >>> refusal(nn.Linear)
        "Linear does not route its attention through transformers' attention interface; attnkit cannot compute or observe it"
    """
    name = model.__name__ if isinstance(model, type) else type(model).__name__
    return (
        f"{name} does not route its attention through transformers' attention interface; "
        "attnkit cannot compute or observe it"
    )


def routes_attention(cls: type) -> bool | None:
    """Whether the model class ``cls`` routes its attention through transformers' attention
    interface, judged from the source of its module (and of the model classes it derives from).

    The most derived class with a verdict decides (a subclass of ``BloomModel`` in a user's file
    is BLOOM's).

    Args:
        cls: a ``transformers.PreTrainedModel`` subclass.

    Returns:
        ``True`` when the source names ``ALL_ATTENTION_FUNCTIONS``; ``False`` when it defines an
        attention module (``class *Attention*(nn.Module)``) and never names it; ``None`` when
        the source cannot be read or defines no attention module (the first forward decides).

    Example::

        >>> from transformers import BertModel, BloomModel
        >>> routes_attention(BertModel), routes_attention(BloomModel)
        (True, False)
    """
    for klass in cls.__mro__:
        if not issubclass(klass, nn.Module) or klass.__module__.startswith("torch."):
            continue
        if klass.__module__ == "transformers.modeling_utils":
            break  # PreTrainedModel and the library's own bases judge nothing
        verdict = _source_verdict(klass.__module__)
        if verdict is not None:
            return verdict
    return None


@functools.cache
def _source_verdict(module_name: str) -> bool | None:
    module = sys.modules.get(module_name)
    if module is None:
        return None
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):  # a notebook, a REPL, a file that is gone
        return None
    if "ALL_ATTENTION_FUNCTIONS" in source:
        return True
    if _ATTENTION_CLASS.search(source):
        return False
    return None


def check_model(model: nn.Module) -> None:
    """Raise ``ValueError`` (:func:`refusal`) when ``model`` holds a Hugging Face model whose
    class computes its attention outside transformers' attention interface.

    Args:
        model: any ``nn.Module``; each ``PreTrainedModel`` in it is judged by
            :func:`routes_attention` (whatever its ``attn_implementation``).

    Example::

        >>> from transformers import BloomConfig, BloomModel
        >>> bloom = BloomModel(BloomConfig(vocab_size=10, hidden_size=8, n_layer=1, n_head=2))
        >>> check_model(bloom)
        Traceback (most recent call last):
        ...
        ValueError: BloomModel does not route its attention through transformers' attention interface; attnkit cannot compute or observe it
    """
    pretrained = _pretrained_class()
    if pretrained is None:
        return
    for module in model.modules():
        if isinstance(module, pretrained) and routes_attention(type(module)) is False:
            raise ValueError(refusal(module))


def _pretrained_class() -> type | None:
    transformers = sys.modules.get("transformers")
    if transformers is None:
        return None
    from transformers import PreTrainedModel

    return PreTrainedModel


def _configured_for_attnkit(module: nn.Module) -> bool:
    config = vars(module).get("config")
    return getattr(config, "_attn_implementation", None) == IMPLEMENTATION


def _on_register(parent: nn.Module, _name: str, _child: Any) -> None:
    """torch's module-registration hook: judges a Hugging Face model configured for attnkit
    when it registers its first submodule (module docstring)."""
    if not _configured_for_attnkit(parent) or parent in _WATCHED:
        return None
    pretrained = _pretrained_class()
    if pretrained is None or not isinstance(parent, pretrained):
        return None
    verdict = routes_attention(type(parent))
    if verdict is False:
        raise ValueError(refusal(parent))
    if verdict is None:  # the source cannot tell: the first forward will
        _WATCHED[parent] = (
            parent.register_forward_pre_hook(_before_forward),
            parent.register_forward_hook(_after_forward),
        )
    else:
        _WATCHED[parent] = ()  # judged; a model that routes its attention is left untouched
    return None


def install() -> None:
    """Add the registration hook (once per process; :func:`attention.register` calls it)."""
    if not _installed:
        hook = torch.nn.modules.module.register_module_module_registration_hook(_on_register)
        _installed.append(hook)


def note_call() -> None:
    """Count one call of the attention function (``attnkit_attention_forward``)."""
    if not _tracing():
        next(_CALLS)


def _tracing() -> bool:
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()


def _before_forward(model: nn.Module, _args: Any) -> None:
    if model in _CLEARED or _tracing():
        return
    _STARTS.setdefault(model, []).append(next(_CALLS))


def _after_forward(model: nn.Module, _args: Any, _output: Any) -> None:
    if model in _CLEARED or _tracing():
        return
    starts = _STARTS.get(model)
    if not starts:
        return
    calls = next(_CALLS) - starts.pop() - 1  # calls counted while this forward ran
    if calls == 0 and _holds_attention(model):
        raise ValueError(refusal(model))
    _CLEARED.add(model)
    for handle in _WATCHED.get(model, ()):
        handle.remove()  # safe here: torch iterates over a copy of the hooks


def _holds_attention(model: nn.Module) -> bool:
    """Whether ``model`` holds an attention module of its own: a class named ``*Attention*`` or
    ``*Attn*``, not inside a nested Hugging Face model running another implementation."""
    pretrained = _pretrained_class()
    stack = list(model.children())
    while stack:
        module = stack.pop()
        if pretrained is not None and isinstance(module, pretrained):
            if not _configured_for_attnkit(module):
                continue
        name = type(module).__name__.lower()
        if "attention" in name or "attn" in name:
            return True
        stack.extend(module.children())
    return False
