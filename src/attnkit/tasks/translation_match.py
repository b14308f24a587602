"""Does this French sentence translate this English one? Co-attention over the two sentences.

Data: :func:`attnkit.data.translation_match.load_translation_match` — the bundled Tatoeba pairs
(CC-BY 2.0 France), each kept pair giving a positive (the release's own translation) and a
negative (the English sentence with the French sentence of another pair of the same split, drawn
by a seeded permutation and never one of that English sentence's references in the release).
Balanced by construction. ``data.max_length`` filters pairs (tokens per side), ``data.max_examples``
caps the training examples (``max_examples // 2`` pairs), ``config.seed`` seeds the draw. One
vocabulary per language from the training examples (``data.min_freq``, ``data.max_vocab``).

Model: :class:`attnkit.models.co_attention_classifier.CoAttentionClassifier`, ``model.style``
parallel (Lu et al. eq. 12-16) or alternating (eq. 6-9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection
from attnkit.data.translation_match import LABELS, SentencePair, load_translation_match
from attnkit.data.vocabulary import Vocabulary
from attnkit.models.co_attention_classifier import CoAttentionClassifier
from attnkit.tasks.base import Task, pad_ids


class CoAttentionModelConfig(ModelSection):
    """Co-attention over two sequences (Lu et al. 2016): parallel or alternating."""

    kind: Literal["co_attention"] = "co_attention"
    style: Literal["parallel", "alternating"] = "parallel"
    embed_dim: int = Field(64, ge=1)
    hidden_dim: int = Field(64, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


@TASKS.register("tatoeba_match")
class TranslationMatch(Task):
    """Is the French sentence a translation of the English one (in the Tatoeba release)?"""

    classes = LABELS
    models = (CoAttentionModelConfig,)

    def load(self) -> Mapping[str, Sequence[Any]]:
        data = self.config.data
        max_pairs = None if data.max_examples is None else max(1, data.max_examples // 2)
        return load_translation_match(
            max_length=data.max_length, max_pairs=max_pairs, seed=self.config.seed
        )

    def label(self, example: Any) -> int:
        if not isinstance(example, SentencePair):
            raise TypeError(
                f"a tatoeba_match example is a SentencePair, got {type(example).__name__}"
            )
        return example.label

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        data = self.config.data
        state = {
            side: Vocabulary.build(
                (list(getattr(ex, side)) for ex in train), data.min_freq, data.max_vocab
            ).to_dict()
            for side in ("english", "french")
        }
        self.restore(state)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self.english = Vocabulary.from_dict(state["english"])
        self.french = Vocabulary.from_dict(state["french"])

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"tokens1": English [B, N_e], "tokens2": French [B, N_f]}``."""
        return {
            "tokens1": pad_ids([ex.english for ex in examples], self.english),
            "tokens2": pad_ids([ex.french for ex in examples], self.french),
        }

    def build_model(self) -> nn.Module:
        section = self.model_config
        return CoAttentionClassifier(
            len(self.english),
            len(self.french),
            len(self.classes),
            style=section.style,
            embed_dim=section.embed_dim,
            hidden_dim=section.hidden_dim,
            dropout=section.dropout,
        )

    def describe(self, example: Any) -> str:
        return f"{' '.join(example.english)} ||| {' '.join(example.french)}"
