"""English → French translation on a parallel corpus (Tatoeba, Hansards): the translation task.

Data (:func:`load_examples`): the bundled Tatoeba pairs, or the Hansards training text with the
NAACL-2003 alignment gold as its valid and test splits. State learnt from the training split:
the source and target vocabularies (``data.min_freq``, ``data.max_vocab``), kept in the run as
``vocab.json``. Model (:func:`build_model`): the RNN encoder–decoder with Bahdanau or Luong
attention, or the Transformer.

The objective (:func:`loss_terms`) is the token-level cross-entropy of the reference; with
supervised attention (survey §4.2, Liu et al. 2016; Mi et al. 2016) the joint loss adds
``λ · L_attention(attention weights, alignment targets)``, the targets being a statistical
teacher's links of the training pairs (``data.supervision``: IBM Model 1 or fast_align, one
direction or both symmetrized, ``data.symmetrization``) cached in the run as ``links.pharaoh``;
a Transformer with an alignment head (Garg et al. 2019, ``model.alignment_layer``) has that head
supervised instead of its last layer's averaged attention. The final evaluation
(:func:`evaluate_run`) is BLEU, the teacher-forced loss and, on the Hansards gold, the alignment
error rate of the attention (of the alignment head when the model has one); the report shows
the alignment matrices of a few translations (:data:`SHOWCASE`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from attnkit.checkpoint import atomic_write
from attnkit.config import (
    ARCHITECTURE_DATA_KEYS,
    TASKS,
    ConfigError,
    DataConfig,
    ModelSection,
    RunConfig,
    check_attention_kind,
)
from attnkit.data.batching import Batch, Batches, encode
from attnkit.data.corpus import Example, Links, Vocabularies
from attnkit.data.fast_align import FastAlign
from attnkit.data.hansards import load_hansards, missing_files
from attnkit.data.ibm_model1 import IBMModel1
from attnkit.data.multi30k import detokenize as moses_detokenize
from attnkit.data.multi30k import load_multi30k, read_sentences
from attnkit.data.multi30k import tokenize as moses_tokenize
from attnkit.data.pharaoh import format_pharaoh, parse_pharaoh
from attnkit.data.symmetrize import symmetrize, transpose_links
from attnkit.data.tatoeba import load_tatoeba
from attnkit.data.tatoeba_gold import load_tatoeba_gold
from attnkit.data.tokenize import detokenize, tokenize
from attnkit.evaluate.alignment import corpus_alignment_error_rate, links_from_weights
from attnkit.evaluate.bleu_forms import detokenized_bleu, token_bleu
from attnkit.evaluate.supervised import supervised_attention_loss
from attnkit.evaluate.translation import (
    corpus_loss,
    evaluate_translations,
    forced_alignment,
    translate,
)
from attnkit.interpret.translation_view import slug, view_translation
from attnkit.interpret.viewer import write_viewer
from attnkit.models import RNNSeq2Seq, TransformerSeq2Seq
from attnkit.report import Alignment, describe_model, save_heatmaps
from attnkit.tasks.alignment_methods import (
    best_on_dev,
    compare_alignment_methods,
    forced_attention,
)
from attnkit.tasks.job import Job, Log, Presentation, RunDirectory, Term

# How the report names each reading of attnkit.tasks.alignment_methods.
READING_NAMES = {
    "naive": "naive attention",
    "shift_att": "Shift-Att",
    "alignment_head": "alignment head",
    "alignment_head_x_shift_att": "alignment head × Shift-Att",
}


def method_title(method: str) -> str:
    """A method key of :func:`attnkit.tasks.alignment_methods.compare_alignment_methods` in
    words: ``"alignment_head+mutual_argmax"`` → ``"alignment head, mutual argmax"``."""
    reading, _, extraction = method.partition("+")
    title = READING_NAMES.get(reading, reading)
    return f"{title}, {extraction.replace('_', ' ')}" if extraction else title


# Sentences each report translates; "I love you." is the running example of attention's alignment.
SHOWCASE = ["I love you.", "I am cold.", "He is my brother.", "Where is the station?"]


def load_examples(config: RunConfig) -> dict[str, list[Example]]:
    """The corpus of ``config.data``, split into "train", "valid" and "test"; with
    ``data.reverse`` every pair the other way (:meth:`~attnkit.data.corpus.Example.reversed`)."""
    examples = _load_corpus(config)
    if config.data.reverse:
        return {split: [e.reversed() for e in pairs] for split, pairs in examples.items()}
    return examples


def _load_corpus(config: RunConfig) -> dict[str, list[Example]]:
    data = config.data
    if data.corpus == "tatoeba":
        return load_tatoeba(max_length=data.max_length, max_pairs=data.max_pairs)
    if isinstance(data, Multi30kData):
        return _load_multi30k(data)
    root = Path(data.root or "")
    if not root.is_dir():
        raise ConfigError(f"data.root: no such directory {str(root)!r}")
    missing = missing_files(root)
    if missing:  # a configuration error, found before any file is read
        raise ConfigError(
            f"data.root: {str(root)!r} is not the hansards-en-fr directory (missing "
            f"{', '.join(str(root / name) for name in missing)})"
        )
    return load_hansards(root, max_length=data.max_length, max_pairs=data.max_pairs)


class Multi30kData(DataConfig):
    """Multi30k task 1 (Elliott et al. 2016): the languages, and the case of the tokens.

    ``root`` is the shared data folder (its ``multi30k`` folder is read). ``max_length`` and
    ``max_pairs`` cut the training split only: BLEU is always on the whole valid/test split.
    """

    root: str | None = Field(
        "../shared/data", description="the shared data folder holding the multi30k folder"
    )
    source_lang: Literal["de", "en", "fr"] = "de"
    target_lang: Literal["de", "en", "fr"] = "en"
    lowercase: bool = Field(
        False, description="lower-case the Moses tokens (BLEU is then case-insensitive too)"
    )

    @model_validator(mode="after")
    def _languages_differ(self) -> Multi30kData:
        if self.source_lang == self.target_lang:
            raise ValueError(
                f"target_lang: must differ from source_lang, got {self.target_lang!r} twice"
            )
        return self

    def directory(self) -> Path:
        """The ``multi30k`` folder of :attr:`root` (``ConfigError`` naming it when absent)."""
        path = Path(self.root or "") / "multi30k"
        if not path.is_dir():
            raise ConfigError(
                f"data.root: expected the shared data folder holding multi30k/, got "
                f"{self.root!r} (no {str(path)!r})"
            )
        return path


def _load_multi30k(data: Multi30kData) -> dict[str, list[Example]]:
    """The Multi30k splits of ``data``; ``max_length`` drops long *training* pairs only."""
    splits = load_multi30k(
        data.directory(),
        data.source_lang,
        data.target_lang,
        lowercase=data.lowercase,
        max_pairs=data.max_pairs,
    )
    if data.max_length is not None:
        limit = data.max_length
        splits["train"] = [e for e in splits["train"] if max(len(e.source), len(e.target)) <= limit]
    return splits


class RNNModelConfig(ModelSection):
    """RNN encoder–decoder with attention: Bahdanau et al. (2015) or Luong et al. (2015)."""

    kind: Literal["rnn"] = "rnn"
    style: Literal["bahdanau", "luong"] = "bahdanau"
    score: Literal["additive", "concat", "dot", "general", "location"] = "additive"
    align: Literal["global", "local_monotonic", "local_predictive"] = "global"
    embed_dim: int = Field(256, ge=1)
    hidden_dim: int = Field(256, ge=1)
    num_layers: int = Field(1, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    window: int = Field(10, ge=1, description="D of the local alignments (Luong et al. use 10)")
    input_feeding: bool = True
    bidirectional_encoder: bool = Field(
        False,
        description="luong: a bidirectional encoder of hidden_dim/2 units per direction "
        "(OpenNMT's brnn) in place of the paper's unidirectional stack",
    )
    max_source_length: int = Field(100, ge=1, description="positions of the location score")
    query: Literal["previous_state", "conditional"] = Field(
        "previous_state",
        description="bahdanau: the attention's query, the paper's s_{i-1} or the conditional "
        "GRU's s'_i = GRU_1(E y_{i-1}, s_{i-1}), which has read the word just emitted",
    )

    def describe(self) -> str:
        query = ", conditional-GRU query" if self.query == "conditional" else ""
        encoder = ", bidirectional encoder" if self.bidirectional_encoder else ""
        return (
            f"{self.style} GRU encoder-decoder{encoder}, {self.score} score, "
            f"{self.align} alignment{query}"
        )

    def architecture(self) -> dict[str, Any]:
        # the paper's query and encoder are what every run had before these keys existed:
        # leaving the defaults out keeps the fingerprints of those runs' checkpoints
        keys = super().architecture()
        if keys["query"] == "previous_state":
            del keys["query"]
        if not keys["bidirectional_encoder"]:
            del keys["bidirectional_encoder"]
        return keys

    @model_validator(mode="after")
    def _bahdanau_is_additive(self) -> RNNModelConfig:
        if self.style == "luong" and self.query != "previous_state":
            raise ValueError(
                f"query: {self.query!r} is a query of the bahdanau style; luong queries its "
                "current state"
            )
        if self.bidirectional_encoder and (self.style != "luong" or self.hidden_dim % 2):
            raise ValueError(
                "bidirectional_encoder: a luong option (bahdanau's encoder is bidirectional) "
                "that splits hidden_dim between two directions; got "
                f"style={self.style!r}, hidden_dim={self.hidden_dim}"
            )
        if self.style == "bahdanau" and (self.score, self.align) != ("additive", "global"):
            raise ValueError(
                "score/align: the bahdanau style is additive (concat) global attention; "
                f"got score={self.score!r}, align={self.align!r} (use style: luong)"
            )
        return self


class TransformerModelConfig(ModelSection):
    """Transformer encoder–decoder (Vaswani et al. 2017) from attnkit's layers."""

    kind: Literal["transformer"] = "transformer"
    d_model: int = Field(256, ge=1)
    nhead: int = Field(4, ge=1)
    num_layers: int = Field(3, ge=1)
    dim_feedforward: int = Field(1024, ge=1)
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    max_length: int = Field(256, ge=1)
    attention: str = Field(
        "exact", description="the encoder's self-attention: exact or an efficient kind"
    )
    decoder_attention: str = Field(
        "exact",
        description="the decoder's causal self-attention: exact, sliding_window, linear, "
        "performer or synthesizer_dense (cross-attention is always exact)",
    )
    alignment_layer: int | None = Field(
        None,
        description="the decoder layer of a Garg et al. (2019) alignment head, 0 = the bottom, "
        "negative from the top (-2: the penultimate, theirs); supervised attention trains it",
    )
    alignment_head: int = Field(0, ge=0, description="which head of that layer's cross-attention")

    def describe(self) -> str:
        kinds = ""
        if (self.attention, self.decoder_attention) != ("exact", "exact"):
            kinds = f", {self.attention} encoder / {self.decoder_attention} decoder self-attention"
        return f"Transformer encoder-decoder, {self.num_layers} layers, {self.nhead} heads{kinds}"

    def architecture(self) -> dict[str, Any]:
        # exact attention is what every run had before these keys existed: leaving the default
        # out keeps the fingerprints of those runs' checkpoints
        keys = super().architecture()
        for key in ("attention", "decoder_attention"):
            if keys[key] == "exact":
                del keys[key]
        return keys

    @model_validator(mode="after")
    def _heads_divide(self) -> TransformerModelConfig:
        if self.d_model % self.nhead:
            raise ValueError(
                f"nhead: the number of heads must divide d_model; got nhead={self.nhead}, "
                f"d_model={self.d_model}"
            )
        return self

    @model_validator(mode="after")
    def _alignment_head_exists(self) -> TransformerModelConfig:
        layers = self.num_layers
        if self.alignment_layer is not None and not -layers <= self.alignment_layer < layers:
            raise ValueError(
                f"alignment_layer: must be in [{-layers}, {layers - 1}] for num_layers={layers}; "
                f"got {self.alignment_layer}"
            )
        if self.alignment_head >= self.nhead:
            raise ValueError(
                f"alignment_head: must be below nhead={self.nhead}; got {self.alignment_head}"
            )
        return self

    @model_validator(mode="after")
    def _attention_kinds(self) -> TransformerModelConfig:
        from attnkit.models.transformer_seq2seq import check_decoder_attention

        check_attention_kind("attention", self.attention)
        check_attention_kind("decoder_attention", self.decoder_attention)
        try:
            check_decoder_attention(self.decoder_attention)
        except ValueError as error:
            raise ValueError(f"decoder_attention: {error}") from None
        return self


