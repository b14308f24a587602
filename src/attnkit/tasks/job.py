"""What the one training loop, its final evaluation and ``attnkit eval`` need from a task.

Every corpus of a run configuration has a :class:`Job`: translation (:mod:`.translation`) and
the classification tasks (:mod:`.trainer` runs any :class:`~attnkit.tasks.Task`). The loop
(:func:`attnkit.train.train`) and the one final evaluation (:func:`attnkit.train.finish`) call
only these methods; a run directory keeps what :meth:`Job.learnt` returned in
:attr:`Job.state_file`, so a checkpoint is usable without the training data.

A job's lifetime: constructed from the configuration (cheap: the data is read on first use of
:attr:`Job.examples`); :meth:`~Job.learnt` on a new run, or :meth:`~Job.restore` from the run's
state; :meth:`~Job.prepare` once the run is open; then :meth:`~Job.batch` and :meth:`~Job.loss`
every step, :meth:`~Job.valid` every ``eval_every`` steps; at the end :meth:`~Job.evaluate` and
:meth:`~Job.present`.

A job knows nothing of data parallelism: :meth:`~Job.batch` is the *global* batch of a step, the
training loop gives each process its share (rows ``rank::world``), and :meth:`~Job.loss` returns
:class:`Term` s of that share, which the loop combines over the processes (see :class:`Term`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from torch import Tensor, nn

from attnkit.config import ARCHITECTURE_DATA_KEYS, DataConfig, ModelSection, RunConfig
from attnkit.core.deprecation import warn_renamed
from attnkit.report import Alignment

Log = Callable[[str], None]


@dataclass(frozen=True)
class Term:
    """One term of a training objective, computed on this process's share of a batch.

    The objective is the weighted sum of its terms, each averaged over the *global* batch: the
    loop sums ``count`` over the processes and scales the term to that average (times the number
    of processes, which DDP's gradient averaging divides out), so the gradient equals the one a
    single process computes on the whole batch. A term is given either as a ``sum`` over its
    ``count`` items (tokens) or as their ``mean`` (a model's own objective) — exactly one.

    Attributes:
        count: how many items (tokens, rows) the term averages over in this share (a tensor).
        sum: the term summed over those items, or None.
        mean: the term averaged over them, or None.
        weight: its weight in the objective (λ of a joint loss).
    """

    count: Tensor
    sum: Tensor | None = None
    mean: Tensor | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if (self.sum is None) == (self.mean is None):
            raise ValueError("a Term takes exactly one of sum= and mean=")


class RunDirectory(Protocol):
    """What :meth:`Job.prepare` reads of the open run (:class:`attnkit.run.Run`)."""

    path: Path


@dataclass
class Presentation:
    """What a finished run shows besides its metrics.

    Attributes:
        results: keys added to ``results.json`` (e.g. ``"showcase"``, ``"samples"``).
        alignments: alignment matrices drawn in the report (translation).
        images: PNG files embedded in the report (heatmaps, attention maps).
    """

    results: dict[str, Any] = field(default_factory=dict)
    alignments: list[Alignment] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)


class Job(ABC):
    """One corpus's part in the training pipeline (see the module docstring).

    Class attributes:
        state_file: the run file holding :meth:`learnt`'s state (JSON).
        example_noun: what a training example is called in the report (``"pairs"``).
    """

    state_file: ClassVar[str] = "task.json"
    example_noun: ClassVar[str] = "examples"
    #: what a task registered in :data:`attnkit.config.TASKS` declares (see there); a
    #: classification :class:`~attnkit.tasks.Task` declares them on itself instead
    models: ClassVar[tuple[type[ModelSection], ...]]
    data_section: ClassVar[type[DataConfig]] = DataConfig
    architecture_data_keys: ClassVar[tuple[str, ...]] = ARCHITECTURE_DATA_KEYS
    translation: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse keys the job cannot honour (``ValueError`` starting with the key's path);
        a job whose keys are all valid alone refuses nothing."""
        return None

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self._examples: Mapping[str, Sequence[Any]] | None = None

    @property
    def examples(self) -> Mapping[str, Sequence[Any]]:
        """The ``"train"``, ``"valid"`` and ``"test"`` splits (read once, on first use)."""
        if self._examples is None:
            self._examples = self.load()
        return self._examples

    @abstractmethod
    def load(self) -> Mapping[str, Sequence[Any]]:
        """Read the splits (as trained and evaluated: caps applied)."""

    @abstractmethod
    def learnt(self) -> dict[str, Any]:
        """Fit what the run keeps from the training split (vocabularies, statistics) and return
        it as a JSON-able dict; the job is then ready as after :meth:`restore`."""

    @abstractmethod
    def restore(self, state: dict[str, Any]) -> None:
        """Take the state :meth:`learnt` returned (read back from :attr:`state_file`);
        ``ValueError`` when it is not this job's."""

    @abstractmethod
    def build_model(self) -> nn.Module:
        """The model of ``config.model`` (after :meth:`learnt` or :meth:`restore`), initialised
        from the global RNG."""

    @abstractmethod
    def prepare(self, run: RunDirectory, log: Log) -> int:
        """Get the batches ready once the run is open; returns the batches per epoch. It may
        write files of the run it derives from the data (aligner links): under data parallelism
        the first process prepares before the others, which then read them."""

    @abstractmethod
    def batch(self, step: int) -> Any:
        """The global batch of ``step``, a function of seed and step: a list of examples, or a
        dataclass of tensors whose first dimension is the batch (the loop shards either)."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> dict[str, Term]:
        """The objective's terms on ``batch`` (a share of a global batch), by name."""

    def view(
        self,
        model: nn.Module,
        step: int,
        text: str,
        *,
        directory: Path,
        output: str | Path | None = None,
        beam_size: int | None = None,
    ) -> Path:
        """Write the attention viewer page of ``model`` on the input ``text`` (``attnkit
        view RUN_DIR --input TEXT``) and return its path; a task without one refuses."""
        raise ValueError(
            f"a {self.config.data.corpus} run has no attention viewer page: `attnkit view "
            "RUN_DIR` shows translation runs (`attnkit view --hf` any Hugging Face model)"
        )

    def explain(
        self,
        model: nn.Module,
        step: int,
        text: str,
        *,
        directory: Path,
        output: str | Path | None = None,
        beam_size: int | None = None,
    ) -> Path:
        """Deprecated name of :meth:`view` (warns with a ``DeprecationWarning``)."""
        warn_renamed("Job.explain", "Job.view")
        return self.view(model, step, text, directory=directory, output=output, beam_size=beam_size)

    def smallest_batch(self) -> int | None:
        """The fewest examples a global batch of this run has (None: not known), so the loop
        can refuse more processes than that before training (each needs an example)."""
        return None

    @abstractmethod
    def valid(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics (``"loss"`` first) of the model in eval mode."""

    @abstractmethod
    def evaluate(
        self,
        model: nn.Module,
        examples: Sequence[Any],
        *,
        beam_size: int | None = None,
        quiet: bool = True,
    ) -> dict[str, Any]:
        """Metrics of ``model`` on ``examples`` (a split): what ``results.json`` and
        ``eval-SPLIT.json`` hold. ``beam_size`` overrides the configuration's search where
        there is one."""

    @abstractmethod
    def present(self, model: nn.Module, directory: Path) -> Presentation:
        """What the finished run shows: examples of its outputs, its attention drawn as PNGs
        in ``directory``."""

    @abstractmethod
    def summary(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """The report's rows for these results, after the rows every run has."""

    @abstractmethod
    def describe_results(self, results: Mapping[str, Any]) -> list[str]:
        """``attnkit eval``'s lines: first how much was evaluated (``"347 sentences"``), then
        one indented line per metric."""

    @abstractmethod
    def headline(self, results: Mapping[str, Any]) -> str:
        """The one line the training command logs at the end."""
