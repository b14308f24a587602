"""Jain & Wallace's additive-attention classifier against its equations in float64: the encoders
(BiLSTM, tanh-affine average, CNN), the additive score and pooling, the decoder and the QA
variant; padding, recording, ablation through the hook, gradients, embedding initialisation."""

from __future__ import annotations

import pytest
import torch

from attnkit.evaluate import ablate
from attnkit.interpret import record
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier

TOKENS = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 3, 0, 0], [5, 0, 0, 0, 0]])
QUESTION = torch.tensor([[3, 4, 0], [5, 6, 7], [8, 0, 0]])
ENCODERS = ("lstm", "average", "cnn")


def make(encoder: str, *, question: bool = False, seed: int = 0) -> AdditiveAttentionClassifier:
    torch.manual_seed(seed)
    model = AdditiveAttentionClassifier(
        12,
        3,
        encoder=encoder,
        embed_dim=6,
        hidden_dim=4,
        attention_dim=5,
        kernel_sizes=(1, 3),
        question=question,
    )
    return model.double().eval()


def encode_alone(encoder, x: torch.Tensor) -> torch.Tensor:
    """``h_t [L, d]`` of one unpadded sentence ``x [L, d_e]``, from the paper's definitions."""
    if encoder.kind == "lstm":
        return encoder.rnn.rnn(x[None])[0][0]  # torch's own LSTM over the sentence alone
    if encoder.kind == "average":
        w, b = encoder.projection.weight, encoder.projection.bias
        return torch.tanh(x @ w.T + b)
    outs = []
    for conv in encoder.convolutions:
        k = conv.kernel_size[0]
        padded = torch.cat([x.new_zeros(k // 2, x.shape[1]), x, x.new_zeros(k // 2, x.shape[1])])
        w = conv.weight  # [d_h, d_e, k]
        rows = [torch.einsum("oik,ki->o", w, padded[t : t + k]) + conv.bias for t in range(len(x))]
        outs.append(torch.relu(torch.stack(rows)))
    return torch.cat(outs, dim=-1)


def question_summary(encoder, states: torch.Tensor) -> torch.Tensor:
    if encoder.kind == "lstm":
        half = states.shape[-1] // 2
        return torch.cat([states[-1, :half], states[0, half:]])
    if encoder.kind == "cnn":  # Jain & Wallace max-pool the CNN's states over the tokens
        return states.max(0).values
    return states.mean(0)


def reference(
    model: AdditiveAttentionClassifier,
    tokens: torch.Tensor,
    question: torch.Tensor | None = None,
    weights: str = "model",
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Attention ``α`` per sentence and logits ``[B, C]``: e_t = wᵀ tanh(W1 q + W2 h_t + b)."""
    score = model.attention.score
    alphas, logits = [], []
    with torch.no_grad():
        for i, row in enumerate(tokens):
            real = row[row != 0]
            h = encode_alone(model.encoder, model.embedding.weight[real])
            if question is None:
                q = model.query
            else:
                q_real = question[i][question[i] != 0]
                qh = encode_alone(model.question_encoder, model.embedding.weight[q_real])
                q = question_summary(model.question_encoder, qh)
            hidden = torch.tanh(
                score.query_proj.weight @ q + h @ score.key_proj.weight.T + score.key_proj.bias
            )
            e = hidden @ score.out.weight[0]
            alpha = e.softmax(0) if weights == "model" else torch.full_like(e, 1 / len(e))
            pooled = alpha @ h
            if question is not None:
                pooled = torch.tanh(
                    pooled @ model.passage_proj.weight.T
                    + model.passage_proj.bias
                    + q @ model.question_proj.weight.T
                )
            alphas.append(alpha)
            logits.append(pooled @ model.decoder.weight.T + model.decoder.bias)
    return alphas, torch.stack(logits)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_logits_and_recorded_attention_match_the_equations(encoder: str) -> None:
    model = make(encoder)
    with record(model) as rec:
        logits = model(TOKENS)
    alphas, expected = reference(model, TOKENS)
    assert logits.shape == (3, 3)
    torch.testing.assert_close(logits, expected)
    weights = rec["attention"]  # [B, 1, 1, L]
    assert weights.shape == (3, 1, 1, 5)
    for i, alpha in enumerate(alphas):
        n = len(alpha)
        torch.testing.assert_close(weights[i, 0, 0, :n], alpha)
        assert torch.all(weights[i, 0, 0, n:] == 0)  # padding gets no attention


@pytest.mark.parametrize("encoder", ENCODERS)
def test_question_answering_variant_matches_the_equations(encoder: str) -> None:
    model = make(encoder, question=True)
    _, expected = reference(model, TOKENS, QUESTION)
    torch.testing.assert_close(model(TOKENS, question=QUESTION), expected)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_padding_never_changes_the_logits(encoder: str) -> None:
    model = make(encoder)
    padded = torch.cat([TOKENS, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded), model(TOKENS))


@pytest.mark.parametrize("encoder", ENCODERS)
def test_uniform_replacement_through_the_hook(encoder: str) -> None:
    model = make(encoder)

    def uniform(weights: torch.Tensor, admissible: torch.Tensor) -> torch.Tensor:
        keep = admissible.expand_as(weights).to(weights.dtype)
        return keep / keep.sum(-1, keepdim=True)

    with ablate(model, uniform, modules=["attention"]):
        logits = model(TOKENS)
    _, expected = reference(model, TOKENS, weights="uniform")
    torch.testing.assert_close(logits, expected)
    assert not torch.allclose(logits, model(TOKENS))  # the attention mattered


@pytest.mark.parametrize("encoder", ENCODERS)
def test_gradient_reaches_every_parameter(encoder: str) -> None:
    model = make(encoder).train()
    model(TOKENS).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_embeddings_initialised_from_a_matrix_and_frozen() -> None:
    matrix = torch.randn(12, 7, dtype=torch.float64)
    model = AdditiveAttentionClassifier(
        12, 2, encoder="average", embeddings=matrix, freeze_embeddings=True, hidden_dim=3
    ).double()
    torch.testing.assert_close(model.embedding.weight, matrix)
    assert not model.embedding.weight.requires_grad
    model(TOKENS).sum().backward()
    assert model.embedding.weight.grad is None


def test_bad_input_names_what_was_expected() -> None:
    with pytest.raises(ValueError, match="encoder must be one of"):
        AdditiveAttentionClassifier(12, 2, encoder="gru")
    with pytest.raises(ValueError, match=r"embeddings must be \[vocab_size=12"):
        AdditiveAttentionClassifier(12, 2, embeddings=torch.randn(11, 4))
    model = make("average")
    with pytest.raises(ValueError, match="tokens must be long token ids"):
        model(TOKENS.float())
    with pytest.raises(ValueError, match="takes no question"):
        model(TOKENS, question=QUESTION)
    with pytest.raises(ValueError, match="needs a question"):
        make("average", question=True)(TOKENS)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_encode_then_decode_returns_the_attention_in_the_graph(encoder: str) -> None:
    model = make(encoder)
    mask = TOKENS != 0
    states, query = model.encode(model.embed(TOKENS), mask)
    logits, alpha = model.decode(states, mask, query, return_attention=True)
    alphas, expected = reference(model, TOKENS)
    torch.testing.assert_close(logits, expected)
    for i, a in enumerate(alphas):
        torch.testing.assert_close(alpha[i, : len(a)], a)
    alpha[:, 0].sum().backward()  # the weights are differentiable (adversarial training)
    assert model.attention.score.out.weight.grad.abs().sum() > 0
