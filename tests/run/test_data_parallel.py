"""``torchrun --nproc-per-node 2 -m attnkit train``: two CPU processes (gloo), each on half of
every global batch, end with the weights of one process trained on the whole batches, also when
stopped and resumed; only rank 0 writes; a peer that dies or hangs stops rank 0 with one clear
error line within ``--timeout``."""

from __future__ import annotations

import json
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


def _torchrun(
    config_path: Path, *args: str, script: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 -m attnkit train CONFIG ARGS --quiet`` (or ``script``, a
    wrapper that calls :func:`attnkit.cli.main`, in place of ``-m attnkit``), on 127.0.0.1."""
    program = [str(script)] if script is not None else ["-m", "attnkit"]
    return subprocess.run(
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
            *program,
            "train",
            str(config_path),
            *args,
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        timeout=180,  # nothing may hang the test suite
        check=False,
    )


def _why(done: subprocess.CompletedProcess) -> str:
    """What a failed launch printed that says why: the ranks' own error lines (torchrun's
    summary, at the end, only names the signal), then the end of stderr."""
    causes = [line for line in done.stderr.splitlines()
              if any(word in line for word in ("Error", "error:", "terminate", "what()"))]  # fmt: skip
    return "\n".join(causes[:20]) + "\n...\n" + done.stderr[-1500:]


def _weights(run_dir: Path) -> dict:
    return load_file(run_dir / "checkpoints" / "step-00000004.safetensors")


#: a classification task: a 3-hop memory network on generated questions
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
    done = _torchrun(config_path, "--run-dir", str(tmp_path / "ddp"))
    assert done.returncode == 0, _why(done)
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


@pytest.fixture(scope="module")
def single_tiny(tmp_path_factory) -> Path:
    """The run directory of one process trained on TINY without interruption (the reference)."""
    path = tmp_path_factory.mktemp("single") / "run"
    return train(validate(TINY), run_dir=path, quiet=True, log=lambda _: None).path


def _worst_difference(a_dir: Path, b_dir: Path) -> float:
    """Max abs difference of the step-4 model parameters and Adam moments of two runs."""
    a, b = _weights(a_dir), _weights(b_dir)
    keys = [k for k in a if k.startswith(("model.", "optimizer."))]
    assert keys and sorted(a) == sorted(b)
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in keys)


def _train_steps(run_dir: Path) -> list[int]:
    return [m["step"] for m in read_metrics(run_dir) if m["split"] == "train"]


def test_stopped_and_resumed_two_processes_match_one_uninterrupted_process(tmp_path, single_tiny):
    config_path = tmp_path / "ddp.yaml"
    config_path.write_text(yaml.safe_dump(TINY))
    run_dir = tmp_path / "ddp"
    first = _torchrun(config_path, "--run-dir", str(run_dir), "--stop-after", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    assert not (run_dir / "checkpoints" / "step-00000004.json").exists()
    assert _train_steps(run_dir) == [1, 2]
    second = _torchrun(config_path, "--resume", str(run_dir))
    assert second.returncode == 0, second.stderr[-2000:]
    assert _train_steps(run_dir) == [1, 2, 3, 4]  # every step logged once, by rank 0
    assert _worst_difference(single_tiny, run_dir) <= 1e-5
    assert (run_dir / "results.json").is_file()


#: the wrapper torchrun starts instead of ``-m attnkit``: it changes nothing in attnkit, only
#: watches (AK_TEST_WRITES: every file rank R writes or creates under the run directory, from
#: Python's audit events, saved to DIR/writes-R.json) or breaks rank 1 (AK_TEST_FAIL=exits|hangs:
#: after its loss of step K rank 1 leaves with code 0 — so that torchrun, which stops every
#: process as soon as one *fails*, leaves rank 0 to find out by itself — or sleeps)
WRAPPER = """
import json, os, sys, time

rank = os.environ["RANK"]
writes, run_dir = [], os.path.realpath(sys.argv[sys.argv.index("--run-dir") + 1])


def inside(path):
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # a file descriptor
    path = os.path.realpath(os.fsdecode(path))
    return path == run_dir or path.startswith(run_dir + os.sep)


