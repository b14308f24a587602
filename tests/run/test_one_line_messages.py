"""Commands on a run answer a mistake in one line naming what the user gave — the flag, the file,
the page — and what was expected, never a traceback or a name the user never typed: a beam
wider than the target vocabulary (was ``std::bad_alloc``), ``--input`` bytes that are not UTF-8,
``--checkpoint`` of a file that is not a checkpoint, a read-only run directory (the page, not
the temporary file), and two damaged checkpoints (the advice, followed once, continues the
run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from attnkit.cli import main
from attnkit.config import validate
from attnkit.run import Run, read_metrics
from attnkit.train import train

CONFIG = {
    "name": "messages",
    "seed": 5,
    "data": {"corpus": "tatoeba", "max_length": 5, "max_pairs": 60},
    "model": {"kind": "rnn", "style": "luong", "score": "dot", "embed_dim": 8, "hidden_dim": 8},
    "train": {
        "steps": 6,
        "batch_size": 8,
        "lr": 0.01,
        "log_every": 1,
        "checkpoint_every": 2,
        "keep_checkpoints": 3,
    },
    "decode": {"max_length": 5, "max_eval_sentences": 2},
}


def _quiet(_: str) -> None:
    pass


def _one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"attnkit {command}: error: "), err
    return err.rstrip("\n")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A translation run of 6 steps with the checkpoints of steps 2, 4 and 6."""
    path = tmp_path_factory.mktemp("finished") / "run"
    return train(validate(CONFIG), run_dir=path, quiet=True, log=_quiet).path


@pytest.fixture
def run_copy(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _target_words(run_dir: Path) -> int:
    return len(Run.open(run_dir).job.vocabularies.target)


@pytest.mark.parametrize("command", ["translate", "eval", "view"])
def test_a_beam_wider_than_the_target_vocabulary_is_refused_naming_it(finished, capsys, command):
    argv = {
        "translate": ["translate", str(finished), "hello", "--beam", "1000000"],
        "eval": ["eval", str(finished), "--beam", "1000000", "--quiet"],
        "view": ["view", str(finished), "--input", "hello", "--beam", "1000000"],
    }[command]
    assert main(argv) == 2
    words = _target_words(finished)
    assert _one_line(capsys, command) == (
        f"attnkit {command}: error: --beam 1000000: wider than the target vocabulary of "
        f"{finished} ({words} words): the first step has {words} continuations to keep; give "
        f"at most {words}"
    )


def test_a_beam_as_wide_as_the_target_vocabulary_translates(finished, capsys):
    words = _target_words(finished)
    assert main(["translate", str(finished), "hello", "--beam", str(words), "--no-attention"]) == 0
    assert capsys.readouterr().out.strip()  # a translation was printed


def test_input_bytes_that_are_not_utf8_are_refused_naming_input(finished, tmp_path, capsys):
    """A shell passes the bytes of a Latin-1 ``café`` as they are; Python holds the byte 0xe9
    as the surrogate escape U+DCE9 (``os.fsdecode``)."""
    text = os.fsdecode(b"caf\xe9")
    page = tmp_path / "page.html"
    assert main(["view", str(finished), "--input", text, "--output", str(page)]) == 2
    assert _one_line(capsys, "view") == (
        "attnkit view: error: --input: not UTF-8 text (byte 0xe9 at character 4); give the "
        "text in UTF-8"
    )
    assert not page.exists()
    assert main(["translate", str(finished), text]) == 2
    assert "SENTENCE: not UTF-8 text (byte 0xe9 at character 4)" in _one_line(capsys, "translate")


@pytest.mark.parametrize("given", ["my-checkpoint.pt", "checkpoints/step-00000009.json"])
def test_checkpoint_is_named_as_given(finished, tmp_path, capsys, given):
    path = tmp_path / given if given.endswith(".pt") else finished / given
    if given.endswith(".pt"):
        path.write_bytes(b"not ours")
    assert main(["eval", str(finished), "--checkpoint", str(path), "--quiet"]) == 1
    line = _one_line(capsys, "eval")
    assert line.startswith(f"attnkit eval: error: {path}: ")
    assert "my-checkpoint.json" not in line
    if given.endswith(".pt"):
        assert "not a checkpoint of attnkit; a checkpoint is a step-XXXXXXXX.json" in line
    else:  # a name of the run's kind that does not exist: the run's checkpoints are listed
        assert "no such checkpoint" in line
        assert "step-00000002.json, step-00000004.json, step-00000006.json" in line


def test_two_damaged_checkpoints_are_both_named_and_the_advice_works(run_copy, tmp_path, capsys):
    """Steps 4 and 6 damaged: the refusal names both and the intact step 2; moving out what
    it names, once, lets the same command continue from step 2 to the end."""
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump(CONFIG))
    checkpoints = run_copy / "checkpoints"
    for step in (4, 6):
        tensors = checkpoints / f"step-0000000{step}.safetensors"
        blob = bytearray(tensors.read_bytes())
        blob[-5] ^= 0xFF
        tensors.write_bytes(bytes(blob))
    resume = ["train", str(config_file), "--resume", str(run_copy), "--quiet"]
    assert main(resume) == 1
    line = _one_line(capsys, "train")
    assert "step-00000004.json is damaged too" in line
    assert "the older checkpoint step-00000002.json (step 2) is intact" in line
    named = (
        "step-00000006.json, step-00000006.safetensors, step-00000004.json and "
        "step-00000004.safetensors"
    )
    assert f"move {named} out of {checkpoints} and resume again" in line
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in named.replace(" and ", ", ").split(", "):
        (checkpoints / name).rename(aside / name)
    assert main(resume) == 0
    assert [m["step"] for m in read_metrics(run_copy)] == [1, 2, 3, 4, 5, 6]


@contextmanager
def _read_only(directory: Path) -> Iterator[None]:
    """``directory`` unwritable for this process: its write bits cleared, or for root (whom
    they do not stop) the immutable attribute set (``chattr +i``)."""
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(mode & ~0o222)
        try:
            yield
        finally:
            directory.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(directory)], check=False).returncode:
        pytest.skip("root, and the immutable attribute cannot be set here")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(directory)], check=True)


def test_a_read_only_run_directory_names_the_page(run_copy, capsys):
    with _read_only(run_copy):
        assert main(["view", str(run_copy), "--input", "hello"]) == 1
    line = _one_line(capsys, "view")
    assert line.startswith(f"attnkit view: error: {run_copy / 'view-hello.html'}: ")
    assert ".tmp" not in line


def test_an_allocation_beyond_any_memory_is_one_line_naming_the_flags(capsys):
    """The allocator's own error (torch's ``DefaultCPUAllocator: can't allocate memory``) is
    translated into the one line, naming the flags that set the sizes of the command given:
    ``attnkit info``'s location score holds a row of weights per key."""
    argv = ["info", "--score", "location", "--keys", "10000000000000", "--dim", "64"]
    assert main(argv) == 1
    assert _one_line(capsys, "info") == (
        "attnkit info: error: not enough memory (2560000.0 GB asked at once); lower the sizes "
        "given: --batch, --heads, --queries, --keys, --dim, --value-dim"
    )
