"""Target-dependent sentiment with LCR-Rot-hop (Wallaart & Frasincar 2019).

Data (derived; no target-level annotation exists in this project's sources):
:func:`attnkit.data.target_sentiment.load_target_sentiment` — a positively and a negatively rated
Rotten Tomatoes sentence (Hutto & Gilbert's mean human ratings, ``|rating| >= 0.5``) joined as one
context, a 1–3-token target span drawn in one of them, labelled by the sign of **that**
sentence's rating; every pair gives both targets, so the classes are balanced and only the
target's position tells them apart. ``data.max_length`` = longest source sentence (tokens),
``data.max_examples`` caps the training examples, ``config.seed`` seeds the derivation. The
vocabulary is built from the training contexts (``data.min_freq``, ``data.max_vocab``).

Model: :class:`attnkit.models.lcr_rot_hop.LCRRotHop` (``model.hops`` rotations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection
from attnkit.data.target_sentiment import LABELS, TargetExample, load_target_sentiment
from attnkit.models.lcr_rot_hop import LCRRotHop
from attnkit.tasks.base import WordTask, pad_ids


class LCRRotHopModelConfig(ModelSection):
    """LCR-Rot-hop (Wallaart & Frasincar 2019): rotatory attention over left/target/right."""

    kind: Literal["lcr_rot_hop"] = "lcr_rot_hop"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(64, ge=1)
    hops: int = Field(3, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


@TASKS.register("target_sentiment")
class TargetSentiment(WordTask):
    """Is the sentiment towards the target (of the sentence holding it) positive or negative?"""

    classes = LABELS
    models = (LCRRotHopModelConfig,)

    def load(self) -> Mapping[str, Sequence[Any]]:
        data = self.config.data
        return load_target_sentiment(
            max_length=data.max_length, max_examples=data.max_examples, seed=self.config.seed
        )

    def label(self, example: Any) -> int:
        if not isinstance(example, TargetExample):
            raise TypeError(
                f"a target_sentiment example is a TargetExample, got {type(example).__name__}"
            )
        return example.label

    def sentences(self, example: Any) -> list[Sequence[str]]:
        return [example.left + example.target + example.right]

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"left": [B, N_l], "target": [B, N_t], "right": [B, N_r]}`` token ids."""
        return {
            part: pad_ids([getattr(ex, part) for ex in examples], self.words)
            for part in ("left", "target", "right")
        }

    def build_model(self) -> nn.Module:
        section = self.model_config
        return LCRRotHop(
            len(self.words),
            len(self.classes),
            embed_dim=section.embed_dim,
            hidden_dim=section.hidden_dim,
            hops=section.hops,
            dropout=section.dropout,
        )

    def describe(self, example: Any) -> str:
        return (
            f"{' '.join(example.left)} [{' '.join(example.target)}] {' '.join(example.right)} "
            f"(rating {example.rating:+.2f})"
        )
