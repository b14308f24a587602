"""Question answering over a story with an end-to-end memory network (multi-hop attention).

Data: **generated**, not real — the bAbI-style world of :mod:`attnkit.data.memory_qa` (actors move
between locations, pick up and drop objects; "where is mary" needs one supporting fact, "where is
the football" two). Answers are correct by construction. The training split has
``data.max_examples`` questions (default :data:`TRAIN_QUESTIONS`), validation
:data:`VALID_QUESTIONS`, test :data:`TEST_QUESTIONS`, each from its own seeded generator
(``config.seed``). The classes are the six location words.

An example's memory is its story's statements before the question, at most
``model.memory_size`` of the most recent ones, newest first (slot ``i`` = the ``i+1``-th most
recent sentence, what the temporal encoding ``T(i)`` indexes). The vocabulary is built from the
training stories and questions (``data.min_freq``, ``data.max_vocab``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import Field
from torch import Tensor, nn

from attnkit.config import TASKS, ModelSection
from attnkit.data.memory_qa import LOCATIONS, QAExample, memory_qa_splits
from attnkit.data.vocabulary import PAD, Vocabulary
from attnkit.interpret.plots import draw_heatmap
from attnkit.models.memory_network import EndToEndMemoryNetwork
from attnkit.tasks.base import Task

TRAIN_QUESTIONS = 10000  # as bAbI-10k
VALID_QUESTIONS = 500
TEST_QUESTIONS = 1000
#: how many two-supporting-fact test questions get a PNG of their hops' attention
HEATMAPS = 3


class MemoryNetworkModelConfig(ModelSection):
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


@TASKS.register("memory_qa")
class MemoryQuestionAnswering(Task):
    """Where is an actor or an object, given the story so far (bAbI tasks 1-2 style)."""

    classes = LOCATIONS
    models = (MemoryNetworkModelConfig,)

    def load(self) -> Mapping[str, Sequence[Any]]:
        train = self.config.data.max_examples or TRAIN_QUESTIONS
        splits = memory_qa_splits(self.config.seed, train, VALID_QUESTIONS, TEST_QUESTIONS)
        return dict(splits)

    def label(self, example: Any) -> int:
        if not isinstance(example, QAExample):
            raise TypeError(f"a memory_qa example is a QAExample, got {type(example).__name__}")
        return self.classes.index(example.answer)

    def fit(self, train: Sequence[Any]) -> dict[str, Any]:
        sentences = [list(s) for example in train for s in (*example.story, example.question)]
        data = self.config.data
        vocab = Vocabulary.build(sentences, data.min_freq, data.max_vocab)
        missing = [word for word in self.classes if word not in vocab]
        if missing:
            raise ValueError(f"the training stories never mention the answers {missing}")
        state = {"words": vocab.to_dict()}
        self.restore(state)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        self.words = Vocabulary.from_dict(state["words"])

    def collate(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        memory_size = self.model_config.memory_size
        stories = [list(reversed(e.story[-memory_size:])) for e in examples]  # newest first
        slots = max(1, max(len(story) for story in stories))
        length = max(1, max((len(s) for story in stories for s in story), default=1))
        q_length = max(len(e.question) for e in examples)
        memories = torch.full((len(examples), slots, length), PAD, dtype=torch.long)
        questions = torch.full((len(examples), q_length), PAD, dtype=torch.long)
        mask = torch.zeros(len(examples), slots, dtype=torch.bool)
        for b, (example, story) in enumerate(zip(examples, stories, strict=True)):
            for i, sentence in enumerate(story):
                memories[b, i, : len(sentence)] = torch.tensor(self.words.encode(list(sentence)))
                mask[b, i] = True
            questions[b, : len(example.question)] = torch.tensor(
                self.words.encode(list(example.question))
            )
        return {"memories": memories, "memory_mask": mask, "question": questions}

    def build_model(self) -> nn.Module:
        section = self.model_config
        answer_ids = torch.tensor(self.words.encode(list(self.classes)), dtype=torch.long)
        return EndToEndMemoryNetwork(
            len(self.words),
            answer_ids,
            embed_dim=section.embed_dim,
            hops=section.hops,
            memory_size=section.memory_size,
            sentence_encoding=section.sentence_encoding,
            temporal_encoding=section.temporal_encoding,
            dropout=section.dropout,
        )

    def artifacts(self, model: nn.Module, examples: Sequence[Any], directory: Path) -> list[Path]:
        """PNG heatmaps of each hop's attention over the memories (oldest sentence first) for the
        first :data:`HEATMAPS` "where is the <object>" questions: the two supporting facts should
        be found in different hops."""
        # imported here: matplotlib is only needed for figures

        chosen = [e for e in examples if e.kind == "object"][:HEATMAPS]
        if not chosen or not isinstance(model, EndToEndMemoryNetwork):
            return []
        directory.mkdir(parents=True, exist_ok=True)
        model.eval()
        paths = []
        for i, example in enumerate(chosen):
            with torch.no_grad():
                out = model.read(**self.collate([example]))
            kept = example.story[-model.memory_size :]
            # sentences as rows (oldest first), hops as columns: long labels read horizontally
            weights = out.weights[0, :, : len(kept)].flip(-1).T  # [M, K]
            predicted = self.classes[int(out.logits.argmax(-1))]
            path = directory / f"memory_hops_{i}.png"
            # own figure: plot_heatmap sizes by the number of columns, too narrow for 3 hops
            fig = Figure(figsize=(6.0, 0.35 * len(kept) + 1.5))
            FigureCanvasAgg(fig)
            ax = fig.add_subplot()
            hops = [f"hop {k + 1}" for k in range(weights.shape[1])]
            draw_heatmap(ax, weights, hops, [" ".join(s) for s in kept], annotate=True)
            ax.xaxis.set_tick_params(rotation=0)
            title = f"{' '.join(example.question)}? → {predicted} (answer: {example.answer})"
            ax.set_title(title, fontsize=10, loc="right")
            fig.tight_layout()
            fig.savefig(path, format="png", dpi=100)
            paths.append(path)
        return paths

    def describe(self, example: Any) -> str:
        # the last 4 statements and the question; the answer is not shown (reports add the label)
        story = ". ".join(" ".join(s) for s in example.story[-4:])
        cut = "… " if len(example.story) > 4 else ""
        return f"{cut}{story}. {' '.join(example.question)}?"
