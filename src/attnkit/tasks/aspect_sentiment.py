"""Aspect-based sentiment on the published benchmarks with LCR-Rot (Zheng & Xia 2018) and
LCR-Rot-hop (Wallaart & Frasincar 2019).

Data: :func:`attnkit.data.absa.load_absa` from ``absa/`` of the shared data folder
(``data.root``, default ``../shared/data``): each example a target phrase, the words to its left
and to its right, and the sentiment expressed towards it (negative, neutral, positive). One
corpus name per benchmark: ``semeval14_restaurants`` and ``semeval14_laptops`` (SemEval-2014
task 4, the split of Zheng & Xia), ``twitter`` (Dong et al. 2014), ``semeval2015`` and
``semeval2016`` (the restaurant sets as split by HAABSA, Wallaart & Frasincar's code). The files
have no validation split: ``data.valid_fraction`` of the training examples (default 15 %) is held
out, drawn with the run's seed, for validation (``train.eval_every``) and early stopping
(``train.patience``); the test split is the benchmark's. Tokens are lower-cased
(``data.lowercase``), as GloVe 6B is uncased. ``data.max_examples`` keeps a seeded sample of the
remaining training examples; ``data.max_length`` keeps, of each context, the words nearest the
target. The vocabulary is built from the training examples (``data.min_freq``,
``data.max_vocab``).

Word vectors (``data.embeddings``): ``random`` draws the table from ``U[-0.25, 0.25]`` with the
run's seed (Kim 2014's range); ``glove`` starts from GloVe 6B 50d (``glove-6b-50d/`` of the shared
data folder) through :func:`attnkit.data.glove.embedding_matrix` — a word without a vector is
drawn from ``N(0, σ²)``, σ the spread of the vectors — and needs ``model.embed_dim: 50``. Both
papers used 300-dimensional GloVe vectors, which the shared data folder does not hold. The table
is fine-tuned in both cases.

Model: :class:`attnkit.models.lcr_rot_hop.LCRRotHop` (``model.kind: lcr_rot_hop``):
``model.hops: 1`` is LCR-Rot, 3 is LCR-Rot-hop.

Trivial baseline: every test example given the most frequent class of the training file
(:func:`attnkit.data.absa.majority_baseline`); ``python -m attnkit.data.absa`` prints it for the
five benchmarks.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import ARCHITECTURE_DATA_KEYS, TASKS, DataConfig, RunConfig
from attnkit.data.absa import POLARITIES, AspectExample, load_absa
from attnkit.data.glove import embedding_matrix
from attnkit.data.vocabulary import PAD, Vocabulary
from attnkit.models.lcr_rot_hop import LCRRotHop
from attnkit.tasks.base import WordTask, pad_ids
from attnkit.tasks.sentence_benchmarks import (  # one read per process
    GLOVE_DIM,
    GLOVE_DIR,
    glove_vectors,
)
from attnkit.tasks.target_sentiment import LCRRotHopModelConfig

#: the shared data folder read when ``data.root`` is not given
SHARED_DATA = "../shared/data"
ABSA_DIR = "absa"
#: half-width of the uniform draw of ``data.embeddings: random``
RANDOM_RANGE = 0.25


class AspectSentimentData(DataConfig):
    """Where the benchmarks are, how much of training is held out, and the word vectors."""

    embeddings: Literal["random", "glove"] = Field(
        "random",
        description="random: a table drawn from U[-0.25, 0.25]; glove: GloVe 6B 50d (needs "
        "model.embed_dim: 50)",
    )
    valid_fraction: float = Field(
        0.15,
        gt=0.0,
        lt=1.0,
        description="share of the training file held out (seeded by the run's seed) for "
        "validation: the files have no validation split",
    )
    lowercase: bool = Field(True, description="lower-case every token (GloVe 6B is uncased)")
    glove_vocabulary: bool = Field(
        False,
        description="glove: the vocabulary also holds every word with a GloVe vector, so a word "
        "unseen in training keeps its vector instead of becoming <unk>",
    )


class AspectLCRRotHopConfig(LCRRotHopModelConfig):
    """LCR-Rot-hop (Wallaart & Frasincar 2019; ``hops: 1`` is Zheng & Xia's LCR-Rot)."""

    freeze_embeddings: bool = Field(
        False, description="keep the initial word vectors fixed (not trained)"
    )

    def describe(self) -> str:
        if self.hops == 1:
            return "LCR-Rot (Zheng & Xia 2018)"
        return f"LCR-Rot-hop (Wallaart & Frasincar 2019), {self.hops} hops"


class AspectSentiment(WordTask):
    """The sentiment towards a target phrase in its sentence (one subclass per benchmark)."""

    #: the benchmark's name in :data:`attnkit.data.absa.DATASETS`
    dataset: ClassVar[str]
    classes = POLARITIES
    models = (AspectLCRRotHopConfig,)
    data_section = AspectSentimentData
    architecture_data_keys: ClassVar[tuple[str, ...]] = (
        *ARCHITECTURE_DATA_KEYS,
        "max_examples",
        "valid_fraction",
        "lowercase",
        "glove_vocabulary",
    )
    eval_batch_size: ClassVar[int | None] = 256

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        if config.data.embeddings == "glove" and config.model.embed_dim != GLOVE_DIM:
            raise ValueError(
                f"data.embeddings: glove is GloVe 6B {GLOVE_DIM}d and needs model.embed_dim: "
                f"{GLOVE_DIM}, got model.embed_dim: {config.model.embed_dim}"
            )
        if config.data.glove_vocabulary and config.data.embeddings != "glove":
            raise ValueError(
                "data.glove_vocabulary: adds the words of the GloVe vectors and needs "
                f"data.embeddings: glove, got data.embeddings: {config.data.embeddings}"
            )

    @property
    def root(self) -> Path:
        """The shared data folder."""
        return Path(self.config.data.root or SHARED_DATA)

    def load(self) -> Mapping[str, Sequence[Any]]:
        data = self.config.data
        splits = load_absa(
            self.root / ABSA_DIR,
            self.dataset,
            lowercase=data.lowercase,
            valid_fraction=data.valid_fraction,
            seed=self.config.seed,
        )
        train = splits["train"]
        if data.max_examples is not None and data.max_examples < len(train):
            kept = random.Random(f"{self.dataset}/max_examples/{self.config.seed}").sample(
                range(len(train)), data.max_examples
            )
            splits["train"] = [train[i] for i in sorted(kept)]
        if data.max_length is not None:
            n = data.max_length
            splits = {
                name: [
                    AspectExample(e.left[max(0, len(e.left) - n) :], e.target, e.right[:n], e.label)
                    for e in examples
                ]
                for name, examples in splits.items()
            }
        return splits

    def label(self, example: Any) -> int:
        if not isinstance(example, AspectExample):
            raise TypeError(
                f"a {self.config.data.corpus} example is an AspectExample, got "
                f"{type(example).__name__}"
            )
        return example.label

    def sentences(self, example: Any) -> list[Sequence[str]]:
        return [example.tokens]

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        state = super().fit(train)
        if self.config.data.glove_vocabulary:
            seen = set(self.words.itos)
            vectors = glove_vectors(str(self.root / GLOVE_DIR))
            extra = [w for w in vectors if w not in seen]
            state = {"words": Vocabulary([*self.words.itos, *extra]).to_dict()}
            self.restore(state)
        return state

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"left": [B, N_l], "target": [B, N_t], "right": [B, N_r]}`` token ids."""
        return {
            part: pad_ids([getattr(e, part) for e in examples], self.words)
            for part in ("left", "target", "right")
        }

    def initial_embeddings(self) -> Tensor:
        """The initial word vectors ``[V, D]``, seeded with the run's seed: ``U[-0.25, 0.25]``
        (``data.embeddings: random``) or GloVe's (``glove``, ``D`` = 50); the ``PAD`` row is
        zero."""
        if self.config.data.embeddings == "random":
            generator = torch.Generator().manual_seed(self.config.seed)
            shape = (len(self.words), self.model_config.embed_dim)
            weight = (torch.rand(shape, generator=generator) * 2 - 1) * RANDOM_RANGE
            weight[PAD] = 0.0
            return weight
        vectors = glove_vectors(str(self.root / GLOVE_DIR))
        weight, self.coverage = embedding_matrix(self.words, vectors, seed=self.config.seed)
        return weight

    def build_model(self) -> nn.Module:
        section = self.model_config
        return LCRRotHop(
            len(self.words),
            len(self.classes),
            embed_dim=section.embed_dim,
            hidden_dim=section.hidden_dim,
            hops=section.hops,
            dropout=section.dropout,
            embeddings=self.initial_embeddings(),
            freeze_embeddings=section.freeze_embeddings,
        )

    def describe(self, example: Any) -> str:
        return f"{' '.join(example.left)} [{' '.join(example.target)}] {' '.join(example.right)}"


@TASKS.register("semeval14_restaurants")
class SemEval14Restaurants(AspectSentiment):
    """SemEval-2014 task 4 restaurant reviews (3,608 training, 1,120 test aspects)."""

    dataset = "semeval14-restaurants"


@TASKS.register("semeval14_laptops")
class SemEval14Laptops(AspectSentiment):
    """SemEval-2014 task 4 laptop reviews (2,328 training, 638 test aspects)."""

    dataset = "semeval14-laptops"


@TASKS.register("twitter")
class Twitter(AspectSentiment):
    """Dong et al.'s (2014) tweets about entities (6,248 training, 692 test targets)."""

    dataset = "twitter"


@TASKS.register("semeval2015")
class SemEval2015(AspectSentiment):
    """SemEval-2015 task 12 restaurant reviews, HAABSA's split (1,279 training, 597 test)."""

    dataset = "semeval2015"


@TASKS.register("semeval2016")
class SemEval2016(AspectSentiment):
    """SemEval-2016 task 5 restaurant reviews, HAABSA's split (1,879 training, 650 test)."""

    dataset = "semeval2016"
