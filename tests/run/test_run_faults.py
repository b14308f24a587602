"""Faults of a training run: ``kill -9`` at many points of a short run
then ``--resume`` gives the checkpoint and metrics of an uninterrupted run; a torn last metrics
line is dropped and reported; a full disk and a read-only run directory end in one line naming
the path (exit 1) with nothing lost; a second writer is refused naming the holder's pid; a
diverging run stops at its first non-finite loss; files follow the umask.

The kills use ``os.fork`` of this process (no second import of torch, so several kill points fit
the suite's time) and one real ``python -m attnkit`` under a wrapper script; either way the
process dies by SIGKILL at a chosen audit event (``open`` of a file, ``os.rename``, ``os.remove``),
leaving its files as a crash would.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from attnkit.checkpoint import CheckpointError, atomic_write, list_checkpoints, read_checkpoint
from attnkit.cli import main
from attnkit.config import validate
from attnkit.run import LOCK_FILE, RunLock, read_metrics, truncate_metrics
from attnkit.train import train

CONFIG = {
    "name": "faults",
    "seed": 7,
    "data": {"corpus": "tatoeba", "max_length": 5, "max_pairs": 100},
    "model": {"kind": "rnn", "style": "bahdanau", "embed_dim": 8, "hidden_dim": 8, "dropout": 0.2},
    "train": {
        "steps": 6,
        "batch_size": 8,
        "lr": 0.01,
        "log_every": 1,
        "eval_every": 3,
        "checkpoint_every": 2,
        "keep_checkpoints": 2,
    },
    "decode": {"max_length": 5, "max_eval_sentences": 3},
}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread, as this process (bit-exact resume)
TIMEOUT = 600  # seconds: a hung child fails the test instead of the suite


def _quiet(_: str) -> None:
    pass


def _cli(*args: str, script: Path | None = None, env: dict | None = None):
    command = [sys.executable, str(script)] if script else [sys.executable, "-m", "attnkit"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=TIMEOUT,
        check=False,
    )


def _history(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if k != "seconds"} for m in read_metrics(run_dir)]


def _assert_one_line(err: str, command: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"attnkit {command}: error: "), err


def _assert_like_the_reference(run_dir: Path, reference: Path) -> None:
    """Final checkpoint (model, optimizer, torch's RNG), metrics and results as the
    uninterrupted run's. NumPy's global generator is saved and restored but never seeded by a
    run (nothing in training draws from it): it differs between processes, so it is left out."""
    name = "checkpoints/step-00000006.safetensors"
    a, b = load_file(reference / name), load_file(run_dir / name)
    assert sorted(a) == sorted(b) and "rng.torch" in a
    assert any(key.startswith("optimizer.") for key in a)
    for key in a:
        if key != "rng.numpy":
            assert a[key].equal(b[key]), key
    assert _history(run_dir) == _history(reference)
    ra, rb = (json.loads((r / "results.json").read_text()) for r in (reference, run_dir))
    assert (ra["bleu"], ra["loss"]) == (rb["bleu"], rb["loss"])
    assert not [p for p in run_dir.rglob("*.tmp")], "temporary files left behind"


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "faults.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run."""
    tmp = tmp_path_factory.mktemp("reference")
    return train(validate(CONFIG), run_dir=tmp / "run", quiet=True, log=_quiet).path


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """The run stopped cleanly after step 2 (its first checkpoint)."""
    tmp = tmp_path_factory.mktemp("stopped")
    return train(validate(CONFIG), run_dir=tmp / "run", stop_after=2, quiet=True, log=_quiet).path


def _copy(run_dir: Path, where: Path) -> Path:
    shutil.copytree(run_dir, where)
    return where


# ---------------------------------------------------------------------------------- kill -9


def _matches(event: str, args: tuple, wanted: str, needle: str) -> bool:
    if event != wanted:
        return False
    path = args[1] if event == "os.rename" else args[0]  # os.replace: its destination
    return isinstance(path, (str, bytes, os.PathLike)) and needle in os.fsdecode(path)


def _train_killed_at(run_dir: Path, event: str, needle: str, nth: int) -> None:
    """Train in a forked child that SIGKILLs itself at the ``nth`` audit ``event`` whose path
    contains ``needle``; returns once it died that way."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            seen = [0]

            def hook(name: str, args: tuple) -> None:
                if _matches(name, args, event, needle):
                    seen[0] += 1
                    if seen[0] == nth:
                        os.kill(os.getpid(), signal.SIGKILL)

            sys.addaudithook(hook)
            train(validate(CONFIG), run_dir=run_dir, quiet=True, log=_quiet)
        finally:
            os._exit(3)  # not killed: the event never came
    deadline = time.monotonic() + TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the training child hung")
        time.sleep(0.05)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


KILL_POINTS = {
    "creating the first checkpoint's tensor file": ("open", ".step-00000002.safetensors.", 1),
    "writing the second checkpoint's JSON": ("open", ".step-00000004.json.", 1),
    "tensors in place, JSON not yet renamed": ("os.rename", "step-00000004.json", 1),
    "creating the second checkpoint's tensor file": ("open", ".step-00000004.safetensors.", 1),
    "pruning the oldest checkpoint (JSON gone, tensors not)": (
        "os.remove",
        "step-00000002.json",
        1,
    ),
    "writing results.json after the last step": ("open", ".results.json.", 1),
}


@pytest.mark.parametrize("seed", range(len(KILL_POINTS)))
def test_kill_9_then_resume_equals_the_uninterrupted_run(reference, tmp_path, seed):
    """kill -9 at a point of the run (one per seed), and, for some seeds, the torn half of a
    metrics line appended as a kill in the middle of an append leaves it; ``--resume``'s run
    equals the uninterrupted one, with the temporary files and the torn line gone."""
    what = list(KILL_POINTS)[seed]
    event, needle, nth = KILL_POINTS[what]
    run_dir = tmp_path / "run"
    _train_killed_at(run_dir, event, needle, nth)
    for path in list_checkpoints(run_dir / "checkpoints"):  # nothing partial under a final name
        read_checkpoint(path)
    rng = random.Random(seed)
    torn = rng.random() < 0.5
    if torn:
        line = json.dumps({"step": 99, "split": "train", "loss": 1.25, "lr": 0.01}) + "\n"
        with (run_dir / "metrics.jsonl").open("a") as handle:
            handle.write(line[: rng.randrange(1, len(line) - 1)])
    logged: list[str] = []
    train(validate(CONFIG), resume=run_dir, quiet=True, log=logged.append)
    _assert_like_the_reference(run_dir, reference)
    assert any("dropped its torn last line" in line for line in logged) == torn, logged
    if event == "os.rename":  # the JSON's temporary file and the tensors it would have vouched for
        assert any("removed 2 temporary file(s)" in line for line in logged), logged


WRAPPER = """
import os, signal, sys

event, needle = os.environ["AK_KILL_AT"].split(":", 1)


def hook(name, args):
    if name != event:
        return
    path = args[1] if name == "os.rename" else args[0]
    if isinstance(path, (str, bytes, os.PathLike)) and needle in os.fsdecode(path):
        os.kill(os.getpid(), signal.SIGKILL)


sys.addaudithook(hook)
from attnkit.cli import main

sys.exit(main())
"""


def test_kill_9_of_the_real_command_mid_metrics_then_resume(reference, config_file, tmp_path):
    """The real ``python -m attnkit train`` killed while it writes its second checkpoint, with a
    torn metrics line; the real ``--resume`` drops and reports the line (one line on stderr) and
    ends with the uninterrupted run's checkpoint and metrics."""
    script = tmp_path / "killed.py"
    script.write_text(WRAPPER)
    run_dir = tmp_path / "run"
    env = {"AK_KILL_AT": "open:.step-00000004.safetensors."}
    done = _cli(
        "train", str(config_file), "--run-dir", str(run_dir), "--quiet", script=script, env=env
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 5, "split": "tr')  # a kill mid-append leaves half a line
    done = _cli("train", str(config_file), "--resume", str(run_dir), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dropped its torn last line" in done.stdout, done.stdout
    assert str(run_dir / "metrics.jsonl") in done.stdout
    _assert_like_the_reference(run_dir, reference)


# ----------------------------------------------------------------------------- torn metrics


def test_a_torn_last_metrics_line_is_dropped_and_other_damage_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "split": "train", "loss": 1.0}) for s in (1, 2, 3)]
    path.write_text("\n".join(lines) + "\n" + '{"step": 4, "split": "train", "lo')
    note = truncate_metrics(path, 2)
    assert note is not None and str(path) in note and "torn last line" in note
    assert path.read_text() == "\n".join(lines[:2]) + "\n"
    # a complete line missing only its newline is kept
    path.write_text(lines[0] + "\n" + lines[1])
    assert truncate_metrics(path, 5) is None and path.read_text().count("\n") == 2
    # damage inside the file is not a torn append: refused, naming the file and the line
    path.write_text(lines[0] + "\n" + '{"step": 2, "spl\n' + lines[2] + "\n")
    with pytest.raises(Exception, match=rf"{path}: line 2 is not a metrics record"):
        truncate_metrics(path, 5)


