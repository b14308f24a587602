"""Hostile configurations and flags through the real command: each is exit
code 2 with one line on stderr naming the file or the flag and what was expected, fast, before
anything is written; ``attnkit train --check`` validates without training."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from attnkit.config import MAX_CONFIG_BYTES, ConfigError, load_config

ROOT = Path(__file__).parents[2]
VALID = (ROOT / "configs" / "tatoeba-luong-general.yaml").read_text()

# "billion laughs": 8 levels of 9 aliases each, 323 bytes; safe_load expands it to 9**9 strings
LAUGHS = "\n".join(
    ["a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    + [
        f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{','.join(['*' + chr(ord('a') + i - 1)] * 9)}]"
        for i in range(1, 9)
    ]
)


def _attnkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "attnkit", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def _refused(done: subprocess.CompletedProcess, command: str, *named: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    err = done.stderr
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"attnkit {command}: error: "), err
    for text in named:
        assert text in err, (text, err)


def _file(tmp_path: Path, content: str | bytes, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


CONFIGS = {
    "billion laughs": (LAUGHS, [], "anchors and aliases"),
    "one anchor": (VALID.replace("seed: 0", "seed: &s 0"), [], "anchors and aliases"),
    "a merge key": ("base: &b {steps: 3}\ntrain:\n  <<: *b\n", [], "anchors and aliases"),
    "too large": ("#" * (MAX_CONFIG_BYTES + 1), [], f"larger than {MAX_CONFIG_BYTES} bytes"),
    "not UTF-8": (b"name: caf\xe9\n", [], "not UTF-8 text (byte 0xe9"),
    "a list": ("- name: x\n- train: {steps: 1}\n", [], "top level must be a mapping"),
    "a list with --set": ("- a\n- b\n", ["--set", "train.steps=3"], "top level must be a mapping"),
    "nested too deep": ("a: " + "[" * 40 + "]" * 40 + "\n", [], "nested deeper than 16"),
    "an alias in --set": (VALID, ["--set", "train.steps=*x"], "--set train.steps: not valid YAML"),
    "bad YAML in --set": (VALID, ["--set", "train.steps=[1"], "--set train.steps: not valid YAML"),
    "infinite lr": (VALID, ["--set", "train.lr=.inf"], "train.lr: Input should be a finite"),
    "a 5000-digit integer": (VALID.replace("seed: 0", "seed: " + "9" * 5000), [], "5000 digits"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_hostile_config_is_one_line_naming_the_file(tmp_path, case):
    content, extra, expected = CONFIGS[case]
    path = _file(tmp_path, content)
    runs = tmp_path / "runs"
    done = _attnkit("train", str(path), "--runs-dir", str(runs), *extra)
    # a bad --set value is named by its flag, the rest by the file
    _refused(done, "train", "" if case.endswith("in --set") else str(path), expected)
    assert not runs.exists()


def _peak_bytes(load) -> int:
    """The most memory Python allocated while ``load()`` ran (tracemalloc): what an expansion
    or an endless read would show, where a timing would depend on the machine."""
    tracemalloc.start()
    try:
        load()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("case", ["billion laughs", "too large", "nested too deep"])
def test_hostile_configs_are_refused_before_they_expand(tmp_path, case):
    path = _file(tmp_path, CONFIGS[case][0])

    def load() -> None:
        with pytest.raises(ConfigError, match=CONFIGS[case][2]):
            load_config(path)

    # a billion laughs expanded would hold 10⁹ strings; refused, a few file sizes at most
    assert _peak_bytes(load) < 16 * MAX_CONFIG_BYTES


def test_an_endless_file_is_read_only_up_to_the_limit():
    def load() -> None:
        with pytest.raises(ConfigError, match="/dev/zero: larger than"):
            load_config("/dev/zero")

    assert _peak_bytes(load) < 4 * MAX_CONFIG_BYTES


FLAGS = {
    "stop after -1": (["train", "c.yaml", "--stop-after", "-1"], "train", "--stop-after"),
    "stop after 0": (["train", "c.yaml", "--stop-after", "0"], "train", "--stop-after"),
    "eval beam 0": (["eval", "runs/x", "--beam", "0"], "eval", "--beam"),
    "translate beam 0": (["translate", "runs/x", "hi", "--beam", "0"], "translate", "--beam"),
    "view beam 0": (["view", "runs/x", "--input", "hi", "--beam", "0"], "view", "--beam"),
    "info heads -1": (["info", "--heads", "-1"], "info", "--heads"),
    "info keys 0": (["info", "--keys", "0"], "info", "--keys"),
    "info dropout 1.5": (["info", "--dropout", "1.5"], "info", "--dropout"),
    "info dropout nan": (["info", "--dropout", "nan"], "info", "--dropout"),
    "view into a missing folder": (
        ["view", "runs/x", "--input", "hi", "--output", "no/such/folder/x.html"],
        "view",
        "--output: the folder",
    ),
}


@pytest.mark.parametrize("case", list(FLAGS))
def test_a_flag_out_of_range_is_one_line_naming_it(tmp_path, case):
    args, command, named = FLAGS[case]
    _refused(_attnkit(*args, cwd=tmp_path), command, named)


def test_check_validates_without_training(tmp_path):
    path = _file(tmp_path, VALID)
    runs = tmp_path / "runs"
    done = _attnkit("train", str(path), "--check", "--runs-dir", str(runs))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"{path}: valid; data: ") and "train" in done.stdout
    assert not runs.exists()
    done = _attnkit("train", str(path), "--check", "--set", "model.hidden_dim=-3")
    _refused(done, "train", str(path), "model.hidden_dim")