def build_model(config: RunConfig, vocabularies: Vocabularies) -> nn.Module:
    """The model of ``config.model`` for these vocabularies (initialised from the global RNG)."""
    m = config.model
    sizes = (len(vocabularies.source), len(vocabularies.target))
    if isinstance(m, RNNModelConfig):
        return RNNSeq2Seq(
            *sizes,
            style=m.style,
            score=m.score,
            align=m.align,
            embed_dim=m.embed_dim,
            hidden_dim=m.hidden_dim,
            num_layers=m.num_layers,
            dropout=m.dropout,
            window=m.window,
            input_feeding=m.input_feeding,
            query=m.query,
            bidirectional_encoder=m.bidirectional_encoder,
            max_source_length=m.max_source_length,
        )
    if not isinstance(m, TransformerModelConfig):
        raise ValueError(f"model.kind: translation takes rnn or transformer, got {m.kind!r}")
    return TransformerSeq2Seq(
        *sizes,
        d_model=m.d_model,
        nhead=m.nhead,
        num_layers=m.num_layers,
        dim_feedforward=m.dim_feedforward,
        dropout=m.dropout,
        max_length=m.max_length,
        attention=m.attention,
        decoder_attention=m.decoder_attention,
        alignment_layer=m.alignment_layer,
        alignment_head=m.alignment_head,
    )


