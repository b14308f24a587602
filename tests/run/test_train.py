"""Training runs: bit-exact resume in a new process, same seed → same metrics, every shipped
configuration trains, and the commands on a trained run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from attnkit.cli import main
from attnkit.config import load_config, validate
from attnkit.run import read_metrics
from attnkit.train import train

ROOT = Path(__file__).parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

TINY = {
    "name": "tiny",
    "seed": 3,
    "data": {"corpus": "tatoeba", "max_length": 6, "max_pairs": 300},
    "model": {
        "kind": "rnn",
        "style": "bahdanau",
        "embed_dim": 16,
        "hidden_dim": 16,
        "dropout": 0.2,
    },
    "train": {
        "steps": 6,
        "batch_size": 16,
        "lr": 0.01,
        "schedule": "cosine",
        "warmup": 2,
        "log_every": 2,
        "eval_every": 3,
        "checkpoint_every": 2,
    },
    "decode": {"max_length": 8, "max_eval_sentences": 6},
}


def _write(tmp_path: Path, raw: dict, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _history(run_dir: Path) -> list[dict]:
    """The metrics without wall-clock fields."""
    return [{k: v for k, v in m.items() if k != "seconds"} for m in read_metrics(run_dir)]


def _final_state(run_dir: Path, step: int) -> dict:
    return load_file(run_dir / "checkpoints" / f"step-{step:08d}.safetensors")


def _quiet_log(_: str) -> None:
    pass


def test_resume_in_a_new_process_is_bit_exact(tmp_path):
    config = validate(TINY)
    whole = train(config, run_dir=tmp_path / "whole", quiet=True, log=_quiet_log)
    part = train(config, run_dir=tmp_path / "part", stop_after=3, quiet=True, log=_quiet_log)
    assert not (part.path / "results.json").exists()
    assert [m["step"] for m in read_metrics(part.path) if m["split"] == "train"] == [1, 2, 3]
    # the interrupted run logged step 3 but its newest checkpoint is step 3 too; simulate a crash
    # that lost nothing — and resume in a fresh interpreter, one thread like this process
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnkit.cli",
            "train",
            str(_write(tmp_path, TINY)),
            "--resume",
            str(part.path),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    a, b = _final_state(whole.path, 6), _final_state(part.path, 6)
    model_and_optimizer = [k for k in a if not k.startswith("rng.")]
    assert any(k.startswith("optimizer.") for k in model_and_optimizer)
    assert sorted(a) == sorted(b)
    for key in model_and_optimizer:
        assert a[key].equal(b[key]), key
    assert _history(whole.path) == _history(part.path)
    results = [json.loads((r / "results.json").read_text()) for r in (whole.path, part.path)]
    assert results[0]["bleu"] == results[1]["bleu"] and results[0]["loss"] == results[1]["loss"]


def test_resume_drops_metrics_logged_after_the_checkpoint(tmp_path):
    config = validate(TINY)
    whole = train(config, run_dir=tmp_path / "whole", quiet=True, log=_quiet_log)
    part = train(config, run_dir=tmp_path / "part", stop_after=4, quiet=True, log=_quiet_log)
    # a crash after step 4's checkpoint but before step 5's: step-5 metrics exist, no checkpoint
    with (part.path / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": 5, "split": "train", "loss": 123.0}) + "\n")
    train(config, resume=part.path, quiet=True, log=_quiet_log)
    assert _history(whole.path) == _history(part.path)


def test_resume_before_the_first_checkpoint_is_bit_exact(tmp_path):
    """A crash before any checkpoint was written: ``--resume`` starts over from the seed, exactly
    as the uninterrupted run did (initialisation and dropout's stream)."""
    config = validate(TINY)
    whole = train(config, run_dir=tmp_path / "whole", quiet=True, log=_quiet_log)
    part = train(config, run_dir=tmp_path / "part", stop_after=2, quiet=True, log=_quiet_log)
    for path in (part.path / "checkpoints").iterdir():  # lost: only the metrics were written
        path.unlink()
    torch.manual_seed(12345)  # whatever the process did before must not matter
    train(config, resume=part.path, quiet=True, log=_quiet_log)
    a, b = _final_state(whole.path, 6), _final_state(part.path, 6)
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].equal(b[key]), key
    assert _history(whole.path) == _history(part.path)


