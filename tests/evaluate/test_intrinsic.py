"""Attention correctness (eq. 46), rank correlation and supervised attention losses, by hand."""

import math

import pytest
import torch

from attnkit.evaluate import attention_correctness, rank_correlation, supervised_attention_loss


def test_attention_correctness_by_hand():
    w = torch.tensor([0.5, 0.3, 0.2])
    assert attention_correctness(w, [0, 2]).item() == pytest.approx(0.7)
    batch = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    gold = torch.tensor([[False, True, False], [True, False, True]])
    assert torch.allclose(attention_correctness(batch, gold), torch.tensor([0.3, 0.9]))
    with pytest.raises(ValueError, match=r"must be in \[0, 3\)"):
        attention_correctness(w, [3])


def test_rank_correlation_by_hand():
    w = torch.tensor([0.1, 0.4, 0.2, 0.3])
    human = torch.tensor([1.0, 4.0, 3.0, 2.0])
    # ranks [1,4,2,3] vs [1,4,3,2]: Σd² = 2 → ρ = 1 - 6·2 / (4·15) = 0.8
    assert rank_correlation(w, human).item() == pytest.approx(0.8)
    # 5 concordant, 1 discordant pair of 6 → τ = 4/6
    assert rank_correlation(w, human, "kendall").item() == pytest.approx(2 / 3)
    rows = rank_correlation(torch.stack([w, w]), torch.stack([human, -human]))
    assert torch.allclose(rows, torch.tensor([0.8, -0.8], dtype=torch.float64))
    with pytest.raises(ValueError, match="method"):
        rank_correlation(w, human, "pearson")


def test_supervised_attention_loss_by_hand():
    w = torch.tensor([[0.5, 0.25, 0.25]], requires_grad=True)
    one = torch.tensor([[1.0, 0, 0]])
    assert supervised_attention_loss(w, one, "kl").item() == pytest.approx(math.log(2))
    assert supervised_attention_loss(w, one, "ce").item() == pytest.approx(math.log(2))
    # ((0.5)² + 0.25² + 0.25²) / 3
    assert supervised_attention_loss(w, one, "mse").item() == pytest.approx(0.125)
    two = torch.tensor([[1.0, 1, 0]])  # normalised to [0.5, 0.5, 0]
    assert supervised_attention_loss(w, two, "kl").item() == pytest.approx(0.5 * math.log(2))
    assert supervised_attention_loss(w, two, "ce").item() == pytest.approx(1.5 * math.log(2))
    supervised_attention_loss(w, two, "ce").backward()
    # ∂/∂a_n of -Σ g log a = -g_n / a_n
    assert torch.allclose(w.grad, torch.tensor([[-1.0, -2.0, 0.0]]))


def test_supervised_rows_without_gold_are_skipped():
    w = torch.tensor([[0.5, 0.5], [0.9, 0.1]])
    gold = torch.tensor([[1.0, 0], [0, 0]])
    assert supervised_attention_loss(w, gold, "ce").item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="kind"):
        supervised_attention_loss(w, gold, "l1")
