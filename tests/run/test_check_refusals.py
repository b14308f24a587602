"""What training would refuse at set-up, `attnkit train --check` refuses first (exit 2, one line,
nothing written); and options that would be ignored are refused."""

from __future__ import annotations

import pytest

from attnkit.cli import main

TRANSFORMER = "configs/tatoeba-transformer.yaml"  # model.max_length: 32, decode.max_length: 20
TINY = [
    "--set", "train.steps=2", "--set", "data.max_pairs=40", "--set", "model.d_model=16",
    "--set", "model.dim_feedforward=16", "--set", "model.num_layers=1",
    "--set", "decode.max_eval_sentences=2", "--set", "train.eval_every=null",
    "--set", "train.checkpoint_every=null",
]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("train.steps=true", "train.steps: expected a number, got the boolean True"),
        ("seed=9223372036854775808", "seed: Input should be less than 9223372036854775808"),
        ("decode.max_length=40", "decode.max_length: decoding 40 tokens needs 41 positions"),
        ("data.max_length=32", "data.max_length: sentences of 32 tokens need 33 decoder"),
        ("data.max_length=1", "data: no training pair is left of tatoeba"),
    ],
)
def test_check_refuses_what_training_would(override, expected, tmp_path, capsys):
    assert main(["train", TRANSFORMER, "--check", "--set", override]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    # and training refuses it the same way, leaving no run directory behind
    run_dir = tmp_path / "run"
    assert main(["train", TRANSFORMER, "--set", override, "--run-dir", str(run_dir)]) == 2
    assert expected in capsys.readouterr().err and not run_dir.exists()


def test_a_long_sentence_is_refused_against_the_positions(capsys):
    argv = ["train", TRANSFORMER, "--check", "--set", "data.max_length=null"]
    assert main([*argv, "--set", "model.max_length=8", "--set", "decode.max_length=5"]) == 2
    err = capsys.readouterr().err
    assert "model.max_length: the train split has a sentence needing" in err


@pytest.fixture
def stopped_run(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", TRANSFORMER, *TINY, "--run-dir", str(run_dir), "--quiet"]) == 0
    capsys.readouterr()
    return run_dir


def test_check_on_another_architecture_answers_2(stopped_run, capsys):
    argv = ["train", TRANSFORMER, *TINY, "--set", "model.d_model=32", "--set", "model.nhead=4"]
    assert main([*argv, "--check", "--resume", str(stopped_run)]) == 2
    assert "architecture differs: model.d_model: saved 16, given 32" in capsys.readouterr().err


def test_resume_with_run_dir_is_refused(stopped_run, tmp_path, capsys):
    argv = ["train", TRANSFORMER, *TINY, "--resume", str(stopped_run)]
    assert main([*argv, "--run-dir", str(tmp_path / "elsewhere")]) == 2
    assert "--resume continues RUN_DIR in place" in capsys.readouterr().err


def test_resume_below_the_checkpoint_says_so(stopped_run, capsys):
    argv = ["train", TRANSFORMER, *TINY, "--set", "train.steps=1", "--resume", str(stopped_run)]
    assert main(argv) == 2
    assert "train.steps: 1 is below the run's checkpoint at step 2" in capsys.readouterr().err


def test_eval_set_without_config_is_refused(stopped_run, capsys):
    assert main(["eval", str(stopped_run), "--set", "decode.beam_size=2"]) == 2
    assert "--set changes a configuration given with --config" in capsys.readouterr().err