def loss_terms(model: nn.Module, batch: Batch, config: RunConfig) -> dict[str, Term]:
    """The training objective's terms on ``batch``: the token-level cross-entropy of the
    reference (a sum over its target tokens) and, with supervised attention, λ times the
    attention loss averaged over the sentences that have alignment targets."""
    out = model(batch.source, batch.source_lengths, batch.target_in)
    nll_sum = F.cross_entropy(
        out.logits.flatten(0, 1),
        batch.target_out.flatten(),
        ignore_index=0,
        label_smoothing=config.train.label_smoothing,
        reduction="sum",
    )
    terms = {"nll": Term(count=(batch.target_out != 0).sum(), sum=nll_sum)}
    weight = config.train.supervised_weight
    # a model with an alignment head (Garg et al. 2019) supervises that head, others their
    # attention weights
    attention = out.weights if out.alignment is None else out.alignment
    if weight > 0 and batch.alignment is not None:
        rows = (batch.alignment.sum(-1) > 0).sum()
        mean = (
            supervised_attention_loss(attention, batch.alignment, config.train.supervised_kind)
            if rows > 0
            else attention.sum() * 0.0  # no gold row in this share: no contribution
        )
        terms["attention_loss"] = Term(count=rows, mean=mean, weight=weight)
    return terms


