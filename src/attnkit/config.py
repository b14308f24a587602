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
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from attnkit.core.registry import Registry


class ConfigError(ValueError):
    """An invalid configuration: one line naming the file, the key's path and the problem."""


class _Section(BaseModel):
    # allow_inf_nan=False: `.inf`/`.nan` are refused where a number is expected (train.lr: .inf
    # trained on NaN to the end)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, raw: Any) -> Any:
        # pydantic reads `steps: true` as 1: a YAML boolean where a number is expected is a typo
        if isinstance(raw, Mapping):
            for key, value in raw.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if field is not None and isinstance(value, bool) and _numeric(field.annotation):
                    raise ValueError(f"{key}: expected a number, got the boolean {value}")
        return raw


def _numeric(annotation: Any) -> bool:
    """Whether a field takes numbers and not booleans (``int``, ``float``, ``int | None``)."""
    args = [a for a in getattr(annotation, "__args__", (annotation,)) if a is not type(None)]
    return bool(args) and all(a in (int, float) for a in args)


#: the tasks a configuration's ``data.corpus`` can name. A task is one file of
#: :mod:`attnkit.tasks` whose class (a classification ``Task`` or a ``Job``) registers itself with
#: ``@TASKS.register(corpus)`` and declares, as class attributes, what this module validates:
#:
#: * ``models``: its model sections (subclasses of :class:`ModelSection`), the default first;
#: * ``data_section``: its data section (:class:`DataConfig` or a subclass with keys of its own);
#: * ``architecture_data_keys``: the data keys its checkpoints' tensors depend on;
#: * ``check_config(config)``: a classmethod refusing combinations of keys (``ValueError``
#:   starting with the key's path), or nothing to refuse.
#:
#: ``attnkit.tasks`` imports every built-in task; :func:`validate` needs them registered.
TASKS: Registry[Any] = Registry("task (data.corpus)")


class ModelSection(_Section):
    """A model's configuration section: ``kind`` names the model (one a task accepts)."""

    kind: str

    def describe(self) -> str:
        """The model in a few words, for reports and the attention viewer: the first line of
        the section's docstring, then its variant key (``attention`` or ``style``) if any."""
        name = (type(self).__doc__ or self.kind).strip().splitlines()[0].rstrip(".")
        variant = getattr(self, "attention", None) or getattr(self, "style", None)
        return f"{name} [{variant}]" if variant else name

    def architecture(self) -> dict[str, Any]:
        """The keys the model's tensors depend on (all but ``dropout``, which has none)."""
        return self.model_dump(mode="json", exclude={"dropout"})


