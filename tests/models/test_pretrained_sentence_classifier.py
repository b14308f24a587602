"""The capsule and multi-dimensional sentence classifiers with pretrained word vectors: the table
starts from the matrix, the rest is :class:`SentenceClassifier` (whose equations
tests/models/test_sentence_classifier.py checks), and the attention is recorded by the engine."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.interpret import record
from attnkit.models.pretrained_sentence_classifier import PretrainedSentenceClassifier
from attnkit.models.sentence_classifier import SentenceClassifier

TOKENS = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 3, 0, 0]])
LABELS = torch.tensor([2, 0])


@pytest.mark.parametrize(
    ("attention", "shape"),
    [("capsule", (2, 1, 3, 5)), ("multi_dimensional", (2, 1, 1, 5, 8))],
)
def test_embeddings_shapes_recorded_attention_and_same_model(attention, shape) -> None:
    vectors = torch.randn(12, 6, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = PretrainedSentenceClassifier(
        12, 3, attention=attention, embed_dim=6, hidden_dim=4, embeddings=vectors
    )
    assert torch.equal(model.embedding.table.weight[1:], vectors[1:])
    assert torch.equal(model.embedding.table.weight[0], torch.zeros(6))
    model.objective({"tokens": TOKENS}, LABELS).backward()
    assert model.embedding.table.weight.grad[4].abs().sum() > 0  # fine-tuned, not frozen
    model.eval()
    with record(model) as recorded:
        logits = model(TOKENS)
    assert logits.shape == (2, 3)
    (weights,) = [recorded[name] for name in recorded.keys()]
    assert weights.shape == shape
    padded = weights[1, :, :, 3:]  # the second sentence has 3 words: no weight after them
    assert padded.numel() and torch.all(padded == 0)
    # the same model as SentenceClassifier once its table holds the same vectors
    reference = SentenceClassifier(12, 3, attention=attention, embed_dim=6, hidden_dim=4).eval()
    reference.load_state_dict(model.state_dict())
    assert torch.allclose(reference(TOKENS), logits)
    assert F.cross_entropy(logits, LABELS).isfinite()


def test_the_meta_embedding_head_is_refused() -> None:
    with pytest.raises(ValueError, match="one embedding table"):
        PretrainedSentenceClassifier(12, 2, attention="multi_representational")
