"""The Table 3 sentence classifiers against their equations in float64: capsules (eq. 43-45 and
the capsule loss), multi-dimensional attention (eq. 30-32), meta-embeddings (eq. 21-22) and the
uniform baseline; padding, ablation, and the rt_snippets task's batches."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.config import validate
from attnkit.data.rated_sentences import RatedSentence
from attnkit.evaluate import ablate
from attnkit.models.sentence_classifier import ATTENTIONS, SentenceClassifier
from attnkit.tasks.base import task_for

TOKENS = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 3, 0, 0], [5, 0, 0, 0, 0]])
LABELS = torch.tensor([0, 2, 1])


def make(attention: str, seed: int = 0) -> SentenceClassifier:
    torch.manual_seed(seed)
    model = SentenceClassifier(
        12, 3, attention=attention, embed_dim=6, second_embed_dim=4, hidden_dim=3
    )
    return model.double().eval()


def states(model: SentenceClassifier, tokens: torch.Tensor) -> list[torch.Tensor]:
    """``H`` of each sentence alone through the model's GRU (no padding, no packing)."""
    out = []
    with torch.no_grad():
        for row in tokens:
            real = row[row != 0]
            if model.attention == "multi_representational":
                x = meta_embedding(model, real)
            else:
                x = model.embedding.table(real)
            out.append(model.encoder.rnn(x[None])[0][0])
    return out


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    e = torch.exp(x - x.max(dim, keepdim=True).values)
    return e / e.sum(dim, keepdim=True)


def meta_embedding(model: SentenceClassifier, real: torch.Tensor) -> torch.Tensor:
    """Eq. (21)-(22): ``x^(t_i) = W_i x^(e_i) + b_i``, ``a = softmax_i(w^T tanh(W_1 u + W_2
    x^(t_i) + b))``, ``x^(e) = Σ_i a_i x^(t_i)``, for each token."""
    dme = model.embedding.attention
    t = [p(table(real)) for p, table in zip(dme.projections, model.embedding.tables, strict=True)]
    t = torch.stack(t, 1)  # [T, E, d_t]
    s = dme.score
    hidden = torch.tanh(s.query_proj(dme.query) + s.key_proj(t))  # [T, E, d_w]
    a = softmax(hidden @ s.out.weight[0], dim=1)  # [T, E]
    return (a[..., None] * t).sum(1)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_shapes_and_padding_invariance(attention: str) -> None:
    model = make(attention)
    logits = model(TOKENS)
    assert logits.shape == (3, 3)
    padded = F.pad(TOKENS, (0, 4))  # four more PAD columns
    assert torch.allclose(model(padded), logits, atol=1e-12)
    assert torch.allclose(model(TOKENS[2:, :1]), logits[2:], atol=1e-12)  # alone vs in a batch


def test_uniform_baseline_is_the_mean_of_the_real_states() -> None:
    model = make("uniform")
    means = torch.stack([h.mean(0) for h in states(model, TOKENS)])
    with torch.no_grad():
        expected = model.head.classifier(means)
    assert torch.allclose(model(TOKENS), expected, atol=1e-12)
    with ablate(model, mode="uniform"):  # the ablation column of the baseline is itself
        assert torch.allclose(model(TOKENS), expected, atol=1e-12)


def test_capsules_and_their_objective_match_eq_43_45_and_the_hinge_losses() -> None:
    model = make("capsule")
    caps = model.head.capsules
    q, w, b = caps.query.detach(), caps.probability_weight.detach(), caps.probability_bias.detach()
    logits, loss = [], 0.0
    for h, y in zip(states(model, TOKENS), LABELS.tolist(), strict=True):
        a = softmax(q @ h.T, dim=1)  # eq. (43) and the softmax: [C, T]
        c = a @ h  # context per capsule [C, d]
        z = (w * c).sum(1) + b
        p = torch.sigmoid(z)  # eq. (44)
        r = p[:, None] * c  # eq. (45)
        s = r @ h.mean(0)  # f^T r_c
        n = len(p)
        j = sum(max(0.0, 1 - p[y] + p[k]) for k in range(n) if k != y) / n
        u = sum(max(0.0, 1 - s[y] + s[k]) for k in range(n) if k != y) / n
        loss += (j + u) / len(LABELS)
        logits.append(z)
    assert torch.allclose(model(TOKENS), torch.stack(logits), atol=1e-12)
    objective = model.objective({"tokens": TOKENS}, LABELS)
    assert torch.allclose(objective, torch.as_tensor(loss, dtype=torch.float64), atol=1e-12)


