"""Shared test cases for the core tests: backends, scores and alignments built from the registries.

Everything is generated from ``attnkit.core.engine.BACKENDS`` and the score/align registries, so a
new backend, score or alignment is picked up by the tests without editing them. A registered class
that cannot be built without arguments needs an entry in ``SCORE_FACTORIES`` / ``ALIGN_FACTORIES``
(the tests fail loudly until it has one).

Backend × call combinations are generated from what each backend declares: :func:`admits` asks a
backend's declaration about a call on ``meta`` tensors (shapes and options, no values) at
collection time, and :func:`with_backends` pairs each case only with the backends that take it, so
a combination a backend cannot run is never collected (nothing is skipped for it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import torch
from torch import Tensor

import attnkit as ak
from attnkit.core.call import prepare
from attnkit.core.engine import BACKENDS, backend_named

BACKEND_NAMES = [backend.name for backend in BACKENDS]
#: backends that define attnkit's results for NaN and infinities (the others decline such calls)
NONFINITE_BACKENDS = [backend.name for backend in BACKENDS if backend.nonfinite]
T = TypeVar("T")


def backend_reasons(backend: str, q: Tensor, k: Tensor, v: Tensor, **kwargs) -> list[str]:
    """Why ``backend`` declines ``ak.attention(q, k, v, **kwargs)`` when the engine chooses
    (empty when it takes it); the values are read too (NaN, infinities, overflow)."""
    return backend_named(backend).decline(prepare(q, k, v, **kwargs)) or []


def attend(backend: str, q: Tensor, k: Tensor, v: Tensor, **kwargs) -> ak.AttentionOutput:
    """``ak.attention`` on ``backend`` alone (a test collected for it: its declaration takes the
    call, see :func:`admits`)."""
    return ak.attention(q, k, v, backend=backend, **kwargs)


def on_meta(build: Callable[[], T]) -> T:
    """``build()`` with tensors and parameters made on the ``meta`` device (no memory, no draws
    from the random generator): the objects of a call judged at collection time."""
    with torch.device("meta"):
        return build()


def admits(
    backend: str,
    shapes: Sequence[Sequence[int]] = ((1, 1, 4, 4), (1, 1, 6, 4), (1, 1, 6, 3)),
    *,
    dtype: torch.dtype = torch.float32,
    forced: bool = False,
    **options: Any,
) -> bool:
    """Whether ``backend``'s declaration takes ``ak.attention(q, k, v, **options)`` for ``q``,
    ``k``, ``v`` of ``shapes`` and ``dtype``: judged on ``meta`` tensors, so without values (a
    backend declared ``nonfinite=False`` still declines real inputs holding NaN or infinities).
    Tensors among ``options`` (masks) are moved to ``meta``. ``forced=False``: asked as when
    the engine chooses, so ``dense`` (chosen only for calls that ask for weights) is tested on
    those calls; ``True``: as when it is named alone (``backend=``)."""
    q, k, v = (torch.empty(tuple(s), dtype=dtype, device="meta") for s in shapes)
    moved = {
        key: value.to("meta") if isinstance(value, Tensor) else value
        for key, value in options.items()
    }
    return not backend_named(backend).reasons(prepare(q, k, v, **moved), forced)


def backends_taking(**options: Any) -> list[str]:
    """The backends whose declaration takes a call with ``options`` (keyword arguments of
    ``ak.attention``; ``dtype`` and ``shapes`` as for :func:`admits`): a test's backend list."""
    return [name for name in BACKEND_NAMES if admits(name, **options)]


def _id(value: object) -> str:
    if isinstance(getattr(value, "id", None), str):  # an AlignCase
        return value.id  # type: ignore[attr-defined]
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return str(value)


def with_backends(
    rows: Iterable[Any],
    takes: Callable[..., bool],
    backends: Sequence[str] = BACKEND_NAMES,
) -> list[Any]:
    """``pytest.param(*row, backend)`` for every row (a tuple, or one value) and every backend
    with ``takes(*row, backend)``: the parameters of a test over backends, generated from what
    each declares. Ids are the row's values and the backend, joined by ``-``."""
    params = []
    for row in rows:
        values = row if isinstance(row, tuple) else (row,)
        for backend in backends:
            if takes(*values, backend):
                label = "-".join(_id(x) for x in (*values, backend))
                params.append(pytest.param(*values, backend, id=label))
    return params


# --- scores ---------------------------------------------------------------------------------------

