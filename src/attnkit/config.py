"""Validated run configurations: YAML files in ``configs/`` checked with pydantic.

A run configuration names everything a training run depends on — data, model, optimisation,
decoding, seed — so a run directory's ``config.yaml`` reproduces the run. Every section forbids
unknown keys (``extra="forbid"``): a typo is an error, never a silently ignored setting.

Errors are one line naming the file, the key's path and what was wrong, e.g.::

    configs/bad.yaml: model.dropout: Input should be less than 1 (given 1.5)

The command line turns a :class:`ConfigError` into exit code 2 without a traceback.

Architecture keys (the model section and the data keys that decide the vocabularies) are what a
checkpoint must agree with: :func:`architecture` extracts them and :func:`differing_keys` lists
each difference (saved vs given) so a mismatched resume or evaluation is refused before loading.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """An invalid configuration: one line naming the file, the key's path and the problem."""


class _Section(BaseModel):
    # allow_inf_nan=False: `.inf`/`.nan` are refused where a number is expected (train.lr: .inf
    # trained on NaN to the end, issue 20)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


#: the translation corpora; every other corpus is a classification task (``attnkit.tasks``)
TRANSLATION_CORPORA = ("tatoeba", "hansards")

#: which model kinds each corpus takes (the first is its usual one)
CORPUS_MODELS: dict[str, tuple[str, ...]] = {
    "tatoeba": ("rnn", "transformer"),
    "hansards": ("rnn", "transformer"),
    "movie_reviews": ("han",),
    "rt_snippets": ("sentence",),
    "tatoeba_match": ("co_attention",),
    "target_sentiment": ("lcr_rot_hop",),
    "fashion_mnist": ("vit", "glimpse"),
    "karate": ("gat",),
    "memory_qa": ("memory_network",),
}


class DataConfig(_Section):
    """Which corpus, how it is filtered, and how vocabularies are built."""

    corpus: Literal[
        "tatoeba",
        "hansards",
        "movie_reviews",
        "rt_snippets",
        "tatoeba_match",
        "target_sentiment",
        "fashion_mnist",
        "karate",
        "memory_qa",
    ] = "tatoeba"
    root: str | None = Field(
        None, description="hansards: the hansards-en-fr directory (relative to the working dir)"
    )
    max_length: int | None = Field(None, ge=1, description="drop pairs longer than this (tokens)")
    max_pairs: int | None = Field(None, ge=1, description="keep at most this many training pairs")
    max_examples: int | None = Field(
        None, ge=1, description="classification: at most this many training (or generated) examples"
    )
    max_eval_examples: int | None = Field(
        None, ge=1, description="classification: evaluate on at most this many examples per split"
    )
    min_freq: int = Field(1, ge=1, description="words seen fewer times become <unk>")
    max_vocab: int | None = Field(None, ge=8, description="largest vocabulary per language")
    supervision: Literal["ibm_model1", "fast_align"] | None = Field(
        None,
        description="the statistical teacher whose links of the training pairs are the targets "
        "of supervised attention (survey §4.2): IBM Model 1 or fast_align's IBM Model 2",
    )
    aligner_iterations: int = Field(5, ge=1, description="EM iterations of the aligner")
    aligner_alpha: float | None = Field(
        None,
        gt=0.0,
        description="fast_align: the Dirichlet prior of variational Bayes (fast_align's -v; "
        "0.01 is its default), or none for maximum-likelihood EM",
    )
    reverse: bool = Field(
        False,
        description="translate the other way (Hansards, Tatoeba: French→English); gold and "
        "teacher links are transposed with the sentences",
    )
    symmetrization: (
        Literal["intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and"]
        | None
    ) = Field(
        None,
        description="fit the teacher in both directions and combine its links (Koehn et al. "
        "2003); none: the source→target direction only",
    )

    @model_validator(mode="after")
    def _hansards_root(self) -> DataConfig:
        if self.corpus == "hansards" and not self.root:
            raise ValueError("root: the hansards corpus needs `root` (its directory)")
        return self

    @model_validator(mode="after")
    def _reverse_needs_a_parallel_corpus(self) -> DataConfig:
        if self.reverse and self.corpus not in ("tatoeba", "hansards"):
            raise ValueError(
                f"reverse: only a translation corpus (tatoeba, hansards) has two directions, "
                f"got corpus: {self.corpus}"
            )
        return self

    @model_validator(mode="after")
    def _aligner_options_need_their_aligner(self) -> DataConfig:
        if self.aligner_alpha is not None and self.supervision != "fast_align":
            raise ValueError(
                "aligner_alpha: the Dirichlet prior is fast_align's; set supervision: fast_align "
                f"(got supervision: {self.supervision})"
            )
        if self.symmetrization is not None and self.supervision is None:
            raise ValueError(
                "symmetrization: combines a teacher's two directions; set supervision "
                "(ibm_model1 or fast_align)"
            )
        return self


