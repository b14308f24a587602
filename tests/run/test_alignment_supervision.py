"""Supervised attention's teachers (IBM Model 1, fast_align; one direction or symmetrized) and the
alignment head's loss in the translation pipeline (issue 21 item 3)."""

from __future__ import annotations

import pytest
import torch

from attnkit.config import ConfigError, validate
from attnkit.data import FastAlign, IBMModel1
from attnkit.data.batching import Batches, encode
from attnkit.data.corpus import Example, Vocabularies
from attnkit.data.symmetrize import symmetrize
from attnkit.data_parallel import DataParallel
from attnkit.evaluate.supervised import supervised_attention_loss
from attnkit.tasks.translation import build_model, loss_terms, teacher_links

WORDS = {"the": "la", "house": "maison", "small": "petite", "is": "est", "green": "verte"}
SOURCES = [
    ["the", "house", "is", "small"],
    ["the", "house", "is", "green"],
    ["small", "is", "the", "house"],
    ["the", "small", "house"],
    ["green", "house"],
    ["the", "house"],
    ["is", "green"],
    ["the", "green", "house", "is", "small"],
]
TRAIN = [Example(tuple(s), tuple(WORDS[w] for w in s)) for s in SOURCES]


def _config(**data) -> object:
    return validate(
        {
            "name": "t",
            "data": {"corpus": "tatoeba", **data},
            "model": {"kind": "rnn"},
            "train": {"steps": 2},
        }
    )


@pytest.mark.parametrize("method", ["intersection", "union", "grow-diag-final-and"])
def test_fast_align_teacher_symmetrized_is_both_directions_combined(method: str) -> None:
    config = _config(
        supervision="fast_align", aligner_alpha=0.01, symmetrization=method, aligner_iterations=3
    )
    pairs = [(e.source, e.target) for e in TRAIN]
    forward = FastAlign(alpha=0.01).fit(pairs, iterations=3)
    backward = FastAlign(alpha=0.01).fit([(f, e) for e, f in pairs], iterations=3)
    for example, links in zip(TRAIN, teacher_links(config, TRAIN), strict=True):
        one = forward.align(example.source, example.target)
        other = {(e, f) for f, e in backward.align(example.target, example.source)}
        assert links == symmetrize(one, other, method)
    # on this word-for-word corpus, the intersection is the word-for-word alignment
    if method == "intersection":
        assert teacher_links(config, TRAIN)[0] == {(0, 0), (1, 1), (2, 2), (3, 3)}


def test_the_default_teacher_is_one_direction_of_the_named_aligner() -> None:
    pairs = [(e.source, e.target) for e in TRAIN]
    for name, aligner in (("ibm_model1", IBMModel1()), ("fast_align", FastAlign())):
        config = _config(supervision=name, aligner_iterations=4)
        aligner.fit(pairs, iterations=4)
        assert teacher_links(config, TRAIN) == [aligner.align(s, t) for s, t in pairs]


def _head_config(weight: float) -> object:
    return validate(
        {
            "name": "t",
            "data": {"corpus": "tatoeba", "supervision": "fast_align"},
            "model": {
                "kind": "transformer",
                "d_model": 32,
                "nhead": 4,
                "num_layers": 2,
                "dim_feedforward": 64,
                "dropout": 0.0,
                "max_length": 16,
                "alignment_layer": -2,
                "alignment_head": 1,
            },
            "train": {"steps": 2, "supervised_weight": weight, "supervised_kind": "ce"},
            "decode": {"max_length": 15},  # within the 16 positions
        }
    )


def _batch(config) -> tuple[object, object]:
    linked = [
        Example(e.source, e.target, links=frozenset((i, i) for i in range(len(e.source))))
        for e in TRAIN
    ]
    vocab = Vocabularies.build(linked, 1, None)
    batch = Batches(encode(linked, vocab.source, vocab.target), 8, seed=0).batch(0)
    torch.manual_seed(0)
    return build_model(config, vocab), batch


def test_an_alignment_head_is_what_the_pipeline_supervises_and_evaluates() -> None:
    config = _head_config(0.5)
    model, batch = _batch(config)
    assert (model.alignment_layer, model.alignment_head) == (0, 1)
    _, parts = DataParallel().combine(loss_terms(model, batch, config))
    out = model(batch.source, batch.source_lengths, batch.target_in)
    expected = supervised_attention_loss(out.alignment, batch.alignment, "ce")
    assert parts["attention_loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert parts["loss"] == pytest.approx(parts["nll"] + 0.5 * expected.item(), rel=1e-5)
    # not the last layer's averaged weights
    other = supervised_attention_loss(out.weights, batch.alignment, "ce")
    assert abs(other.item() - expected.item()) > 1e-3


def test_a_few_steps_of_the_joint_loss_lower_the_alignment_loss() -> None:
    config = _head_config(1.0)
    model, batch = _batch(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        loss, parts = DataParallel().combine(loss_terms(model, batch, config))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(parts["attention_loss"])
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize(
    ("section", "values", "expected"),
    [
        ("data", {"aligner_alpha": 0.01}, "data.aligner_alpha: the Dirichlet prior is fast_align"),
        (
            "data",
            {"supervision": "ibm_model1", "aligner_alpha": 0.01},
            "data.aligner_alpha: the Dirichlet prior is fast_align",
        ),
        ("data", {"aligner_alpha": 0.0, "supervision": "fast_align"}, "data.aligner_alpha"),
        ("data", {"symmetrization": "intersection"}, "data.symmetrization: combines"),
        ("data", {"supervision": "fast_align", "symmetrization": "grow"}, "data.symmetrization"),
        ("data", {"supervision": "ibm2"}, "data.supervision"),
        (
            "model",
            {"kind": "transformer", "num_layers": 2, "alignment_layer": 2},
            "model.alignment_layer: must be in [-2, 1] for num_layers=2; got 2",
        ),
        (
            "model",
            {"kind": "transformer", "nhead": 4, "alignment_layer": 0, "alignment_head": 4},
            "model.alignment_head: must be below nhead=4; got 4",
        ),
        ("model", {"kind": "rnn", "alignment_layer": 0}, "alignment_layer"),
    ],
)
def test_bad_teacher_and_head_keys_name_the_key(section: str, values: dict, expected: str) -> None:
    raw = {
        "name": "t",
        "data": {"corpus": "tatoeba"},
        "model": {"kind": "rnn"},
        "train": {"steps": 2},
    }
    raw[section] = {**raw[section], **values}
    with pytest.raises(ConfigError) as error:
        validate(raw, "c.yaml")
    assert expected in str(error.value), str(error.value)
