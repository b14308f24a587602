"""What ``attnkit train`` and ``attnkit explain`` may write, and where: a planted ``.lock`` is never
followed, a failed set-up leaves no run directory behind (exit 2: nothing run or written), the
settings a run is resumed with reach its ``config.yaml``, and ``explain --output`` replaces no file
without ``--force`` and never one of a run's checkpoints."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from attnkit.checkpoint import CheckpointError
from attnkit.cli import build_parser, main
from attnkit.config import ConfigError, load_config, validate
from attnkit.run import LOCK_FILE, Run, RunLock, read_metrics
from attnkit.train import train

CONFIG = {
    "name": "safety",
    "seed": 3,
    "data": {"corpus": "tatoeba", "max_length": 5, "max_pairs": 60},
    "model": {"kind": "rnn", "style": "luong", "score": "dot", "embed_dim": 8, "hidden_dim": 8},
    "train": {"steps": 4, "batch_size": 8, "lr": 0.01, "log_every": 1, "checkpoint_every": 2},
    "decode": {"max_length": 5, "max_eval_sentences": 2},
}
SECRET = "a file of the user's, not a lock\n"


def _quiet(_: str) -> None:
    pass


def _one_line(err: str, command: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"attnkit {command}: error: "), err
    return err


@pytest.fixture
def config_file(tmp_path) -> Path:
    path = tmp_path / "safety.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A translation run stopped after step 2 (checkpoint of step 2)."""
    path = tmp_path_factory.mktemp("stopped") / "run"
    return train(validate(CONFIG), run_dir=path, stop_after=2, quiet=True, log=_quiet).path


# ------------------------------------------------------------------------------ the lock file


def test_a_planted_lock_symlink_is_never_followed(tmp_path, config_file, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).symlink_to(victim)
    assert main(["train", str(config_file), "--run-dir", str(run_dir), "--quiet"]) == 2
    err = _one_line(capsys.readouterr().err, "train")
    assert f"{run_dir / LOCK_FILE}: not a lock file" in err and "symbolic link" in err
    assert victim.read_text() == SECRET  # neither truncated nor given a pid
    assert [p.name for p in run_dir.iterdir()] == [LOCK_FILE]  # nothing written
    with pytest.raises(CheckpointError, match="symbolic link, which is never followed"):
        RunLock.acquire(run_dir)  # as a resumed run would lock it
    assert victim.read_text() == SECRET


def test_a_dangling_lock_symlink_creates_nothing(tmp_path):
    target = tmp_path / "elsewhere" / "created-by-the-lock"
    target.parent.mkdir()
    (tmp_path / LOCK_FILE).symlink_to(target)
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path / LOCK_FILE}: not a lock")):
        RunLock.acquire(tmp_path)
    assert not target.exists()


def _hard_link(lock: Path, victim: Path) -> None:
    os.link(victim, lock)


def _fifo(lock: Path, victim: Path) -> None:
    os.mkfifo(lock)


def _other_data(lock: Path, victim: Path) -> None:
    lock.write_text(SECRET)


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (_hard_link, "a regular file with 2 hard links"),
        (_fifo, "not a regular file"),
        (_other_data, "it holds other data"),
    ],
)
def test_a_lock_file_that_is_not_one_is_refused_untouched(tmp_path, plant, why):
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = run_dir / LOCK_FILE
    plant(lock, victim)
    expected = re.escape(f"{lock}: not a lock file of attnkit ({why}); remove it")
    with pytest.raises(CheckpointError, match=expected):
        RunLock.acquire(run_dir)  # a FIFO does not block it
    with pytest.raises(ConfigError, match=expected):
        train(validate(CONFIG), run_dir=run_dir, quiet=True, log=_quiet)
    assert victim.read_text() == SECRET
    assert [p.name for p in run_dir.iterdir()] == [LOCK_FILE]
    if why == "it holds other data":
        assert lock.read_text() == SECRET


@pytest.mark.parametrize("content", ["", "12345\n"])
def test_a_lock_file_left_by_a_training_still_starts_a_new_run(tmp_path, content):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).write_text(content)
    train(validate(CONFIG), run_dir=run_dir, stop_after=1, quiet=True, log=_quiet)
    assert (run_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert [m["step"] for m in read_metrics(run_dir)] == [1]


# ------------------------------------------------------------- a failed set-up writes nothing

FAILED_SET_UPS = {
    # --set and exit code: refused by validation, by the data, by the allocator (beyond any
    # address space, so it fails at once whatever the kernel's overcommit)
    "seed beyond int64": (["seed=99999999999999999999"], 2),
    "empty training split": (["data.max_pairs=1", "data.max_length=1"], 2),
    "huge embed_dim": (["model.embed_dim=10000000000000"], None),
}


@pytest.mark.parametrize("case", list(FAILED_SET_UPS))
def test_a_failed_set_up_leaves_no_run_directory(tmp_path, capsys, case):
    overrides, code = FAILED_SET_UPS[case]
    config_path = tmp_path / "c.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    runs = tmp_path / "runs"  # made by the training, with its parent
    run_dir = runs / "new" / "run"
    args = ["train", str(config_path), "--run-dir", str(run_dir), "--quiet"]
    args += [item for override in overrides for item in ("--set", override)]
    if code is None:  # the allocator's error is not one of the command's own
        with pytest.raises(RuntimeError, match="allocate"):
            main(args)
    else:
        assert main(args) == code
        _one_line(capsys.readouterr().err, "train")
    assert not runs.exists()
    # the same --run-dir is free again: a corrected command starts the run
    fixed = load_config(config_path)
    train(fixed, run_dir=run_dir, stop_after=1, quiet=True, log=_quiet)
    assert [m["step"] for m in read_metrics(run_dir)] == [1]


def test_a_failed_set_up_keeps_the_user_s_directory_and_lock_file(tmp_path):
    bad = validate({**CONFIG, "data": {**CONFIG["data"], "max_pairs": 1, "max_length": 1}})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no training pair is left"):
        train(bad, run_dir=empty, quiet=True, log=_quiet)
    assert empty.is_dir() and list(empty.iterdir()) == []
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / LOCK_FILE).write_text("")
    with pytest.raises(ValueError, match="no training pair is left"):
        train(bad, run_dir=locked, quiet=True, log=_quiet)
    assert [p.name for p in locked.iterdir()] == [LOCK_FILE]


