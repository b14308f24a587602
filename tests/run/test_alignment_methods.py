"""Each alignment reading of a translation model (naive attention, Shift-Att with its layer/head
chosen on development sentences, the alignment head, both directions symmetrized), scored on
small hand-made attention tensors whose links and AER are worked out by hand in the comments
(AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), Och & Ney 2003)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnkit.data.corpus import Example, Vocabularies
from attnkit.data.vocabulary import Vocabulary
from attnkit.models import TransformerSeq2Seq
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.tasks.alignment_methods import (
    METHODS,
    ForcedAttention,
    MethodResult,
    best_on_dev,
    compare_alignment_methods,
    forced_attention,
    symmetrize_methods,
)


def one_hot(columns: list[int], width: int) -> Tensor:
    out = torch.zeros(len(columns), width)
    for row, column in enumerate(columns):
        out[row, column] = 1.0
    return out


def example(source: str, target: str, sure: set, possible_only: set = frozenset()) -> Example:
    return Example(
        tuple(source.split()),
        tuple(target.split()),
        sure=frozenset(sure),
        possible=frozenset(sure | possible_only),
    )


# Development sentence: 3 words each side, gold the diagonal. Test sentence: 2 words each side,
# crossed, S = {(0,1), (1,0)}, P = S ∪ {(0,0)}.
DEV = example("a b c", "x y z", {(0, 0), (1, 1), (2, 2)})
TEST = example("d e", "u v", {(0, 1), (1, 0)}, {(0, 0)})


def readings() -> tuple[ForcedAttention, ForcedAttention]:
    """2 layers × 2 heads. Layer 0 head 1 attends, at step t, the source of the word it has just
    read (steps 1..T give the gold on DEV); layer 0 head 0 always attends x0, layer 1 always the
    last source word."""
    dev_steps = torch.stack(
        [
            torch.stack([one_hot([0, 0, 0, 0], 3), one_hot([2, 0, 1, 2], 3)]),
            torch.stack([one_hot([2, 2, 2, 2], 3), one_hot([2, 2, 2, 2], 3)]),
        ]
    )  # [2, 2, 4, 3]
    test_steps = torch.stack(
        [
            torch.stack([one_hot([0, 0, 0], 2), one_hot([0, 1, 1], 2)]),
            torch.stack([one_hot([1, 1, 1], 2), one_hot([1, 1, 1], 2)]),
        ]
    )  # [2, 2, 3, 2]
    dev = ForcedAttention(dev_steps, naive=one_hot([1, 2, 0], 3), head=torch.eye(3))
    test = ForcedAttention(
        test_steps, naive=one_hot([0, 0], 2), head=torch.tensor([[0.2, 0.8], [0.9, 0.1]])
    )
    return dev, test


def test_each_reading_by_hand():
    dev, test = readings()
    results = compare_alignment_methods([test], [TEST], [dev], [DEV])
    names = ["naive", "shift_att", "alignment_head", "alignment_head_x_shift_att"]
    assert list(results) == names + [f"{r}+mutual_argmax" for r in names]
    # naive, dev: rows → x1, x2, x0: A = {(1,0), (2,1), (0,2)}, none in S → AER 1.
    # naive, test: both rows → d0: A = {(0,0), (0,1)}; A∩S = {(0,1)}, A∩P = 2 → 1 - 3/4.
    assert results["naive"].dev_aer == 1.0
    assert results["naive"].aer == pytest.approx(0.25)
    assert results["naive"].links == [{(0, 0), (0, 1)}]
    # Shift-Att candidates on dev (rows = steps 1..3): all layers and heads averaged puts ≥ 1/2
    # on x2 in every row (AER 1 - 2/6); layer 0 averaged ties x0 with the gold word in rows 1, 2
    # and argmax takes the first, x0 (A = {(0,0),(0,1),(0,2)}: 1 - 2/6); layer 1 → x2 (1 - 2/6);
    # head (0, 1) gives the diagonal: AER 0, the choice.
    shift = results["shift_att"]
    assert (shift.choice.layers, shift.choice.heads) == ((0,), (1,))
    assert shift.dev_aer == 0.0
    assert shift.dev_links == [{(0, 0), (1, 1), (2, 2)}]
    # applied to test: steps 1, 2 of head (0, 1) → e1, e1: A = {(1,0), (1,1)}; A∩S = {(1,0)},
    # A∩P = {(1,0)} → 1 - 2/4.
    assert shift.links == [{(1, 0), (1, 1)}]
    assert shift.aer == pytest.approx(0.5)
    assert shift.summary() == {"aer": 0.5, "dev_aer": 0.0, "layers": [0], "heads": [1]}
    # alignment head: dev the diagonal (0); test rows → e1, e0 = S exactly (0).
    assert results["alignment_head"].aer == 0.0 and results["alignment_head"].dev_aer == 0.0
    # alignment head × Shift-Att: dev eye ⊙ diagonal = eye (0). Test [[0.2, 0.8], [0.9, 0.1]] ⊙
    # [[0, 1], [0, 1]] = [[0, 0.8], [0, 0.1]]: both rows → e1, A = {(1,0), (1,1)} → 1 - 2/4.
    product = results["alignment_head_x_shift_att"]
    assert product.dev_aer == 0.0 and product.links == [{(1, 0), (1, 1)}]
    assert product.aer == pytest.approx(0.5)
    assert product.choice == shift.choice
    # mutual argmax keeps a row's argmax only if it is also its column's (ties: the first row).
    # naive, test: rows → d0, d0; column d0 → row 0: A = {(0,0)}, possible only → 1 - 1/3.
    # Shift-Att, test: rows → e1, e1; column e1 → row 0: A = {(1,0)} ⊆ S → 1 - 2/3.
    # head, test: rows → e1, e0; columns e0 → row 1 (0.9), e1 → row 0 (0.8): A = S → 0.
    # the product, test: rows → e1, e1; column e1 → row 0 (0.8 > 0.1): A = {(1,0)} → 1 - 2/3.
    mutual = {r: results[f"{r}+mutual_argmax"] for r in names}
    assert mutual["naive"].links == [{(0, 0)}] and mutual["naive"].aer == pytest.approx(2 / 3)
    assert mutual["naive"].dev_aer == 1.0  # a permutation: the same links as argmax
    assert mutual["shift_att"].links == [{(1, 0)}]
    assert mutual["shift_att"].aer == pytest.approx(1 / 3) and mutual["shift_att"].dev_aer == 0
    assert mutual["alignment_head"].links == [{(1, 0), (0, 1)}]
    assert mutual["alignment_head"].aer == 0.0
    assert mutual["alignment_head_x_shift_att"].links == [{(1, 0)}]
    assert mutual["alignment_head_x_shift_att"].aer == pytest.approx(1 / 3)
    # shift_att, alignment_head, ... tie at 0 on dev: the earliest wins.
    assert best_on_dev(results) == "shift_att"
    # one extraction only
    only = compare_alignment_methods([test], [TEST], [dev], [DEV], extractions=["mutual_argmax"])
    assert list(only) == [f"{r}+mutual_argmax" for r in names]
    assert only["alignment_head+mutual_argmax"].links == mutual["alignment_head"].links


def test_without_development_sentences_every_layer_and_head_is_averaged():
    _, test = readings()
    results = compare_alignment_methods([test], [TEST])
    # mean of the 4 heads at steps 1, 2: e0 gets (1 + 0)/4, e1 (0 + 1 + 2)/4 → e1 in both rows:
    # A = {(1,0), (1,1)} → AER 0.5, the same links as the head chosen above.
    assert results["shift_att"].links == [{(1, 0), (1, 1)}]
    assert results["shift_att"].dev_aer is None
    assert (results["shift_att"].choice.layers, results["shift_att"].choice.heads) == ((0, 1), None)
    with pytest.raises(ValueError, match="development"):
        best_on_dev(results)


def test_a_model_without_an_alignment_head_has_no_such_reading():
    dev, test = readings()
    plain = [ForcedAttention(r.steps, r.naive, None) for r in (dev, test)]
    assert list(compare_alignment_methods([plain[1]], [TEST], [plain[0]], [DEV])) == [
        "naive",
        "shift_att",
        "naive+mutual_argmax",
        "shift_att+mutual_argmax",
    ]


def test_bad_input():
    dev, test = readings()
    with pytest.raises(ValueError, match="1 readings for 2 test"):
        compare_alignment_methods([test], [TEST, TEST])
    with pytest.raises(ValueError, match="both dev and dev_examples"):
        compare_alignment_methods([test], [TEST], [dev])
    with pytest.raises(ValueError, match=r"extractions: expected some of .*got \('max',\)"):
        compare_alignment_methods([test], [TEST], extractions=["max"])
    no_gold = Example(("d", "e"), ("u", "v"))
    with pytest.raises(ValueError, match="gold links"):
        compare_alignment_methods([test], [no_gold])


def test_symmetrizing_two_directions_by_hand():
    """Test: forward (e→f) A_f = {(0,0), (1,1)}; the backward model (f→e) links (f, e) =
    {(0,0), (0,1)}, i.e. (e, f) = {(0,0), (1,0)}. Gold S = {(0,0), (1,1)} = P.
    intersection {(0,0)}: 1 - 2/3; union {(0,0), (1,1), (1,0)}: 1 - 4/5.
    Dev: forward {(0,0), (0,1)}, backward (f, e) {(0,0)} → (e, f) {(0,0)}; gold S = {(0,0)}:
    intersection {(0,0)} has AER 0, union {(0,0), (0,1)} 1 - 2/3: the intersection is chosen."""
    test = example("a b", "x y", {(0, 0), (1, 1)})
    dev = example("c d", "z w", {(0, 0)})
    forward = MethodResult("naive", 0.0, [{(0, 0), (1, 1)}], 0.0, [{(0, 0), (0, 1)}])
    backward = MethodResult("naive", 0.0, [{(0, 0), (0, 1)}], 0.0, [{(0, 0)}])
    chosen, scores, links = symmetrize_methods(
        forward, backward, [test], [dev], ("union", "intersection")
    )
    assert chosen == "intersection"
    assert scores["intersection"] == pytest.approx({"aer": 1 / 3, "dev_aer": 0.0})
    assert scores["union"] == pytest.approx({"aer": 0.2, "dev_aer": 1 / 3})
    assert links == [{(0, 0)}]
    with pytest.raises(ValueError, match="same sentences"):
        symmetrize_methods(forward, backward, [test, test], [dev])
    no_dev = MethodResult("naive", 0.0, [{(0, 0)}])
    with pytest.raises(ValueError, match="development links"):
        symmetrize_methods(forward, no_dev, [test], [dev])


class FixedAttention(nn.Module):
    """An RNN-like model whose teacher-forced attention is a given ``[T + 1, S]`` matrix."""

    def __init__(self, attention: Tensor, vocab_size: int) -> None:
        super().__init__()
        self.attention, self.vocab_size = attention, vocab_size

    def forward(self, source: Tensor, source_lengths: Tensor, target_in: Tensor) -> Seq2SeqOutput:
        batch, steps = target_in.shape
        weights = torch.zeros(batch, steps, source.shape[1])
        weights[:, : self.attention.shape[0], : self.attention.shape[1]] = self.attention
        return Seq2SeqOutput(torch.zeros(batch, steps, self.vocab_size), weights)


def vocabularies(examples: list[Example]) -> Vocabularies:
    return Vocabularies(
        Vocabulary.build(list(e.source) for e in examples),
        Vocabulary.build(list(e.target) for e in examples),
    )


def test_forced_attention_of_a_decoder_with_one_attention():
    """Steps 0..T (the last predicts EOS): naive reads rows 0..T-1, Shift-Att rows 1..T."""
    gold = example("a b c", "x y z", {(0, 0), (1, 1), (2, 2)})
    attention = one_hot([0, 0, 1, 2], 3)  # step t attends the source of y_{t-1}
    vocab = vocabularies([gold])
    [reading] = forced_attention(FixedAttention(attention, len(vocab.target)), vocab, [gold])
    assert torch.equal(reading.steps, attention[None, None])
    assert torch.equal(reading.naive, attention[:3])
    assert reading.head is None
    results = compare_alignment_methods([reading], [gold], [reading], [gold])
    # naive: (0,0), (0,1), (1,2) → one of three sure links: 1 - 2/6; Shift-Att: the diagonal.
    assert results["naive"].aer == pytest.approx(2 / 3)
    assert results["shift_att"].aer == 0.0


def test_forced_attention_of_a_transformer_with_an_alignment_head():
    torch.manual_seed(0)
    gold = [
        example("a b c", "x y", {(0, 0), (2, 1)}),
        example("b c", "y z x", {(0, 0), (1, 1)}, {(1, 2)}),
    ]
    vocab = vocabularies(gold)
    model = TransformerSeq2Seq(
        len(vocab.source),
        len(vocab.target),
        d_model=16,
        nhead=2,
        num_layers=3,
        dim_feedforward=32,
        max_length=16,
        alignment_layer=-2,
        alignment_head=1,
    ).eval()
    readings_ = forced_attention(model, vocab, gold)
    source = torch.tensor([vocab.source.encode(list(e.source)) for e in gold[:1]])
    target_in = torch.tensor([[2, *vocab.target.encode(list(gold[0].target))]])
    with torch.no_grad():
        out = model(source, torch.tensor([3]), target_in)
    first = readings_[0]
    assert first.steps.shape == (3, 2, 3, 3)  # [layers, heads, T + 1, S]
    assert torch.allclose(first.steps.sum(-1), torch.ones(3, 2, 3), atol=1e-5)
    # the model's own weights: the last layer's heads averaged, at the output steps
    assert torch.allclose(first.naive, out.weights[0, :2], atol=1e-6)
    assert torch.allclose(first.steps[-1].mean(0)[:2], first.naive, atol=1e-6)
    assert torch.allclose(first.head, out.alignment[0, :2], atol=1e-6)
    assert readings_[1].steps.shape == (3, 2, 4, 2) and readings_[1].head.shape == (3, 2)
    results = compare_alignment_methods(readings_, gold, readings_, gold)
    assert list(results) == list(METHODS)
    for result in results.values():
        assert 0.0 <= result.aer <= 1.0 and len(result.links) == 2
