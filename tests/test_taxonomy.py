"""``ak.taxonomy.describe`` gives the survey's Table 3 row of models built from attnkit parts.

Each expected row is copied from Table 3 of the survey (Brauwers & Frasincar). A "+" in the table
is one model combining mechanisms, a "," two variants tested in one paper; both are sets of values
here, so a paper's variants are built as modules side by side. The survey uses "Soft" (vision) and
"Global" (sequences) for one and the same function (eq. 25): attnkit calls it "Global".
"""

from __future__ import annotations

import pytest
from torch import nn

import attnkit as ak
from attnkit import mechanisms as m
from attnkit.cli import main as cli_main
from attnkit.zoo import entries

D = 8


def row(*cells: str) -> dict[str, frozenset[str]]:
    """Table 3's eight cells ("A + B" or "A, B" for several values) as sets per dimension."""
    names = [
        "feature_multiplicity",
        "feature_levels",
        "feature_representations",
        "scoring",
        "alignment",
        "dimensionality",
        "query_type",
        "query_multiplicity",
    ]
    parse = [c.replace(",", "+").replace("Soft", "Global") for c in cells]
    return {
        n: frozenset(v.strip() for v in c.split("+")) for n, c in zip(names, parse, strict=True)
    }


class Declared(nn.Module):
    """A container that declares what its structure adds (e.g. stacked layers = multi-hop)."""

    def __init__(self, taxonomy: dict[str, str], *parts: nn.Module) -> None:
        super().__init__()
        self.taxonomy = taxonomy
        self.parts = nn.ModuleList(parts)


def bahdanau():
    return ak.GeneralAttention(D, D, score="additive")


def luong():
    return nn.ModuleList(
        [
            ak.GeneralAttention(D, D, score="dot"),
            ak.GeneralAttention(
                D, D, score=ak.scores.Location(D, 16), align=ak.align.LocalPredictive(D, 2)
            ),
        ]
    )


def xu():
    return nn.ModuleList([ak.GeneralAttention(D, D), ak.GeneralAttention(D, D, align="hard")])


def lu():
    # Co-attention at the word, phrase and question levels: the hierarchy is the container's.
    levels = [m.ParallelCoAttention(D, D) for _ in range(3)]
    return Declared({"feature_levels": "Hierarchical"}, *levels)


def yang():
    return m.HierarchicalAttention(D)


def vaswani():
    # Encoder self-attention and decoder cross-attention (queries from the decoder: basic), in
    # stacked layers: multi-hop (§3.3.2).
    return Declared(
        {"query_multiplicity": "Multi-Hop"},
        m.MultiHeadAttention(D, 2),
        m.MultiHeadAttention(D, 2, query_type="Basic"),
    )


def wallaart_frasincar():
    return m.MultiHopRotatoryAttention(D, D)


def kiela():
    return m.MultiRepresentationalAttention([D, 6], D)


def shen():
    return ak.GeneralAttention(D, D, multi_dimensional=True, query_type="Self-Attentive")


def zhang():
    return m.SelfAttention(D, score="dot")


def wang_capsule():
    return m.CapsuleAttention(D, num_classes=3, score="dot")


def wang_reinforced():
    return m.ParallelCoAttention(D, D, align=ak.align.Reinforced(D, D))


def winata():
    return nn.ModuleList(
        [m.MultiRepresentationalAttention([D, 6], D), m.MultiHeadAttention(D, 2, score="additive")]
    )


