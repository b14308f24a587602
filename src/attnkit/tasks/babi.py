"""bAbI question answering with an end-to-end memory network, as in Sukhbaatar et al. (2015,
"End-To-End Memory Networks", §4): one model per task, trained on the task's 1k questions.

Data: :func:`attnkit.data.babi.load_babi` — task ``data.task`` (1–20) of bAbI v1.2 English 1k in
the shared data folder (``data.root``, default ``../shared/data``, holds ``babi/``). 10 % of the
training questions are held out for validation, drawn with ``data.valid_seed`` (the same for
every run seed, so the runs of a task are compared on one validation set); the test file is
whole.

An example's memory is the statements of its story before the question (their words, without
the full stop and question mark), at most
``model.memory_size`` of the most recent (the paper: 50), newest first (slot ``i`` = the
``i+1``-th most recent sentence, what the temporal encoding ``T(i)`` indexes).

Answers: the classes are the task's answer strings, each one output of the final softmax. Tasks
8 (lists) and 19 (path finding) answer with comma lists (``"apple,milk"``, ``"n,w"``); as the
paper does for its list answers (each combination of outputs is recorded as an answer word of its
own), each whole list is one class and one vocabulary word, whose output row ``W`` is the tied
embedding ``C^K`` of that word. The
classes are collected from all three splits: task 7's answer "three" and task 8's
"football,apple,milk" occur in the held-out or test questions only, and a class the softmax does
not have could never be answered (the paper's softmax is over the whole vocabulary). The
vocabulary is the training split's words plus every answer.

Model: :class:`attnkit.models.memory_network.EndToEndMemoryNetwork` (``model.kind:
memory_network``) with the paper's options: ``hops``, adjacent weight tying (the model's only
tying), ``sentence_encoding: position`` (PE), ``temporal_encoding`` (TE), ``temporal_noise: 0.1``
(RN) and ``linear_start`` (LS; the training loop reports each validation to the model, which
re-inserts its softmaxes when the validation loss stops decreasing, or after
``linear_start_epochs`` validations). With ``null_memories`` every story's memory is padded with
null memories to ``S = min(memory_size, the longest training story)`` slots, kept in the hops'
softmaxes as the authors' code pads stories to its ``config.sz``; ``S`` is computed from the
training split when the vocabulary is, and saved with it in the run's task state, so a reloaded
run rebuilds the same model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import ARCHITECTURE_DATA_KEYS, TASKS, DataConfig, RunConfig
from attnkit.data.babi import TASKS as BABI_TASKS
from attnkit.data.babi import BabiExample, load_babi
from attnkit.data.vocabulary import PAD, Vocabulary
from attnkit.interpret.plots import draw_heatmap
from attnkit.models.memory_network import EndToEndMemoryNetwork
from attnkit.tasks.base import Task
from attnkit.tasks.memory_qa import MemoryNetworkModelConfig

#: the shared data folder read when ``data.root`` is not given
SHARED_DATA = "../shared/data"
#: how many test questions with two or more supporting facts get a PNG of their hops' attention
HEATMAPS = 1


def sentence_words(tokens: Sequence[str]) -> list[str]:
    """The words of a sentence without its punctuation (``"."``, ``"?"``): the memory network
    reads words, and a full stop would add one constant vector to every sentence and shift its
    position encoding (``J`` counts words)."""
    return [t for t in tokens if t[0].isalnum()]


class BabiData(DataConfig):
    """Which bAbI task, and which training questions are held out for validation."""

    task: int = Field(1, ge=1, le=20, description="the bAbI task, 1-20")
    valid_seed: int = Field(
        0, ge=0, description="draws the held-out 10 % of the training questions (every run seed)"
    )


class BabiMemoryNetworkConfig(MemoryNetworkModelConfig):
    """End-to-end memory network (Sukhbaatar et al. 2015): multi-hop attention over memories."""

    position_scale: float = Field(
        1.0,
        gt=0.0,
        description="multiplies the position encoding: 1 is the paper's formula, 2 the scale "
        "of the authors' implementation",
    )
    linear_start: bool = Field(
        False,
        description="LS: train without the hops' softmaxes until the validation loss "
        "stops decreasing (MemN2N §4.2); needs train.eval_every",
    )
    linear_start_patience: int = Field(
        1, ge=1, description="validations without a lower loss before the softmaxes return"
    )
    temporal_noise: float = Field(
        0.0, ge=0.0, lt=1.0, description="RN: share of empty memories added in training (§4.1)"
    )
    linear_start_epochs: int | None = Field(
        None,
        ge=1,
        description="LS ends after exactly this many validations (epochs when train.eval_every "
        "is an epoch; the authors' code: 20); null: when the validation loss stops decreasing "
        "(linear_start_patience)",
    )
    null_memories: bool = Field(
        False,
        description="pad each story's memory to the task's longest training story (at most "
        "memory_size) with zero memories that take part in every hop's softmax (the authors' "
        "code; §4.2's null symbol); false: padding is masked out",
    )

    def architecture(self) -> dict[str, Any]:
        # keys added after runs were saved: at their defaults they are left out, so those runs'
        # checkpoints (saved without them) still resume and evaluate
        keys = super().architecture()
        for key, default in (("linear_start_epochs", None), ("null_memories", False)):
            if keys[key] == default:
                del keys[key]
        return keys


@TASKS.register("babi")
class Babi(Task):
    """The answer to a bAbI question, from the story before it."""

    models = (BabiMemoryNetworkConfig,)
    data_section = BabiData
    architecture_data_keys: ClassVar[tuple[str, ...]] = (
        *ARCHITECTURE_DATA_KEYS,
        "max_examples",
        "task",
        "valid_seed",
    )

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        model = config.model
        if model.temporal_noise and not model.temporal_encoding:
            raise ValueError(
                "model.temporal_noise: random noise perturbs the temporal encoding; set "
                "model.temporal_encoding: true"
            )
        if model.linear_start and config.train.eval_every is None:
            raise ValueError(
                "model.linear_start: the softmaxes return when the validation loss stops "
                "decreasing; set train.eval_every"
            )
        if model.linear_start_epochs is not None and not model.linear_start:
            raise ValueError(
                "model.linear_start_epochs: says when linear start ends; set model.linear_start: "
                "true (or linear_start_epochs: null)"
            )

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self._splits: dict[str, list[BabiExample]] | None = None
        # id(example) -> (example, memories, question): the example is kept with its ids, as
        # an id() is only unique while its object lives
        self._encoded: dict[int, tuple[BabiExample, Tensor, Tensor]] = {}

    @property
    def classes(self) -> tuple[str, ...]:  # type: ignore[override]
        if not hasattr(self, "answers"):
            raise RuntimeError("the bAbI classes are known after fit() or restore()")
        return self.answers

    def splits(self) -> dict[str, list[BabiExample]]:
        """The task's ``train``, ``valid`` and ``test`` questions (read once)."""
        if self._splits is None:
            data = self.config.data
            root = Path(data.root or SHARED_DATA) / "babi"
            splits = load_babi(root, data.task, seed=data.valid_seed)
            if data.max_examples is not None:
                splits["train"] = splits["train"][: data.max_examples]
            self._splits = splits
        return self._splits

    def load(self) -> Mapping[str, Sequence[Any]]:
        return self.splits()

    def label(self, example: Any) -> int:
        if not isinstance(example, BabiExample):
            raise TypeError(f"a babi example is a BabiExample, got {type(example).__name__}")
        try:
            return self._class_index[example.answer]
        except KeyError:
            raise ValueError(
                f"bAbI task {example.task}: the answer {example.answer!r} is not one of the "
                f"{len(self.answers)} classes {list(self.answers)}"
            ) from None

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        answers = sorted({e.answer for split in self.splits().values() for e in split})
        data = self.config.data
        sentences = (sentence_words(s) for e in train for s in (*e.story, e.question))
        words = Vocabulary.build(sentences, data.min_freq, data.max_vocab)
        # each answer is a word of its own, the row of the final softmax (lists included)
        words = Vocabulary([*words.itos, *(a for a in answers if a not in words)])
        state: dict[str, Any] = {"words": words.to_dict(), "answers": answers}
        if self.model_config.null_memories:
            # the authors' config.sz: the longest training story, at most the memory's size
            longest = max(len(e.story) for e in train)
            state["null_memory_slots"] = max(1, min(self.model_config.memory_size, longest))
        self.restore(state)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        if not {"words", "answers"} <= set(state) <= {"words", "answers", "null_memory_slots"}:
            raise ValueError(f"not a babi task's state: keys {sorted(state)}")
        self.words = Vocabulary.from_dict(state["words"])
        self.answers = tuple(state["answers"])
        self.null_memory_slots: int | None = state.get("null_memory_slots")
        self._class_index = {answer: i for i, answer in enumerate(self.answers)}
        self._encoded.clear()

    def _encode(self, example: BabiExample) -> tuple[Tensor, Tensor]:
        """``(memories [M, L], question [L_q])`` word ids of ``example``, newest sentence first,
        computed once per example (a training run collates each about 100 times)."""
        cached = self._encoded.get(id(example))
        if cached is not None and cached[0] is example:
            return cached[1], cached[2]
        story = [
            sentence_words(s) for s in reversed(example.story[-self.model_config.memory_size :])
        ]
        length = max(1, max((len(s) for s in story), default=1))
        memories = torch.full((len(story), length), PAD, dtype=torch.long)
        for i, sentence in enumerate(story):
            memories[i, : len(sentence)] = torch.tensor(self.words.encode(sentence))
        question = torch.tensor(
            self.words.encode(sentence_words(example.question)), dtype=torch.long
        )
        self._encoded[id(example)] = (example, memories, question)
        return memories, question

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        encoded = [self._encode(e) for e in examples]
        slots = max(1, max(m.shape[0] for m, _ in encoded))
        length = max(m.shape[1] for m, _ in encoded)
        q_length = max(max(len(q) for _, q in encoded), 1)
        memories = torch.full((len(examples), slots, length), PAD, dtype=torch.long)
        questions = torch.full((len(examples), q_length), PAD, dtype=torch.long)
        mask = torch.zeros(len(examples), slots, dtype=torch.bool)
        for b, (story, question) in enumerate(encoded):
            memories[b, : story.shape[0], : story.shape[1]] = story
            mask[b, : story.shape[0]] = True
            questions[b, : len(question)] = question
        return {"memories": memories, "memory_mask": mask, "question": questions}

    def build_model(self) -> nn.Module:
        section = self.model_config
        answer_ids = torch.tensor(self.words.encode(list(self.answers)), dtype=torch.long)
        if section.null_memories and self.null_memory_slots is None:
            raise ValueError(
                "model.null_memories: the run's task state has no null_memory_slots (saved "
                "without null memories); train it again with model.null_memories: true"
            )
        return EndToEndMemoryNetwork(
            len(self.words),
            answer_ids,
            embed_dim=section.embed_dim,
            hops=section.hops,
            memory_size=section.memory_size,
            sentence_encoding=section.sentence_encoding,
            position_scale=section.position_scale,
            temporal_encoding=section.temporal_encoding,
            dropout=section.dropout,
            linear_start=section.linear_start,
            linear_start_patience=section.linear_start_patience,
            temporal_noise=section.temporal_noise,
            linear_start_epochs=section.linear_start_epochs,
            null_memory_slots=self.null_memory_slots if section.null_memories else None,
        )

    def artifacts(self, model: nn.Module, examples: Sequence[Any], directory: Path) -> list[Path]:
        """PNG heatmaps of each hop's attention over the memories (oldest sentence first, the
        supporting facts marked ``*``) for the first :data:`HEATMAPS` test questions with two or
        more supporting facts (or the first questions, in tasks with one)."""
        if not isinstance(model, EndToEndMemoryNetwork):
            return []
        memory_size = self.model_config.memory_size
        chosen = [e for e in examples if len(e.supporting) > 1][:HEATMAPS] or list(
            examples[:HEATMAPS]
        )
        directory.mkdir(parents=True, exist_ok=True)
        model.eval()
        paths = []
        for i, example in enumerate(chosen):
            with torch.no_grad():
                out = model.read(**self.collate([example]))
            first = max(0, len(example.story) - memory_size)
            kept = example.story[first:]
            weights = out.weights[0, :, : len(kept)].flip(-1).T  # [M, K], oldest first
            rows = [
                ("* " if first + j in example.supporting else "") + " ".join(s)
                for j, s in enumerate(kept)
            ]
            predicted = self.answers[int(out.logits.argmax(-1))]
            path = directory / f"memory_hops_{i}.png"
            fig = Figure(figsize=(6.0, 0.3 * len(kept) + 1.5))
            FigureCanvasAgg(fig)
            ax = fig.add_subplot()
            hops = [f"hop {k + 1}" for k in range(weights.shape[1])]
            # during linear start the hops have no softmax: raw scores, possibly all negative,
            # so the colour scale starts at their minimum instead of at 0
            low = 0.0 if bool(weights.min() >= 0) else None
            draw_heatmap(ax, weights, hops, rows, annotate=len(kept) <= 20, vmin=low)
            ax.xaxis.set_tick_params(rotation=0)
            title = f"{' '.join(example.question)} → {predicted} (answer: {example.answer})"
            ax.set_title(title, fontsize=10, loc="right")
            fig.tight_layout()
            fig.savefig(path, format="png", dpi=80)
            paths.append(path)
        return paths

    def describe(self, example: Any) -> str:
        # the last 4 statements and the question; the answer is not shown (reports add the label)
        story = " ".join(" ".join(s) for s in example.story[-4:])
        cut = "… " if len(example.story) > 4 else ""
        return f"{BABI_TASKS[example.task]}: {cut}{story} {' '.join(example.question)}"