def test_a_run_that_recorded_a_step_is_kept_when_it_fails_later(tmp_path):
    diverging = validate(
        {
            **CONFIG,
            "model": {"kind": "rnn", "style": "bahdanau", "embed_dim": 8, "hidden_dim": 8},
            "train": {**CONFIG["train"], "lr": 1e30},
        }
    )
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="step 2: the loss is nan"):
        train(diverging, run_dir=run_dir, quiet=True, log=_quiet)
    assert [m["step"] for m in read_metrics(run_dir)] == [1]
    assert (run_dir / "config.yaml").is_file()


def test_the_seed_must_fit_torch_s_signed_64_bits():
    assert validate({**CONFIG, "seed": 2**63 - 1}).seed == 2**63 - 1
    with pytest.raises(ConfigError, match="seed: Input should be less than 9223372036854775808"):
        validate({**CONFIG, "seed": 2**63})


# ------------------------------------------------------------------ a resume's configuration


def _copy(run_dir: Path, where: Path) -> Path:
    shutil.copytree(run_dir, where)
    return where


def test_settings_changed_on_resume_reach_the_run_s_config_yaml(stopped, tmp_path):
    run_dir = _copy(stopped, tmp_path / "run")
    changed = validate({**CONFIG, "decode": {**CONFIG["decode"], "max_length": 7}})
    logged: list[str] = []
    train(changed, resume=run_dir, stop_after=3, quiet=True, log=logged.append)
    assert any("decode" in line for line in logged), logged  # the change was announced
    assert Run.open(run_dir).config == changed  # what translate, eval and explain read
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["decode"]["max_length"] == 7
    assert not list(run_dir.glob(".config.yaml.*"))  # written atomically, no temporary left
    # resumed again with the same settings: the file is not rewritten
    before = (run_dir / "config.yaml").stat()
    train(changed, resume=run_dir, stop_after=4, quiet=True, log=_quiet)
    after = (run_dir / "config.yaml").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_resume_refused_for_its_architecture_leaves_config_yaml_alone(stopped, tmp_path):
    run_dir = _copy(stopped, tmp_path / "run")
    text = (run_dir / "config.yaml").read_text()
    other = validate({**CONFIG, "model": {**CONFIG["model"], "hidden_dim": 16}})
    with pytest.raises(CheckpointError, match=r"model\.hidden_dim: saved 8, given 16"):
        train(other, resume=run_dir, quiet=True, log=_quiet)
    assert (run_dir / "config.yaml").read_text() == text


# ------------------------------------------------------------------- explain --output


@pytest.fixture(scope="module")
def finished(stopped, tmp_path_factory) -> Path:
    return _copy(stopped, tmp_path_factory.mktemp("explained") / "run")


def test_explain_output_does_not_replace_a_file_without_force(finished, tmp_path, capsys):
    page = tmp_path / "notes.html"
    page.write_text(SECRET)
    args = ["explain", str(finished), "--input", "I love you.", "--output", str(page)]
    assert main(args) == 2
    err = _one_line(capsys.readouterr().err, "explain")
    assert f"--output: {page} exists; give --force to replace it" in err
    assert page.read_text() == SECRET
    assert main([*args, "--force"]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    fresh = tmp_path / "fresh.html"  # a new file needs no --force
    assert main(["explain", str(finished), "--input", "I love you.", "--output", str(fresh)]) == 0
    assert fresh.is_file()


def test_explain_output_never_writes_into_a_run_s_checkpoints(finished, tmp_path, capsys):
    checkpoints = finished / "checkpoints"
    newest = checkpoints / "step-00000002.json"
    link = tmp_path / "page.html"
    link.symlink_to(newest)  # replacing the link would not reach the checkpoint, but it is
    # refused all the same: a --force typed for the link is not meant for the checkpoint
    before = {p.name: p.read_bytes() for p in checkpoints.iterdir()}
    for output in (newest, checkpoints / "new-page.html", link):
        for force in ([], ["--force"]):
            args = ["explain", str(finished), "--input", "Hi.", "--output", str(output), *force]
            assert main(args) == 2, output
            err = _one_line(capsys.readouterr().err, "explain")
            assert "is in the run's checkpoints folder" in err and str(checkpoints) in err
    assert {p.name: p.read_bytes() for p in checkpoints.iterdir()} == before
    assert link.is_symlink()
    assert build_parser().parse_args(["explain", "r", "--input", "x", "--force"]).force
