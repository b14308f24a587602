"""bAbI question answering, v1.2, English, 1k training questions per task (Weston et al. 2015,
"Towards AI-Complete Question Answering: A Set of Prerequisite Toy Tasks").

Files: ``qaN_NAME_{train,test}.txt`` for the 20 tasks (:data:`TASKS`), in a ``babi/en``
directory. A story is a run of numbered lines; the numbering restarts at 1 with each new story.
A statement line is ``N sentence``; a question line is ``N question<TAB>answer<TAB>ids``, where
``ids`` are the numbers of the statements that support the answer. Each file holds 1,000
questions.

What :func:`read_babi_file` makes of them:

* tokens: lower-cased; a token is a run of letters/digits or one punctuation character, so
  ``"Where is Mary?"`` → ``("where", "is", "mary", "?")``;
* ``story``: the statements of the question's story before it, oldest first — question lines
  are not statements (as in End-To-End Memory Networks, Sukhbaatar et al. 2015);
* ``supporting``: the supporting statement numbers as indices into ``story``;
* ``answer``: the answer field, lower-cased like the tokens (task 5 answers with names such as
  ``Bill``). Tasks 8 (lists/sets) and 19 (path finding) answer with
  comma lists (``"apple,milk"``, ``"n,w"``); :attr:`BabiExample.answer_words` splits them.

Validation: the files have none; the usual protocol (Sukhbaatar et al. 2015) holds out 10 % of
the training questions. :func:`load_babi` holds out whole *stories*, drawn per task with
``random.Random(f"babi/{task}/{seed}")`` until they hold at least 10 % of the questions (100 of
1,000 on most tasks; the last story drawn may add a few, e.g. 104, 101 and 107 on tasks 17, 18
and 20 with seed 0), keeping the file order in both parts; the test file is whole. Whole stories, because
a story carries several questions (5 on most tasks): held-out questions drawn one by one would
share their story with training questions, and validation would reward remembered stories.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# task number → name, as in the file names
TASKS = {
    1: "single-supporting-fact",
    2: "two-supporting-facts",
    3: "three-supporting-facts",
    4: "two-arg-relations",
    5: "three-arg-relations",
    6: "yes-no-questions",
    7: "counting",
    8: "lists-sets",
    9: "simple-negation",
    10: "indefinite-knowledge",
    11: "basic-coreference",
    12: "conjunction",
    13: "compound-coreference",
    14: "time-reasoning",
    15: "basic-deduction",
    16: "basic-induction",
    17: "positional-reasoning",
    18: "size-reasoning",
    19: "path-finding",
    20: "agents-motivations",
}
SPLITS = ("train", "test")
VALID_FRACTION = 0.1

_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class BabiExample:
    """One bAbI question with the story before it.

    Attributes:
        task: the task number, 1–20.
        story: the story's statements before the question, oldest first, each a token tuple.
        question: the question's tokens, e.g. ``("where", "is", "mary", "?")``.
        answer: the file's answer field, lower-cased (``"kitchen"``, ``"apple,milk"``, ``"n,w"``).
        supporting: indices into ``story`` of the supporting statements, in the file's order.
        story_id: which story of its file the question belongs to (0, 1, ... in file order).
    """

    task: int
    story: tuple[tuple[str, ...], ...]
    question: tuple[str, ...]
    answer: str
    supporting: tuple[int, ...]
    story_id: int

    @property
    def answer_words(self) -> tuple[str, ...]:
        """The answer's words: ``"n,w"`` → ``("n", "w")``, ``"kitchen"`` → ``("kitchen",)``."""
        return tuple(self.answer.split(","))


def tokenize_babi(sentence: str) -> tuple[str, ...]:
    """Lower-cased words and punctuation of a bAbI sentence: ``"Mary went home."`` →
    ``("mary", "went", "home", ".")``."""
    return tuple(_TOKEN.findall(sentence.lower()))


