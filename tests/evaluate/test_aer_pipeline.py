"""The alignment error rate as ``attnkit eval`` computes it — forced decoding of the reference
(:func:`forced_alignment`), argmax links, corpus AER (:func:`evaluate_run`) — against known
answers: a model whose attention *is* the gold alignment scores AER 0, and a tiny sure/possible
gold gives the value computed by hand from Och & Ney's formula."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from attnkit.config import validate
from attnkit.data.corpus import Example, Vocabularies
from attnkit.data.vocabulary import EOS, Vocabulary
from attnkit.evaluate.translation import forced_alignment
from attnkit.models.outputs import Seq2SeqOutput, Translation
from attnkit.tasks.translation import evaluate_run

CONFIG = validate({"name": "oracle", "train": {"steps": 1, "batch_size": 2}})


class OracleModel(nn.Module):
    """Knows each sentence's reference and attention matrix: the teacher-forced pass returns the
    given attention (rows: target words, then EOS) and logits that put the reference first;
    ``translate`` returns the reference. Sentences are recognised by their source ids."""

    def __init__(self, vocabularies: Vocabularies, table: dict[tuple[str, ...], tuple]) -> None:
        super().__init__()
        self.table = {}
        for source, (target, attention) in table.items():
            ids = tuple(vocabularies.source.encode(list(source)))
            uniform_eos = torch.full((1, len(source)), 1.0 / len(source))
            self.table[ids] = (
                vocabularies.target.encode(list(target)),
                torch.cat([attention, uniform_eos]),
            )
        self.vocab_size = len(vocabularies.target)

    def _entry(self, source: Tensor, length: Tensor) -> tuple[list[int], Tensor]:
        return self.table[tuple(source[: int(length)].tolist())]

    def forward(self, source: Tensor, source_lengths: Tensor, target_in: Tensor) -> Seq2SeqOutput:
        batch, steps = target_in.shape
        logits = torch.zeros(batch, steps, self.vocab_size)
        weights = torch.zeros(batch, steps, source.shape[1])
        for b in range(batch):
            target, attention = self._entry(source[b], source_lengths[b])
            n = len(target)
            assert target_in[b, 1 : n + 1].tolist() == target  # forced: fed the reference
            weights[b, : n + 1, : attention.shape[1]] = attention
            for t, token in enumerate([*target, EOS]):
                logits[b, t, token] = 10.0
        return Seq2SeqOutput(logits, weights)

    def translate(self, source, source_lengths, *, beam_size=1, max_length=50):
        return [
            Translation(list(target), attention, 0.0)
            for target, attention in (
                self._entry(s, n) for s, n in zip(source, source_lengths, strict=True)
            )
        ]


def _vocabularies(examples: list[Example]) -> Vocabularies:
    return Vocabularies(
        Vocabulary.build(list(e.source) for e in examples),
        Vocabulary.build(list(e.target) for e in examples),
    )


def _example(source: str, target: str, sure: set, possible_only: set = frozenset()) -> Example:
    return Example(
        tuple(source.split()),
        tuple(target.split()),
        sure=frozenset(sure),
        possible=frozenset(sure | possible_only),
    )


# Hansards-style gold (i = English position, j = French position); every French word has one
# link, sure where there is one, else possible; extra possible links elsewhere.
GOLD = [
    _example("i love you .", "je t' aime .", {(0, 0), (2, 1), (1, 2), (3, 3)}),
    _example(
        "the minister said so .",
        "le ministre le a dit .",
        {(0, 0), (1, 1), (3, 2), (4, 5)},
        {(2, 3), (2, 4), (3, 4)},
    ),
    _example("mr. speaker", "monsieur le orateur", {(0, 0), (1, 2)}, {(0, 1), (1, 1)}),
    _example("we agree", "nous sommes de accord", {(0, 0), (1, 3)}, {(1, 1), (1, 2)}),
]


def _gold_attention(example: Example) -> Tensor:
    """One-hot rows on each target word's gold link (its sure link if it has one)."""
    attention = torch.zeros(len(example.target), len(example.source))
    for t in range(len(example.target)):
        sure = sorted(s for s, tt in example.sure if tt == t)
        possible = sorted(s for s, tt in example.possible if tt == t)
        attention[t, (sure or possible)[0]] = 1.0
    return attention


def test_attention_equal_to_the_gold_scores_aer_zero():
    vocabularies = _vocabularies(GOLD)
    oracle = OracleModel(vocabularies, {e.source: (e.target, _gold_attention(e)) for e in GOLD})
    forced = forced_alignment(oracle, vocabularies, GOLD)
    for example, weights in zip(GOLD, forced, strict=True):  # rows = target words, no EOS row
        assert torch.equal(weights, _gold_attention(example))
    results = evaluate_run(oracle, vocabularies, GOLD, CONFIG)
    assert results["aer"] == 0.0
    assert results["bleu"] == pytest.approx(100.0)  # it also translates as the reference
    assert results["sentences"] == len(GOLD)


def test_one_wrong_link_is_counted():
    """The same oracle with "aime" attending to "you" instead of "love": A loses the sure link
    (1, 2) and gains (2, 2), which is in neither S nor P. Sure links: 4 + 4 + 2 + 2 = 12, one
    predicted link per target word: 4 + 6 + 3 + 4 = 17; |A∩S| = 11 and |A∩P| = 16, so
    AER = 1 - (11 + 16) / (17 + 12) = 2/29."""
    vocabularies = _vocabularies(GOLD)
    table = {e.source: (e.target, _gold_attention(e)) for e in GOLD}
    wrong = _gold_attention(GOLD[0])
    wrong[2] = torch.tensor([0.0, 0.3, 0.7, 0.0])
    table[GOLD[0].source] = (GOLD[0].target, wrong)
    results = evaluate_run(OracleModel(vocabularies, table), vocabularies, GOLD, CONFIG)
    assert results["aer"] == pytest.approx(2 / 29, rel=1e-12)


def test_hand_computed_aer_of_a_tiny_sure_possible_gold():
    """Och & Ney (2003): AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), counts summed over the corpus.

    Sentence 1: S = {(0,0), (2,2)}, P = S ∪ {(1,1), (2,1)}; argmax links A = {(0,0), (2,1), (0,2)}
    → |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2.
    Sentence 2: S = {(1,0)}, P = S ∪ {(0,2)}; A = {(1,0), (0,1), (0,2)} → 1, 2, 3, 1.
    Corpus: 1 - (2 + 4) / (6 + 3) = 1/3 (the mean of the sentences' AERs, 0.4 and 0.25, would be
    0.325)."""
    gold = [
        _example("a b c", "x y z", {(0, 0), (2, 2)}, {(1, 1), (2, 1)}),
        _example("d e", "u v w", {(1, 0)}, {(0, 2)}),
    ]
    attention = {
        gold[0].source: torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.25, 0.25]]),
        gold[1].source: torch.tensor([[0.2, 0.8], [0.9, 0.1], [0.6, 0.4]]),
    }
    vocabularies = _vocabularies(gold)
    oracle = OracleModel(vocabularies, {e.source: (e.target, attention[e.source]) for e in gold})
    for example, weights in zip(gold, forced_alignment(oracle, vocabularies, gold), strict=True):
        assert torch.equal(weights, attention[example.source])
    results = evaluate_run(oracle, vocabularies, gold, CONFIG)
    assert results["aer"] == pytest.approx(1 / 3, rel=1e-12)
