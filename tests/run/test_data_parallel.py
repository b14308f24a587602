"""``torchrun --nproc-per-node 2 -m attnkit train``: two CPU processes (gloo), each on half of
every global batch, end with the weights of one process trained on the whole batches (issue 11
item 1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from attnkit.config import validate
from attnkit.run import read_metrics
from attnkit.train import train

TINY = {
    "name": "ddp",
    "seed": 5,
    "data": {"corpus": "tatoeba", "max_length": 6, "max_pairs": 200},
    "model": {
        "kind": "rnn",
        "style": "luong",
        "score": "general",
        "embed_dim": 16,
        "hidden_dim": 16,
        "dropout": 0.0,
    },
    "train": {"steps": 4, "batch_size": 16, "lr": 0.01, "log_every": 1, "checkpoint_every": 2},
    "decode": {"max_length": 6, "max_eval_sentences": 4},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _weights(run_dir: Path) -> dict:
    return load_file(run_dir / "checkpoints" / "step-00000004.safetensors")


#: a classification task (issue 9): a 3-hop memory network on generated questions
MEMORY_QA = {
    "name": "ddp-qa",
    "seed": 2,
    "data": {"corpus": "memory_qa", "max_examples": 120, "max_eval_examples": 16},
    "model": {"kind": "memory_network", "embed_dim": 12, "hops": 3},
    "train": {"steps": 4, "batch_size": 15, "lr": 0.01, "log_every": 1, "checkpoint_every": 2},
}


@pytest.mark.parametrize("style", ["luong", "bahdanau", "memory_network"])
def test_two_processes_match_one(tmp_path, style):
    if style == "memory_network":  # an odd batch: the ranks hold 8 and 7 examples
        raw = MEMORY_QA
    else:
        raw = {
            **TINY,
            "model": {
                **TINY["model"],
                "style": style,
                "score": "general" if style == "luong" else "additive",
            },
        }
    config_path = tmp_path / "ddp.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    single = train(validate(raw), run_dir=tmp_path / "single", quiet=True, log=lambda _: None)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_free_port()),
            "-m",
            "attnkit",
            "train",
            str(config_path),
            "--run-dir",
            str(tmp_path / "ddp"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("run directory:") == 1  # rank 0 alone reports
    a, b = _weights(single.path), _weights(tmp_path / "ddp")
    keys = [k for k in a if k.startswith(("model.", "optimizer."))]
    assert keys and sorted(a) == sorted(b)
    worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in keys)
    assert worst <= 1e-5
    losses = [
        [m["loss"] for m in read_metrics(d) if m["split"] == "train"]
        for d in (single.path, tmp_path / "ddp")
    ]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
