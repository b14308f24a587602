"""A generated question-answering world in the style of bAbI tasks 1 and 2 (Weston et al. 2015).

**The data are generated, not real**: a small simulated world of actors, locations and objects,
narrated as short English sentences, with questions whose answers the simulation knows. The labels
are correct by construction (the answer is read from the simulated state at the time of the
question); ``tests/data/test_memory_qa.py`` checks them against an independent re-simulation that
only reads the sentences.

How a story is generated (``random.Random(seed)`` draws every choice, so a seed gives the same
stories in every Python):

* The world: the 4 actors of :data:`ACTORS`, 6 :data:`LOCATIONS`, 3 :data:`OBJECTS`. At the start
  nobody's location is known and every object lies nowhere known.
* A story is :data:`STORY_STATEMENTS` statements. Each is a **move** (``"mary went to the
  kitchen"``; a random actor to a random other location; verbs from :data:`MOVE_VERBS`) with
  probability :data:`MOVE_PROBABILITY` or when nothing else is possible, otherwise a **take** or a
  **drop** chosen uniformly among those possible:

  - take (``"john picked up the football"``): the actor's location is known, nobody holds the
    object, and it lies at the actor's location or nowhere known. Held objects move with the actor.
  - drop (``"john dropped the football"``): the actor holds the object; it then lies where the
    actor is.

* After every :data:`QUESTION_EVERY` statements comes a question, each one an example whose
  memory is the story's statements so far:

  - ``"where is mary"`` (bAbI task 1, one supporting fact: Mary's last move);
  - ``"where is the football"`` (bAbI task 2, two supporting facts: the last take or drop of the
    football, and the last move of the actor who held it before that statement or holds it now).

  An object question is asked with probability :data:`OBJECT_QUESTION_PROBABILITY` when some
  object's location is known, else an actor question; the actor or object asked about is drawn
  uniformly among those whose location is known. The answer is always one of :data:`LOCATIONS`.

Splits: :func:`memory_qa_splits` draws the train, valid and test stories from the separate
generators ``random.Random(f"memory_qa/{split}/{seed}")``; each split is cut at its number of
questions (the last story may be cut short).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

ACTORS = ("mary", "john", "daniel", "sandra")
LOCATIONS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
OBJECTS = ("apple", "football", "milk")
MOVE_VERBS = ("moved", "went", "journeyed", "travelled")
TAKE_VERBS = ("picked up", "got", "grabbed", "took")
DROP_VERBS = ("dropped", "discarded", "put down", "left")

STORY_STATEMENTS = 16
QUESTION_EVERY = 2
MOVE_PROBABILITY = 0.5
OBJECT_QUESTION_PROBABILITY = 0.5


@dataclass(frozen=True)
class QAExample:
    """One question about a story.

    Attributes:
        story: the statements before the question, oldest first, each a tuple of words.
        question: the question's words, e.g. ``("where", "is", "the", "football")``.
        answer: a word of :data:`LOCATIONS`.
        supporting: indices into ``story`` of the facts that determine the answer, in order.
        kind: ``"actor"`` (one supporting fact) or ``"object"`` (two).
    """

    story: tuple[tuple[str, ...], ...]
    question: tuple[str, ...]
    answer: str
    supporting: tuple[int, ...]
    kind: Literal["actor", "object"]


class _World:
    """The simulated state, and for each answer the statement indices that support it."""

    def __init__(self) -> None:
        self.location: dict[str, str | None] = dict.fromkeys(ACTORS)
        self.last_move: dict[str, int] = {}
        self.holder: dict[str, str | None] = dict.fromkeys(OBJECTS)
        self.lies_at: dict[str, str | None] = dict.fromkeys(OBJECTS)  # when nobody holds it
        # why the object is where it is: (its last take/drop, the holder's move before that)
        self.object_facts: dict[str, tuple[int, int]] = {}

    def object_location(self, obj: str) -> str | None:
        holder = self.holder[obj]
        return self.location[holder] if holder is not None else self.lies_at[obj]

    def object_support(self, obj: str) -> tuple[int, ...]:
        fact, move = self.object_facts[obj]
        holder = self.holder[obj]
        if holder is not None:  # carried: where the holder went last (maybe after the take)
            move = self.last_move[holder]
        return tuple(sorted((fact, move)))


def _statement(world: _World, index: int, rng: random.Random) -> tuple[str, ...]:
    """Draw the next statement, update ``world``, return its words."""
    takes = [
        (actor, obj)
        for actor in ACTORS
        if world.location[actor] is not None
        for obj in OBJECTS
        if world.holder[obj] is None and world.lies_at[obj] in (None, world.location[actor])
    ]
    drops = [(world.holder[obj], obj) for obj in OBJECTS if world.holder[obj] is not None]
    if rng.random() < MOVE_PROBABILITY or not (takes or drops):
        actor = rng.choice(ACTORS)
        place = rng.choice([p for p in LOCATIONS if p != world.location[actor]])
        world.location[actor], world.last_move[actor] = place, index
        return (actor, *rng.choice(MOVE_VERBS).split(), "to", "the", place)
    choice = rng.randrange(len(takes) + len(drops))
    if choice < len(takes):
        actor, obj = takes[choice]
        world.holder[obj], world.lies_at[obj] = actor, None
        verb = rng.choice(TAKE_VERBS)
    else:
        holder, obj = drops[choice - len(takes)]
        assert holder is not None
        actor = holder
        world.holder[obj], world.lies_at[obj] = None, world.location[actor]
        verb = rng.choice(DROP_VERBS)
    world.object_facts[obj] = (index, world.last_move[actor])
    return (actor, *verb.split(), "the", obj)


def _question(world: _World, rng: random.Random) -> tuple[tuple[str, ...], str, tuple[int, ...]]:
    """``(question words, answer, supporting facts)`` about the current state."""
    objects = [obj for obj in OBJECTS if world.object_location(obj) is not None]
    actors = [actor for actor in ACTORS if world.location[actor] is not None]
    if objects and rng.random() < OBJECT_QUESTION_PROBABILITY:
        obj = rng.choice(objects)
        answer = world.object_location(obj)
        assert answer is not None
        return ("where", "is", "the", obj), answer, world.object_support(obj)
    actor = rng.choice(actors)
    answer = world.location[actor]
    assert answer is not None
    return ("where", "is", actor), answer, (world.last_move[actor],)


def generate_examples(num_examples: int, seed: int | str) -> list[QAExample]:
    """``num_examples`` questions from stories drawn by ``random.Random(seed)``.

    Raises ``ValueError`` unless ``num_examples`` is a positive int.
    """
    if isinstance(num_examples, bool) or not isinstance(num_examples, int) or num_examples < 1:
        raise ValueError(f"num_examples must be a positive int, got {num_examples!r}")
    rng = random.Random(seed)
    examples: list[QAExample] = []
    while len(examples) < num_examples:
        world, story = _World(), []
        for index in range(STORY_STATEMENTS):
            story.append(_statement(world, index, rng))
            if (index + 1) % QUESTION_EVERY == 0:
                question, answer, supporting = _question(world, rng)
                kind: Literal["actor", "object"] = "object" if len(question) == 4 else "actor"
                examples.append(QAExample(tuple(story), question, answer, supporting, kind))
                if len(examples) == num_examples:
                    break
    return examples


def memory_qa_splits(
    seed: int, train: int = 4000, valid: int = 500, test: int = 1000
) -> dict[str, list[QAExample]]:
    """The ``"train"``, ``"valid"`` and ``"test"`` questions, each split from its own generator
    ``random.Random(f"memory_qa/{split}/{seed}")`` (str seeds are hashed with SHA-512: stable)."""
    sizes = {"train": train, "valid": valid, "test": test}
    return {name: generate_examples(n, f"memory_qa/{name}/{seed}") for name, n in sizes.items()}