class DataConfig(_Section):
    """Which corpus, how it is filtered, and how vocabularies are built."""

    corpus: str = Field("tatoeba", description="the task: a name registered in ``TASKS``")
    root: str | None = Field(
        None,
        description="the corpus's directory (relative to the working dir): hansards-en-fr for "
        "the Hansards, the shared data folder for the papers' benchmarks",
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


def check_attention_kind(key: str, kind: str) -> None:
    known = known_attention_kinds()
    if kind not in known:
        raise ValueError(
            f"{key}: unknown attention kind {kind!r}; expected one of {', '.join(known)}"
        )


class TrainConfig(_Section):
    """Optimisation: the optimizer (Adam or plain SGD), a learning-rate schedule, gradient
    clipping, evaluation and checkpoints."""

    steps: int = Field(ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    optimizer: Literal["adam", "sgd"] = Field(
        "adam",
        description="adam: torch.optim.Adam; sgd: torch.optim.SGD without momentum, "
        "p ← p − lr·g (MemN2N's training, Sukhbaatar et al. 2015 §4.2)",
    )
    schedule: Literal["constant", "cosine", "inverse_sqrt", "halving"] = Field(
        "constant",
        description="the learning rate's factor after warm-up: constant, cosine decay to 0, "
        "inverse square root, or halving: 0.5 ** floor((t − halve_after) / halve_every) from "
        "step halve_after on, 1 before",
    )
    halve_every: int | None = Field(
        None, ge=1, description="halving schedule: steps between two halvings of the rate"
    )
    halve_after: int | None = Field(
        None,
        ge=0,
        description="halving schedule: the step the halving periods count from (the first "
        "halving is at halve_after + halve_every)",
    )
    warmup: int = Field(0, ge=0)
    clip_norm: float | None = Field(1.0, gt=0.0)
    clip: Literal["global", "per_parameter"] = Field(
        "global",
        description="global: the gradient of all parameters together is scaled to norm at most "
        "clip_norm (torch.nn.utils.clip_grad_norm_); per_parameter: each parameter's gradient "
        "on its own (MemN2N's code clips each weight matrix)",
    )
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
    weight_decay: float = Field(
        0.0, ge=0.0, description="L2 penalty of the optimizer (torch.optim's weight_decay)"
    )
    patience: int | None = Field(
        None,
        ge=1,
        description="early stopping (GAT's rule): stop after this many evaluations in which "
        "neither the validation loss fell nor the validation accuracy rose, and evaluate the "
        "model of the last evaluation that improved both; needs eval_every",
    )
    attention: Literal["learned", "uniform"] = Field(
        "learned",
        description="uniform: train and evaluate with every attention of the model replaced by "
        "uniform weights over its admissible keys (survey §4.1's extrinsic measure)",
    )
    tensorboard: bool = Field(
        False,
        description="log the scalars and, at each evaluation, the report's attention heatmaps "
        "to RUN_DIR/tensorboard (needs the tensorboard extra)",
    )

    @model_validator(mode="after")
    def _halving_needs_its_period(self) -> TrainConfig:
        halving = self.schedule == "halving"
        for key in ("halve_every", "halve_after"):
            value = getattr(self, key)
            if halving and value is None:
                raise ValueError(
                    f"{key}: the halving schedule needs halve_every and halve_after (steps); "
                    f"got {key}: null"
                )
            if not halving and value is not None:
                raise ValueError(
                    f"{key}: only the halving schedule reads it; got schedule: {self.schedule}"
                )
        if self.clip == "per_parameter" and self.clip_norm is None:
            raise ValueError("clip: per_parameter clips each gradient to clip_norm; set clip_norm")
        return self


class ReproduceOver(_Section):
    """A reproduction over the values of one key (bAbI's 20 tasks): each value is trained as
    its own configuration and the paper's table is compared value by value."""

    key: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$",
        description="the configuration key set to each value, e.g. data.task",
    )
    values: list[int | str] = Field(min_length=1, description="the values, in table order")
    label: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="the values' name in run directories and the table (default: the key's "
        "last part)",
    )

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[int | str]) -> list[int | str]:
        seen = [str(v) for v in values]
        twice = sorted({v for v in seen if seen.count(v) > 1})
        if twice:
            raise ValueError(f"values: each value once; repeated: {', '.join(twice)}")
        return values

    @property
    def name(self) -> str:
        """The values' name: :attr:`label`, else the key's last part (``task``)."""
        return self.label or self.key.rsplit(".", 1)[-1]