def known_attention_kinds() -> list[str]:
    """The attention kinds ``ak.MultiHeadAttention(attention=...)`` runs: ``exact`` and every
    registered kind (the efficient ones of ``attnkit.efficient``)."""
    import attnkit.efficient  # noqa: F401  (registers the efficient kinds)
    from attnkit.core.kinds import kind_names

    return kind_names()


def _check_attention_kind(key: str, kind: str) -> None:
    known = known_attention_kinds()
    if kind not in known:
        raise ValueError(
            f"{key}: unknown attention kind {kind!r}; expected one of {', '.join(known)}"
        )


class RNNModelConfig(_Section):
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
    max_source_length: int = Field(100, ge=1, description="positions of the location score")

    @model_validator(mode="after")
    def _bahdanau_is_additive(self) -> RNNModelConfig:
        if self.style == "bahdanau" and (self.score, self.align) != ("additive", "global"):
            raise ValueError(
                "score/align: the bahdanau style is additive (concat) global attention; "
                f"got score={self.score!r}, align={self.align!r} (use style: luong)"
            )
        return self


class TransformerModelConfig(_Section):
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

        _check_attention_kind("attention", self.attention)
        _check_attention_kind("decoder_attention", self.decoder_attention)
        try:
            check_decoder_attention(self.decoder_attention)
        except ValueError as error:
            raise ValueError(f"decoder_attention: {error}") from None
        return self


class HANModelConfig(_Section):
    """Hierarchical attention network (Yang et al. 2016): word and sentence GRUs with attention."""

    kind: Literal["han"] = "han"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(50, ge=1, description="per direction of each bidirectional GRU")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    max_sentences: int | None = Field(
        None, ge=1, description="keep each document's first this many sentences (all splits)"
    )


class SentenceModelConfig(_Section):
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


