"""The sentence-classification benchmarks of Kim (2014) with attentive classifiers: SST-2, SST-5,
TREC and MR (corpora ``sst2``, ``sst5``, ``trec``, ``mr``).

Data (the shared data folder, ``data.root``, default ``../shared/data``):

* ``sst2`` / ``sst5`` — the Stanford Sentiment Treebank at sentence level
  (:func:`attnkit.data.sst.load_sst`): the root label of each tree of ``sst/trees``, the official
  train / dev / test split (SST-5 8,544 / 1,101 / 2,210; SST-2 drops the neutral roots, 6,920 /
  872 / 1,821). Tokens are lower-cased, as Kim's preprocessing of SST does. ``data.phrases:
  true`` is Kim's (2014) protocol: the training split is every distinct labelled phrase of the
  training trees (SST-2: 76,961 once neutral phrases are dropped; SST-5: 156,817; the whole
  sentences among them), validation and test stay the whole sentences
  (:func:`attnkit.data.sst.load_sst` with ``phrases=True``); left false, only whole sentences
  are trained on.
* ``trec`` — TREC question classification, 6 coarse classes
  (:func:`attnkit.data.sentence_classification.load_trec`), tokens as in the files (Kim keeps
  TREC's case). TREC has no validation split: a seeded 10 % of the 5,452 training questions
  (545, drawn with ``random.Random("trec/valid")``, the same for every run) is held out for early
  stopping, the other 4,907 are trained on; the test split is the official 500 questions.
* ``mr`` — movie-review polarity, 10,662 sentences with no standard split: 10-fold
  cross-validation (:func:`attnkit.data.sentence_classification.cross_validation_split`). Round
  ``k`` tests on fold ``k`` (1,066 or 1,067 sentences) and holds out a seeded 10 % of the other
  nine folds for early stopping (``random.Random(f"mr/valid/{k}")``). ``data.fold`` chooses the
  round; left unset, the run's seed does (``seed mod 10``), so ``attnkit reproduce mr-… --seeds
  10`` trains the ten rounds, and its mean over seeds is the 10-fold cross-validation accuracy.

``data.max_examples`` keeps a seeded sample of that many training sentences (so a small slice is
never one class, MR being sorted by class), ``data.max_length`` cuts each sentence to that many
tokens. The vocabulary is built from the training sentences (``data.min_freq``,
``data.max_vocab``).

Embeddings (``data.embeddings``): ``random`` — Kim's "-rand": every word vector drawn from
``U[−0.25, 0.25]`` (the range of his code's random vectors, chosen there to match the variance of
word2vec's), seeded with the run's seed, the ``PAD`` row zero; or ``glove``: GloVe 6B 50d from ``glove-6b-50d/`` of the shared data folder through
:func:`attnkit.data.glove.embedding_matrix` (each word looked up as written, then lower-cased,
GloVe 6B being uncased; words without a vector drawn from ``N(0, σ²)`` of the vectors' entries),
fine-tuned with the model. It needs ``model.embed_dim: 50``. The papers used 300-dimensional
vectors (GloVe 840B, word2vec), which are not available here.

Models (``model.kind``):

* ``self_attentive`` — Lin et al. (2017): BiLSTM, ``r`` hops of structured self-attention, the
  penalty ``‖A Aᵀ − I‖²_F`` (:class:`~attnkit.models.self_attentive_classifier.SelfAttentiveClassifier`);
* ``multi_dimensional`` — Shen et al.'s (2018) multi-dimensional source2token attention over a
  BiGRU (:class:`~attnkit.models.sentence_classifier.SentenceClassifier`); DiSAN's own encoder is
  directional self-attention, not a recurrent network;
* ``capsule`` — Wang et al.'s (2018) RNN-Capsule over a BiGRU with its capsule loss (the same
  class); their code's default encoder is a two-layer unidirectional LSTM with dropout on each
  capsule's representation, which this head has not;
* ``bilstm_attention`` — BiLSTM with additive (tanh) attention pooling, the classifier of Jain &
  Wallace (2019) (:class:`~attnkit.models.additive_attention_classifier.AdditiveAttentionClassifier`
  with its ``"lstm"`` encoder; dropout on the word vectors only);
* ``cnn`` — Kim's (2014) CNN, the anchor without attention
  (:class:`~attnkit.models.kim_cnn.KimCNN`: filter widths 3, 4, 5 × 100 maps, ReLU,
  max-over-time pooling, dropout 0.5, output weight vectors of norm at most 3); with
  ``data.embeddings: random`` it is his CNN-rand. Having no attention, it has no
  uniform-attention column (``train.attention: uniform`` is refused).
"""