class ReproduceSection(_Section):
    """What a configuration of ``configs/reproduce/`` reproduces: the paper's number it is
    compared with (``attnkit reproduce``)."""

    paper: str = Field(min_length=1, description="authors, year and title")
    source: str = Field(min_length=1, description="where the number is: table, row and column")
    cell: str | None = Field(
        None,
        min_length=1,
        description="the paper's number in a few words for the table of reproductions, "
        "e.g. 'Kim 2014, Table 2' (every configuration of configs/reproduce with a value has "
        "one; not required, so that run directories saved before it load)",
    )
    metric: str = Field(min_length=1, description="the key of results.json compared")
    scale: float = Field(1.0, gt=0.0, description="results.json's value times this (100: %)")
    value: float | None = Field(None, description="the paper's number, in its own unit")
    std: float | None = Field(None, ge=0.0, description="the paper's spread, if it gives one")
    seeds: int = Field(5, ge=1, le=20, description="seeds of a full reproduction")
    lower_is_better: bool = False
    quick: list[str] = Field(
        default_factory=list, description="key=value overrides of `attnkit reproduce --quick`"
    )
    peer: bool = Field(
        False,
        description="also train the peer library's model with the same settings and seeds "
        "(the task's run_peer; skipped, saying so, when the library is absent)",
    )
    peer_seeds: int | None = Field(
        None,
        ge=1,
        le=20,
        description="seeds of the peer library's model, at most as many as the model's; "
        "default: as many",
    )
    uniform: list[str] | None = Field(
        default_factory=lambda: ["train.attention=uniform"],
        description="key=value overrides giving the same model with uniform attention; null "
        "for a model without attention (no uniform-attention twin)",
    )
    uniform_seeds: int | None = Field(
        None,
        ge=1,
        le=20,
        description="seeds (runs per value) of the uniform-attention model, at most as many as "
        "the model's; default: as many",
    )
    over: ReproduceOver | None = Field(
        None, description="reproduce each value of one key (a table of tasks); see ReproduceOver"
    )
    select: Literal["mean", "best_on_valid"] = Field(
        "mean",
        description="per value, the mean over the seeds, or the seed whose last validation is "
        "best (select_metric; ties go to the lower validation loss)",
    )
    select_metric: str = Field("accuracy", min_length=1, description="the validation key read")
    select_lower_is_better: bool = False
    complement: bool = Field(
        False, description="compare 1 − metric (an error rate from an accuracy), times scale"
    )
    fail_above: float | None = Field(
        None, description="a value (or seed) whose number exceeds this has failed (bAbI: 5 %)"
    )
    paper_values: dict[str, float] | None = Field(
        None, description="the paper's number for each value of `over` (keys: the values)"
    )
    paper_failures: int | None = Field(None, ge=0, description="the paper's count of failures")

    @field_validator("uniform")
    @classmethod
    def _a_twin_differs(cls, uniform: list[str] | None) -> list[str] | None:
        if uniform is not None and not uniform:
            raise ValueError(
                "uniform: [] would train the same model again as its uniform-attention twin; "
                "give the overrides that replace its attention, or null for a model without "
                "attention"
            )
        return uniform

    @model_validator(mode="after")
    def _per_value_numbers_need_values(self) -> ReproduceSection:
        # paper_values may name more values than `over` runs (a quick run of two tasks)
        if self.paper_values is not None and self.over is None:
            raise ValueError("paper_values: per-value numbers need `over`")
        if self.paper_failures is not None and self.fail_above is None:
            raise ValueError("paper_failures: failures are counted with fail_above; set it")
        return self


class DecodeConfig(_Section):
    """Decoding for evaluation and translation."""

    beam_size: int = Field(1, ge=1)
    max_length: int = Field(50, ge=1)
    max_eval_sentences: int | None = Field(None, ge=1)


def task_of(corpus: str) -> Any:
    """The class registered for ``corpus`` in :data:`TASKS` (``ValueError`` listing the
    registered ones)."""
    if not len(TASKS):
        raise ValueError(
            "no task is registered: import attnkit.tasks (it registers the built-in tasks) "
            "before validating a configuration"
        )
    return TASKS.get(corpus)


def model_kinds(corpus: str) -> tuple[str, ...]:
    """The ``model.kind`` values the task of ``corpus`` takes, its default first."""
    return tuple(m.model_fields["kind"].default for m in task_of(corpus).models)


