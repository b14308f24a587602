"""HAN against Yang et al.'s equations written out in float64 (HAN eq. 5-11), padding, ablation,
and the movie_reviews task's batches."""

from __future__ import annotations

import pytest
import torch

from attnkit.config import validate
from attnkit.data.movie_reviews import Review
from attnkit.evaluate import ablate
from attnkit.models.han import HierarchicalAttentionNetwork
from attnkit.tasks.base import task_for

# two documents: 3 sentences (the middle one short), and 1 sentence
WORDS = torch.tensor(
    [
        [[4, 5, 6, 7], [8, 9, 0, 0], [3, 2, 4, 9]],
        [[5, 5, 7, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
    ]
)


def make(seed: int = 0) -> HierarchicalAttentionNetwork:
    torch.manual_seed(seed)
    return HierarchicalAttentionNetwork(12, 3, embed_dim=6, hidden_dim=4).double().eval()


def attend(u: torch.Tensor, w: torch.Tensor, b: torch.Tensor, h: torch.Tensor):
    """HAN eq. 5-7: ``α = softmax_t(u^T tanh(W h_t + b))``, ``s = Σ_t α_t h_t``."""
    scores = torch.stack([u @ torch.tanh(w @ h_t + b) for h_t in h])
    alpha = torch.exp(scores - scores.max()) / torch.exp(scores - scores.max()).sum()
    return alpha, (alpha[:, None] * h).sum(0)


def level_parameters(score, query):
    """HAN's ``(u, W, b)`` of one level from attnkit's additive score ``w^T tanh(W_1 q + W_2 k +
    b)`` with the learned query q: u = w, W = W_2, b = W_1 q + b."""
    u = score.out.weight[0].detach()
    w = score.key_proj.weight.detach()
    b = (score.key_proj.bias + score.query_proj.weight @ query).detach()
    return u, w, b


def reference(han: HierarchicalAttentionNetwork, words: torch.Tensor):
    """Logits, word weights and sentence weights of each document, one real sequence at a time
    through the model's own GRUs (no padding, no packing)."""
    att = han.attention
    word_gru, sentence_gru = att.word_encoder.rnn, att.sentence_encoder.rnn
    word_level = level_parameters(att.word_score, att.word_query)
    sentence_level = level_parameters(att.sentence_score, att.sentence_query)
    logits, word_weights, sentence_weights = [], [], []
    with torch.no_grad():
        for doc in words:
            vectors, alphas = [], []
            for sentence in doc:
                real = sentence[sentence != 0]
                if len(real) == 0:
                    continue
                h = word_gru(han.embedding(real)[None])[0][0]  # HAN eq. 1-4, [T, 2h]
                alpha, s = attend(*word_level, h)  # eq. 5-7
                vectors.append(s)
                alphas.append(alpha)
            hs = sentence_gru(torch.stack(vectors)[None])[0][0]  # eq. 8
            beta, v = attend(*sentence_level, hs)  # eq. 9-10
            logits.append(han.classifier(v))  # eq. 11 (before the softmax)
            word_weights.append(alphas)
            sentence_weights.append(beta)
    return torch.stack(logits), word_weights, sentence_weights


def test_logits_and_both_levels_of_weights_match_han_equations() -> None:
    han = make()
    logits, word_weights, sentence_weights = reference(han, WORDS)
    out = han.attend(WORDS, return_weights=True)
    assert torch.allclose(han(WORDS), logits, atol=1e-10)
    for b, (alphas, beta) in enumerate(zip(word_weights, sentence_weights, strict=True)):
        n = len(alphas)
        assert torch.allclose(out.sentence_weights[b, :n], beta, atol=1e-12)
        assert (out.sentence_weights[b, n:] == 0).all()
        for i, alpha in enumerate(alphas):
            assert torch.allclose(out.word_weights[b, i, : len(alpha)], alpha, atol=1e-12)
            assert (out.word_weights[b, i, len(alpha) :] == 0).all()


def test_padding_words_and_sentences_do_not_change_the_logits() -> None:
    han = make(1)
    padded = torch.zeros(2, 5, 7, dtype=torch.long)
    padded[:, :3, :4] = WORDS
    assert torch.allclose(han(padded), han(WORDS), atol=1e-12)
    # a document alone gives the logits it gets in a batch
    assert torch.allclose(han(WORDS[1:, :1, :3]), han(WORDS)[1:], atol=1e-12)


def test_uniform_ablation_changes_the_logits_and_equals_mean_pooling() -> None:
    han = make(2)
    with ablate(han, mode="uniform"):
        ablated = han(WORDS)
    assert (ablated - han(WORDS)).abs().max() > 1e-4
    # with uniform weights each level is a plain mean of the real GRU states
    att = han.attention
    with torch.no_grad():
        expected = []
        for doc in WORDS:
            means = []
            for sentence in doc:
                real = sentence[sentence != 0]
                if len(real):
                    means.append(att.word_encoder.rnn(han.embedding(real)[None])[0][0].mean(0))
            hs = att.sentence_encoder.rnn(torch.stack(means)[None])[0][0]
            expected.append(han.classifier(hs.mean(0)))
    assert torch.allclose(ablated, torch.stack(expected), atol=1e-10)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[B, S, W\]"):
        make()(WORDS[0])


def test_movie_reviews_task_batches_vocabulary_and_model() -> None:
    config = validate(
        {
            "name": "t",
            "data": {"corpus": "movie_reviews"},
            "model": {"kind": "han", "embed_dim": 6, "hidden_dim": 3},
            "train": {"steps": 1},
        }
    )
    task = task_for(config)
    train = [
        Review((("a", "good", "film"), ("good",)), 1),
        Review((("a", "bad", "film", "indeed"),), 0),
    ]
    state = task.fit(train)
    batch = task.collate(train)["words"]
    assert batch.shape == (2, 2, 4)
    good, film = task.words.encode(["good", "film"])
    assert batch[0, 1].tolist() == [good, 0, 0, 0] and batch[1, 1].tolist() == [0, 0, 0, 0]
    assert batch[0, 0, 2] == film
    other = task_for(config)
    other.restore(state)
    assert other.words == task.words
    model = task.build_model()
    assert model(**task.collate(train)).shape == (2, 2)
    assert [task.label(r) for r in train] == [1, 0] and task.classes[1] == "positive"
    with pytest.raises(TypeError, match="Review"):
        task.label(("a",))


def test_artifacts_draw_one_png_per_review(tmp_path) -> None:
    config = validate(
        {
            "name": "t",
            "data": {"corpus": "movie_reviews"},
            "model": {"kind": "han", "embed_dim": 6, "hidden_dim": 3},
            "train": {"steps": 1},
        }
    )
    task = task_for(config)
    reviews = [Review((("a", "film"), ("good",)), 1), Review((("bad",),), 0), Review((), 0)]
    task.fit(reviews)
    paths = task.artifacts(task.build_model(), reviews, tmp_path)
    assert [p.name for p in paths] == ["review-1.png", "review-2.png"]  # the empty one skipped
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