# ------------------------------------------------------------------------------ full disk


@contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk that fills) needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_one_line_naming_the_path_and_loses_nothing(
    stopped, reference, config_file, tmp_path
):
    with _tmpfs(tmp_path / "disk", "4m") as disk:
        run_dir = _copy(stopped, disk / "run")
        checkpoint = sum(p.stat().st_size for p in (run_dir / "checkpoints").iterdir())
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        filler = disk / "filler"
        filler.write_bytes(b"\0" * max(0, free - checkpoint // 2))  # room for half a checkpoint
        done = _cli("train", str(config_file), "--resume", str(run_dir), "--quiet")
        assert done.returncode == 1, done.stderr[-2000:]
        _assert_one_line(done.stderr, "train")
        assert f"error: {run_dir}" in done.stderr and "No space left on device" in done.stderr
        assert not list(run_dir.rglob("*.tmp"))  # the failed write removed its temporary file
        assert read_checkpoint(run_dir / "checkpoints" / "step-00000002.json").step == 2
        filler.unlink()  # space again: the run continues as if nothing happened
        train(validate(CONFIG), resume=run_dir, quiet=True, log=_quiet)
        _assert_like_the_reference(run_dir, reference)


# ---------------------------------------------------------------------- read-only run dir


@contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` read-only: a read-only bind mount as root (root ignores permissions), else
    permissions without write."""
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "--bind", str(path), str(path)], check=False)
        remounted = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True
        )
        if mounted.returncode or remounted.returncode:
            subprocess.run(["umount", "-l", str(path)], check=False)
            pytest.skip(f"cannot bind-mount read-only here: {remounted.stderr.strip()}")
        try:
            yield
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
        return
    modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
    for p in modes:
        p.chmod(modes[p] & ~0o222)
    try:
        yield
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def test_a_read_only_run_directory(stopped, config_file, tmp_path):
    """``attnkit eval`` prints its results, then says in one line that they were not saved
    (exit 1); ``--resume`` stops in one line naming the path (exit 1); nothing changed."""
    run_dir = _copy(stopped, tmp_path / "run")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with _read_only(run_dir):
        done = _cli("eval", str(run_dir), "--quiet")
        assert done.returncode == 1, done.stderr[-2000:]
        assert "step 2, test split" in done.stdout and "BLEU" in done.stdout  # printed first
        _assert_one_line(done.stderr, "eval")
        assert f"not saved to {run_dir / 'eval-test.json'}" in done.stderr
        done = _cli("train", str(config_file), "--resume", str(run_dir), "--quiet")
        assert done.returncode == 1, done.stderr[-2000:]
        _assert_one_line(done.stderr, "train")
        assert f"error: {run_dir}" in done.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


# ---------------------------------------------------------------------------------- locking


def test_a_second_writer_is_refused_naming_the_holder(stopped, config_file, tmp_path):
    run_dir = _copy(stopped, tmp_path / "run")
    with RunLock.acquire(run_dir):  # this process writes the run
        assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())
        done = _cli("train", str(config_file), "--resume", str(run_dir), "--quiet")
        assert done.returncode == 1, done.stderr[-2000:]
        _assert_one_line(done.stderr, "train")
        assert f"pid {os.getpid()}" in done.stderr and str(run_dir / LOCK_FILE) in done.stderr
        assert _history(run_dir) == _history(stopped)  # the metrics were not touched
        with pytest.raises(Exception, match=f"pid {os.getpid()}"):  # also within one process
            RunLock.acquire(run_dir)
    RunLock.acquire(run_dir).release()  # released: free again (as after kill -9: the kernel)


def test_a_new_run_is_locked_before_its_first_file(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with RunLock.acquire(run_dir):
        with pytest.raises(Exception, match=f"pid {os.getpid()}"):
            train(validate(CONFIG), run_dir=run_dir, quiet=True, log=_quiet)
    assert [p.name for p in run_dir.iterdir()] == [LOCK_FILE]


# ------------------------------------------------------------------ stale files, damage, umask


def test_stale_temporary_files_are_removed_at_the_next_start(stopped, reference, tmp_path):
    run_dir = _copy(stopped, tmp_path / "run")
    stale = [
        run_dir / "checkpoints" / ".step-00000004.json.a1b2c3d4.tmp",
        run_dir / "checkpoints" / ".step-00000004.safetensors.x_y_z123.tmp",
        run_dir / ".metrics.jsonl.abcdefgh.tmp",
    ]
    kept = run_dir / ".eval-test.json.abcdefgh.tmp"  # attnkit eval may be writing it
    for path in [*stale, kept]:
        path.write_bytes(b"half")
    logged: list[str] = []
    train(validate(CONFIG), resume=run_dir, quiet=True, log=logged.append)
    assert not any(p.exists() for p in stale) and kept.exists()
    assert any("removed 3 temporary file(s)" in line for line in logged), logged
    kept.unlink()
    _assert_like_the_reference(run_dir, reference)


def test_a_damaged_newest_checkpoint_names_the_older_intact_one(
    reference, config_file, tmp_path, capsys
):
    """Refused, not skipped silently (decided in docs/reliability.md): the message names the
    intact older checkpoint and how to resume from it, and doing so finishes the run exactly."""
    run_dir = _copy(reference, tmp_path / "run")
    tensors = run_dir / "checkpoints" / "step-00000006.safetensors"
    blob = bytearray(tensors.read_bytes())
    blob[-5] ^= 0xFF
    tensors.write_bytes(bytes(blob))
    capsys.readouterr()
    assert main(["train", str(config_file), "--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err
    _assert_one_line(err, "train")
    assert f"{tensors}: corrupted" in err
    assert "step-00000004.json (step 4) is intact" in err and "resume again" in err
    for name in ("step-00000006.json", "step-00000006.safetensors"):  # as the message says
        (run_dir / "checkpoints" / name).rename(tmp_path / name)
    assert main(["train", str(config_file), "--resume", str(run_dir), "--quiet"]) == 0
    _assert_like_the_reference(run_dir, reference)


def test_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a.json", "{}")
        os.umask(0o002)
        atomic_write(tmp_path / "b.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o664


def test_a_run_s_files_are_readable_by_the_group_and_others_under_umask_022(reference):
    # the reference run was written under this process's umask (022 by default, as a shell's)
    mask = os.umask(0o022)
    os.umask(mask)
    for path in reference.rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path


class _Payload:
    """Unpickling this creates a file: the proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_in_place_of_a_checkpoint_does_not_run(stopped, tmp_path):
    run_dir = _copy(stopped, tmp_path / "run")
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker))
    for name in ("step-00000002.json", "step-00000002.safetensors"):
        (run_dir / "checkpoints" / name).write_bytes(payload)
        with pytest.raises(CheckpointError, match="step-00000002"):
            read_checkpoint(run_dir / "checkpoints" / "step-00000002.json")
    assert not marker.exists()


# ----------------------------------------------------------------------- non-finite losses

DIVERGING = {**CONFIG, "train": {**CONFIG["train"], "lr": 1e30}}


def test_training_stops_at_the_first_non_finite_loss(tmp_path):
    path = tmp_path / "diverging.yaml"
    path.write_text(yaml.safe_dump(DIVERGING))
    run_dir = tmp_path / "run"
    done = _cli("train", str(path), "--run-dir", str(run_dir), "--quiet")
    assert done.returncode == 1, done.stderr[-2000:]
    _assert_one_line(done.stderr, "train")
    assert "step 2: the loss is nan" in done.stderr and "train.lr: 1e+30" in done.stderr
    assert [m["step"] for m in read_metrics(run_dir)] == [1]  # no NaN step recorded
    assert not (run_dir / "results.json").exists()


@pytest.fixture(scope="module")
def diverged(tmp_path_factory) -> Path:
    """A run that trained on through NaN (``stop_on_nonfinite: false``)."""
    tmp = tmp_path_factory.mktemp("diverged")
    config = {**DIVERGING, "train": {**DIVERGING["train"], "stop_on_nonfinite": False}}
    return train(validate(config), run_dir=tmp / "run", quiet=True, log=_quiet).path


def test_a_run_that_trains_on_through_nan_still_writes_its_report(diverged):
    assert all(m["loss"] != m["loss"] for m in read_metrics(diverged)[1:] if "loss" in m)
    assert (diverged / "report.html").is_file() and (diverged / "results.json").is_file()


def test_view_on_nan_weights_is_one_clear_line(diverged):
    done = _cli("view", str(diverged), "--input", "I love you.")
    assert done.returncode == 1, done.stderr[-2000:]
    _assert_one_line(done.stderr, "view")
    assert "step-00000006.json: the model's weights are not finite" in done.stderr
    assert "differs" not in done.stderr