def test_same_seed_same_metrics_other_seed_other_metrics(tmp_path):
    config = validate(TINY)
    runs = [train(config, run_dir=tmp_path / f"r{i}", quiet=True, log=_quiet_log) for i in (0, 1)]
    assert _history(runs[0].path) == _history(runs[1].path)
    r0, r1 = (json.loads((r.path / "results.json").read_text()) for r in runs)
    assert {k: r0[k] for k in ("bleu", "loss", "samples")} == {
        k: r1[k] for k in ("bleu", "loss", "samples")
    }
    other = train(validate({**TINY, "seed": 4}), run_dir=tmp_path / "o", quiet=True, log=_quiet_log)
    assert _history(other.path) != _history(runs[0].path)


def _fake_hansards(root: Path, pairs: int = 40, gold: int = 104) -> Path:
    """A tiny corpus in the Hansards release's formats (see data/hansards-en-fr/README.md)."""
    words_en = ["the", "house", "minister", "member", "question", "government", "mr.", "speaker"]
    words_fr = ["la", "chambre", "ministre", "depute", "question", "gouvernement", "m.", "orateur"]
    (root / "train-csc401-subset").mkdir(parents=True)
    (root / "gold").mkdir()
    en, fr = [], []
    for i in range(pairs):
        picks = [(i * 7 + j * 3) % len(words_en) for j in range(2 + i % 4)]
        en.append(" ".join(words_en[p] for p in picks).capitalize() + " .")
        fr.append(" ".join(words_fr[p] for p in picks).capitalize() + " .")
    (root / "train-csc401-subset" / "train.e").write_text("\n".join(en) + "\n")
    (root / "train-csc401-subset" / "train.f").write_text("\n".join(fr) + "\n")
    ge, gf, gl = [], [], []
    for i in range(gold):
        picks = [(i * 5 + j) % len(words_en) for j in range(1 + i % 3)]
        ge.append(" ".join(words_en[p] for p in picks) + " ")
        gf.append(" ".join(words_fr[p] for p in picks) + " ")
        gl.append(" ".join(f"{j}-{j}" if j % 2 == 0 else f"{j}?{j}" for j in range(len(picks))))
    (root / "gold" / "test.e").write_text("\n".join(ge) + "\n")
    (root / "gold" / "test.f").write_text("\n".join(gf) + "\n")
    (root / "gold" / "test.pharaoh").write_text("\n".join(gl) + "\n")
    return root