def watch(event, args):
    if event == "open":
        path, mode, flags = args
        intent = mode is not None and any(c in mode for c in "wax+")
        intent |= mode is None and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if intent and inside(path):
            writes.append([event, os.fsdecode(path)])
    elif event in ("os.mkdir", "os.remove") and inside(args[0]):
        writes.append([event, os.fsdecode(args[0])])
    elif event == "os.rename" and inside(args[1]):  # os.replace: its destination
        writes.append([event, os.fsdecode(args[1])])


if "AK_TEST_WRITES" in os.environ:
    sys.addaudithook(watch)

if "AK_TEST_FAIL" in os.environ:
    import attnkit.tasks.translation

    how, step = os.environ["AK_TEST_FAIL"].split(":")
    original, calls = attnkit.tasks.translation.TranslationJob.loss, []

    def loss(self, model, batch):
        out = original(self, model, batch)
        calls.append(1)
        if os.environ.get("RANK") == "1" and len(calls) == int(step):
            if how == "exits":
                os._exit(0)
            time.sleep(120)  # alive, silent; torchrun ends it once rank 0 has failed
        return out

    attnkit.tasks.translation.TranslationJob.loss = loss

from attnkit.cli import main

code = main(sys.argv[1:])
if "AK_TEST_WRITES" in os.environ:
    with open(os.path.join(os.environ["AK_TEST_WRITES"], f"writes-{rank}.json"), "w") as f:
        json.dump(writes, f)
sys.exit(code)
"""


def test_only_rank_0_writes_the_run(tmp_path, single_tiny):
    config_path = tmp_path / "ddp.yaml"
    config_path.write_text(yaml.safe_dump(TINY))
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    run_dir = tmp_path / "ddp"
    done = _torchrun(
        config_path, "--run-dir", str(run_dir), script=script, env={"AK_TEST_WRITES": str(tmp_path)}
    )
    assert done.returncode == 0, _why(done)
    writes = [json.loads((tmp_path / f"writes-{r}.json").read_text()) for r in (0, 1)]
    assert writes[1] == []  # rank 1 wrote, created, renamed or removed nothing in the run
    written = {Path(path).relative_to(run_dir.resolve()).as_posix() for _, path in writes[0]}
    # the watch sees rank 0's writes: the run's files, the metrics, both checkpoints, the report
    assert {"config.yaml", "vocab.json", "metrics.jsonl", "results.json", "report.html"} <= written
    assert {
        f"checkpoints/step-0000000{s}.{x}" for s in (2, 4) for x in ("json", "safetensors")
    } <= (written)
    assert _train_steps(run_dir) == [1, 2, 3, 4]  # one set of metrics
    # one set of files: the same as a single process's run directory
    listing = [
        sorted(p.relative_to(d).as_posix() for p in d.rglob("*")) for d in (single_tiny, run_dir)
    ]
    assert listing[0] == listing[1]


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("exits", "a peer's connection closed: a peer process died"),
        ("hangs", "no answer from a peer within 4 s (attnkit train --timeout SECONDS)"),
    ],
)
def test_a_dead_or_silent_rank_stops_training_with_one_clear_error(tmp_path, how, message):
    config_path = tmp_path / "ddp.yaml"
    config_path.write_text(yaml.safe_dump(TINY))
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    done = _torchrun(
        config_path,
        "--run-dir",
        str(tmp_path / "ddp"),
        "--timeout",
        "4",
        script=script,
        env={"AK_TEST_FAIL": f"{how}:2"},
    )  # bounded: _torchrun's own 180 s timeout fails the test instead of hanging it
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("attnkit train:")]
    assert len(errors) == 1, done.stderr[-3000:]
    # rank 1 left (or went silent) in step 2, during DDP's gradient all-reduce
    assert errors[0].startswith(
        "attnkit train: error: rank 0 of 2 (data-parallel training, step 2 of 4): communication "
        "with the other ranks failed — " + message
    ), errors[0]
    if how == "hangs":
        assert "Timed out waiting 4000ms" in errors[0]  # gloo used the configured timeout
    assert done.stdout.count("run directory:") == 0