from __future__ import annotations

import functools
import random
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import ARCHITECTURE_DATA_KEYS, TASKS, DataConfig, ModelSection, RunConfig
from attnkit.data.glove import embedding_matrix, load_glove
from attnkit.data.sentence_classification import (
    FOLDS,
    MR_LABELS,
    TREC_LABELS,
    SentenceExample,
    cross_validation_split,
    load_movie_review_polarity,
    load_trec,
)
from attnkit.data.sst import SST2_LABELS, SST5_LABELS, load_sst
from attnkit.data.vocabulary import PAD
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier
from attnkit.models.kim_cnn import KimCNN
from attnkit.models.pretrained_sentence_classifier import PretrainedSentenceClassifier
from attnkit.models.self_attentive_classifier import SelfAttentiveClassifier
from attnkit.tasks.base import WordTask, pad_ids

#: the shared data folder read when ``data.root`` is not given
SHARED_DATA = "../shared/data"
GLOVE_DIR = "glove-6b-50d"
GLOVE_DIM = 50
#: Kim's (2014) random word vectors are drawn from U[-RANDOM_RANGE, RANDOM_RANGE]
RANDOM_RANGE = 0.25
#: the fraction of the training sentences held out for early stopping where there is no
#: validation split (TREC, and each round of MR)
HELD_OUT = 0.1


class SentenceBenchmarkData(DataConfig):
    """Which benchmark (``corpus``), which cross-validation round (MR), which word vectors."""

    fold: int | None = Field(
        None,
        ge=0,
        lt=FOLDS,
        description="mr: the cross-validation round (its fold is the test split); none: the "
        "run's seed modulo 10",
    )
    phrases: bool = Field(
        False,
        description="sst2/sst5: train on every distinct labelled phrase of the training trees "
        "(Kim 2014), validate and test on whole sentences; false: whole sentences only",
    )
    embeddings: Literal["random", "glove"] = Field(
        "random",
        description="random: a randomly initialised table; glove: GloVe 6B 50d (needs "
        "model.embed_dim: 50), fine-tuned",
    )


class SelfAttentiveModelConfig(ModelSection):
    """Structured self-attentive classifier (Lin et al. 2017): BiLSTM, r attention hops, MLP."""

    kind: Literal["self_attentive"] = "self_attentive"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(150, ge=1, description="u, per direction of the LSTM")
    attention_hidden: int = Field(100, ge=1, description="d_a, the rows of W_s1")
    hops: int = Field(10, ge=1, description="r, the rows of W_s2 (attention distributions)")
    mlp_hidden: int = Field(500, ge=1, description="hidden units of the MLP classifier")
    penalty: float = Field(1.0, ge=0.0, description="coefficient of ‖A Aᵀ − I‖²_F in the loss")
    dropout: float = Field(0.5, ge=0.0, lt=1.0)

    def architecture(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"dropout", "penalty"})


class MultiDimensionalModelConfig(ModelSection):
    """Multi-dimensional source2token attention over a BiGRU (Shen et al. 2018)."""

    kind: Literal["multi_dimensional"] = "multi_dimensional"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(100, ge=1, description="per direction of the GRU")
    dropout: float = Field(0.5, ge=0.0, lt=1.0)


class CapsuleModelConfig(ModelSection):
    """RNN-Capsule (Wang et al. 2018): one attention capsule per class over a BiGRU."""

    kind: Literal["capsule"] = "capsule"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(100, ge=1, description="per direction of the GRU")
    dropout: float = Field(0.5, ge=0.0, lt=1.0)


class BiLSTMAttentionModelConfig(ModelSection):
    """BiLSTM with additive attention pooling (Jain & Wallace 2019)."""

    kind: Literal["bilstm_attention"] = "bilstm_attention"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(128, ge=1, description="per direction of the LSTM")
    attention_hidden: int = Field(128, ge=1, description="the hidden layer of the tanh score")
    dropout: float = Field(0.5, ge=0.0, lt=1.0)


class KimCNNModelConfig(ModelSection):
    """Kim's (2014) CNN: convolutions over the word vectors, max-over-time pooling, no attention."""

    kind: Literal["cnn"] = "cnn"
    embed_dim: int = Field(300, ge=1)
    widths: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        (3, 4, 5), min_length=1, description="the filter widths h"
    )
    feature_maps: int = Field(100, ge=1, description="filters per width")
    dropout: float = Field(0.5, ge=0.0, lt=1.0, description="on the max-pooled features")
    max_norm: float | None = Field(
        3.0,
        gt=0.0,
        description="s: the largest l2-norm of a class's output weight vector, restored after "
        "every update; none: unconstrained",
    )

    def architecture(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"dropout", "max_norm"})