SCORE_FACTORIES: dict[str, Callable[[int], ak.scores.Score]] = {
    "additive": lambda d: ak.scores.Additive(d, d, 5),
    "general": lambda d: ak.scores.General(d, d),
    "biased_general": lambda d: ak.scores.BiasedGeneral(d, d),
    "activated_general": lambda d: ak.scores.ActivatedGeneral(d, d),
    "location": lambda d: ak.scores.Location(d, max_length=16),
}
SCORE_NAMES = ak.scores.SCORES.names()
# Scores that read key positions rather than key contents (not invariant to permuting keys).
POSITIONAL_SCORES = {"location"}


def make_score(name: str, d: int, dtype: torch.dtype = torch.float32) -> ak.scores.Score:
    """A score of this registered name for queries and keys of size ``d``."""
    if name in SCORE_FACTORIES:
        return SCORE_FACTORIES[name](d).to(dtype)
    cls = ak.scores.SCORES.get(name)
    assert not getattr(cls, "parametric", False), f"add {name!r} to SCORE_FACTORIES"
    return cls().to(dtype)


# --- alignments -----------------------------------------------------------------------------------

ALIGN_FACTORIES: dict[str, Callable[[int], ak.align.Align]] = {
    "topk": lambda d: ak.align.TopK(2),
    "local_monotonic": lambda d: ak.align.LocalMonotonic(2),
    "local_predictive": lambda d: ak.align.LocalPredictive(d, 2),
    "reinforced": lambda d: ak.align.Reinforced(d, d),
}
ALIGN_NAMES = ak.align.ALIGNS.names()
# Alignments whose weights depend on key or query positions.
POSITIONAL_ALIGNS = {"local_monotonic", "local_predictive"}


@dataclass(frozen=True)
class AlignCase:
    """An alignment to build: registered ``name``, how to construct it, and its mode."""

    id: str
    name: str
    make: Callable[[int], ak.align.Align]
    training: bool = False

    def build(self, d: int, dtype: torch.dtype = torch.float32) -> ak.align.Align:
        align = self.make(d).to(dtype)
        align.train(self.training)
        return align

    @property
    def cls(self) -> type:
        return ak.align.ALIGNS.get(self.name)


def _factory(name: str) -> Callable[[int], ak.align.Align]:
    if name in ALIGN_FACTORIES:
        return ALIGN_FACTORIES[name]
    cls = ak.align.ALIGNS.get(name)
    assert not getattr(cls, "parametric", False), f"add {name!r} to ALIGN_FACTORIES"
    return lambda d: cls()


def align_cases(training: bool = True) -> list[AlignCase]:
    """Every registered alignment in eval mode; with ``training``, stochastic ones sampling too
    (and the straight-through hard alignment)."""
    cases = [AlignCase(name, name, _factory(name)) for name in ALIGN_NAMES]
    if training:
        for name in ALIGN_NAMES:
            if getattr(ak.align.ALIGNS.get(name), "stochastic", False):
                cases.append(AlignCase(f"{name}-train", name, _factory(name), True))
        cases.append(
            AlignCase(
                "hard-straight_through-train",
                "hard",
                lambda d: ak.align.Hard(estimator="straight_through"),
                True,
            )
        )
    return cases


def case_ids(cases: Sequence[AlignCase]) -> list[str]:
    return [case.id for case in cases]


def local_window_mask(align: ak.align.Align, m: int, n: int) -> Tensor | None:
    """The keys a local-monotonic alignment admits by position (``|j - i| <= D``), else None."""
    if isinstance(align, ak.align.LocalMonotonic):
        i = torch.arange(m).view(m, 1)
        j = torch.arange(n).view(1, n)
        return (j - i).abs() <= align.window
    return None


# --- tensors and gradients ------------------------------------------------------------------------


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(
    b: int = 2,
    h: int = 2,
    m: int = 4,
    n: int = 5,
    d: int = 4,
    dv: int = 3,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    requires_grad: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    tensors = (
        torch.randn(b, h, m, d, generator=g, dtype=dtype),
        torch.randn(b, h, n, d, generator=g, dtype=dtype),
        torch.randn(b, h, n, dv, generator=g, dtype=dtype),
    )
    return tuple(t.requires_grad_(requires_grad) for t in tensors)  # type: ignore[return-value]


def grads(loss: Tensor, inputs: Sequence[Tensor]) -> list[Tensor]:
    """``d loss / d input`` for each input; zeros where the loss does not depend on it."""
    if not loss.requires_grad:
        return [torch.zeros_like(t) for t in inputs]
    found = torch.autograd.grad(loss, list(inputs), allow_unused=True, retain_graph=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(inputs, found, strict=True)]
