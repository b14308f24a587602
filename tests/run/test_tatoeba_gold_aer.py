"""The translation task's AER on the bundled Tatoeba gold (:func:`tatoeba_gold_aer`, what
``attnkit demo`` prints), against Och & Ney's formula evaluated here on the package's Pharaoh
file, parsed independently."""

from __future__ import annotations

from importlib.resources import files

import pytest
import torch
from torch import Tensor, nn

from attnkit.data import load_tatoeba_gold
from attnkit.data.corpus import Vocabularies
from attnkit.data.vocabulary import Vocabulary
from attnkit.models.outputs import Seq2SeqOutput
from attnkit.tasks.translation import tatoeba_gold_aer


class FirstWord(nn.Module):
    """Every decoder step attends the first source word only."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, source: Tensor, source_lengths: Tensor, target_in: Tensor) -> Seq2SeqOutput:
        batch, steps = target_in.shape
        weights = torch.zeros(batch, steps, source.shape[1])
        weights[..., 0] = 1.0
        return Seq2SeqOutput(torch.zeros(batch, steps, self.vocab_size), weights)


def test_aer_of_linking_every_french_word_to_the_first_english_word():
    lines = files("attnkit.data").joinpath("tatoeba_gold.pharaoh").read_text().splitlines()
    gold = load_tatoeba_gold()
    assert len(lines) == len(gold) == 50
    a_and_s = a_and_p = a_size = s_size = 0
    for line, example in zip(lines, gold, strict=True):
        sure, possible = set(), set()
        for token in line.split():
            sep = "-" if "-" in token else "?"
            i, j = (int(x) for x in token.split(sep))
            possible.add((i, j))
            if sep == "-":
                sure.add((i, j))
        predicted = {(0, j) for j in range(len(example.target))}
        a_and_s += len(predicted & sure)
        a_and_p += len(predicted & possible)
        a_size += len(predicted)
        s_size += len(sure)
    expected = 1 - (a_and_s + a_and_p) / (a_size + s_size)
    vocabularies = Vocabularies(
        Vocabulary.build(list(e.source) for e in gold),
        Vocabulary.build(list(e.target) for e in gold),
    )
    result = tatoeba_gold_aer(FirstWord(len(vocabularies.target)), vocabularies, batch_size=7)
    assert result == {
        "sentences": 50,
        "aer": pytest.approx(expected, abs=1e-12),
        "reading": "naive",
    }
    assert 0.5 < expected < 1.0  # a real score, not a degenerate 0 or 1
