"""attnkit: attention mechanisms in deep learning — complete, exact and fast, on PyTorch.

    >>> import attnkit as ak
    >>> out = ak.attention(q, k, v, score="additive" or ak.scores.Additive(...), align="softmax")

See README.md and docs/core.md for the map from the survey's equations to this API.

The names below are imported on first use (PEP 562), so ``import attnkit`` — and the
``attnkit`` command's ``--help`` and ``--version`` — do not import PyTorch. ``from attnkit import
X``, ``ak.X`` and ``import attnkit.X`` work as with eager imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> (module, attribute); attribute ``None``: the name is that module itself.
#: One line per name: adding a public name is adding a line here.
_LAZY: dict[str, tuple[str, str | None]] = {
    "AttentionHook": ("attnkit.core.hooks", "AttentionHook"),
    "AttentionOutput": ("attnkit.core.call", "AttentionOutput"),
    "GeneralAttention": ("attnkit.core.general", "GeneralAttention"),
    "MultiHeadAttention": ("attnkit.mechanisms.multi_head", "MultiHeadAttention"),
    "align": ("attnkit.core.align", None),
    "attention": ("attnkit.core.engine", "attention"),
    "attention_hooks": ("attnkit.core.hooks", "attention_hooks"),
    "backends": ("attnkit.core.engine", "backends"),
    "data": ("attnkit.data", None),
    "distributed": ("attnkit.distributed", None),
    "efficient": ("attnkit.efficient", None),
    "evaluate": ("attnkit.evaluate", None),
    "explain": ("attnkit.core.engine", "explain"),
    "interpret": ("attnkit.interpret", None),
    "layers": ("attnkit.layers", None),
    "masks": ("attnkit.core.masks", None),
    "mechanisms": ("attnkit.mechanisms", None),
    "merge_attention": ("attnkit.core.merge", "merge_attention"),
    "models": ("attnkit.models", None),
    "scores": ("attnkit.core.scores", None),
    "taxonomy": ("attnkit.taxonomy", None),
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first access and cache the value here."""
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'attnkit' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups find it without calling __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, eagerly
    from attnkit import (  # noqa: F401
        data,
        distributed,
        efficient,
        evaluate,
        interpret,
        layers,
        mechanisms,
        models,
        taxonomy,
    )
    from attnkit.core import align, masks, scores  # noqa: F401
    from attnkit.core.call import AttentionOutput  # noqa: F401
    from attnkit.core.engine import attention, backends, explain  # noqa: F401
    from attnkit.core.general import GeneralAttention  # noqa: F401
    from attnkit.core.hooks import AttentionHook, attention_hooks  # noqa: F401
    from attnkit.core.merge import merge_attention  # noqa: F401
    from attnkit.mechanisms.multi_head import MultiHeadAttention  # noqa: F401
