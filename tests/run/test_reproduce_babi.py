"""``attnkit reproduce memn2n-babi``: the bAbI task on the real files (every task's counts, the
answers as classes, the memories), the validation hook that drives linear start through the
trainer, the selection of the best run on validation, and the quick reproduction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit import reproduce
from attnkit.config import ConfigError, RunConfig, load_config
from attnkit.data.babi import TASKS, load_babi
from attnkit.tasks import job_for
from attnkit.tasks.trainer import ClassificationJob
from attnkit.train import learning_rate_factor, train

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "reproduce" / "memn2n-babi.yaml"
REPO = CONFIG.parents[2]


@pytest.fixture(scope="module")
def data_root(shared_data: Path) -> Path:
    if not (shared_data / "babi").is_dir():
        pytest.skip(f"the shared data pack has no babi folder ({shared_data / 'babi'})")
    return shared_data


def babi_config(root: Path, *overrides: str) -> RunConfig:
    return load_config(CONFIG, [f"data.root={root}", *overrides])


def test_every_task_reaches_the_model_with_its_counts_and_answers(data_root: Path) -> None:
    for task in TASKS:
        job = job_for(babi_config(data_root, f"data.task={task}"))
        counts = {split: len(job.examples[split]) for split in ("train", "valid", "test")}
        assert counts["train"] + counts["valid"] == 1000 and counts["test"] == 1000, task
        assert 100 <= counts["valid"] < 112, task  # whole stories (tests/data/test_babi.py)
        job.learnt()
        # the classes: every answer string of the task's questions, read independently
        raw = load_babi(data_root / "babi", task)
        answers = {e.answer for split in raw.values() for e in split}
        assert set(job.task.classes) == answers, task
        labels = [job.task.label(e) for e in job.examples["test"]]
        assert [job.task.classes[i] for i in labels] == [e.answer for e in raw["test"]]
        # each class is a vocabulary word: the row of W = C^K that scores it
        assert all(answer in job.task.words for answer in answers)


def test_list_answers_are_single_classes(data_root: Path) -> None:
    # lists (task 8) and paths (task 19) are one class each, as the paper's answer words
    for task, answer in ((8, "apple,milk"), (19, "n,w")):
        job = job_for(babi_config(data_root, f"data.task={task}"))
        job.learnt()
        assert answer in job.task.classes and answer in job.task.words
        questions = [e for e in job.examples["test"] if e.answer == answer]
        assert questions and {job.task.label(e) for e in questions} == {
            job.task.classes.index(answer)
        }


def test_memories_are_the_50_newest_sentences_newest_first(data_root: Path) -> None:
    job = job_for(babi_config(data_root, "data.task=3"))
    job.learnt()
    task = job.task
    long = next(e for e in job.examples["test"] if len(e.story) > 60)
    short = next(e for e in job.examples["test"] if len(e.story) < 10)
    batch = task.collate([long, short])
    assert batch["memories"].shape[:2] == (2, 50)
    assert batch["memory_mask"].sum(-1).tolist() == [50, len(short.story)]
    words = task.words
    newest = [words.itos[i] for i in batch["memories"][0, 0].tolist() if i]
    oldest_kept = [words.itos[i] for i in batch["memories"][0, 49].tolist() if i]
    assert newest == list(long.story[-1][:-1]) and oldest_kept == list(long.story[-50][:-1])
    assert long.story[-1][-1] == "." and short.question[-1] == "?"  # punctuation is dropped
    question = [words.itos[i] for i in batch["question"][1].tolist() if i]
    assert question == list(short.question[:-1])


def test_config_refuses_what_the_model_cannot_do(data_root: Path) -> None:
    with pytest.raises(ConfigError, match=r"model\.temporal_noise: .*temporal_encoding"):
        babi_config(data_root, "model.temporal_encoding=false")
    with pytest.raises(ConfigError, match=r"model\.linear_start: .*train\.eval_every"):
        babi_config(data_root, "train.eval_every=null")
    with pytest.raises(ConfigError, match=r"data\.task"):
        babi_config(data_root, "data.task=21")
    with pytest.raises(ConfigError, match=r"model\.linear_start_epochs: .*linear_start: true"):
        babi_config(data_root, "model.linear_start=false")
    with pytest.raises(ConfigError, match=r"model\.linear_start_epochs: .*greater than or equal"):
        babi_config(data_root, "model.linear_start_epochs=-2")


def test_the_config_is_the_authors_procedure(data_root: Path) -> None:
    config = babi_config(data_root)
    t, per_epoch = config.train, 29  # ceil(900 training questions / 32)
    assert (t.optimizer, t.clip, t.schedule) == ("sgd", "per_parameter", "halving")
    # the authors' summed loss at 0.005, clipped at 40, is the mean loss at 32 times the rate
    assert t.lr == pytest.approx(0.005 * t.batch_size) and t.clip_norm == pytest.approx(40 / 32)
    assert t.eval_every == per_epoch and t.steps == 120 * per_epoch
    assert config.model.linear_start_epochs == 20 and config.model.null_memories
    # halved at the start of the 25th, 50th, 75th and 100th epoch after the 20 of linear start
    factor = learning_rate_factor(config)
    epochs = [factor(e * per_epoch) for e in range(120)]  # the rate of (0-based) epoch e
    assert epochs == [0.5 ** max(0, (e - 20 + 1) // 25) for e in range(120)]
    assert epochs[43] == 1.0 and epochs[44] == 0.5 and epochs[119] == 1 / 16


def test_null_memories_pad_to_the_longest_training_story(data_root: Path) -> None:
    for task, longest in ((6, 26), (3, 50)):  # task 3's stories reach 224 sentences: capped
        job = job_for(babi_config(data_root, f"data.task={task}"))
        state = job.learnt()
        stories = [len(e.story) for e in job.examples["train"]]
        assert state["null_memory_slots"] == min(50, max(stories)) == longest
        assert job.build_model().null_memory_slots == longest
        plain = job_for(babi_config(data_root, f"data.task={task}", "model.null_memories=false"))
        assert "null_memory_slots" not in plain.learnt()
        assert plain.build_model().null_memory_slots is None


def test_fixed_linear_start_switches_after_n_validations_and_resumes(
    data_root: Path, tmp_path
) -> None:
    config = babi_config(
        data_root,
        "data.task=6",
        "data.max_examples=64",
        "data.max_eval_examples=24",
        "train.steps=7",
        "train.batch_size=16",
        "train.eval_every=1",
        "train.checkpoint_every=1",
        "train.keep_checkpoints=7",
        "train.halve_after=2",
        "train.halve_every=2",
        "model.linear_start_epochs=5",
    )
    quiet = {"quiet": True, "log": lambda _: None}
    whole = train(config, run_dir=tmp_path / "whole", **quiet)
    part = train(config, run_dir=tmp_path / "part", stop_after=3, **quiet)
    train(config, resume=part.path, **quiet)
    active = []
    for step in range(1, 8):
        name = f"step-{step:08d}.safetensors"
        a = load_file(whole.path / "checkpoints" / name)
        b = load_file(part.path / "checkpoints" / name)
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"{step} {key}")
        (linear,) = [v for k, v in a.items() if k.endswith("linear_start.active")]
        active.append(bool(linear))
    assert active == [True, True, True, True, False, False, False]  # the 5th validation


def test_each_validation_reaches_the_model_and_switches_linear_start(data_root: Path) -> None:
    config = babi_config(
        data_root,
        "data.max_examples=64",
        "data.max_eval_examples=40",
        "model.linear_start_patience=1",
        "model.linear_start_epochs=null",  # the patience rule
    )
    job = ClassificationJob(config)
    job.learnt()
    torch.manual_seed(0)
    model = job.build_model().eval()
    assert model.linear
    first = job.valid(model)
    assert model.linear and float(model.linear_start.best_loss) == pytest.approx(first["loss"])
    job.valid(model)  # the same model: its loss did not decrease
    assert not model.linear


def test_linear_start_resumes_where_the_uninterrupted_run_switches(
    data_root: Path, tmp_path
) -> None:
    config = babi_config(
        data_root,
        "data.max_examples=64",
        "data.max_eval_examples=24",
        "train.steps=8",
        "train.batch_size=16",
        "train.eval_every=1",
        "train.checkpoint_every=3",
        "train.lr=0.02",
        "train.optimizer=adam",
        "model.linear_start_patience=2",
        "model.linear_start_epochs=null",  # the patience rule
    )
    quiet = {"quiet": True, "log": lambda _: None}
    whole = train(config, run_dir=tmp_path / "whole", **quiet)
    part = train(config, run_dir=tmp_path / "part", stop_after=3, **quiet)
    train(config, resume=part.path, **quiet)
    a = load_file(next((whole.path / "checkpoints").glob("*.safetensors")))
    b = load_file(next((part.path / "checkpoints").glob("*.safetensors")))
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    (active,) = [v for k, v in a.items() if k.endswith("linear_start.active")]
    assert not bool(active)
    # the validations say when the softmaxes returned: after the interruption at step 3
    records = map(json.loads, (whole.path / "metrics.jsonl").read_text().splitlines())
    losses = [r["loss"] for r in records if r["split"] == "valid"]
    assert len(losses) == 8
    best, waited, switched = float("inf"), 0, None
    for step, loss in enumerate(losses, start=1):
        best, waited = (loss, 0) if loss < best else (best, waited + 1)
        if waited == 2 and switched is None:
            switched = step
    assert switched is not None and switched > 3, losses


def _seed(seed: int, accuracy: float, loss: float, value: float) -> reproduce.Seed:
    return reproduce.Seed(
        seed, value, 0.1, Path(f"seed-{seed}"), {"accuracy": accuracy, "loss": loss}
    )


def test_best_on_valid_chooses_the_best_validation_then_the_lower_loss(data_root: Path) -> None:
    spec = babi_config(data_root).reproduce
    assert spec is not None
    runs = [_seed(0, 0.90, 0.3, 12.0), _seed(1, 0.95, 0.5, 30.0), _seed(2, 0.95, 0.2, 40.0)]
    assert reproduce.best_on_valid(spec, runs).seed == 2  # not the best test number: seed 0
    lower = spec.model_copy(update={"select_metric": "loss", "select_lower_is_better": True})
    assert reproduce.best_on_valid(lower, runs).seed == 2
    blind = reproduce.Seed(3, 1.0, 0.1, Path("seed-3"), None)
    with pytest.raises(Exception, match=r"seed-3: reproduce\.select: best_on_valid"):
        reproduce.best_on_valid(spec, [*runs, blind])


def test_quick_reproduction_prints_the_task_table_and_resumes(
    data_root: Path, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(REPO)  # configs/reproduce is read from the working directory
    lines: list[str] = []
    line = reproduce.reproduce(
        "memn2n-babi", quick=True, data=str(data_root), runs_dir=tmp_path, log=lines.append
    )
    assert {
        "name",
        "metric",
        "mean",
        "std",
        "seeds",
        "paper",
        "paper_source",
        "uniform",
        "minutes",
        "per_value",
        "failures",
    } <= set(line)
    assert line["metric"] == "1 - accuracy" and line["seeds"] == 1
    assert list(line["per_value"]) == ["1", "19"]
    errors = []
    for task in ("1", "19"):
        results = tmp_path / "reproduce" / "memn2n-babi-quick" / f"task-{task}" / "seed-0"
        accuracy = json.loads((results / "results.json").read_text())["accuracy"]
        errors.append(100 * (1 - accuracy))
        assert line["per_value"][task] == pytest.approx(100 * (1 - accuracy), abs=1e-3)
    assert line["mean"] == pytest.approx(sum(errors) / 2, abs=1e-3)
    assert line["failures"] == sum(e > 5.0 for e in errors)
    assert line["paper_per_value"] == {"1": 0.0, "19": 82.8} and line["paper_failures"] == 11
    assert set(line["uniform_per_value"]) == {"1", "19"}
    assert (tmp_path / "reproduce" / "memn2n-babi-quick-uniform" / "task-19" / "seed-0").is_dir()
    table = [
        row for row in lines if row.split()[:1] in (["task"], ["1"], ["19"], ["mean"], ["failed"])
    ]
    assert table[0].split() == ["task", "paper", "attnkit", "uniform"] and len(table) == 5
    # a second call reads the finished runs back: the same line, nothing trained again
    again = reproduce.reproduce(
        "memn2n-babi", quick=True, data=str(data_root), runs_dir=tmp_path, log=lambda _: None
    )
    assert {k: v for k, v in again.items() if k != "wall_minutes"} == {
        k: v for k, v in line.items() if k != "wall_minutes"
    }


def test_uniform_runs_are_at_most_the_models(data_root: Path) -> None:
    spec = babi_config(data_root).reproduce
    assert spec is not None
    assert reproduce.uniform_count(spec.model_copy(update={"uniform_seeds": None}), 7) == 7
    assert reproduce.uniform_count(spec.model_copy(update={"uniform_seeds": 3}), 7) == 3
    assert reproduce.uniform_count(spec.model_copy(update={"uniform_seeds": 3}), 1) == 1
    assert reproduce.peer_count(spec.model_copy(update={"peer_seeds": None}), 7) == 7
    assert reproduce.peer_count(spec.model_copy(update={"peer_seeds": 3}), 7) == 3
