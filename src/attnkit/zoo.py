"""The zoo: every registered mechanism of attnkit with its taxonomy row and one line of what it is.

``attnkit zoo`` prints it. Each entry builds a small example of the mechanism so its row comes from
:func:`attnkit.taxonomy.describe` — the same declarations a user's model is described by.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from attnkit import mechanisms as m
from attnkit.core.align import ALIGNS, LocalPredictive, Reinforced
from attnkit.core.general import GeneralAttention
from attnkit.core.kinds import create_kind, kind_names
from attnkit.core.scores import SCORES, Additive, Location, build_score
from attnkit.taxonomy import TaxonomyRow, describe


@dataclass(frozen=True)
class Entry:
    """One mechanism: its name, what it is, and how to build a small one."""

    name: str
    summary: str
    build: Callable[[], nn.Module]
    where: str

    def row(self) -> TaxonomyRow:
        return describe(self.build())


def _score(name: str) -> nn.Module:
    if name == "location":
        return Location(8, 16)
    if name == "additive":
        return Additive(8, 8, 8)
    return build_score(name, 8, 8)


def _align(name: str) -> nn.Module:
    if name == "local_predictive":
        return LocalPredictive(8, window=2)
    if name == "reinforced":
        return Reinforced(8, 8)
    return ALIGNS.create(name)


def entries() -> list[Entry]:
    """Every mechanism, in the survey's order: general mechanisms, then feature-, then query-related."""
    out = [
        Entry(
            f"score: {name}", _first_line(SCORES.get(name)), lambda n=name: _score(n), "ak.scores"
        )
        for name in SCORES.names()
    ]
    out += [
        Entry(f"align: {name}", _first_line(ALIGNS.get(name)), lambda n=name: _align(n), "ak.align")
        for name in ALIGNS.names()
    ]
    mechanisms: list[tuple[type, Callable[[], nn.Module]]] = [
        (GeneralAttention, lambda: GeneralAttention(8, 8)),
        (m.AlternatingCoAttention, lambda: m.AlternatingCoAttention(8, 8)),
        (m.InteractiveCoAttention, lambda: m.InteractiveCoAttention(8, 8)),
        (m.ParallelCoAttention, lambda: m.ParallelCoAttention(8, 8)),
        (m.MultiGrainedCoAttention, lambda: m.MultiGrainedCoAttention(8, 8)),
        (m.RotatoryAttention, lambda: m.RotatoryAttention(8, 8)),
        (m.MultiHopRotatoryAttention, lambda: m.MultiHopRotatoryAttention(8, 8)),
        (m.AttentionViaAttention, lambda: m.AttentionViaAttention(8, 8, 8)),
        (m.HierarchicalAttention, lambda: m.HierarchicalAttention(8)),
        (m.MultiRepresentationalAttention, lambda: m.MultiRepresentationalAttention([8, 6], 8)),
        (m.ConstantQueryAttention, lambda: m.ConstantQueryAttention(8)),
        (m.LearnedQueryAttention, lambda: m.LearnedQueryAttention(8)),
        (m.SelfAttention, lambda: m.SelfAttention(8)),
        (m.MultiHeadAttention, lambda: m.MultiHeadAttention(8, 2)),
        (m.MultiHopAttention, lambda: m.MultiHopAttention(8, 8, num_hops=2)),
        (m.CapsuleAttention, lambda: m.CapsuleAttention(8, num_classes=3)),
        (m.SqueezeExcitation, lambda: m.SqueezeExcitation(8, reduction=2)),
        (m.ConvolutionalBlockAttention, lambda: m.ConvolutionalBlockAttention(8, reduction=2)),
        (m.NonLocalBlock, lambda: m.NonLocalBlock(8)),
        (m.CrissCrossAttention, lambda: m.CrissCrossAttention(8)),
        (m.RecurrentCrissCrossAttention, lambda: m.RecurrentCrissCrossAttention(8)),
        (m.DualAttention, lambda: m.DualAttention(8)),
        (m.MultiheadAttentionBlock, lambda: m.MultiheadAttentionBlock(8, 2)),
        (m.SetAttentionBlock, lambda: m.SetAttentionBlock(8, 2)),
        (
            m.InducedSetAttentionBlock,
            lambda: m.InducedSetAttentionBlock(8, 2, num_inducing_points=4),
        ),
        (m.PoolingByMultiheadAttention, lambda: m.PoolingByMultiheadAttention(8, 2)),
        (m.PerceiverEncoder, lambda: m.PerceiverEncoder(8, 8, 4, num_heads=2)),
        (m.Hopfield, lambda: m.Hopfield(8)),
        (m.HopfieldPooling, lambda: m.HopfieldPooling(8)),
        (m.HopfieldLayer, lambda: m.HopfieldLayer(8, num_stored_patterns=16)),
        (m.FastWeightProgrammer, lambda: m.FastWeightProgrammer(8, num_heads=2)),
        (m.GraphAttention, lambda: m.GraphAttention(8, 4, num_heads=2)),
        (m.GraphAttentionV2, lambda: m.GraphAttentionV2(8, 4, num_heads=2)),
    ]
    out += [
        Entry(cls.__name__, _first_line(cls), build, f"{cls.__module__}.{cls.__name__}")
        for cls, build in mechanisms
    ]
    out += [
        Entry(
            f"attention kind: {name}",
            _first_line(type(create_kind(name))),
            lambda n=name: m.MultiHeadAttention(8, 2, attention=n),
            f"ak.MultiHeadAttention(attention={name!r})",
        )
        for name in kind_names()
    ]
    return out


def _first_line(cls: type) -> str:
    """The docstring's summary (its first paragraph, on one line)."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(line.strip() for line in paragraph.splitlines()).rstrip(".")


def render() -> str:
    """The zoo as text: one block per mechanism."""
    header = (
        "Rows: feature multiplicity | levels | representations | scoring | alignment | "
        "dimensionality | query type | query multiplicity (survey Table 3)"
    )
    lines = [header, ""]
    for entry in entries():
        lines += [f"{entry.name}  ({entry.where})", f"    {entry.summary}", f"    {entry.row()}"]
    return "\n".join(lines)
