"""Runs written before the training set-up was rewritten resume: the same losses, bit for bit.

``tests/run/old_runs/`` holds two runs made by attnkit as it was before the set-up changed
(commit 0562d37, ``attnkit train old_runs/NAME.yaml``): ``NAME-cut`` stopped after step 3
(``--stop-after 3``) and, of the uninterrupted ``NAME-whole``, its metrics and step-6 checkpoint.
A translation run with supervised attention (Tatoeba, IBM Model 1 links) and a classification run
(GAT on the karate club). Resuming the cut run today must give the whole run's losses
exactly, and its weights and optimizer state to float32 rounding: the runs were written on another
machine, and a CPU with other vector instructions rounds differently in the last bits
(measured on an AVX2 machine, 2026-12-02: every loss equal, weights apart by at most 1.2e-7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli import main

OLD = Path(__file__).parent / "old_runs"


def _train_records(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows if r["split"] == "train"]


@pytest.mark.parametrize("name", ["tatoeba", "karate"])
def test_an_old_run_resumes_bit_exactly(name, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(OLD / f"{name}-cut", run)
    assert main(["train", str(OLD / f"{name}.yaml"), "--resume", str(run), "--quiet"]) == 0
    whole = OLD / f"{name}-whole"
    assert _train_records(run / "metrics.jsonl") == _train_records(whole / "metrics.jsonl")
    got = load_file(run / "checkpoints" / "step-00000006.safetensors")
    expected = load_file(whole / "step-00000006.safetensors")
    assert got.keys() == expected.keys()
    for key, tensor in expected.items():
        # numpy's generator is saved but never drawn from in training: its state is the
        # process's, not the run's
        if key != "rng.numpy":
            torch.testing.assert_close(got[key], tensor, msg=key)
