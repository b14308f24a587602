"""Deprecated: the attention viewer of a Hugging Face model is
:mod:`attnkit.integrations.huggingface.view` (``explain_model`` is
:func:`~attnkit.integrations.huggingface.view.view_model`). Every old name still works and warns
with a ``DeprecationWarning``.
"""

from __future__ import annotations

from typing import Any

from attnkit.core.deprecation import renamed_attributes


def _new(name: str) -> Any:
    from attnkit.integrations.huggingface import view

    return getattr(view, name)


_NEW = "attnkit.integrations.huggingface.view."
__getattr__ = renamed_attributes(
    __name__,
    {
        "explain_model": (_NEW + "view_model", lambda: _new("view_model")),
        "attention_maps": (_NEW + "attention_maps", lambda: _new("attention_maps")),
        "load_model": (_NEW + "load_model", lambda: _new("load_model")),
    },
)
