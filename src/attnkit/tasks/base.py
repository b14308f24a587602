"""A classification task: its data, how a batch of examples becomes tensors, and its model.

Translation is :mod:`attnkit.tasks.translation`; every other corpus of a run configuration
names a :class:`Task` registered with :func:`register_task`. Its job in the training pipeline,
:class:`attnkit.tasks.trainer.ClassificationJob`, only needs what a task declares here:

* :meth:`Task.load` — the ``"train"``, ``"valid"`` and ``"test"`` examples (any objects);
* :meth:`Task.label` — an example's class index into :attr:`Task.classes`;
* :meth:`Task.fit` / :meth:`Task.restore` — state learnt from the training split (vocabularies),
  JSON-able, saved in the run as ``task.json`` so a checkpoint is usable without the training data;
* :meth:`Task.collate` — the model's keyword inputs for a list of examples;
* :meth:`Task.build_model` — a module with ``model(**inputs) -> logits [B, C]`` and, when its
  training objective is not cross-entropy of those logits (capsule loss, REINFORCE), a method
  ``objective(inputs, labels) -> scalar``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnkit.config import RunConfig
from attnkit.data.vocabulary import PAD, Vocabulary

_TASKS: dict[str, type[Task]] = {}


class Task(ABC):
    """One classification task of a run configuration (see the module docstring)."""

    #: class names; a label is an index into them
    classes: ClassVar[tuple[str, ...]]

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    @property
    def model_config(self) -> Any:
        """``config.model``: the section of this task's model kind (validated against the
        corpus, so its fields are the kind's)."""
        return self.config.model

    @abstractmethod
    def load(self) -> Mapping[str, Sequence[Any]]:
        """The examples of the ``"train"``, ``"valid"`` and ``"test"`` splits."""

    @abstractmethod
    def label(self, example: Any) -> int:
        """``example``'s class index."""

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        """State learnt from the training examples (JSON-able); also restores it into ``self``."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        """Rebuild what :meth:`fit` learnt from its saved state (a task that learns nothing from
        its data has nothing to restore)."""
        if state:
            raise ValueError(
                f"{type(self).__name__} learns no state from its data; got keys {sorted(state)}"
            )

    @abstractmethod
    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        """The model's keyword inputs for ``examples`` (a batch)."""

    @abstractmethod
    def build_model(self) -> nn.Module:
        """The model of ``config.model`` (after :meth:`fit` or :meth:`restore`)."""

    def describe(self, example: Any) -> str:
        """One line of text showing ``example`` in reports."""
        return str(example)

    def artifacts(self, model: nn.Module, examples: Sequence[Any], directory: Path) -> list[Path]:
        """Extra outputs of a finished run (attention maps as PNG, ...), written in ``directory``."""
        return []


def pad_ids(sequences: Sequence[Sequence[str]], words: Vocabulary) -> Tensor:
    """``[B, L]`` token ids, ``L`` the longest sequence (at least 1), ``PAD`` after each."""
    length = max(1, max((len(s) for s in sequences), default=1))
    ids = torch.full((len(sequences), length), PAD, dtype=torch.long)
    for b, sequence in enumerate(sequences):
        if sequence:
            ids[b, : len(sequence)] = torch.tensor(words.encode(list(sequence)))
    return ids


class WordTask(Task):
    """A task over text with one vocabulary, ``words``, built from the training split's
    sentences (``data.min_freq``, ``data.max_vocab``) and saved in the run."""

    words: Vocabulary

    @abstractmethod
    def sentences(self, example: Any) -> Iterable[Sequence[str]]:
        """The token sequences of ``example`` the vocabulary counts."""

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        data = self.config.data
        sentences = (list(s) for example in train for s in self.sentences(example))
        state = {"words": Vocabulary.build(sentences, data.min_freq, data.max_vocab).to_dict()}
        self.restore(state)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self.words = Vocabulary.from_dict(state["words"])


def register_task(corpus: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: the task of runs whose ``data.corpus`` is ``corpus``."""

    def register(cls: type[Task]) -> type[Task]:
        if corpus in _TASKS and _TASKS[corpus] is not cls:
            raise ValueError(f"corpus {corpus!r} already has a task: {_TASKS[corpus].__name__}")
        _TASKS[corpus] = cls
        return cls

    return register


def task_for(config: RunConfig) -> Task:
    """The registered task of ``config.data.corpus``, constructed for ``config`` (importing
    any module of :mod:`attnkit.tasks` first imports the package, which registers them all)."""
    corpus = config.data.corpus
    if corpus not in _TASKS:
        raise ValueError(
            f"data.corpus: no classification task for {corpus!r}; "
            f"registered: {', '.join(sorted(_TASKS))}"
        )
    return _TASKS[corpus](config)
