"""``attnkit eval`` and ``attnkit train --resume`` on a checkpoint whose JSON is valid JSON with
wrong content (docs/reliability.md): exit code 1, exactly one line on stderr naming
the file, no traceback, and nothing in the run directory changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnkit.checkpoint import content_checksum
from attnkit.cli import main
from attnkit.config import validate
from attnkit.run import LOCK_FILE
from attnkit.train import train

CONFIG = {
    "name": "tiny",
    "seed": 5,
    "data": {"corpus": "tatoeba", "max_length": 5, "max_pairs": 120},
    "model": {"kind": "rnn", "style": "bahdanau", "embed_dim": 8, "hidden_dim": 8, "dropout": 0.1},
    "train": {"steps": 4, "batch_size": 8, "log_every": 1, "checkpoint_every": 2},
    "decode": {"max_length": 5, "max_eval_sentences": 4},
}


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run stopped after step 2 (its checkpoint), and its configuration file."""
    tmp = tmp_path_factory.mktemp("interrupted")
    run = train(validate(CONFIG), run_dir=tmp / "run", stop_after=2, quiet=True, log=_quiet)
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return run.path, config


def _drop_file(meta):
    del meta["tensors"]["file"]


def _short_python_rng(meta):
    meta["rng"]["python"][1] = meta["rng"]["python"][1][:10]


def _setter(*path, value):
    def change(meta):
        node = meta
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


# the audit's cases; "vouched" = the JSON's checksum was recomputed to agree with the damage
DAMAGE = {
    "tensors.file missing": (_drop_file, False),
    "scheduler junk": (_setter("scheduler", value={"junk": 1}), False),
    "scheduler junk, vouched": (_setter("scheduler", value={"junk": 1}), True),
    "step a string": (_setter("step", value="abc"), False),
    "tensors a string": (_setter("tensors", value="abc"), False),
    "architecture a list": (_setter("architecture", value=[1, 2]), False),
    "python RNG too short": (_short_python_rng, False),
    "python RNG too short, vouched": (_short_python_rng, True),
    "lr changed": (_setter("optimizer", "param_groups", 0, "lr", value=5.0), False),
    "lr a string, vouched": (_setter("optimizer", "param_groups", 0, "lr", value="x"), True),
}


def _damaged_copy(run_dir: Path, tmp_path: Path, damage: str) -> tuple[Path, Path]:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    json_path = sorted((copy / "checkpoints").glob("step-*.json"))[-1]
    change, vouched = DAMAGE[damage]
    meta = json.loads(json_path.read_text())
    change(meta)
    if vouched:
        meta["checksum"] = content_checksum(meta)
    json_path.write_text(json.dumps(meta, indent=1))
    return copy, json_path


def _files(directory: Path) -> dict[str, bytes]:
    # the lock file holds the pid of the newest process that locked the run: not the run's data
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file() and p.name != LOCK_FILE
    }


def _assert_one_line_naming(err: str, command: str, path: Path) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"attnkit {command}: error: {path}: "), err


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_refuses_wrong_json_content(interrupted, tmp_path, capsys, damage):
    run_dir, config = interrupted
    copy, json_path = _damaged_copy(run_dir, tmp_path, damage)
    before = _files(copy)
    capsys.readouterr()
    assert main(["train", str(config), "--resume", str(copy), "--quiet"]) == 1
    _assert_one_line_naming(capsys.readouterr().err, "train", json_path)
    assert _files(copy) == before  # no metrics truncated, no checkpoint written


@pytest.mark.parametrize("damage", [d for d, (_, vouched) in DAMAGE.items() if not vouched])
def test_eval_refuses_wrong_json_content(interrupted, tmp_path, capsys, damage):
    run_dir, _ = interrupted
    copy, json_path = _damaged_copy(run_dir, tmp_path, damage)
    before = _files(copy)
    capsys.readouterr()
    assert main(["eval", str(copy), "--quiet"]) == 1
    _assert_one_line_naming(capsys.readouterr().err, "eval", json_path)
    assert _files(copy) == before  # no eval-test.json


def test_an_undamaged_copy_resumes_and_evaluates(interrupted, tmp_path, capsys):
    """The control: the same commands on an intact copy succeed."""
    run_dir, config = interrupted
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    assert main(["eval", str(copy), "--quiet"]) == 0
    assert main(["train", str(config), "--resume", str(copy), "--quiet"]) == 0
    assert (copy / "checkpoints" / "step-00000004.json").is_file()
    assert "error" not in capsys.readouterr().err


def test_resume_in_a_real_process_refuses_a_vouched_bad_scheduler(interrupted, tmp_path):
    """Model and optimizer states are fine, the scheduler's is not: the process exits 1 with one
    line, before anything was loaded or written."""
    run_dir, config = interrupted
    copy, json_path = _damaged_copy(run_dir, tmp_path, "scheduler junk, vouched")
    before = _files(copy)
    done = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", "train", str(config), "--resume", str(copy)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    _assert_one_line_naming(done.stderr, "train", json_path)
    assert "corrupted scheduler state" in done.stderr
    assert _files(copy) == before
