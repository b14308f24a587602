"""A classification task: its data, how a batch of examples becomes tensors, and its model.

Translation is :mod:`attnkit.tasks.translation`; every other corpus of a run configuration
names a :class:`Task` registered with ``@TASKS.register(corpus)`` (:data:`attnkit.config.TASKS`),
in the file that also defines its model sections. Its job in the training pipeline,
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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnkit.config import ARCHITECTURE_DATA_KEYS, TASKS, DataConfig, ModelSection, RunConfig
from attnkit.data.vocabulary import PAD, Vocabulary


class Task(ABC):
    """One classification task of a run configuration (see the module docstring)."""

    #: class names; a label is an index into them
    classes: ClassVar[tuple[str, ...]]
    #: the model sections ``model.kind`` chooses from, the default first
    models: ClassVar[tuple[type[ModelSection], ...]]
    #: the data section (a subclass of :class:`DataConfig` adds keys of the task's own)
    data_section: ClassVar[type[DataConfig]] = DataConfig
    #: the data keys the run's learnt state depends on: ``max_examples`` caps the training
    #: split the vocabulary is learnt from
    architecture_data_keys: ClassVar[tuple[str, ...]] = (*ARCHITECTURE_DATA_KEYS, "max_examples")
    translation: ClassVar[bool] = False
    #: examples per evaluation batch (None: ``train.batch_size``)
    eval_batch_size: ClassVar[int | None] = None
    #: whether the final evaluation adds the same checkpoint with uniform attention (the
    #: engine's ablation); a task whose ablation costs too much says so where it sets False
    ablation_column: ClassVar[bool] = True

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse keys the task cannot honour (``ValueError`` starting with the key's path)."""
        if config.data.reverse:
            raise ValueError(
                f"data.reverse: only a translation corpus (tatoeba, hansards) has two "
                f"directions, got corpus: {config.data.corpus}"
            )

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


def task_for(config: RunConfig) -> Task:
    """The classification task ``config.data.corpus`` names, constructed for ``config``
    (``ValueError`` when the corpus names no classification task)."""
    entry = TASKS.get(config.data.corpus)
    if not (isinstance(entry, type) and issubclass(entry, Task)):
        classification = [n for n in TASKS.names() if issubclass(TASKS.get(n), Task)]
        raise ValueError(
            f"data.corpus: no classification task for {config.data.corpus!r}; "
            f"registered: {', '.join(sorted(classification))}"
        )
    return entry(config)
