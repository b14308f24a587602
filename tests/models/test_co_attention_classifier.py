"""The co-attention sentence-pair classifier (attnkit.models.co_attention_classifier).

References: the classifier head written out in float64; under uniform ablation each context is
the plain mean of its sentence's real encoder features, computed here by hand.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.evaluate import ablate
from attnkit.models.co_attention_classifier import CoAttentionClassifier

STYLES = ("parallel", "alternating")


def model_and_batch(style: str, dtype=torch.float32):
    torch.manual_seed(0)
    model = CoAttentionClassifier(30, 40, 2, style=style, embed_dim=8, hidden_dim=5).to(dtype)
    model.eval()
    tokens1 = torch.randint(1, 30, (4, 6))
    tokens2 = torch.randint(1, 40, (4, 7))
    tokens1[1, 4:] = 0  # padding of different lengths
    tokens2[2, 3:] = 0
    tokens2[3, 1:] = 0
    return model, tokens1, tokens2


@pytest.mark.parametrize("style", STYLES)
def test_shape_and_padding_invariance(style: str) -> None:
    model, t1, t2 = model_and_batch(style)
    logits = model(t1, t2)
    assert logits.shape == (4, 2) and torch.isfinite(logits).all()
    padded = model(
        torch.cat([t1, torch.zeros(4, 3, dtype=torch.long)], 1),
        torch.cat([t2, torch.zeros(4, 2, dtype=torch.long)], 1),
    )
    torch.testing.assert_close(padded, logits, atol=1e-6, rtol=1e-6)
    # each example alone, unpadded, gives its row of the batch
    for b in range(4):
        alone = model(
            t1[b : b + 1, : int((t1[b] > 0).sum())], t2[b : b + 1, : int((t2[b] > 0).sum())]
        )
        torch.testing.assert_close(alone, logits[b : b + 1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("style", STYLES)
def test_head_matches_float64_formula(style: str) -> None:
    model, t1, t2 = model_and_batch(style, torch.float64)
    with torch.no_grad():
        out = model.attend(t1, t2)
        c1, c2 = out.contexts["1"], out.contexts["2"]
        m = torch.cat([c1, c2, c1 * c2, (c1 - c2).abs()], -1)  # Mou et al.'s matching features
        hidden = torch.tanh(m @ model.hidden.weight.T + model.hidden.bias)
        expected = hidden @ model.output.weight.T + model.output.bias
        torch.testing.assert_close(model(t1, t2), expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("style", STYLES)
def test_uniform_ablation_reaches_the_co_attention(style: str) -> None:
    model, t1, t2 = model_and_batch(style, torch.float64)
    with torch.no_grad():
        logits = model(t1, t2)
        with ablate(model, mode="uniform"):
            ablated = model(t1, t2)
            out = model.attend(t1, t2)
        assert (ablated - logits).abs().max() > 1e-4
        # uniform weights: each context is the mean of the real features (values = features)
        for key, encoder, tokens in (("1", model.encoder1, t1), ("2", model.encoder2, t2)):
            features, mask = encoder(tokens)
            mean = (features * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            torch.testing.assert_close(out.contexts[key], mean, atol=1e-12, rtol=1e-12)


def test_bad_input() -> None:
    model, t1, t2 = model_and_batch("parallel")
    with pytest.raises(ValueError, match="tokens1 must be int64"):
        model(t1.float(), t2)
    with pytest.raises(ValueError, match="one batch size"):
        model(t1, t2[:2])
    with pytest.raises(ValueError, match="style must be one of"):
        CoAttentionClassifier(5, 5, 2, style="interactive")  # type: ignore[arg-type]


def test_task_collates_both_sentences_for_the_model() -> None:
    from attnkit.config import validate
    from attnkit.tasks.base import task_for

    raw = {
        "name": "match-test",
        "data": {"corpus": "tatoeba_match", "max_length": 4, "max_examples": 40},
        "model": {"kind": "co_attention", "style": "alternating", "embed_dim": 6, "hidden_dim": 4},
        "train": {"steps": 1},
    }
    task = task_for(validate(raw))
    data = task.load()
    assert len(data["train"]) == 40
    state = task.fit(data["train"])
    examples = data["train"][:6]
    inputs = task.collate(examples)
    for key, side, words in (
        ("tokens1", "english", task.english),
        ("tokens2", "french", task.french),
    ):
        for row, example in zip(inputs[key].tolist(), examples, strict=True):
            assert words.decode([i for i in row if i != 0]) == list(getattr(example, side))
    assert [task.label(e) for e in examples] == [1, 0, 1, 0, 1, 0]
    again = task_for(validate(raw))
    again.restore(state)
    assert (again.english, again.french) == (task.english, task.french)
    assert again.build_model()(**inputs).shape == (6, 2)
    with pytest.raises(TypeError, match="SentencePair"):
        task.label("an english sentence")