@pytest.mark.parametrize("present", ["nothing", "training text only"])
def test_a_data_root_that_is_not_the_hansards_folder_is_a_config_error(tmp_path, capsys, present):
    root = tmp_path / "not-hansards"
    (root / "train-csc401-subset").mkdir(parents=True)
    (root / "README.md").write_text("some other folder\n")
    expected_missing = ["train-csc401-subset/train.e", "gold/test.pharaoh"]
    if present == "training text only":
        for side in "ef":
            (root / "train-csc401-subset" / f"train.{side}").write_text("a b .\n")
        expected_missing = ["gold/test.e", "gold/test.f", "gold/test.pharaoh"]
    runs = tmp_path / "runs"
    code = main(
        [
            "train",
            str(ROOT / "configs" / "hansards-bahdanau.yaml"),
            "--set",
            f"data.root={root}",
            "--runs-dir",
            str(runs),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"attnkit train: error: data.root: {str(root)!r} is not the hansards")
    for name in expected_missing:
        assert str(root / name) in err
    if present == "training text only":
        assert "train.e" not in err
    assert not runs.exists()  # refused before a run directory was made


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_config_trains_a_few_steps(tmp_path, path):
    overrides = ["train.steps=2", "train.eval_every=2", "train.checkpoint_every=null"]
    if not load_config(path).is_translation:  # a classification task
        overrides += ["data.max_examples=64", "data.max_eval_examples=8"]
        config = load_config(path, overrides)
        run = train(config, runs_dir=tmp_path / "runs", quiet=True, log=_quiet_log)
        results = json.loads((run.path / "results.json").read_text())
        assert results["examples"] == min(8, results["examples"]) and results["examples"] > 0
        for metrics in (results, results["uniform_attention"]):
            assert 0.0 <= metrics["accuracy"] <= 1.0 and 0.0 <= metrics["macro_f1"] <= 1.0
        assert (run.path / "report.html").is_file() and (run.path / "task.json").is_file()
        return
    overrides += [
        "data.max_pairs=64",
        "decode.max_eval_sentences=3",
        "decode.max_length=5",
    ]
    if load_config(path).data.corpus == "hansards":
        overrides.append(f"data.root={_fake_hansards(tmp_path / 'hansards')}")
    config = load_config(path, overrides)
    run = train(config, runs_dir=tmp_path / "runs", quiet=True, log=_quiet_log)
    results = json.loads((run.path / "results.json").read_text())
    assert results["sentences"] == 3 and 0.0 <= results["bleu"] <= 100.0
    if config.data.corpus == "hansards":
        assert 0.0 <= results["aer"] <= 1.0
    assert (run.path / "report.html").is_file() and list((run.path / "heatmaps").glob("*.png"))
    losses = [m for m in read_metrics(run.path) if m["split"] == "train"]
    assert len(losses) == 2 and all(m["loss"] > 0 for m in losses)
    if config.train.supervised_weight > 0:
        assert all("attention_loss" in m for m in losses)
        assert (run.path / "links.pharaoh").is_file()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trained")
    return train(validate(TINY), run_dir=tmp / "run", quiet=True, log=_quiet_log), tmp


def test_eval_and_translate_commands(trained, capsys):
    run, _ = trained
    assert main(["eval", str(run.path), "--split", "valid", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "valid split" in out and "BLEU" in out
    assert json.loads((run.path / "eval-valid.json").read_text())["step"] == 6
    assert main(["translate", str(run.path), "I love you."]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [w.removesuffix("(unk)") for w in lines[1].split()]  # tiny vocabulary: unknowns
    assert header == ["i", "love", "you", "."]  # the matrix's header: the source words
    assert lines[-1].startswith("<eos>")
    rows = [[float(x) for x in line.split()[1:]] for line in lines[2:]]
    assert all(abs(sum(r) - 1.0) < 0.02 for r in rows)  # each target word's weights sum to 1


def test_a_uniform_attention_run_is_read_uniform_everywhere(tmp_path, capsys):
    """A run trained with ``train.attention: uniform`` is that model wherever it is read: its
    report's matrices, ``attnkit eval`` (the final evaluation's test loss again) and ``attnkit
    translate`` all weigh the source positions equally (survey §4.1's uniform attention)."""
    raw = {**TINY, "train": {**TINY["train"], "attention": "uniform"}}
    run = train(validate(raw), run_dir=tmp_path / "run", quiet=True, log=_quiet_log)
    results = json.loads((run.path / "results.json").read_text())
    rows = [row for shown in results["showcase"] for row in shown["weights"]]
    assert rows and all(row == pytest.approx([1 / len(row)] * len(row), abs=1e-6) for row in rows)
    assert main(["eval", str(run.path), "--split", "test", "--quiet"]) == 0
    again = json.loads((run.path / "eval-test.json").read_text())
    assert again["loss"] == pytest.approx(results["loss"], rel=1e-6)
    capsys.readouterr()
    assert main(["translate", str(run.path), "I love you."]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = [[float(x) for x in line.split()[1:]] for line in lines[2:]]  # 2 decimals
    assert shown and all(row == pytest.approx([row[0]] * len(row), abs=0.006) for row in shown)


@pytest.mark.parametrize("how", ["empty", "truncated", "corrupted"])
def test_damaged_checkpoint_exit_code_1_one_line(trained, capsys, how, tmp_path):
    import shutil

    run, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(run.path, copy)
    tensors = sorted((copy / "checkpoints").glob("*.safetensors"))[-1]
    blob = tensors.read_bytes()
    tensors.write_bytes(
        {
            "empty": b"",
            "truncated": blob[: len(blob) // 2],
            "corrupted": blob[:100] + b"\x00" * 50 + blob[150:],
        }[how]
    )
    assert main(["eval", str(copy), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tensors) in err and "Traceback" not in err


def test_eval_refuses_a_different_architecture(trained, capsys, tmp_path):
    run, _ = trained
    other = _write(tmp_path, {**TINY, "model": {**TINY["model"], "hidden_dim": 32}})
    assert main(["eval", str(run.path), "--config", str(other), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "model.hidden_dim: saved 16, given 32" in err and err.count("\n") == 1


def test_resume_refuses_a_different_architecture(trained, capsys, tmp_path):
    run, _ = trained
    other = _write(tmp_path, {**TINY, "model": {**TINY["model"], "embed_dim": 8}})
    assert main(["train", str(other), "--resume", str(run.path), "--quiet"]) == 1
    assert "model.embed_dim: saved 16, given 8" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["demo", "train", "eval", "translate", "view", "zoo", "info"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: attnkit {command}")


def test_view_command_writes_one_page(trained, capsys, tmp_path):
    run, _ = trained
    page = tmp_path / "page.html"
    assert main(["view", str(run.path), "--input", "I love you.", "--output", str(page)]) == 0
    assert capsys.readouterr().out.strip() == f"attention viewer: {page}"
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "cross-attention" in text
