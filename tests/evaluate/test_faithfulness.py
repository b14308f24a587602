"""ERASER's comprehensiveness, sufficiency and AOPC (DeYoung et al. 2020) computed by hand on a
bag-of-words classifier, whose token importance is known exactly: logits = Σ_n W[token_n], so
token n adds W[t, 0] - W[t, 1] to the margin of class 0."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnkit.evaluate import AOPC, ERASER_FRACTIONS, aopc, comprehensiveness, sufficiency

PAD = 0
# rows: token ids 0..5; id 0 (the replacement) adds nothing
W = torch.tensor(
    [[0.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.0], [0.0, 0.25]], dtype=torch.float64
)


class BagOfWords(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(W)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        rows = self.embedding(input_ids)
        if attention_mask is not None:
            rows = rows * attention_mask[..., None]
        return rows.sum(1)  # [B, 2] logits


def p0(tokens: list[int]) -> float:
    """The probability of class 0 for a bag of tokens, by hand: sigmoid of the margin."""
    margin = sum(float(W[t, 0] - W[t, 1]) for t in tokens)
    return 1 / (1 + math.exp(-margin))


IDS = torch.tensor([[1, 2, 3, 4]])  # margins 2, -1, 1, 0.5: predicted class 0
IMPORTANCE = W[IDS, 0] - W[IDS, 1]  # the exact contribution of each token to class 0


def test_comprehensiveness_and_sufficiency_by_hand() -> None:
    model = BagOfWords().eval()
    full = p0([1, 2, 3, 4])
    fractions = [0.25, 0.5, 1.0]  # k = 1, 2, 4 of 4 tokens
    got = comprehensiveness(model, IDS, IMPORTANCE, fractions, replacement_id=PAD)
    # ranked 1 (2.0), 3 (1.0), 4 (0.5), 2 (-1.0)
    expected = [full - p0([2, 3, 4]), full - p0([2, 4]), full - p0([])]
    assert got.shape == (1, 3)
    assert torch.allclose(got[0], torch.tensor(expected, dtype=torch.float64), atol=1e-12)
    got = sufficiency(model, IDS, IMPORTANCE, fractions, replacement_id=PAD)
    expected = [full - p0([1]), full - p0([1, 3]), 0.0]
    assert torch.allclose(got[0], torch.tensor(expected, dtype=torch.float64), atol=1e-12)
    # a map ranking the tokens backwards is less faithful on both counts
    backwards = comprehensiveness(model, IDS, -IMPORTANCE, [0.25], replacement_id=PAD)
    assert float(backwards) == pytest.approx(full - p0([1, 3, 4]))
    assert float(backwards) < float(
        comprehensiveness(model, IDS, IMPORTANCE, [0.25], replacement_id=PAD)
    )


def test_aopc_is_the_mean_over_the_eraser_bins() -> None:
    model = BagOfWords().eval()
    ids = torch.tensor([[1, 2, 3, 4, 5, 1, 3, 2, 4, 5]])  # 10 tokens: k = 1, 1, 1, 2, 5
    importance = W[ids, 0] - W[ids, 1]
    scores = aopc(model, ids, importance, replacement_id=PAD)
    assert isinstance(scores, AOPC) and scores.fractions == ERASER_FRACTIONS
    tokens = ids[0].tolist()
    order = sorted(range(10), key=lambda n: (-float(importance[0, n]), n))  # ties: earlier first
    full = p0(tokens)
    comp, suff = [], []
    for k in (1, 1, 1, 2, 5):  # ⌈f · 10⌉ for f = 1, 5, 10, 20, 50 %
        top = set(order[:k])
        comp.append(full - p0([t for n, t in enumerate(tokens) if n not in top]))
        suff.append(full - p0([t for n, t in enumerate(tokens) if n in top]))
    assert float(scores.comprehensiveness) == pytest.approx(sum(comp) / 5, abs=1e-12)
    assert float(scores.sufficiency) == pytest.approx(sum(suff) / 5, abs=1e-12)


def test_padding_is_never_removed_and_target_and_candidates_are_honoured() -> None:
    model = BagOfWords().eval()
    inputs = {
        "input_ids": torch.tensor([[1, 2, 3, 4], [3, 5, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
    }
    importance = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 9.0, 9.0]])  # padding ranked top
    got = comprehensiveness(model, inputs, importance, [0.5], replacement_id=PAD, target=1)
    # example 1 has 2 candidates: k = 1 removes token 5 (importance 0.2), never the padding
    p1 = 1 - p0([3, 5])
    assert float(got[1, 0]) == pytest.approx(p1 - (1 - p0([3])), abs=1e-12)
    assert float(got[0, 0]) == pytest.approx((1 - p0([1, 2, 3, 4])) - (1 - p0([3, 4])), abs=1e-12)
    keep_first = torch.tensor([[False, True, True, True], [False, True, False, False]])
    got = sufficiency(model, inputs, importance, [0.5], replacement_id=PAD, candidates=keep_first)
    # example 0: 3 candidates, k = 2 keeps tokens 2 and 3; token 1 is no candidate, kept too
    assert float(got[0, 0]) == pytest.approx(p0([1, 2, 3, 4]) - p0([1, 2, 3]), abs=1e-12)


def test_refusals() -> None:
    model = BagOfWords().eval()
    with pytest.raises(ValueError, match="one score per token"):
        comprehensiveness(model, IDS, IMPORTANCE[:, :3], [0.5], replacement_id=PAD)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        comprehensiveness(model, IDS, IMPORTANCE, [0.0], replacement_id=PAD)
    with pytest.raises(ValueError, match="integer token ids"):
        sufficiency(model, IDS.double(), IMPORTANCE, [0.5], replacement_id=PAD)
    with pytest.raises(ValueError, match="class indices"):
        sufficiency(model, IDS, IMPORTANCE, [0.5], replacement_id=PAD, target=2)
    with pytest.raises(ValueError, match="eval mode"):
        aopc(model.train(), IDS, IMPORTANCE, replacement_id=PAD)
    with pytest.raises(ValueError, match="class scores"):
        aopc(model.eval(), IDS, IMPORTANCE, replacement_id=PAD, output=lambda y: y[:, 0])
