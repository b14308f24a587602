"""Attention kinds: what :class:`attnkit.MultiHeadAttention` runs between its projections (eq. 39).

A module chooses how its heads attend with ``attention=``: a name from the one registry below
(``"exact"``, the engine; ``"linear"``, ``"linformer"``, … registered by ``attnkit.efficient``,
which ``MultiHeadAttention`` imports) or a
configured kind object (``LinformerAttention(max_length=8192, projected_length=256)``). The same
registry serves configuration files (``config.py`` checks kind names) and the CLI (``attnkit info``
lists them).

A kind is called like :func:`attnkit.attention` on the projected heads (``q [B, H, M, d_k]``,
``k [B, G, N, d_k]``, ``v [B, G, N, d_v]``, keywords ``score, align, mask, causal, score_mod,
scale, dropout, return_weights``) and returns an :class:`~attnkit.core.call.AttentionOutput`. The
module gives it the head sizes once, by :meth:`AttentionKind.bind`, before the first call, so a
kind whose parameters depend on them (Performer's random features, Synthesizer's per-head MLP) can
be configured without them.

Names map to constructors of a new object with the kind's default hyperparameters, so every
module built from a name owns its kind. A kind with state (parameters or buffers) is one module
per ``MultiHeadAttention``: its ``bind`` refuses a second owner rather than let two modules share
parameters by accident.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.registry import Registry


@runtime_checkable
class AttentionKind(Protocol):
    """What ``MultiHeadAttention(attention=...)`` runs for its heads (see the module doc).

    Attributes:
        name: the registry name (``"exact"``, ``"linformer"``, …), shown by the module's
            ``attention`` attribute, its ``repr`` and error messages.
        taxonomy: the kind's place in the survey's taxonomy (merged into the module's), or None.
        forms_weights: whether the kind computes its attention through :func:`attnkit.attention`,
            so its weights exist to be recorded or replaced (only ``"exact"``).
    """

    @property
    def name(self) -> str: ...

    @property
    def taxonomy(self) -> Mapping[str, Any] | None: ...

    @property
    def forms_weights(self) -> bool: ...

    def bind(self, num_heads: int, head_dim_k: int, head_dim_v: int) -> AttentionKind:
        """The kind a module with these head sizes runs (normally ``self``, now sized)."""
        ...

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **options: Any) -> AttentionOutput: ...


class ExactAttention:
    """The engine itself, :func:`attnkit.attention`: exact attention with any score and
    alignment (the default kind, ``"exact"``). It has no state, so one object serves every
    module (``bind`` returns it unchanged)."""

    name = "exact"
    taxonomy: Mapping[str, Any] | None = None
    forms_weights = True

    def bind(self, num_heads: int, head_dim_k: int, head_dim_v: int) -> ExactAttention:
        return self

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **options: Any) -> AttentionOutput:
        return attention(q, k, v, **options)

    def __repr__(self) -> str:
        return "ExactAttention()"

    def __reduce__(self) -> str:
        return "EXACT"  # copies and unpickled modules share the one object


#: the exact kind every module named ``"exact"`` runs
EXACT = ExactAttention()

#: the attention kinds: name → a factory of a new kind object with that kind's default
#: hyperparameters, built once per module. ``attnkit.efficient`` registers its kinds here when it
#: is imported (its classes carry ``@KINDS.register(name)``); ``MultiHeadAttention`` imports it.
KINDS: Registry[AttentionKind] = Registry("attention kind")
KINDS.register("exact")(lambda: EXACT)


def kind_names() -> list[str]:
    """Every registered kind name, ``"exact"`` first, then in registration order."""
    return KINDS.names()


def create_kind(spec: str | AttentionKind) -> AttentionKind:
    """The kind object for ``spec``: a new one with default hyperparameters for a name, or
    ``spec`` itself for a kind object.

    Raises:
        ValueError: an unknown name (the message lists the registered ones).
        TypeError: neither a name nor an object with the :class:`AttentionKind` interface.
    """
    if isinstance(spec, str):
        return KINDS.get(spec)()
    if isinstance(spec, AttentionKind):
        return spec
    raise TypeError(
        "attention must be a kind name (str) or an attention kind object (with name, taxonomy, "
        f"forms_weights, bind and __call__, e.g. ak.efficient.LinformerAttention), got "
        f"{type(spec).__name__}"
    )


def kind_name(spec: str | AttentionKind) -> str:
    """The registry name of ``spec`` (a name, checked, or a kind object's ``name``)."""
    return spec if isinstance(spec, str) and spec in KINDS else create_kind(spec).name