def evaluate_run(
    model: nn.Module,
    vocabularies: Vocabularies,
    examples: Sequence[Example],
    config: RunConfig,
    *,
    beam_size: int | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """:func:`attnkit.evaluate.translation.evaluate_translations` with the run configuration's
    settings: the first ``decode.max_eval_sentences`` examples, its beam (unless ``beam_size``)
    and ``max_length``, batches of ``train.batch_size`` for the loss."""
    limit = config.decode.max_eval_sentences
    return evaluate_translations(
        model,
        vocabularies,
        list(examples[:limit] if limit else examples),
        beam_size=beam_size or config.decode.beam_size,
        max_length=config.decode.max_length,
        batch_size=config.train.batch_size,
        quiet=quiet,
    )


def has_gold(examples: Sequence[Example]) -> bool:
    """Whether every example carries gold alignments (sure and possible links)."""
    return bool(examples) and all(e.sure is not None for e in examples)


def alignment_results(
    model: nn.Module,
    vocabularies: Vocabularies,
    test: Sequence[Example],
    dev: Sequence[Example],
    batch_size: int = 64,
) -> dict[str, Any]:
    """Every alignment reading of the model (:mod:`attnkit.tasks.alignment_methods`: naive
    attention, Shift-Att with its layers/heads chosen on ``dev``, the alignment head) scored on
    ``test`` and ``dev`` (both with gold links), the best on ``dev`` named, and its ``test``
    links as Pharaoh lines (``i-j``: source = English position, target = French position).

    Returns:
        ``{"methods": {method: {"aer", "dev_aer", ["layers", "heads"]}}, "best_on_dev": method,
        "test_links": [line per test sentence]}``.
    """
    methods = compare_alignment_methods(
        forced_attention(model, vocabularies, test, batch_size),
        test,
        forced_attention(model, vocabularies, dev, batch_size),
        dev,
    )
    best = best_on_dev(methods)
    return {
        "methods": {name: result.summary() for name, result in methods.items()},
        "best_on_dev": best,
        "test_links": [format_pharaoh(links) for links in methods[best].links],
    }


def tatoeba_gold_aer(
    model: nn.Module, vocabularies: Vocabularies, batch_size: int = 64
) -> dict[str, Any]:
    """The attention's AER on the 50 hand-aligned Tatoeba test pairs bundled in the package
    (:func:`attnkit.data.load_tatoeba_gold`): forced decoding, each French word linked to the
    English word of largest weight in the model's own attention at the step that outputs it
    (the naive reading; a model's alignment head when it has one). That reading was fixed
    beforehand, not chosen on these sentences: the gold has no development part, and for the
    Bahdanau decoder (the demo's) the attention that predicts ``y_i`` is by construction ``y_i``'s
    soft alignment; reading the next step instead (Shift-Att) was worse on the Hansards
    development part (docs/results.md).

    Returns:
        ``{"sentences": 50, "aer": float, "reading": "naive"}``.
    """
    gold = list(load_tatoeba_gold())
    predicted = [
        links_from_weights(w) for w in forced_alignment(model, vocabularies, gold, batch_size)
    ]
    aer = corpus_alignment_error_rate(predicted, [e.sure for e in gold], [e.possible for e in gold])  # type: ignore[misc]
    return {"sentences": len(gold), "aer": aer, "reading": "naive"}


def showcase(config: RunConfig, examples: Mapping[str, Sequence[Example]]) -> list[list[str]]:
    """Tokenised source sentences for the report: the running examples on Tatoeba, the first test
    sentences elsewhere."""
    if config.data.corpus == "tatoeba" and not config.data.reverse:
        return [tokenize(s, "en") for s in SHOWCASE]
    return [list(e.source) for e in examples["test"][:4]]


def teacher(config: RunConfig) -> Callable[[], IBMModel1 | FastAlign]:
    """A constructor of the configured statistical aligner (``data.supervision``)."""
    data = config.data
    if data.supervision == "fast_align":
        return lambda: FastAlign(alpha=data.aligner_alpha)
    if data.supervision == "ibm_model1":
        return IBMModel1
    raise ValueError(f"data.supervision: no teacher is configured, got {data.supervision!r}")


def teacher_links(config: RunConfig, train: Sequence[Example]) -> list[Links]:
    """The teacher's links ``(source, target)`` of every training pair: the source→target
    model's Viterbi links, or with ``data.symmetrization`` both directions' combined (the
    target→source model's links transposed, :func:`attnkit.data.symmetrize.symmetrize`)."""
    make, iterations = teacher(config), config.data.aligner_iterations
    pairs = [(e.source, e.target) for e in train]
    forward = make().fit(pairs, iterations=iterations)
    forward_links = [forward.align(s, t) for s, t in pairs]
    method = config.data.symmetrization
    if method is None:
        return forward_links
    backward = make().fit([(t, s) for s, t in pairs], iterations=iterations)
    return [
        frozenset(symmetrize(links, transpose_links(backward.align(t, s)), method))
        for links, (s, t) in zip(forward_links, pairs, strict=True)
    ]


def alignment_targets(
    config: RunConfig, directory: Path, train: Sequence[Example], log: Log
) -> list[Example]:
    """Training examples with ``links`` from the configured teacher (:func:`teacher_links`),
    cached in ``directory / "links.pharaoh"``, one Pharaoh line per pair."""
    cache = directory / "links.pharaoh"
    if cache.is_file():
        lines = cache.read_text(encoding="utf-8").splitlines()
        if len(lines) == len(train):
            return [
                replace(e, links=frozenset(parse_pharaoh(line)[0]))
                for e, line in zip(train, lines, strict=True)
            ]
    start = time.perf_counter()
    linked = [
        replace(e, links=frozenset(links))
        for e, links in zip(train, teacher_links(config, train), strict=True)
    ]
    atomic_write(cache, "\n".join(format_pharaoh(e.links or ()) for e in linked) + "\n")
    data = config.data
    directions = f", {data.symmetrization} of both directions" if data.symmetrization else ""
    log(
        f"{data.supervision} alignments{directions} of {len(train)} pairs in "
        f"{time.perf_counter() - start:.0f} s"
    )
    return linked


@TASKS.register("hansards")
@TASKS.register("tatoeba")
class TranslationJob(Job):
    """Sequence-to-sequence training on a parallel corpus (see the module docstring)."""

    state_file = "vocab.json"
    example_noun = "pairs"
    models = (RNNModelConfig, TransformerModelConfig)
    translation = True

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        data, m = config.data, config.model
        if data.corpus == "hansards" and not data.root:
            raise ValueError("data.root: the hansards corpus needs `root` (its directory)")
        if isinstance(m, TransformerModelConfig):
            # the decoder reads <bos> y1 … yn: n + 1 positions of model.max_length
            if config.decode.max_length + 1 > m.max_length:
                raise ValueError(
                    f"decode.max_length: decoding {config.decode.max_length} tokens needs "
                    f"{config.decode.max_length + 1} positions; the Transformer has "
                    f"model.max_length={m.max_length}"
                )
            if data.max_length is not None and data.max_length + 1 > m.max_length:
                raise ValueError(
                    f"data.max_length: sentences of {data.max_length} tokens need "
                    f"{data.max_length + 1} decoder positions; the Transformer has "
                    f"model.max_length={m.max_length}"
                )

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self._vocabularies: Vocabularies | None = None

    @property
    def vocabularies(self) -> Vocabularies:
        """The source and target vocabularies (after :meth:`learnt` or :meth:`restore`)."""
        if self._vocabularies is None:
            raise RuntimeError("call learnt() or restore() before using the vocabularies")
        return self._vocabularies

    def load(self) -> Mapping[str, Sequence[Example]]:
        examples = load_examples(self.config)
        data, m = self.config.data, self.config.model
        if not examples["train"]:
            raise ValueError(
                f"data: no training pair is left of {data.corpus} (data.max_length="
                f"{data.max_length}, data.max_pairs={data.max_pairs}); loosen the filter"
            )
        if isinstance(m, TransformerModelConfig):
            for split, pairs in examples.items():
                longest = max((max(len(e.source), len(e.target) + 1) for e in pairs), default=0)
                if longest > m.max_length:
                    raise ValueError(
                        f"model.max_length: the {split} split has a sentence needing {longest} "
                        f"positions, more than model.max_length={m.max_length}; set "
                        f"data.max_length below it or raise model.max_length"
                    )
        return examples

    def learnt(self) -> dict[str, Any]:
        data = self.config.data
        self._vocabularies = Vocabularies.build(
            self.examples["train"], data.min_freq, data.max_vocab
        )
        return self._vocabularies.to_dict()

    def restore(self, state: dict[str, Any]) -> None:
        self._vocabularies = Vocabularies.from_dict(state)

    @property
    def languages(self) -> tuple[str, str]:
        """The source and target language codes: English → French, or the other way with
        ``data.reverse`` (the corpora's pairs are read English first)."""
        return ("fr", "en") if self.config.data.reverse else ("en", "fr")

    def tokenize_source(self, sentence: str) -> list[str]:
        """A user's sentence as the model's source tokens, tokenised as the training data was."""
        return tokenize(sentence, self.languages[0])

    def detokenize_target(self, tokens: Sequence[str]) -> str:
        """Decoded target tokens as a sentence of the target language."""
        return detokenize(list(tokens), self.languages[1])

    def build_model(self) -> nn.Module:
        return build_model(self.config, self.vocabularies)

    def prepare(self, run: RunDirectory, log: Log) -> int:
        config, train_examples = self.config, self.examples["train"]
        if config.data.supervision is not None:  # read from the run when already written
            train_examples = alignment_targets(config, run.path, train_examples, log)
        vocab = self.vocabularies
        self.batches = Batches(
            encode(train_examples, vocab.source, vocab.target),
            config.train.batch_size,
            seed=config.seed,
        )
        self.encoded_valid = encode(self.examples["valid"], vocab.source, vocab.target)
        return len(self.batches)

    def batch(self, step: int) -> Batch:
        return self.batches.batch(step)

    def loss(self, model: nn.Module, batch: Batch) -> dict[str, Term]:
        return loss_terms(model, batch, self.config)

    def valid(self, model: nn.Module) -> dict[str, float]:
        return corpus_loss(model, self.encoded_valid, self.config.train.batch_size)

    def evaluate(
        self,
        model: nn.Module,
        examples: Sequence[Any],
        *,
        beam_size: int | None = None,
        quiet: bool = True,
    ) -> dict[str, Any]:
        """:func:`evaluate_run`, and the alignments: on the Hansards gold every reading
        (:func:`alignment_results`, choices on the "valid" split = gold sentences 1–100) as
        ``"alignment"``; on Tatoeba the AER on the bundled hand-aligned gold
        (:func:`tatoeba_gold_aer`) as ``"tatoeba_gold"``."""
        results = evaluate_run(
            model, self.vocabularies, examples, self.config, beam_size=beam_size, quiet=quiet
        )
        batch_size = self.config.train.batch_size
        dev = self.examples.get("valid", ())
        if has_gold(examples) and has_gold(dev):
            results["alignment"] = alignment_results(
                model, self.vocabularies, examples, dev, batch_size
            )
        if self.config.data.corpus == "tatoeba":
            results["tatoeba_gold"] = tatoeba_gold_aer(model, self.vocabularies, batch_size)
        return results

    def present(self, model: nn.Module, directory: Path) -> Presentation:
        """The :func:`showcase` sentences translated, with their alignment matrices (in
        ``results.json`` as ``"showcase"``, and as PNG heatmaps)."""
        config, sources = self.config, showcase(self.config, self.examples)
        translated = translate(
            model,
            self.vocabularies,
            sources,
            beam_size=config.decode.beam_size,
            max_length=config.decode.max_length,
        )
        alignments = [
            Alignment(source, target, weights)
            for source, (target, weights) in zip(sources, translated, strict=True)
        ]
        for a in alignments:  # the report shows words only: the end-of-sentence row is dropped
            if a.target:
                a.weights = a.weights[: len(a.target)]
            else:  # nothing but the end of the sentence was produced: show that row
                a.target = ["<eos>"]
        shown = [
            {"source": a.source, "target": a.target, "weights": a.weights.tolist()}
            for a in alignments
        ]
        return Presentation(
            results={"showcase": shown},
            alignments=alignments,
            images=save_heatmaps(alignments, directory),
        )

    def summary(self, results: Mapping[str, Any]) -> dict[str, Any]:
        rows = {"test sentences": results["sentences"], "test BLEU": f"{results['bleu']:.2f}"}
        if "aer" in results:
            rows["test AER"] = f"{results['aer']:.3f}"
        for method, scores in results.get("alignment", {}).get("methods", {}).items():
            rows[f"test AER, {method_title(method)}"] = (
                f"{scores['aer']:.3f} (dev {scores['dev_aer']:.3f}{_choice(scores)})"
            )
        if "tatoeba_gold" in results:
            gold = results["tatoeba_gold"]
            rows[f"attention AER, Tatoeba gold ({gold['sentences']} test sentences)"] = (
                f"{gold['aer']:.3f}"
            )
        return rows

    def describe_results(self, results: Mapping[str, Any]) -> list[str]:
        lines = [
            f"{results['sentences']} sentences",
            f"  BLEU        {results['bleu']:.2f}   (beam {results['beam_size']})",
            f"  loss        {results['loss']:.4f}   (perplexity {results['perplexity']:.2f})",
        ]
        if "aer" in results:
            lines.append(f"  AER         {results['aer']:.4f}")
        alignment = results.get("alignment")
        if alignment:
            for method, scores in alignment["methods"].items():
                best = "   best on dev" if method == alignment["best_on_dev"] else ""
                lines.append(
                    f"  AER {method_title(method):<40} {scores['aer']:.4f}   (dev "
                    f"{scores['dev_aer']:.4f}{_choice(scores)}){best}"
                )
        if "tatoeba_gold" in results:
            gold = results["tatoeba_gold"]
            lines.append(
                f"  AER on the Tatoeba gold ({gold['sentences']} sentences)  {gold['aer']:.4f}"
            )
        return lines

    def headline(self, results: Mapping[str, Any]) -> str:
        message = f"test BLEU {results['bleu']:.2f} on {results['sentences']} sentences"
        if "aer" in results:
            message += f", AER {results['aer']:.3f}"
        alignment = results.get("alignment")
        if alignment:
            best = alignment["best_on_dev"]
            message += (
                f" (best on dev: {method_title(best)}, AER {alignment['methods'][best]['aer']:.3f})"
            )
        if "tatoeba_gold" in results:
            gold = results["tatoeba_gold"]
            message += f", attention AER {gold['aer']:.3f} on the {gold['sentences']}-sentence Tatoeba gold"
        return message

    def view(
        self,
        model: nn.Module,
        step: int,
        sentence: str,
        *,
        directory: Path,
        output: str | Path | None = None,
        beam_size: int | None = None,
    ) -> Path:
        """Translate ``sentence`` (in the source language) with ``model`` (the checkpoint of ``step``) and write
        the attention viewer page for it (:func:`attnkit.interpret.translation_view.view_translation`).

        Args:
            model: the run's model, in eval mode.
            step: its checkpoint's step (shown on the page).
            sentence: the source-language input, e.g. ``"I love you."``.
            directory: the run directory (the default page is written there).
            output: where to write the page; default ``RUN_DIR/view-<slug of the input>.html``.
            beam_size: beam width of the search; ``None``: the run's ``decode.beam_size``.

        Returns:
            the path of the HTML page (written atomically).

        Raises:
            ValueError: an input with no tokens, or a bad ``beam_size``.
            TypeError: an input that is not a str.
        """
        if not isinstance(sentence, str):
            raise TypeError(f"the input must be a str, got {type(sentence).__name__}")
        source = self.tokenize_source(sentence)
        if not source:
            raise ValueError(f"the input must contain at least one word, got {sentence!r}")
        if beam_size is not None and (
            isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1
        ):
            raise ValueError(f"beam_size must be a positive int or None, got {beam_size!r}")
        config, vocabularies = self.config, self.vocabularies
        beam = config.decode.beam_size if beam_size is None else beam_size
        shown = view_translation(
            model,
            vocabularies.source,
            vocabularies.target,
            source,
            beam_size=beam,
            max_length=config.decode.max_length,
        )
        translation = self.detokenize_target(shown.translation)
        title = f"{directory.name}: \u201c{sentence.strip()}\u201d \u2192 \u201c{translation}\u201d"
        notes = [
            f"model: {describe_model(config)}",
            f"checkpoint: step {step}; search: {'greedy' if beam == 1 else f'beam {beam}'}",
        ]
        # the viewer labels an unknown word "word(unk)": the labels that differ from the input
        unknown = [
            shown for shown, token in zip(shown.source, source, strict=True) if shown != token
        ]
        if unknown:
            notes.append(f"not in the source vocabulary (read as <unk>): {', '.join(unknown)}")
        if not shown.ended:
            notes.append(
                f"the search stopped at decode.max_length={config.decode.max_length} tokens "
                "before emitting <eos>"
            )
        notes.append(
            "cross-attention: rows are the target words emitted, columns the source words; "
            "decoder self-attention: rows and columns are the decoder's inputs (<bos> y1 … yn)"
        )
        path = Path(output) if output is not None else directory / f"view-{slug(sentence)}.html"
        return write_viewer(path, shown.maps, title=title, notes="\n".join(notes))


@TASKS.register("multi30k")
class Multi30kTranslationJob(TranslationJob):
    """Translation on Multi30k (``data`` is :class:`Multi30kData`, German → English by default),
    scored the two ways published figures are (:mod:`attnkit.evaluate.bleu_forms`): sacrebleu on
    Moses-detokenised output against the raw references, with its signature, and corpus BLEU on
    lower-cased tokens (the pytorch-seq2seq tutorials' way) — each for greedy search and for the
    beam of ``decode.beam_size``.

    Results (besides the teacher-forced loss): ``"bleu"`` (sacrebleu, greedy), ``"sacrebleu"``
    ``{"greedy", "beam", "beam_size", "signature"}`` and ``"bleu_lowercased_tokens"``
    ``{"greedy", "beam", "beam_size"}``.
    """

    data_section: ClassVar[type[DataConfig]] = Multi30kData
    architecture_data_keys: ClassVar[tuple[str, ...]] = (
        *ARCHITECTURE_DATA_KEYS,
        "source_lang",
        "target_lang",
        "lowercase",
    )

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        if config.data.reverse:
            raise ValueError(
                "data.reverse: Multi30k names its direction; swap data.source_lang and "
                "data.target_lang instead"
            )

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self._references: dict[tuple[tuple[str, ...], tuple[str, ...]], str] | None = None

    @property
    def data(self) -> Multi30kData:
        data = self.config.data
        assert isinstance(data, Multi30kData)  # the registry validated data with data_section
        return data

    @property
    def languages(self) -> tuple[str, str]:
        return self.data.source_lang, self.data.target_lang

    def tokenize_source(self, sentence: str) -> list[str]:
        """Moses tokens of the source language, lower-cased when the run's data were."""
        return moses_tokenize(sentence, self.data.source_lang, lowercase=self.data.lowercase)

    def detokenize_target(self, tokens: Sequence[str]) -> str:
        return moses_detokenize(list(tokens), self.data.target_lang)

    def references(self, examples: Sequence[Example]) -> list[str]:
        """The raw reference sentence of each example (of the valid or test split), for
        sacrebleu; a pair of neither split (an ``attnkit eval`` of the training split) gets its
        reference tokens Moses-detokenised."""
        if self._references is None:
            data, raw = self.data, {}
            for split in ("valid", "test"):
                texts = read_sentences(data.directory(), split, data.target_lang)
                for example, text in zip(self.examples[split], texts, strict=True):
                    raw[(example.source, example.target)] = text
            self._references = raw
        return [
            self._references.get(
                (e.source, e.target), moses_detokenize(list(e.target), self.data.target_lang)
            )
            for e in examples
        ]

    def evaluate(
        self,
        model: nn.Module,
        examples: Sequence[Any],
        *,
        beam_size: int | None = None,
        quiet: bool = True,
    ) -> dict[str, Any]:
        config, data, vocab = self.config, self.data, self.vocabularies
        limit = config.decode.max_eval_sentences
        chosen: list[Example] = list(examples[:limit] if limit else examples)
        beam = beam_size or config.decode.beam_size
        results: dict[str, Any] = {"sentences": len(chosen), "beam_size": 1}
        encoded = encode(chosen, vocab.source, vocab.target)
        results.update(corpus_loss(model, encoded, config.train.batch_size))
        references = self.references(chosen)
        sources = [list(e.source) for e in chosen]
        searches = {"greedy": 1} if beam == 1 else {"greedy": 1, "beam": beam}
        sacre: dict[str, Any] = {"beam_size": beam}
        lowercased: dict[str, Any] = {"beam_size": beam}
        hypotheses: list[str] = []
        for search, width in searches.items():
            started = time.perf_counter()
            tokens = [
                t
                for t, _ in translate(
                    model,
                    vocab,
                    sources,
                    beam_size=width,
                    max_length=config.decode.max_length,
                    batch_size=config.train.batch_size,
                )
            ]
            detokenized = [moses_detokenize(t, data.target_lang) for t in tokens]
            sacre[search], sacre["signature"] = detokenized_bleu(
                detokenized, references, lowercase=data.lowercase
            )
            lowercased[search] = token_bleu(tokens, [list(e.target) for e in chosen])
            sacre[f"{search}_seconds"] = round(time.perf_counter() - started, 1)
            if search == "greedy":
                hypotheses = detokenized
        results["bleu"] = sacre["greedy"]
        results["sacrebleu"] = sacre
        results["bleu_lowercased_tokens"] = lowercased
        results["samples"] = [
            {
                "source": moses_detokenize(list(e.source), data.source_lang),
                "reference": r,
                "hypothesis": h,
            }
            for e, r, h in list(zip(chosen, references, hypotheses, strict=True))[:5]
        ]
        return results

    def _bleu_rows(self, results: Mapping[str, Any]) -> list[tuple[str, str]]:
        sacre, lowercased = results["sacrebleu"], results["bleu_lowercased_tokens"]
        rows = [("greedy", "greedy")]
        if "beam" in sacre:
            rows.append(("beam", f"beam {sacre['beam_size']}"))
        return [
            (
                label,
                f"sacreBLEU {sacre[key]:.2f}, BLEU on lower-cased tokens {lowercased[key]:.2f}",
            )
            for key, label in rows
        ]

    def summary(self, results: Mapping[str, Any]) -> dict[str, Any]:
        rows: dict[str, Any] = {"test sentences": results["sentences"]}
        for label, text in self._bleu_rows(results):
            rows[f"test BLEU, {label}"] = text
        rows["sacrebleu signature"] = results["sacrebleu"]["signature"]
        return rows

    def describe_results(self, results: Mapping[str, Any]) -> list[str]:
        lines = [
            f"{results['sentences']} sentences",
            f"  loss        {results['loss']:.4f}   (perplexity {results['perplexity']:.2f})",
        ]
        lines += [f"  {label:<7} {text}" for label, text in self._bleu_rows(results)]
        lines.append(f"  sacrebleu signature {results['sacrebleu']['signature']}")
        return lines

    def headline(self, results: Mapping[str, Any]) -> str:
        return f"test {'; '.join(f'{label}: {text}' for label, text in self._bleu_rows(results))} on {results['sentences']} sentences"


def _choice(scores: Mapping[str, Any]) -> str:
    """Shift-Att's layers and heads, as ``", layer 2, head 1"``; empty for other readings."""
    if "layers" not in scores:
        return ""
    layers = scores["layers"]
    where = f"layer {layers[0]}" if len(layers) == 1 else "all layers"
    heads = scores["heads"]
    return f", {where}, " + ("heads averaged" if heads is None else f"head {heads[0]}")