def task_file(root: str | Path, task: int, split: str) -> Path:
    """The file of ``task`` (1–20) and ``split`` (``"train"``/``"test"``) under ``root`` (the
    ``babi`` directory holding ``en/``, or ``en/`` itself)."""
    if isinstance(task, bool) or task not in TASKS:
        raise ValueError(f"task must be an int in 1..20, got {task!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(root)
    directory = root / "en" if (root / "en").is_dir() else root
    path = directory / f"qa{task}_{TASKS[task]}_{split}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"bAbI file not found: {path}")
    return path


def read_babi_file(path: str | Path, task: int) -> list[BabiExample]:
    """Every question of one bAbI file (see the module docstring), in file order.

    Raises:
        ValueError: one line naming the file, the line number and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"bAbI file not found: {path}")
    examples: list[BabiExample] = []
    statements: list[tuple[str, ...]] = []
    index_of: dict[int, int] = {}  # line number in the story → index into statements
    previous = 0
    story_id = -1
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")

        def fail(expected: str, line: str = line, number: int = number) -> ValueError:
            return ValueError(f"{path}: line {number}: expected {expected}, got {line!r:.80}")

        head, _, text = line.partition(" ")
        if not head.isdigit():
            raise fail("a line number, a space and a sentence")
        story_line = int(head)
        if story_line == 1:
            statements, index_of = [], {}
            story_id += 1
        elif story_line != previous + 1:
            raise fail(f"line number {previous + 1} (or 1 to start a story)")
        previous = story_line
        if "\t" not in text:
            if not tokenize_babi(text):
                raise fail("a sentence after the line number")
            index_of[story_line] = len(statements)
            statements.append(tokenize_babi(text))
            continue
        fields = text.split("\t")
        if len(fields) != 3 or not fields[1].strip():
            raise fail("'N question<TAB>answer<TAB>supporting ids'")
        question, answer, ids = fields
        try:
            support_lines = [int(i) for i in ids.split()]
        except ValueError:
            raise fail("supporting statement numbers (integers)") from None
        missing = [i for i in support_lines if i not in index_of]
        if not support_lines or missing:
            raise fail(f"supporting ids of earlier statements of the story, not {missing}")
        examples.append(
            BabiExample(
                task=task,
                story=tuple(statements),
                question=tokenize_babi(question),
                answer=answer.strip().lower(),
                supporting=tuple(index_of[i] for i in support_lines),
                story_id=story_id,
            )
        )
    return examples


def split_validation(
    examples: list[BabiExample], task: int, seed: int, fraction: float = VALID_FRACTION
) -> tuple[list[BabiExample], list[BabiExample]]:
    """``(train, valid)``: whole stories, drawn in the order of
    ``random.Random(f"babi/{task}/{seed}")``, are held out until they hold at least
    ``round(fraction · len(examples))`` questions; no story is in both parts, and both keep the
    file order."""
    if not 0 <= fraction < 1:
        raise ValueError(f"the validation fraction must be in [0, 1), got {fraction}")
    questions = Counter(e.story_id for e in examples)  # story → its number of questions
    stories = sorted(questions)
    target = round(fraction * len(examples))
    held_out: set[int] = set()
    count = 0
    for story in random.Random(f"babi/{task}/{seed}").sample(stories, len(stories)):
        if count >= target:
            break
        held_out.add(story)
        count += questions[story]
    train = [e for e in examples if e.story_id not in held_out]
    valid = [e for e in examples if e.story_id in held_out]
    return train, valid


def load_babi(
    root: str | Path, task: int, seed: int = 0, valid_fraction: float = VALID_FRACTION
) -> dict[str, list[BabiExample]]:
    """One bAbI task: ``{"train", "valid", "test"}`` lists of :class:`BabiExample`.

    Args:
        root: the ``babi`` directory (holding ``en/``) or its ``en/`` directory.
        task: 1–20.
        seed: chooses the held-out validation stories.
        valid_fraction: the least share of training questions held out, as whole stories
            (0.1: 900 / 100 on most tasks).
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    training = read_babi_file(task_file(root, task, "train"), task)
    train, valid = split_validation(training, task, seed, valid_fraction)
    return {
        "train": train,
        "valid": valid,
        "test": read_babi_file(task_file(root, task, "test"), task),
    }


__all__ = [
    "SPLITS",
    "TASKS",
    "BabiExample",
    "load_babi",
    "read_babi_file",
    "split_validation",
    "task_file",
    "tokenize_babi",
]
