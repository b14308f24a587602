"""The RNN decoders' fast attention step hands over to the engine while interpretation or
ablation sessions watch, so ``interpret.record`` sees and ``evaluate.ablate`` replaces their
attention, with the same numbers as the fast path."""

from __future__ import annotations

import pytest
import torch

from attnkit.evaluate import ablate
from attnkit.interpret import record
from attnkit.models import RNNSeq2Seq

CASES = [
    ("bahdanau", "additive", "global"),
    ("luong", "general", "global"),
    ("luong", "dot", "local_monotonic"),
    ("luong", "general", "local_predictive"),
    ("luong", "location", "global"),
]


def _model_and_batch(style, score, align):
    torch.manual_seed(0)
    model = RNNSeq2Seq(
        30,
        40,
        style=style,
        score=score,
        align=align,
        embed_dim=8,
        hidden_dim=8,
        window=1,
        max_source_length=9,
    ).eval()
    source = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    lengths = torch.tensor([6, 3])
    target_in = torch.tensor([[2, 14, 15, 16, 17], [2, 18, 19, 0, 0]])
    return model, (source, lengths, target_in)


@pytest.mark.parametrize(("style", "score", "align"), CASES)
def test_record_sees_the_decoder_attention_unchanged(style, score, align):
    model, batch = _model_and_batch(style, score, align)
    with torch.no_grad():
        fast = model(*batch)
        with record(model) as rec:
            watched = model(*batch)
    torch.testing.assert_close(watched.logits, fast.logits, rtol=1e-5, atol=1e-6)
    [name] = rec.keys()
    steps = rec.weights[name]
    assert len(steps) == batch[2].shape[1]  # one engine call per target position
    recorded = torch.cat([w[:, 0] for w in steps], 1)  # [B, T, S]
    torch.testing.assert_close(recorded, fast.weights, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("style", "score", "align"), CASES[:3])
def test_uniform_ablation_spreads_each_row_over_its_admissible_words(style, score, align):
    model, (source, lengths, target_in) = _model_and_batch(style, score, align)
    with torch.no_grad(), ablate(model, "uniform"):
        out = model(source, lengths, target_in)
    for row, n in enumerate(lengths.tolist()):
        for t in range(target_in.shape[1]):
            admissible = torch.zeros(source.shape[1], dtype=torch.bool)
            admissible[:n] = True
            if align == "local_monotonic":  # the window |j - t| <= D, D = 1
                j = torch.arange(source.shape[1])
                admissible &= (j - t).abs() <= 1
            # a window past the sentence's end has no word: zeros, as every empty row
            expected = admissible.double() / admissible.sum().clamp_min(1)
            torch.testing.assert_close(out.weights[row, t].double(), expected)
