"""bAbI 1k English: counts of the README, the story/question structure, the seeded hold-out, and
one-line errors."""

import pytest

from attnkit.data.babi import TASKS, load_babi, read_babi_file, task_file, tokenize_babi


@pytest.fixture(scope="module")
def root(shared_data):
    path = shared_data / "babi"
    if not path.is_dir():
        pytest.skip(f"the shared data pack has no babi folder ({path})")
    return path


@pytest.fixture(scope="module")
def tasks(root):
    return {task: load_babi(root, task) for task in TASKS}


def test_every_task_has_1000_train_and_1000_test_questions(root, tasks):
    for task, splits in tasks.items():
        for split in ("train", "test"):
            # independent count: question lines are the lines with a tab
            text = task_file(root, task, split).read_text()
            assert sum("\t" in line for line in text.splitlines()) == 1000
        counts = {name: len(examples) for name, examples in splits.items()}
        assert counts["train"] + counts["valid"] == 1000 and counts["test"] == 1000, task
        # whole stories (of 1-12 questions): the last one drawn may overshoot 100
        assert 100 <= counts["valid"] < 112, task
        assert all(e.task == task for e in splits["train"] + splits["test"])


def test_first_questions_of_task_1(root):
    examples = read_babi_file(task_file(root, 1, "train"), 1)
    first, second = examples[:2]
    assert first.story == (
        ("mary", "moved", "to", "the", "bathroom", "."),
        ("john", "went", "to", "the", "hallway", "."),
    )
    assert first.question == ("where", "is", "mary", "?")
    assert (first.answer, first.supporting) == ("bathroom", (0,))
    # the question line is no statement: the next question's story has 4 statements
    assert len(second.story) == 4 and second.story[2][0] == "daniel"
    assert (second.answer, second.supporting) == ("hallway", (2,))


def test_supporting_facts_hold_the_answer(tasks):
    # Task 1 ("where is X?"): the one supporting statement is X's last move, to the answer.
    for example in tasks[1]["train"] + tasks[1]["test"]:
        (index,) = example.supporting
        fact = example.story[index]
        assert fact[0] == example.question[2] and fact[-2] == example.answer
    # Task 3 needs three facts, the later ones after the earlier ones.
    lengths = {len(e.supporting) for e in tasks[3]["test"]}
    assert 3 in lengths
    for example in tasks[2]["test"] + tasks[3]["test"]:
        assert all(0 <= i < len(example.story) for i in example.supporting)


def test_list_answers_of_tasks_8_and_19(tasks):
    path_answers = {e.answer for e in tasks[19]["train"]}
    assert all(len(e.answer_words) == 2 for e in tasks[19]["test"])
    assert path_answers <= {f"{a},{b}" for a in "nesw" for b in "nesw"}
    lists = [e for e in tasks[8]["train"] + tasks[8]["test"] if "," in e.answer]
    assert lists and all(len(e.answer_words) >= 2 for e in lists)
    assert ("apple", "milk") in {e.answer_words for e in lists}


def test_answers_and_tokens_are_lower_case(tasks):
    names = {e.answer for e in tasks[5]["test"]}
    assert "bill" in names and "Bill" not in names
    for splits in tasks.values():
        for example in splits["test"][:50]:
            assert all(t == t.lower() for s in example.story for t in s)
            assert example.question[-1] == "?"


def test_hold_out_is_seeded_and_disjoint(root, tasks):
    training = read_babi_file(task_file(root, 2, "train"), 2)
    same = load_babi(root, 2, seed=0)
    other = load_babi(root, 2, seed=1)
    assert same["valid"] == tasks[2]["valid"]  # same seed, same questions
    assert other["valid"] != same["valid"]
    for split in (same, other):
        ids = [id(e) for e in split["train"] + split["valid"]]
        assert len(set(ids)) == 1000
        # file order kept in both parts, and together they are the whole file
        positions = {example: i for i, example in enumerate(training)}
        for part in ("train", "valid"):
            order = [positions[e] for e in split[part]]
            assert order == sorted(order)
        assert sorted(positions[e] for e in split["train"] + split["valid"]) == list(range(1000))


def test_hold_out_keeps_stories_whole(root, tasks):
    """A story carries several questions: a validation question whose story also feeds training
    questions would be answered from memory."""
    for task in TASKS:
        # the story of each question, counted independently: a line numbered 1 starts a story
        story_of, story = [], -1
        for line in task_file(root, task, "train").read_text().splitlines():
            story += line.split(" ", 1)[0] == "1"
            if "\t" in line:
                story_of.append(story)
        examples = read_babi_file(task_file(root, task, "train"), task)
        assert [e.story_id for e in examples] == story_of
        train, valid = tasks[task]["train"], tasks[task]["valid"]
        assert not {e.story_id for e in train} & {e.story_id for e in valid}, task


def test_tokenizer_splits_punctuation():
    assert tokenize_babi("Where is Mary? ") == ("where", "is", "mary", "?")
    assert tokenize_babi("Why did fred go, then?") == ("why", "did", "fred", "go", ",", "then", "?")


@pytest.mark.parametrize(
    ("content", "line", "expected"),
    [
        ("1 Mary went home.\nJohn went home.\n", 2, "expected a line number"),
        ("1 Mary went home.\n3 John went home.\n", 2, "expected line number 2"),
        ("1 Mary went home.\n2 Where is Mary?\thome\n", 2, "answer<TAB>supporting ids"),
        ("1 Mary went home.\n2 Where is Mary?\thome\tone\n", 2, "supporting statement numbers"),
        ("1 Where is Mary?\thome\t1\n", 1, "supporting ids of earlier statements"),
        ("1 Mary went home.\n2 Where is Mary?\thome\t3\n", 2, "supporting ids of earlier"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, content, line, expected):
    path = tmp_path / "qa1_single-supporting-fact_train.txt"
    path.write_text(content)
    with pytest.raises(ValueError) as error:
        read_babi_file(path, 1)
    message = str(error.value)
    assert message.startswith(f"{path}: line {line}: ")
    assert expected in message and "\n" not in message


def test_root_may_be_the_en_directory(root):
    assert task_file(root / "en", 20, "test") == task_file(root, 20, "test")


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"qa4_two-arg-relations_test\.txt"):
        task_file(tmp_path, 4, "test")
    with pytest.raises(ValueError, match=r"task must be an int in 1\.\.20"):
        task_file(tmp_path, 21, "test")
    with pytest.raises(ValueError, match="split must be one of"):
        task_file(tmp_path, 1, "valid")
