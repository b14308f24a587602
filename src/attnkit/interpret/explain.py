"""Deprecated: the attention maps of one translation are :mod:`attnkit.interpret.translation_view`
(``explain`` is :func:`~attnkit.interpret.translation_view.view_translation`, ``Explanation`` is
:class:`~attnkit.interpret.translation_view.TranslationView`). Every old name still works and
warns with a ``DeprecationWarning``.
"""

from __future__ import annotations

from typing import Any

from attnkit.core.deprecation import renamed_attributes


def _new(name: str) -> Any:
    from attnkit.interpret import translation_view

    return getattr(translation_view, name)


_NEW = "attnkit.interpret.translation_view."
__getattr__ = renamed_attributes(
    __name__,
    {
        "explain": (_NEW + "view_translation", lambda: _new("view_translation")),
        "Explanation": (_NEW + "TranslationView", lambda: _new("TranslationView")),
        **{
            name: (_NEW + name, lambda name=name: _new(name))
            for name in (
                "slug",
                "ENCODER_SELF_ATTENTION",
                "DECODER_SELF_ATTENTION",
                "CROSS_ATTENTION",
                "CUT_LABEL",
            )
        },
    },
)
