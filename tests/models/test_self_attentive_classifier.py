"""Lin et al.'s (2017) structured self-attentive classifier against its formulas in float64:
``A = softmax(W_s2 tanh(W_s1 Hᵀ))``, ``M = A H``, the MLP, and the loss with the penalty
``‖A Aᵀ − I‖²_F``; the attention as the engine records it, padding, pretrained embeddings."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnkit as ak
from attnkit.evaluate import ablate
from attnkit.interpret import record
from attnkit.models.self_attentive_classifier import (
    SelfAttentiveClassifier,
    StructuredScore,
    structured_penalty,
)

TOKENS = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 3, 0, 0], [5, 0, 0, 0, 0]])
LABELS = torch.tensor([0, 2, 1])


def make(penalty: float = 0.7, seed: int = 0, **kwargs) -> SelfAttentiveClassifier:
    torch.manual_seed(seed)
    model = SelfAttentiveClassifier(
        12,
        3,
        embed_dim=6,
        hidden_dim=3,
        attention_hidden=5,
        hops=4,
        mlp_hidden=7,
        penalty=penalty,
        **kwargs,
    )
    return model.double().eval()


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    e = torch.exp(x - x.max(dim, keepdim=True).values)
    return e / e.sum(dim, keepdim=True)


def reference(model: SelfAttentiveClassifier) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits ``[B, C]`` and each sentence's ``A [r, T]`` by Lin et al.'s formulas, each sentence
    run alone through the LSTM (no padding, no packing)."""
    w_s1 = model.attention.attend.score.key_proj.weight.detach()  # [d_a, 2u]
    w_s2 = model.attention.query.detach()  # [r, d_a]
    logits, maps = [], []
    with torch.no_grad():
        for row in TOKENS:
            words = row[row != 0]
            h = model.encoder.rnn(model.embedding(words)[None])[0][0]  # H [T, 2u]
            a = softmax(w_s2 @ torch.tanh(w_s1 @ h.T), dim=1)  # A [r, T]
            m = a @ h  # M [r, 2u]
            hidden = torch.relu(model.hidden.weight @ m.flatten() + model.hidden.bias)
            logits.append(model.classifier.weight @ hidden + model.classifier.bias)
            maps.append(a)
    return torch.stack(logits), maps


def test_logits_and_recorded_attention_match_lin_et_al() -> None:
    model = make()
    expected, maps = reference(model)
    with record(model) as recorded:
        logits = model(TOKENS)
    assert logits.shape == (3, 3)
    assert torch.allclose(logits, expected, atol=1e-12)
    assert list(recorded.keys()) == ["attention.attend"]
    weights = recorded["attention.attend"]  # [B, 1, r, L] from the engine
    assert weights.shape == (3, 1, 4, 5)
    for b, a in enumerate(maps):
        length = a.shape[1]
        assert torch.allclose(weights[b, 0, :, :length], a, atol=1e-12)
        assert torch.all(weights[b, 0, :, length:] == 0)  # padded words get no weight


def test_objective_is_cross_entropy_plus_the_frobenius_penalty() -> None:
    model = make(penalty=0.7)
    expected, maps = reference(model)
    penalties = []
    for a in maps:  # ‖A Aᵀ − I‖²_F, entry by entry
        r = a.shape[0]
        total = 0.0
        for i in range(r):
            for j in range(r):
                dot = float(sum(a[i, t] * a[j, t] for t in range(a.shape[1])))
                total += (dot - (1.0 if i == j else 0.0)) ** 2
        penalties.append(total)
    loss = F.cross_entropy(expected, LABELS).item() + 0.7 * sum(penalties) / len(penalties)
    objective = model.objective({"tokens": TOKENS}, LABELS)
    assert objective.item() == pytest.approx(loss, abs=1e-12)
    weights = torch.nn.utils.rnn.pad_sequence([a.T for a in maps], batch_first=True).transpose(1, 2)
    assert torch.allclose(structured_penalty(weights), torch.tensor(penalties, dtype=torch.float64))
    # without the penalty the objective is the plain cross-entropy
    plain = make(penalty=0.0).objective({"tokens": TOKENS}, LABELS)
    assert plain.item() == pytest.approx(F.cross_entropy(expected, LABELS).item(), abs=1e-12)


def test_penalty_of_hops_on_different_words_is_zero_and_of_equal_hops_is_not() -> None:
    distinct = torch.eye(3, 5, dtype=torch.float64)[None]  # hop i on word i
    assert structured_penalty(distinct).item() == 0.0
    same = torch.full((1, 2, 4), 0.25, dtype=torch.float64)  # two uniform hops over 4 words
    # A Aᵀ = 1/4 everywhere: (1/4 − 1)² twice on the diagonal, (1/4)² twice off it
    assert structured_penalty(same).item() == pytest.approx(2 * 0.75**2 + 2 * 0.25**2)
    with pytest.raises(ValueError, match=r"A \[B, r, N\]"):
        structured_penalty(torch.ones(2, 3))


def test_forward_backward_shapes_padding_and_gradients() -> None:
    model = make()
    model.train()
    loss = model.objective({"tokens": TOKENS}, LABELS)
    loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
    assert model.attention.query.grad.abs().sum() > 0  # W_s2
    assert model.attention.attend.score.key_proj.weight.grad.abs().sum() > 0  # W_s1
    model.eval()
    padded = F.pad(TOKENS, (0, 3))
    assert torch.allclose(model(padded), model(TOKENS), atol=1e-12)
    assert torch.allclose(model(TOKENS[2:, :1]), model(TOKENS)[2:], atol=1e-12)


def test_uniform_ablation_gives_every_hop_the_mean() -> None:
    model = make(seed=2)
    with ablate(model, mode="uniform"), record(model) as recorded:
        ablated = model(TOKENS)
    weights = recorded["attention.attend"]
    assert torch.allclose(weights[1, 0, :, :3], torch.full((4, 3), 1 / 3, dtype=torch.float64))
    assert (ablated - model(TOKENS)).abs().max() > 1e-6


def test_pretrained_embeddings_initialise_the_table() -> None:
    vectors = torch.arange(12 * 6, dtype=torch.float32).reshape(12, 6) / 10
    model = SelfAttentiveClassifier(
        12,
        3,
        embed_dim=6,
        hidden_dim=3,
        attention_hidden=5,
        hops=2,
        mlp_hidden=4,
        embeddings=vectors,
    )
    assert torch.equal(model.embedding.weight[1:], vectors[1:])
    assert torch.equal(model.embedding.weight[0], torch.zeros(6))  # PAD stays zero
    with pytest.raises(ValueError, match=r"\[vocab_size, embed_dim\] = \[12, 6\], got \[12, 5\]"):
        SelfAttentiveClassifier(12, 3, embed_dim=6, embeddings=torch.zeros(12, 5))


def test_bad_arguments_and_input_are_refused() -> None:
    with pytest.raises(ValueError, match="hops must be an int >= 1, got 0"):
        SelfAttentiveClassifier(12, 3, hops=0)
    with pytest.raises(ValueError, match="penalty must be >= 0"):
        SelfAttentiveClassifier(12, 3, penalty=-1.0)
    with pytest.raises(ValueError, match=r"long token ids \[B, L\]"):
        make()(TOKENS.float())
    with pytest.raises(ValueError, match="d_a=5"):
        StructuredScore(d_key=6, d_hidden=5).check(4, 6, 0)


def test_taxonomy_row() -> None:
    row = str(ak.taxonomy.describe(make()))
    assert row.split(" | ")[3] == "Additive" and row.endswith("Self-Attentive | Multi-Head")