def hold_out(
    examples: Sequence[SentenceExample], key: str, fraction: float = HELD_OUT
) -> tuple[list[SentenceExample], list[SentenceExample]]:
    """``(train, valid)``: ``round(fraction · n)`` examples drawn with ``random.Random(key)`` are
    the validation part (in the drawn order), the others stay in their order."""
    order = list(range(len(examples)))
    random.Random(key).shuffle(order)
    chosen = order[: round(fraction * len(examples))]
    held = set(chosen)
    return [e for i, e in enumerate(examples) if i not in held], [examples[i] for i in chosen]


@functools.lru_cache(maxsize=4)  # SST-2 and SST-5, sentences and phrases
def _sst_sentences(
    root: str, classes: int, phrases: bool
) -> dict[str, tuple[SentenceExample, ...]]:
    # parsing the 11,855 trees takes seconds: once per process (a reproduction's seeds, tests)
    loaded = load_sst(root, classes, lowercase=True, phrases=phrases)
    return {name: tuple(split) for name, split in loaded.items()}


@functools.lru_cache(maxsize=1)
def glove_vectors(path: str) -> dict[str, np.ndarray]:
    # one read per process: a reproduction builds the model of every seed from the same file
    return load_glove(path, dim=GLOVE_DIM)


class SentenceBenchmark(WordTask):
    """A sentence-classification benchmark: its splits (one subclass per corpus), the shared
    data keys, the four attentive classifiers and Kim's CNN."""

    models = (
        SelfAttentiveModelConfig,
        MultiDimensionalModelConfig,
        CapsuleModelConfig,
        BiLSTMAttentionModelConfig,
        KimCNNModelConfig,
    )
    data_section = SentenceBenchmarkData
    architecture_data_keys: ClassVar[tuple[str, ...]] = (
        *ARCHITECTURE_DATA_KEYS,
        "max_examples",
        "fold",
        "phrases",  # the vocabulary's order follows the training split's word counts
    )
    eval_batch_size: ClassVar[int | None] = 256
    #: whether ``data.fold`` means something (MR's cross-validation)
    cross_validation: ClassVar[bool] = False
    #: whether ``data.phrases`` means something (the treebank's labelled phrases)
    has_phrases: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        data = config.data
        if data.fold is not None and not cls.cross_validation:
            raise ValueError(
                f"data.fold: only mr is cross-validated; {data.corpus} has a fixed test split "
                f"(got fold: {data.fold})"
            )
        if data.phrases and not cls.has_phrases:
            raise ValueError(
                f"data.phrases: only sst2 and sst5 have labelled phrases; {data.corpus} is "
                f"trained on its sentences (got phrases: true)"
            )
        if config.model.kind == "cnn" and config.train.attention == "uniform":
            raise ValueError(
                "train.attention: the cnn model has no attention to replace with uniform "
                "weights (got attention: uniform)"
            )
        if data.embeddings == "glove" and config.model.embed_dim != GLOVE_DIM:
            raise ValueError(
                f"data.embeddings: glove is GloVe 6B {GLOVE_DIM}d and needs model.embed_dim: "
                f"{GLOVE_DIM}, got model.embed_dim: {config.model.embed_dim}"
            )

    @property  # type: ignore[misc]  # a class attribute of Task, decided here by the model
    def ablation_column(self) -> bool:  # type: ignore[override]
        """Whether the final evaluation adds the uniform-attention column: not for the CNN,
        which has no attention to replace."""
        return bool(self.model_config.kind != "cnn")

    @property
    def root(self) -> Path:
        return Path(self.config.data.root or SHARED_DATA)

    @abstractmethod
    def splits(self) -> Mapping[str, list[SentenceExample]]:
        """The corpus's ``"train"``, ``"valid"`` and ``"test"`` sentences, whole."""

    def load(self) -> Mapping[str, Sequence[Any]]:
        data = self.config.data
        splits = dict(self.splits())
        train = splits["train"]
        if data.max_examples is not None and data.max_examples < len(train):
            kept = random.Random(f"{data.corpus}/max_examples").sample(
                range(len(train)), data.max_examples
            )
            splits["train"] = [train[i] for i in sorted(kept)]
        if data.max_length is not None:
            splits = {
                name: [SentenceExample(e.tokens[: data.max_length], e.label) for e in examples]
                for name, examples in splits.items()
            }
        return splits

    def label(self, example: Any) -> int:
        if not isinstance(example, SentenceExample):
            raise TypeError(
                f"a {self.config.data.corpus} example is a SentenceExample, got "
                f"{type(example).__name__}"
            )
        return example.label

    def sentences(self, example: Any) -> list[Sequence[str]]:
        return [example.tokens]

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """``{"tokens": [B, L]}``, ``L`` the longest sentence of the batch, ``PAD`` after."""
        return {"tokens": pad_ids([example.tokens for example in examples], self.words)}

    def initial_embeddings(self) -> Tensor:
        """The initial word vectors ``[V, D]`` of the vocabulary, seeded with the run's seed:
        ``U[−0.25, 0.25]`` (``data.embeddings: random``) or GloVe's (``glove``, ``D`` = 50);
        the ``PAD`` row is zero."""
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
        section, embeddings = self.model_config, self.initial_embeddings()
        vocab, classes = len(self.words), len(self.classes)
        if section.kind == "self_attentive":
            return SelfAttentiveClassifier(
                vocab,
                classes,
                embed_dim=section.embed_dim,
                hidden_dim=section.hidden_dim,
                attention_hidden=section.attention_hidden,
                hops=section.hops,
                mlp_hidden=section.mlp_hidden,
                penalty=section.penalty,
                dropout=section.dropout,
                embeddings=embeddings,
            )
        if section.kind == "cnn":
            return KimCNN(
                vocab,
                classes,
                embed_dim=section.embed_dim,
                widths=section.widths,
                feature_maps=section.feature_maps,
                dropout=section.dropout,
                max_norm=section.max_norm,
                embeddings=embeddings,
            )
        if section.kind in ("multi_dimensional", "capsule"):
            return PretrainedSentenceClassifier(
                vocab,
                classes,
                attention=section.kind,
                embed_dim=section.embed_dim,
                hidden_dim=section.hidden_dim,
                dropout=section.dropout,
                embeddings=embeddings,
            )
        return AdditiveAttentionClassifier(
            vocab,
            classes,
            encoder="lstm",
            embed_dim=section.embed_dim,
            hidden_dim=section.hidden_dim,
            attention_dim=section.attention_hidden,
            dropout=section.dropout,
            embeddings=embeddings,
        )

    def describe(self, example: Any) -> str:
        return " ".join(example.tokens)