def test_multi_dimensional_attention_matches_eq_30_32() -> None:
    model = make("multi_dimensional")
    pool = model.head.pool
    score = pool.attend.score
    query = pool.query[0].detach()
    pooled = []
    with torch.no_grad():
        for h in states(model, TOKENS):
            hidden = torch.tanh(score.query_proj(query) + score.key_proj(h))  # [T, d_w]
            e = hidden @ score.out.weight.T  # eq. (31): one score per feature [T, d]
            a = softmax(e, dim=0)  # eq. (32): over the words, per feature
            pooled.append((a * h).sum(0))  # eq. (30)
        expected = model.head.classifier(torch.stack(pooled))
    assert torch.allclose(model(TOKENS), expected, atol=1e-12)
    assert model.objective({"tokens": TOKENS}, LABELS).item() == pytest.approx(
        F.cross_entropy(expected, LABELS).item(), abs=1e-12
    )


def test_meta_embeddings_use_both_tables_and_match_eq_21_22() -> None:
    model = make("multi_representational")
    assert [t.embedding_dim for t in model.embedding.tables] == [6, 4]
    pool = model.head.pool
    s, query = pool.attend.score, pool.query[0].detach()
    pooled = []
    with torch.no_grad():
        for h in states(model, TOKENS):  # states() builds the meta-embeddings by eq. (21)-(22)
            a = softmax(torch.tanh(s.query_proj(query) + s.key_proj(h)) @ s.out.weight[0], 0)
            pooled.append(a @ h)
        expected = model.head.classifier(torch.stack(pooled))
    assert torch.allclose(model(TOKENS), expected, atol=1e-12)
    model.objective({"tokens": TOKENS}, LABELS).backward()
    for table in model.embedding.tables:  # both representations are trained in the same run
        assert table.weight.grad is not None and table.weight.grad[4].abs().sum() > 0


@pytest.mark.parametrize(
    "attention",
    [
        "capsule",
        "multi_representational",
        "multi_dimensional",
    ],
)
def test_uniform_ablation_changes_the_logits(attention: str) -> None:
    model = make(attention, seed=3)
    logits = model(TOKENS)
    with ablate(model, mode="uniform"):
        ablated = model(TOKENS)
    assert (ablated - logits).abs().max() > 1e-4
    assert torch.allclose(model(TOKENS), logits)  # restored after the block


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="attention must be one of"):
        SentenceClassifier(5, 2, attention="max")
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        make("uniform")(TOKENS.float())


def test_rt_snippets_task_batches_vocabulary_and_model() -> None:
    config = validate(
        {
            "name": "t",
            "data": {"corpus": "rt_snippets"},
            "model": {"kind": "sentence", "attention": "capsule", "embed_dim": 6, "hidden_dim": 3},
            "train": {"steps": 1},
        }
    )
    task = task_for(config)
    train = [
        RatedSentence(("a", "good", "film"), 2.5, 1, 1),
        RatedSentence(("bad",), -1.0, 0, 2),
    ]
    state = task.fit(train)
    batch = task.collate(train)["tokens"]
    assert batch.shape == (2, 3) and batch[1].tolist() == [task.words.encode(["bad"])[0], 0, 0]
    other = task_for(config)
    other.restore(state)
    assert other.words == task.words
    model = task.build_model()
    assert model(**task.collate(train)).shape == (2, 2)
    assert hasattr(model, "objective") and [task.label(e) for e in train] == [1, 0]
    with pytest.raises(TypeError, match="RatedSentence"):
        task.label("a good film")


@pytest.mark.parametrize(
    ("attention", "rows"),
    [
        ("capsule", ["negative", "positive"]),
        ("multi_dimensional", ["mean over features"]),
        ("multi_representational", ["embedding 1", "embedding 2", "attention"]),
        ("uniform", ["attention"]),
    ],
)
def test_artifacts_draw_every_recorded_map(attention: str, rows: list[str], tmp_path) -> None:
    from attnkit.interpret.record import record
    from attnkit.tasks.rated_sentences import _maps

    config = validate(
        {
            "name": "t",
            "data": {"corpus": "rt_snippets"},
            "model": {"kind": "sentence", "attention": attention, "embed_dim": 6, "hidden_dim": 3},
            "train": {"steps": 1},
        }
    )
    task = task_for(config)
    examples = [RatedSentence(("a", "good", "film"), 2.5, 1, 1), RatedSentence(("bad",), -1, 0, 2)]
    task.fit(examples)
    model = task.build_model()
    paths = task.artifacts(model, examples, tmp_path)
    assert [p.name for p in paths] == ["sentence-1.png", "sentence-2.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    with torch.no_grad(), record(model) as recorded:
        model(task.collate(examples[:1])["tokens"])
    maps, labels = _maps(recorded, 3, task.classes)
    assert labels == rows
    weights = torch.cat(maps)
    assert weights.shape == (len(rows), 3)
    if attention == "uniform":
        assert torch.allclose(weights, torch.full((1, 3), 1 / 3, dtype=torch.float64))
    if attention != "multi_representational":  # each row a distribution over the words
        assert torch.allclose(weights.sum(-1), torch.ones(len(rows), dtype=torch.float64))
