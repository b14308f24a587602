"""Run configurations: every shipped config validates; each kind of bad input is exit code 2 with
one line on stderr naming the key's path (RELIABILITY.md, issue 6 item 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnkit.cli import main
from attnkit.config import (
    ConfigError,
    architecture,
    differing_keys,
    load_config,
    to_yaml,
    validate,
)

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))
BASE = {"name": "t", "model": {"kind": "rnn"}, "train": {"steps": 2}}


def test_configs_exist_and_validate():
    assert len(CONFIGS) >= 5
    for path in CONFIGS:
        config = load_config(path)
        assert validate(yaml.safe_load(to_yaml(config))) == config  # the resolved YAML round-trips


def _with(path: str, value) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    node = raw
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("model.hiden_dim", 3, "model.hiden_dim: unknown key"),
        ("train.lerning_rate", 3, "train.lerning_rate: unknown key"),
        ("surprise", 1, "surprise: unknown key"),
        ("model.hidden_dim", "big", "model.hidden_dim: Input should be a valid integer"),
        ("train.steps", None, "train.steps: Input should be a valid integer"),
        ("model.dropout", 1.5, "model.dropout: Input should be less than 1"),
        ("model.dropout", -0.1, "model.dropout: Input should be greater than or equal to 0"),
        ("model.window", 0, "model.window: Input should be greater than or equal to 1"),
        (
            "model.kind",
            "cnn",
            "model.kind: the tatoeba corpus takes model kind rnn or transformer; got 'cnn'",
        ),
        (
            "data.corpus",
            "wmt",
            "data.corpus: must be one of babi, fashion_mnist, hansards, karate,",
        ),
    ],
)
def test_bad_values_name_the_key(path, value, expected):
    with pytest.raises(ConfigError) as info:
        validate(_with(path, value), "c.yaml")
    message = str(info.value)
    assert message.startswith("c.yaml: ") and expected in message
    assert "\n" not in message


def test_missing_field_and_cross_field_rules():
    with pytest.raises(ConfigError, match=r"c.yaml: train: missing \(required\)"):
        validate({"name": "t"}, "c.yaml")
    raw = {
        "name": "t",
        "model": {"kind": "transformer", "d_model": 10, "nhead": 3},
        "train": {"steps": 1},
    }
    with pytest.raises(ConfigError, match=r"model.nhead: the number of heads must divide d_model"):
        validate(raw)
    with pytest.raises(ConfigError, match=r"model.score/align: the bahdanau style is additive"):
        validate(_with("model.score", "dot"))
    with pytest.raises(ConfigError, match=r"train.supervised_weight: .*data.supervision"):
        validate(_with("train.supervised_weight", 1.0))
    with pytest.raises(ConfigError, match=r"data.root: the hansards corpus needs `root`"):
        validate(_with("data.corpus", "hansards"))


def test_cli_exit_code_2_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with("model.dropout", 2.0)))
    assert main(["train", str(bad), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.dropout" in err and str(bad) in err
    assert not (tmp_path / "runs").exists()  # nothing written for a refused configuration
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert main(["train", str(broken)]) == 2
    assert "not valid YAML at line" in capsys.readouterr().err


def test_cli_exit_code_2_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with("model.heads_of_state", 4)))
    done = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", "train", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"attnkit train: error: {bad}: model.heads_of_state: unknown key"
    ]


def test_overrides_are_validated_too(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert load_config(path, ["train.steps=7", "model.hidden_dim=32"]).train.steps == 7
    with pytest.raises(
        ConfigError, match=r"train.steps: Input should be greater than or equal to 1"
    ):
        load_config(path, ["train.steps=0"])
    with pytest.raises(ConfigError, match=r"override must look like key\.path=value"):
        load_config(path, ["train.steps"])


def test_architecture_differences_are_listed():
    a = validate(BASE)
    b = validate(_with("model.hidden_dim", 64))
    c = validate(_with("model.dropout", 0.3))  # dropout changes no tensor
    assert differing_keys(architecture(a), architecture(b)) == [
        "model.hidden_dim: saved 256, given 64"
    ]
    assert differing_keys(architecture(a), architecture(c)) == []