class CoAttentionModelConfig(_Section):
    """Co-attention over two sequences (Lu et al. 2016): parallel or alternating."""

    kind: Literal["co_attention"] = "co_attention"
    style: Literal["parallel", "alternating"] = "parallel"
    embed_dim: int = Field(64, ge=1)
    hidden_dim: int = Field(64, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class LCRRotHopModelConfig(_Section):
    """LCR-Rot-hop (Wallaart & Frasincar 2019): rotatory attention over left/target/right."""

    kind: Literal["lcr_rot_hop"] = "lcr_rot_hop"
    embed_dim: int = Field(100, ge=1)
    hidden_dim: int = Field(64, ge=1)
    hops: int = Field(3, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class ViTModelConfig(_Section):
    """Vision Transformer (Dosovitskiy et al. 2021): patches, a class token, encoder layers."""

    kind: Literal["vit"] = "vit"
    patch_size: int = Field(4, ge=1, description="P: divides the image's height and width")
    d_model: int = Field(64, ge=1)
    nhead: int = Field(4, ge=1)
    num_layers: int = Field(4, ge=1)
    dim_feedforward: int = Field(128, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    attention: str = Field(
        "exact", description="the encoder layers' self-attention: exact or an efficient kind"
    )

    @model_validator(mode="after")
    def _attention_kind(self) -> ViTModelConfig:
        _check_attention_kind("attention", self.attention)
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> ViTModelConfig:
        if self.d_model % self.nhead:
            raise ValueError(
                f"nhead: the number of heads must divide d_model; got nhead={self.nhead}, "
                f"d_model={self.d_model}"
            )
        return self


class GlimpseModelConfig(_Section):
    """Soft vs hard attention over a convolutional feature grid (Xu et al. 2015)."""

    kind: Literal["glimpse"] = "glimpse"
    attention: Literal["soft", "hard"] = "soft"
    channels: int = Field(32, ge=1, description="size of each annotation vector a_i (conv)")
    hidden_dim: int = Field(64, ge=1, description="of the attention MLP and the output MLP")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    reinforce_weight: float = Field(1.0, ge=0.0, description="hard: λ_r of Xu et al. eq. 12")
    entropy_weight: float = Field(
        0.01, ge=0.0, description="hard: λ_e, weight of the entropy bonus (Xu et al. §4.1)"
    )
    baseline_decay: float = Field(
        0.9, ge=0.0, lt=1.0, description="hard: of the moving-average reward baseline"
    )


class GATModelConfig(_Section):
    """Graph attention network (Veličković et al. 2018): two GAT layers."""

    kind: Literal["gat"] = "gat"
    hidden_dim: int = Field(8, ge=1, description="per head")
    heads: int = Field(8, ge=1)
    output_heads: int = Field(
        1, ge=1, description="heads of the output layer, averaged (GAT eq. 6)"
    )
    dropout: float = Field(
        0.6, ge=0.0, lt=1.0, description="on each layer's input and on the attention weights"
    )
    negative_slope: float = Field(0.2, ge=0.0, description="of the LeakyReLU in the score")


class MemoryNetworkModelConfig(_Section):
    """End-to-end memory network (Sukhbaatar et al. 2015): multi-hop attention over memories."""

    kind: Literal["memory_network"] = "memory_network"
    embed_dim: int = Field(32, ge=1)
    hops: int = Field(3, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    sentence_encoding: Literal["bag_of_words", "position"] = Field(
        "position", description="BoW or position encoding (PE) of sentences (MemN2N §4.1)"
    )
    temporal_encoding: bool = Field(True, description="learned T_A, T_C per memory slot (§4.1)")
    memory_size: int = Field(50, ge=1, description="the most recent sentences kept as memories")


MODEL_KINDS = (
    "rnn",
    "transformer",
    "han",
    "sentence",
    "co_attention",
    "lcr_rot_hop",
    "vit",
    "glimpse",
    "gat",
    "memory_network",
)

ModelConfig = Annotated[
    RNNModelConfig
    | TransformerModelConfig
    | HANModelConfig
    | SentenceModelConfig
    | CoAttentionModelConfig
    | LCRRotHopModelConfig
    | ViTModelConfig
    | GlimpseModelConfig
    | GATModelConfig
    | MemoryNetworkModelConfig,
    Field(discriminator="kind"),
]


class TrainConfig(_Section):
    """Optimisation: Adam, a learning-rate schedule, clipping, evaluation and checkpoints."""

    steps: int = Field(ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    schedule: Literal["constant", "cosine", "inverse_sqrt"] = "constant"
    warmup: int = Field(0, ge=0)
    clip_norm: float | None = Field(1.0, gt=0.0)
    label_smoothing: float = Field(0.0, ge=0.0, lt=1.0)
    supervised_weight: float = Field(
        0.0, ge=0.0, description="λ of the joint loss NLL + λ·L_attention (survey §4.2)"
    )
    supervised_kind: Literal["kl", "ce", "mse"] = "ce"
    log_every: int = Field(50, ge=1)
    eval_every: int | None = Field(None, ge=1, description="validation loss every k steps")
    checkpoint_every: int | None = Field(None, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    stop_on_nonfinite: bool = Field(
        True, description="stop at the first NaN/inf loss, naming the step and the likely cause"
    )
    tensorboard: bool = Field(
        False,
        description="log the scalars and, at each evaluation, the report's attention heatmaps "
        "to RUN_DIR/tensorboard (needs the tensorboard extra)",
    )


class DecodeConfig(_Section):
    """Decoding for evaluation and translation."""

    beam_size: int = Field(1, ge=1)
    max_length: int = Field(50, ge=1)
    max_eval_sentences: int | None = Field(None, ge=1)


class RunConfig(_Section):
    """A whole run: ``name``, ``seed``, and the four sections."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = Field(0, ge=0, lt=2**63)  # torch.manual_seed takes a signed 64-bit seed
    data: DataConfig = DataConfig()
    model: ModelConfig = RNNModelConfig()
    train: TrainConfig
    decode: DecodeConfig = DecodeConfig()

    @property
    def is_translation(self) -> bool:
        """Whether the corpus is a translation corpus (a fact for scripts and tests; the
        pipeline asks its :class:`~attnkit.tasks.job.Job` instead)."""
        return self.data.corpus in TRANSLATION_CORPORA

    @model_validator(mode="after")
    def _model_fits_corpus(self) -> RunConfig:
        kinds = CORPUS_MODELS[self.data.corpus]
        if self.model.kind not in kinds:
            raise ValueError(
                f"model.kind: the {self.data.corpus} corpus takes model kind "
                f"{' or '.join(kinds)}; got {self.model.kind!r}"
            )
        return self

    @model_validator(mode="after")
    def _supervision_needs_targets(self) -> RunConfig:
        if self.train.supervised_weight > 0 and self.data.supervision is None:
            raise ValueError(
                "train.supervised_weight: supervised attention needs alignment targets; set "
                "data.supervision (ibm_model1 or fast_align)"
            )
        return self


def _key(part: Any) -> str:
    # a key as the user wrote it, or its repr when it is not a plain name (newlines, non-strings)
    return part if isinstance(part, str) and re.fullmatch(r"[\w-]+", part) else repr(part)


def _describe_error(error: Mapping[str, Any]) -> str:
    path = ".".join(_key(part) for part in error["loc"])
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key"
    if kind == "missing":
        return f"{path}: missing (required)"
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        given = error["input"].get("kind") if isinstance(error["input"], Mapping) else None
        return f"{path}.kind: must be one of {', '.join(MODEL_KINDS)} (given {given!r})"
    if message.startswith("Value error, "):  # our validators name their own key first
        own_key, _, text = message.removeprefix("Value error, ").partition(": ")
        return f"{path + '.' if path else ''}{own_key}: {text}"
    given = repr(error.get("input"))
    if len(given) > 60:
        given = given[:57] + "..."
    return f"{path}: {message} (given {given})"


def _strip_union_tags(loc: Sequence[Any]) -> tuple[Any, ...]:
    # pydantic puts the discriminator value in the location of a tagged union ("model.rnn.x")
    return tuple(p for p in loc if p not in MODEL_KINDS)


def validate(raw: Any, source: str = "config") -> RunConfig:
    """A :class:`RunConfig` from parsed YAML, or :class:`ConfigError` with one line per problem
    joined by ``; `` (the first line is the most useful)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a mapping of keys, got {type(raw).__name__}")
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            item = dict(item)
            item["loc"] = _strip_union_tags(item["loc"])
            problems.append(_describe_error(item))
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


#: the largest configuration file read, in bytes: a run configuration is a few hundred bytes,
#: and PyYAML (pure Python) parses 64 KiB well under a second
MAX_CONFIG_BYTES = 64 * 1024
#: the deepest nesting of mappings and lists accepted (a run configuration has three levels)
MAX_CONFIG_DEPTH = 16


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only: no Python objects, so no code from a configuration)
    without anchors and aliases, and with bounded nesting.

    ``yaml.safe_load`` expands aliases without bound: a 499-byte file of nested aliases ("billion
    laughs") grew ``attnkit train`` past 2 GB. A run configuration needs neither, so both are
    refused where they first appear; so is a key given twice."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.MarkedYAMLError(
                problem="YAML anchors and aliases (& and *) are not accepted in a configuration",
                problem_mark=event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise yaml.MarkedYAMLError(
                    problem=f"nested deeper than {MAX_CONFIG_DEPTH} levels",
                    problem_mark=event.start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # a key given twice is refused: PyYAML keeps the last silently (`steps: 10` ... `steps: 1`)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable: the base class refuses it
                continue
            if duplicate:
                raise yaml.MarkedYAMLError(
                    problem=f"the key {key!r} is given twice", problem_mark=key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """Plain data (mappings, lists, scalars) from YAML ``text``, or :class:`ConfigError` naming
    ``source``: no anchors or aliases, at most :data:`MAX_CONFIG_DEPTH` levels."""
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(error, "problem", None)
        detail = f" ({problem})" if problem else ""
        raise ConfigError(f"{source}: not valid YAML{line}{detail}") from None
    except (ValueError, RecursionError) as error:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{source}: unreadable YAML value ({_first_line(error)})") from None
    finally:
        loader.dispose()


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def read_config_text(path: str | Path) -> str:
    """The text of the configuration file ``path``: at most :data:`MAX_CONFIG_BYTES`, UTF-8,
    else :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)  # never more, whatever the file is
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the configuration ({error.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_CONFIG_BYTES} bytes; a run configuration is a few "
            "hundred bytes"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start})"
        ) from None


def read_config(path: str | Path, overrides: Sequence[str] = ()) -> Any:
    """The parsed YAML of ``path`` with ``overrides`` applied, before validation (see
    :func:`load_config`)."""
    raw = parse_yaml(read_config_text(path), str(path))
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(
            f"{path}: the top level must be a mapping of keys (name:, train:, ...), "
            f"got a YAML {_yaml_kind(raw)}"
        )
    return apply_overrides(raw, overrides, str(path))


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """Read and validate a YAML run configuration; ``overrides`` are ``key.path=value`` strings
    (values parsed as YAML), applied before validation.

    Refused with :class:`ConfigError` (one line naming the file): a file over
    :data:`MAX_CONFIG_BYTES`, not UTF-8, not YAML, with anchors or aliases, nested deeper than
    :data:`MAX_CONFIG_DEPTH`, whose top level is not a mapping, or whose keys do not validate."""
    return validate(read_config(path, overrides), str(path))


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _plain_copy(value: Any) -> Any:
    # a copy of parsed YAML (no aliases: a tree); json.dumps would stringify keys and fail on dates
    if isinstance(value, Mapping):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_copy(item) for item in value]
    return value


def apply_overrides(raw: Any, overrides: Sequence[str], source: str = "config") -> Any:
    """``raw`` with each ``a.b.c=value`` set (the value parsed as YAML); a new dict."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(
            f"{source}: the top level must be a mapping of keys to apply --set, "
            f"got a YAML {_yaml_kind(raw)}"
        )
    result = _plain_copy(raw) if raw is not None else {}
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key or "" in key.split("."):
            raise ConfigError(f"{source}: override must look like key.path=value, got {override!r}")
        node = result
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{source}: {key}: {part} is not a section")
            node = child
        node[leaf] = parse_yaml(value, f"--set {key}")
    return result


def to_yaml(config: RunConfig) -> str:
    """The resolved configuration (defaults filled in) as YAML."""
    return yaml.dump(config.model_dump(mode="json"), Dumper=_PlainDumper, sort_keys=False)


class _PlainDumper(yaml.SafeDumper):
    """Never writes anchors: a run's config.yaml is read back by the loader that refuses them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


ARCHITECTURE_DATA_KEYS = ("corpus", "max_length", "max_pairs", "min_freq", "max_vocab")

#: the data keys a run's learnt state and tensors depend on, per corpus: ``max_examples`` caps
#: the training split a classification task learns its vocabulary from (a translation corpus
#: has no such key; leaving it out keeps its checkpoints' fingerprints)
CORPUS_ARCHITECTURE_DATA_KEYS: dict[str, tuple[str, ...]] = {
    corpus: (
        ARCHITECTURE_DATA_KEYS
        if corpus in TRANSLATION_CORPORA
        else (*ARCHITECTURE_DATA_KEYS, "max_examples")
    )
    for corpus in CORPUS_MODELS
}


def architecture(config: RunConfig) -> dict[str, Any]:
    """The keys a checkpoint's tensors depend on, flattened (``model.hidden_dim`` → 256)."""
    model = config.model.model_dump(mode="json", exclude={"dropout"})  # dropout: no tensors
    for key in ("attention", "decoder_attention"):
        # exact attention is what every run had before these keys existed: leaving the default
        # out keeps the fingerprints of those runs' checkpoints
        if model.get(key) == "exact" and config.model.kind in ("transformer", "vit"):
            del model[key]
    flat = {f"model.{k}": v for k, v in model.items()}
    data = config.data.model_dump(mode="json")
    flat.update({f"data.{k}": data[k] for k in CORPUS_ARCHITECTURE_DATA_KEYS[config.data.corpus]})
    return flat


def fingerprint(arch: Mapping[str, Any]) -> str:
    """A stable hash of :func:`architecture`'s mapping."""
    return hashlib.sha256(json.dumps(dict(arch), sort_keys=True).encode()).hexdigest()[:16]


def differing_keys(saved: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    """``"key: saved X, given Y"`` for each architecture key that differs."""
    lines = []
    for key in sorted(set(saved) | set(given)):
        a, b = saved.get(key, "<absent>"), given.get(key, "<absent>")
        if a != b:
            lines.append(f"{key}: saved {a!r}, given {b!r}")
    return lines