MODELS = {
    "Bahdanau et al. [3]": (
        bahdanau,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Additive",
            "Global",
            "Single-Dimensional",
            "Basic",
            "Singular",
        ),
    ),
    "Luong et al. [4]": (
        luong,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Multiplicative, Location",
            "Global, Local",
            "Single-Dimensional",
            "Basic",
            "Singular",
        ),
    ),
    "Xu et al. [8]": (
        xu,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Additive",
            "Soft, Hard",
            "Single-Dimensional",
            "Basic",
            "Singular",
        ),
    ),
    "Lu et al. [32]": (
        lu,
        row(
            "Parallel Co-attention",
            "Hierarchical",
            "Single-Representational",
            "Additive",
            "Global",
            "Single-Dimensional",
            "Specialized",
            "Singular",
        ),
    ),
    "Yang et al. [5]": (
        yang,
        row(
            "Singular",
            "Hierarchical",
            "Single-Representational",
            "Additive",
            "Global",
            "Single-Dimensional",
            "Self-Attentive",
            "Singular",
        ),
    ),
    "Vaswani et al. [13]": (
        vaswani,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Scaled-Multiplicative",
            "Global",
            "Single-Dimensional",
            "Self-Attentive + Basic",
            "Multi-Head + Multi-Hop",
        ),
    ),
    "Wallaart and Frasincar [43]": (
        wallaart_frasincar,
        row(
            "Rotatory",
            "Single-Level",
            "Single-Representational",
            "Activated General",
            "Global",
            "Single-Dimensional",
            "Specialized",
            "Multi-Hop",
        ),
    ),
    "Kiela et al. [50]": (
        kiela,
        row(
            "Singular",
            "Single-Level",
            "Multi-Representational",
            "Additive",
            "Global",
            "Single-Dimensional",
            "Self-Attentive",
            "Singular",
        ),
    ),
    "Shen et al. [64]": (
        shen,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Additive",
            "Global",
            "Multi-Dimensional",
            "Self-Attentive",
            "Singular",
        ),
    ),
    "Zhang et al. [74]": (
        zhang,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Multiplicative",
            "Global",
            "Single-Dimensional",
            "Self-Attentive",
            "Singular",
        ),
    ),
    "Wang et al. [62]": (
        wang_reinforced,
        row(
            "Parallel Co-attention",
            "Single-Level",
            "Single-Representational",
            "Additive",
            "Reinforced",
            "Single-Dimensional",
            "Specialized",
            "Singular",
        ),
    ),
    "Winata et al. [52]": (
        winata,
        row(
            "Singular",
            "Single-Level",
            "Multi-Representational",
            "Additive",
            "Global",
            "Single-Dimensional",
            "Self-Attentive",
            "Multi-Head",
        ),
    ),
    "Wang et al. [89]": (
        wang_capsule,
        row(
            "Singular",
            "Single-Level",
            "Single-Representational",
            "Multiplicative",
            "Global",
            "Single-Dimensional",
            "Self-Attentive",
            "Capsule-Based",
        ),
    ),
}


@pytest.mark.parametrize("paper", list(MODELS))
def test_describe_gives_the_table_3_row(paper: str) -> None:
    build, expected = MODELS[paper]
    assert ak.taxonomy.describe(build()).names() == expected


def test_undeclared_dimensions_take_their_defaults() -> None:
    described = ak.taxonomy.describe(nn.Linear(2, 2))
    assert str(described) == (
        "Singular | Single-Level | Single-Representational | — | — | Single-Dimensional | — | Singular"
    )


def test_unknown_declarations_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown taxonomy dimension 'colour'"):
        ak.taxonomy.describe(Declared({"colour": "blue"}))
    with pytest.raises(
        ValueError, match="unknown scoring 'Quadratic'; expected one of: 'Additive'"
    ):
        ak.taxonomy.describe(Declared({"scoring": "Quadratic"}))


def test_the_zoo_describes_every_registered_score_alignment_and_mechanism(capsys) -> None:
    names = {e.name for e in entries()}
    assert {f"score: {n}" for n in ak.scores.SCORES.names()} <= names
    assert {f"align: {n}" for n in ak.align.ALIGNS.names()} <= names
    assert {f"attention kind: {n}" for n in ak.core.kinds.kind_names()} <= names
    prefixes = ("score:", "align:", "attention kind:", "General")
    assert set(m.__all__) >= {n for n in names if not n.startswith(prefixes)}
    assert cli_main(["zoo"]) == 0
    out = capsys.readouterr().out
    assert "LCR-Rot-hop" in out
    assert "Rotatory | Single-Level | Single-Representational | Activated General" in out
