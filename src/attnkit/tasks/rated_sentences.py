"""Sentence sentiment with capsule, multi-dimensional, multi-representational or uniform attention
(survey Table 3).

Data: the 10,605 Rotten Tomatoes review sentences of Pang & Lee's sentence polarity dataset with
Hutto & Gilbert's (2014) mean human ratings, bundled as :mod:`attnkit.data.rated_sentences`. The
label is **derived**: the sign of the mean rating (the 37 sentences rated exactly 0 are
dropped), 10,568 sentences, split by a hash of the text into about 8,466 / 1,064 / 1,038. The
training split is cut to ``data.max_examples``, each sentence to ``data.max_length`` tokens. The
vocabulary is built from the training sentences (``data.min_freq``, ``data.max_vocab``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection
from attnkit.data.rated_sentences import LABELS, RatedSentence, load_rated_sentences
from attnkit.interpret.plots import plot_heatmap
from attnkit.interpret.record import record
from attnkit.models.sentence_classifier import SentenceClassifier
from attnkit.tasks.base import WordTask, pad_ids

#: test sentences drawn by :meth:`RatedSentences.artifacts`
ARTIFACT_SENTENCES = 6


class SentenceModelConfig(ModelSection):
    """A sentence classifier over a bidirectional GRU with the chosen attention (survey §3.3)."""

    kind: Literal["sentence"] = "sentence"
    attention: Literal["capsule", "multi_dimensional", "multi_representational", "uniform"] = (
        "capsule"
    )
    embed_dim: int = Field(100, ge=1)
    second_embed_dim: int = Field(
        50, ge=1, description="multi_representational: the second embedding's size"
    )
    hidden_dim: int = Field(64, ge=1, description="per direction of the bidirectional GRU")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


@TASKS.register("rt_snippets")
class RatedSentences(WordTask):
    """Is a review sentence positive or negative (by the sign of its mean human rating)?"""

    classes = LABELS
    models = (SentenceModelConfig,)

    def load(self) -> Mapping[str, Sequence[Any]]:
        data = self.config.data
        return load_rated_sentences(max_examples=data.max_examples, max_length=data.max_length)

    def label(self, example: Any) -> int:
        if not isinstance(example, RatedSentence):
            raise TypeError(
                f"an rt_snippets example is a RatedSentence, got {type(example).__name__}"
            )
        return example.label

    def sentences(self, example: Any) -> list[Sequence[str]]:
        return [example.tokens]

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"tokens": [B, L]}``, ``L`` the longest sentence of the batch, ``PAD`` after."""
        return {"tokens": pad_ids([example.tokens for example in examples], self.words)}

    def build_model(self) -> nn.Module:
        section = self.model_config
        return SentenceClassifier(
            len(self.words),
            len(self.classes),
            attention=section.attention,
            embed_dim=section.embed_dim,
            second_embed_dim=section.second_embed_dim,
            hidden_dim=section.hidden_dim,
            dropout=section.dropout,
        )

    def describe(self, example: Any) -> str:
        return f"{' '.join(example.tokens)} (rating {example.rating:+.2f})"

    def artifacts(self, model: nn.Module, examples: Sequence[Any], directory: Path) -> list[Path]:
        """One PNG per test sentence (the first six): every attention map of the model over its
        words, recorded with :func:`attnkit.interpret.record` — one row per capsule, the pooling
        weights (averaged over the features for multi-dimensional attention), and the weight of
        each embedding in the meta-embedding."""

        chosen = [e for e in examples[:ARTIFACT_SENTENCES] if e.tokens]
        if not chosen:
            return []
        was_training = model.training
        model.eval()
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        try:
            for i, example in enumerate(chosen):
                tokens = self.collate([example])["tokens"]
                with torch.no_grad(), record(model) as recorded:
                    predicted = int(model(tokens).argmax(-1))
                rows, labels = _maps(recorded, len(example.tokens), self.classes)
                title = (
                    f"predicted {self.classes[predicted]}, true {example.polarity} "
                    f"(rating {example.rating:+.2f})"
                )
                path = directory / f"sentence-{i + 1}.png"
                plot_heatmap(torch.cat(rows), list(example.tokens), labels, path, title=title)
                paths.append(path)
        finally:
            model.train(was_training)
        return paths


def _maps(recorded: Any, length: int, classes: Sequence[str]) -> tuple[list[Tensor], list[str]]:
    """Rows ``[r, L]`` of a one-sentence batch's recorded weights and their labels."""
    rows, labels = [], []
    for name in recorded.keys():
        w = recorded[name]
        if name == "embedding.attention":  # one call per token: [L, 1, 1, E] -> [E, L]
            w = w.reshape(length, -1).T
            labels += [f"embedding {j + 1}" for j in range(w.shape[0])]
        elif w.dim() == 5:  # multi-dimensional [1, 1, 1, L, d]
            w = w[0, 0].mean(-1)
            labels.append("mean over features")
        else:  # [1, 1, r, L]: the capsules (r = C) or one pooling query
            w = w[0, 0]
            labels += list(classes) if w.shape[0] == len(classes) > 1 else ["attention"]
        rows.append(w.double())
    return rows, labels