class RunConfig(_Section):
    """A whole run: ``name``, ``seed``, and the four sections. The data and model sections are
    those of the task ``data.corpus`` names (see :data:`TASKS`)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = Field(0, ge=0, lt=2**63)  # torch.manual_seed takes a signed 64-bit seed
    data: SerializeAsAny[DataConfig] = Field(default=None, validate_default=True)  # type: ignore[assignment]
    model: SerializeAsAny[ModelSection] = Field(default=None, validate_default=True)  # type: ignore[assignment]
    train: TrainConfig
    decode: DecodeConfig = DecodeConfig()
    reproduce: ReproduceSection | None = None

    @property
    def is_translation(self) -> bool:
        """Whether the task is a translation task (a fact for scripts and tests; the pipeline
        asks its :class:`~attnkit.tasks.job.Job` instead)."""
        return bool(getattr(task_of(self.data.corpus), "translation", False))

    @field_validator("data", mode="before")
    @classmethod
    def _data_of_task(cls, value: Any) -> Any:
        # the section's class is the task's: read the corpus first, then validate the rest
        if isinstance(value, DataConfig):
            value = value.model_dump()
        raw = {} if value is None else value
        if not isinstance(raw, Mapping):
            return value  # the section's own validation names the problem
        corpus = raw.get("corpus", DataConfig.model_fields["corpus"].default)
        if not len(TASKS):
            task_of(corpus)  # says how to register them
        if not isinstance(corpus, str) or corpus not in TASKS:
            valid = ", ".join(sorted(TASKS.names()))
            raise ValueError(f"corpus: must be one of {valid} (given {corpus!r})")
        return task_of(corpus).data_section.model_validate(raw)

    @field_validator("model", mode="before")
    @classmethod
    def _model_of_task(cls, value: Any, info: ValidationInfo) -> Any:
        data = info.data.get("data")
        if data is None:  # the data section failed: its error is the one to read
            return ModelSection.model_construct(kind="")
        models, kinds = task_of(data.corpus).models, model_kinds(data.corpus)
        if isinstance(value, ModelSection):
            value = value.model_dump()
        raw = {} if value is None else value
        if not isinstance(raw, Mapping):
            return value
        kind = raw.get("kind", kinds[0])
        if kind not in kinds:
            raise ValueError(
                f"kind: the {data.corpus} corpus takes model kind {' or '.join(kinds)}; "
                f"got {kind!r}"
            )
        return models[kinds.index(kind)].model_validate(raw)

    @model_validator(mode="after")
    def _task_accepts(self) -> RunConfig:
        task_of(self.data.corpus).check_config(self)
        return self

    @model_validator(mode="after")
    def _patience_needs_evaluations(self) -> RunConfig:
        if self.train.patience is not None and self.train.eval_every is None:
            raise ValueError(
                "train.patience: early stopping reads the validation metrics; set "
                "train.eval_every"
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
    if message.startswith("Value error, "):  # our validators name their own key first
        own_key, _, text = message.removeprefix("Value error, ").partition(": ")
        return f"{path + '.' if path else ''}{own_key}: {text}"
    given = repr(error.get("input"))
    if len(given) > 60:
        given = given[:57] + "..."
    return f"{path}: {message} (given {given})"


def validate(raw: Any, source: str = "config") -> RunConfig:
    """A :class:`RunConfig` from parsed YAML, or :class:`ConfigError` with one line per problem
    joined by ``; `` (the first line is the most useful). The tasks must be registered
    (``import attnkit.tasks`` registers the built-in ones)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a mapping of keys, got {type(raw).__name__}")
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as error:
        problems = [_describe_error(item) for item in error.errors()]
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


#: the data keys a translation run's vocabularies depend on; a classification task adds
#: ``max_examples`` (it caps the training split its vocabulary is learnt from). Each task states
#: its own as ``architecture_data_keys``.
ARCHITECTURE_DATA_KEYS = ("corpus", "max_length", "max_pairs", "min_freq", "max_vocab")


def architecture(config: RunConfig) -> dict[str, Any]:
    """The keys a checkpoint's tensors depend on, flattened (``model.hidden_dim`` → 256)."""
    flat = {f"model.{k}": v for k, v in config.model.architecture().items()}
    data = config.data.model_dump(mode="json")
    keys = task_of(config.data.corpus).architecture_data_keys
    flat.update({f"data.{k}": data[k] for k in keys})
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
