"""The BiLSTM with additive attention of Jain & Wallace (2019) against its formula in float64:
``a = softmax(w^T tanh(W h_l + b))``, ``c = Σ a_l h_l``, ``logits = W_o c + b_o``; the attention
as the engine records it, padding, the uniform ablation and pretrained embeddings."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.evaluate import ablate
from attnkit.interpret import record
from attnkit.models.bilstm_attention_classifier import BiLSTMAttentionClassifier

TOKENS = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 3, 0, 0], [5, 0, 0, 0, 0]])
LABELS = torch.tensor([0, 1, 1])


def make(seed: int = 0, **kwargs) -> BiLSTMAttentionClassifier:
    torch.manual_seed(seed)
    model = BiLSTMAttentionClassifier(
        12, 2, embed_dim=6, hidden_dim=3, attention_hidden=5, **kwargs
    )
    return model.double().eval()


def reference(model: BiLSTMAttentionClassifier) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and each sentence's weights ``[T]``, each sentence run alone through the LSTM."""
    score = model.attention.attend.score
    w, b = score.key_proj.weight.detach(), score.key_proj.bias.detach()  # W [d_w, 2h], b
    v = score.out.weight.detach()[0]  # w [d_w]
    logits, maps = [], []
    with torch.no_grad():
        for row in TOKENS:
            words = row[row != 0]
            h = model.encoder.rnn(model.embedding(words)[None])[0][0]  # [T, 2h]
            e = torch.tanh(h @ w.T + b) @ v  # [T]
            a = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
            logits.append(model.classifier.weight @ (a @ h) + model.classifier.bias)
            maps.append(a)
    return torch.stack(logits), maps


def test_logits_and_recorded_attention_match_the_additive_formula() -> None:
    model = make()
    expected, maps = reference(model)
    with record(model) as recorded:
        logits = model(TOKENS)
    assert torch.allclose(logits, expected, atol=1e-12)
    weights = recorded["attention.attend"]  # [B, 1, 1, L]
    assert weights.shape == (3, 1, 1, 5)
    for i, a in enumerate(maps):
        assert torch.allclose(weights[i, 0, 0, : len(a)], a, atol=1e-12)
        assert torch.all(weights[i, 0, 0, len(a) :] == 0)


def test_forward_backward_padding_and_the_uniform_ablation() -> None:
    model = make(seed=1)
    model.train()
    F.cross_entropy(model(TOKENS), LABELS).backward()
    score = model.attention.attend.score
    assert score.key_proj.weight.grad.abs().sum() > 0 and score.out.weight.grad.abs().sum() > 0
    model.eval()
    assert torch.allclose(model(F.pad(TOKENS, (0, 2))), model(TOKENS), atol=1e-12)
    with torch.no_grad():
        means = []
        for row in TOKENS:
            words = row[row != 0]
            means.append(model.encoder.rnn(model.embedding(words)[None])[0][0].mean(0))
        mean_logits = model.classifier(torch.stack(means))
    with ablate(model, mode="uniform"):
        assert torch.allclose(model(TOKENS), mean_logits, atol=1e-12)


def test_pretrained_embeddings_and_bad_input() -> None:
    vectors = torch.randn(12, 6)
    model = BiLSTMAttentionClassifier(12, 2, embed_dim=6, hidden_dim=3, embeddings=vectors)
    assert torch.equal(model.embedding.weight[1:], vectors[1:])
    with pytest.raises(ValueError, match="floating-point tensor"):
        BiLSTMAttentionClassifier(
            12, 2, embed_dim=6, embeddings=torch.zeros(12, 6, dtype=torch.long)
        )
    with pytest.raises(ValueError, match=r"long token ids \[B, L\]"):
        make()(TOKENS[0])
