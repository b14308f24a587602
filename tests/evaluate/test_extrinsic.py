"""BLEU, perplexity, accuracy, macro-F1 on hand-computed examples."""

import math

import pytest
import torch

from attnkit.evaluate import accuracy, bleu, macro_f1, perplexity


def test_bleu():
    refs = ["the cat sat on the mat", "a dog barked at the moon"]
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert bleu(["x y z w v", "q r s t u"], refs) == pytest.approx(0.0)
    # hypothesis = the reference minus its last word: all n-gram precisions are 1,
    # brevity penalty exp(1 - 6/5)
    got = bleu(["the cat sat on the"], ["the cat sat on the mat"])
    assert got == pytest.approx(100 * math.exp(1 - 6 / 5), rel=1e-6)
    with pytest.raises(ValueError, match="one sentence per hypothesis"):
        bleu(["a"], ["a", "b"])


def test_perplexity_uniform_over_four_is_four():
    logits = torch.zeros(2, 3, 4)
    targets = torch.tensor([[0, 1, 2], [3, -100, 0]])
    assert perplexity(logits, targets) == pytest.approx(4.0)


def test_accuracy_and_macro_f1_by_hand():
    predicted = torch.tensor([0, 0, 1, 1])
    target = torch.tensor([0, 1, 1, 1])
    assert accuracy(predicted, target) == 0.75
    # class 0: TP 1, FP 1, FN 0 → 2/3; class 1: TP 2, FP 0, FN 1 → 4/5
    assert macro_f1(predicted, target) == pytest.approx((2 / 3 + 4 / 5) / 2)
    with pytest.raises(ValueError, match="shapes differ"):
        accuracy(predicted, target[:3])
