"""The generated bAbI-style world: answers checked by an independent re-simulation of the text."""

from __future__ import annotations

from collections import Counter

import pytest

from attnkit.data.memory_qa import LOCATIONS, QAExample, generate_examples, memory_qa_splits

# The test's own reading of the sentences (not the generator's tables): a move ends in
# "to the <place>"; otherwise the sentence is "<actor> <verb words> the <object>".
TAKE = {"picked up", "got", "grabbed", "took"}
DROP = {"dropped", "discarded", "put down", "left"}


def replay(story: tuple[tuple[str, ...], ...]) -> tuple[dict[str, str], dict[str, str]]:
    """``(actor -> location, object -> location)`` after the story, from its words alone."""
    actor_at: dict[str, str] = {}
    holder: dict[str, str] = {}
    lies: dict[str, str] = {}
    for words in story:
        actor = words[0]
        if words[-3:-1] == ("to", "the"):
            actor_at[actor] = words[-1]
            continue
        verb, obj = " ".join(words[1:-2]), words[-1]
        assert words[-2] == "the", words
        if verb in TAKE:
            assert obj not in holder, f"{actor} takes the {obj} held by {holder.get(obj)}"
            assert actor in actor_at, f"{actor} takes the {obj} from nowhere known"
            assert lies.get(obj, actor_at[actor]) == actor_at[actor], "taken where it is not"
            holder[obj] = actor
            lies.pop(obj, None)
        elif verb in DROP:
            assert holder.get(obj) == actor, f"{actor} drops the {obj} held by {holder.get(obj)}"
            del holder[obj]
            lies[obj] = actor_at[actor]
        else:
            raise AssertionError(f"unknown statement {words}")
    objects = {**lies, **{obj: actor_at[a] for obj, a in holder.items()}}
    return actor_at, objects


@pytest.fixture(scope="module")
def examples() -> list[QAExample]:
    return generate_examples(400, 7)


def test_answers_match_an_independent_simulation(examples: list[QAExample]) -> None:
    for example in examples:
        actor_at, objects = replay(example.story)
        if example.question[:3] == ("where", "is", "the"):
            assert example.kind == "object"
            assert objects[example.question[3]] == example.answer
        else:
            assert example.kind == "actor" and len(example.question) == 3
            assert actor_at[example.question[2]] == example.answer


def test_supporting_facts_determine_the_answer(examples: list[QAExample]) -> None:
    for example in examples:
        facts = [example.story[i] for i in example.supporting]
        moves = [f for f in facts if f[-3:-1] == ("to", "the")]
        assert len(moves) == 1 and moves[0][-1] == example.answer  # the move naming the answer
        mover = moves[0][0]
        move_index = example.supporting[facts.index(moves[0])]
        end = len(example.story)  # the mover (and what it carries) stays until the question...
        if example.kind == "actor":
            assert example.supporting == (move_index,) and mover == example.question[2]
        else:
            assert len(example.supporting) == 2
            (other_index,) = [i for i in example.supporting if i != move_index]
            other = example.story[other_index]
            assert other[0] == mover and other[-1] == example.question[3]
            # it is the object's last take or drop
            assert all(s[-1] != other[-1] for s in example.story[other_index + 1 :])
            if " ".join(other[1:-2]) in DROP:  # ...or until it drops the object there
                assert move_index < other_index
                end = other_index
        between = example.story[move_index + 1 : end]
        assert not any(s[0] == mover and s[-3:-1] == ("to", "the") for s in between)


def test_both_question_kinds_and_all_answers_occur(examples: list[QAExample]) -> None:
    kinds = Counter(e.kind for e in examples)
    assert kinds["actor"] > 100 and kinds["object"] > 100
    assert set(Counter(e.answer for e in examples)) == set(LOCATIONS)
    assert max(len(e.story) for e in examples) == 16 and min(len(e.story) for e in examples) == 2


def test_generation_is_deterministic_and_splits_differ() -> None:
    assert generate_examples(30, 3) == generate_examples(30, 3)
    splits = memory_qa_splits(0, train=40, valid=20, test=20)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [40, 20, 20]
    firsts = {name: split[0].story for name, split in splits.items()}
    assert len(set(firsts.values())) == 3  # separate generators: different stories
    assert memory_qa_splits(1, 40, 20, 20)["train"] != splits["train"]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_sizes_raise(bad: object) -> None:
    with pytest.raises(ValueError, match="num_examples"):
        generate_examples(bad, 0)  # type: ignore[arg-type]
