"""The taxonomy of attention mechanisms (survey §3, Fig. 3) as data, and ``describe(model)``.

The survey classifies an attention model along eight orthogonal dimensions (the columns of its
Table 3): three feature-related (multiplicity, levels, representations), three general (scoring,
alignment, dimensionality) and two query-related (type, multiplicity). Each is an enum here.

Every attnkit module declares its place with a ``taxonomy`` attribute (or property): a mapping
from dimension names to the survey's words for the values it contributes, e.g.
``{"scoring": "Additive"}`` for the additive score or ``{"query_multiplicity": "Multi-Head"}``.
Plain strings keep ``attnkit.core`` free of imports from here. :func:`describe` walks any
``nn.Module``, unions the declared values
per dimension (the survey's "+": combined in one model) and fills the dimensions nobody declared
with their plain defaults (singular, single-level, single-representational, single-dimensional),
so a model built from attnkit parts needs no special case to get its Table 3 row.

Example::

    >>> import attnkit as ak
    >>> bahdanau = ak.GeneralAttention(d_query=32, d_feature=32, score="additive")
    >>> print(ak.taxonomy.describe(bahdanau))
    Singular | Single-Level | Single-Representational | Additive | Global | Single-Dimensional | Basic | Singular
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import Enum

from torch import nn


class FeatureMultiplicity(Enum):
    """§3.1.1: how many inputs (feature sets) the attention attends to, and how."""

    SINGULAR = "Singular"
    ALTERNATING_CO_ATTENTION = "Alternating Co-attention"
    INTERACTIVE_CO_ATTENTION = "Interactive Co-attention"
    PARALLEL_CO_ATTENTION = "Parallel Co-attention"
    MULTI_GRAINED_CO_ATTENTION = "Multi-grained Co-attention"
    ROTATORY = "Rotatory"


class FeatureLevels(Enum):
    """§3.1.2: one level of features, or several (words → sentences → documents)."""

    SINGLE_LEVEL = "Single-Level"
    ATTENTION_VIA_ATTENTION = "Attention-via-Attention"
    HIERARCHICAL = "Hierarchical"


class FeatureRepresentations(Enum):
    """§3.1.3: one representation of the input, or several (meta-embeddings)."""

    SINGLE_REPRESENTATIONAL = "Single-Representational"
    MULTI_REPRESENTATIONAL = "Multi-Representational"


class Scoring(Enum):
    """§3.2.1, Table 2."""

    ADDITIVE = "Additive"
    MULTIPLICATIVE = "Multiplicative"
    SCALED_MULTIPLICATIVE = "Scaled-Multiplicative"
    GENERAL = "General"
    BIASED_GENERAL = "Biased General"
    ACTIVATED_GENERAL = "Activated General"
    SIMILARITY = "Similarity"
    LOCATION = "Location"


class Alignment(Enum):
    """§3.2.2. Soft and global alignment are one function (eq. 25): "Global" here. Sparse
    alignments (sparsemax, 1.5-entmax) and top-k are not in the survey; they are named here."""

    GLOBAL = "Global"
    HARD = "Hard"
    LOCAL = "Local"
    REINFORCED = "Reinforced"
    SPARSE = "Sparse"
    TOP_K = "Top-k"


class Dimensionality(Enum):
    """§3.2.3."""

    SINGLE_DIMENSIONAL = "Single-Dimensional"
    MULTI_DIMENSIONAL = "Multi-Dimensional"


class QueryType(Enum):
    """§3.3.1: a query from the model's state (basic), built for the task (specialized), or from
    the features themselves (self-attentive)."""

    BASIC = "Basic"
    SPECIALIZED = "Specialized"
    SELF_ATTENTIVE = "Self-Attentive"


class QueryMultiplicity(Enum):
    """§3.3.2."""

    SINGULAR = "Singular"
    MULTI_HEAD = "Multi-Head"
    MULTI_HOP = "Multi-Hop"
    CAPSULE_BASED = "Capsule-Based"


@dataclass(frozen=True)
class Place:
    """Values one module contributes, per dimension (empty: it says nothing about it)."""

    feature_multiplicity: frozenset[FeatureMultiplicity] = frozenset()
    feature_levels: frozenset[FeatureLevels] = frozenset()
    feature_representations: frozenset[FeatureRepresentations] = frozenset()
    scoring: frozenset[Scoring] = frozenset()
    alignment: frozenset[Alignment] = frozenset()
    dimensionality: frozenset[Dimensionality] = frozenset()
    query_type: frozenset[QueryType] = frozenset()
    query_multiplicity: frozenset[QueryMultiplicity] = frozenset()

    @classmethod
    def of(cls, *values: Enum) -> Place:
        """A place from enum values, each filed under its own dimension."""
        by_dimension: dict[str, set[Enum]] = {}
        for value in values:
            by_dimension.setdefault(_DIMENSION_OF[type(value)], set()).add(value)
        return cls(**{name: frozenset(vs) for name, vs in by_dimension.items()})

    def __or__(self, other: Place) -> Place:
        return Place(
            **{f.name: getattr(self, f.name) | getattr(other, f.name) for f in fields(self)}
        )


_DIMENSION_OF: dict[type, str] = {
    FeatureMultiplicity: "feature_multiplicity",
    FeatureLevels: "feature_levels",
    FeatureRepresentations: "feature_representations",
    Scoring: "scoring",
    Alignment: "alignment",
    Dimensionality: "dimensionality",
    QueryType: "query_type",
    QueryMultiplicity: "query_multiplicity",
}

#: what a dimension is when no module of the model says otherwise
DEFAULTS = Place.of(
    FeatureMultiplicity.SINGULAR,
    FeatureLevels.SINGLE_LEVEL,
    FeatureRepresentations.SINGLE_REPRESENTATIONAL,
    Dimensionality.SINGLE_DIMENSIONAL,
    QueryMultiplicity.SINGULAR,
)


@dataclass(frozen=True)
class TaxonomyRow(Place):
    """One row of Table 3: the set of values of each dimension."""

    def names(self) -> dict[str, frozenset[str]]:
        """Dimension → the set of value names (the survey's words)."""
        return {f.name: frozenset(v.value for v in getattr(self, f.name)) for f in fields(self)}

    def cells(self) -> list[str]:
        """The eight cells in Table 3's column order, combined values joined by " + "."""
        out = []
        for f in fields(self):
            values = getattr(self, f.name)
            order = list(type(next(iter(values)))) if values else []
            out.append(" + ".join(v.value for v in sorted(values, key=order.index)) or "—")
        return out

    def __str__(self) -> str:
        return " | ".join(self.cells())


DIMENSIONS: dict[str, type[Enum]] = {name: enum for enum, name in _DIMENSION_OF.items()}


def parse_place(declaration: Mapping[str, str | Iterable[str]]) -> Place:
    """A :class:`Place` from a module's declaration ``{dimension: value name(s)}``."""
    values: list[Enum] = []
    for dimension, names in declaration.items():
        if dimension not in DIMENSIONS:
            raise ValueError(
                f"unknown taxonomy dimension {dimension!r}; expected one of: {', '.join(DIMENSIONS)}"
            )
        enum = DIMENSIONS[dimension]
        for name in [names] if isinstance(names, str) else names:
            try:
                values.append(enum(name))
            except ValueError:
                valid = ", ".join(repr(v.value) for v in enum)
                raise ValueError(
                    f"unknown {dimension} {name!r}; expected one of: {valid}"
                ) from None
    return Place.of(*values)


def place_of(module: nn.Module) -> Place:
    """The place ``module`` itself declares (empty if it declares none)."""
    declaration = getattr(module, "taxonomy", None)
    return Place() if declaration is None else parse_place(declaration)


def describe(model: nn.Module) -> TaxonomyRow:
    """Table 3's row for ``model``: the union of what its modules declare, defaults elsewhere."""
    place = Place()
    for module in model.modules():
        place = place | place_of(module)
    filled = {f.name: getattr(place, f.name) or getattr(DEFAULTS, f.name) for f in fields(Place)}
    return TaxonomyRow(**filled)