@TASKS.register("sst2")
class SST2(SentenceBenchmark):
    """Is a movie-review sentence negative or positive (SST, neutral sentences dropped)?"""

    classes = SST2_LABELS
    has_phrases = True

    def splits(self) -> Mapping[str, list[SentenceExample]]:
        loaded = _sst_sentences(str(self.root / "sst"), 2, self.config.data.phrases)
        return {name: list(split) for name, split in loaded.items()}


@TASKS.register("sst5")
class SST5(SentenceBenchmark):
    """How positive is a movie-review sentence, on SST's five-point scale?"""

    classes = SST5_LABELS
    has_phrases = True

    def splits(self) -> Mapping[str, list[SentenceExample]]:
        loaded = _sst_sentences(str(self.root / "sst"), 5, self.config.data.phrases)
        return {name: list(split) for name, split in loaded.items()}


@TASKS.register("trec")
class TREC(SentenceBenchmark):
    """What kind of answer does a question ask for (TREC's six coarse classes)?"""

    classes = TREC_LABELS

    def splits(self) -> Mapping[str, list[SentenceExample]]:
        official = load_trec(self.root / "sentence-classification")
        train, valid = hold_out(official["train"], "trec/valid")
        return {"train": train, "valid": valid, "test": official["test"]}


@TASKS.register("mr")
class MR(SentenceBenchmark):
    """Is a movie-review sentence negative or positive (Pang & Lee's sentence polarity)?"""

    classes = MR_LABELS
    cross_validation = True

    @property
    def fold(self) -> int:
        """The cross-validation round: ``data.fold``, else the seed modulo 10."""
        fold = self.config.data.fold
        return self.config.seed % FOLDS if fold is None else fold

    def splits(self) -> Mapping[str, list[SentenceExample]]:
        examples = load_movie_review_polarity(self.root / "sentence-classification")
        round_ = cross_validation_split(examples, self.fold)
        train, valid = hold_out(round_["train"], f"mr/valid/{self.fold}")
        return {"train": train, "valid": valid, "test": round_["test"]}
