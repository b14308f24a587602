"""A run interrupted after its last checkpoint and resumed logs every step to TensorBoard once,
as its ``metrics.jsonl`` does: the event files are cut back to the checkpoint's step before the
steps after it are trained again. Read back with TensorBoard's own EventAccumulator and, record by
record, with its raw event-file reader."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "tensorboard",
    reason="optional: tensorboard is not installed (pip install 'attnkit[tensorboard]'; "
    "`make test` tries it)",
)

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event

from attnkit.config import validate
from attnkit.run import read_metrics
from attnkit.tensorboard import TensorBoardLogger, truncate_events
from attnkit.train import train

CONFIG = {
    "name": "board",
    "seed": 4,
    "data": {"corpus": "tatoeba", "max_length": 5, "max_pairs": 60},
    "model": {"kind": "rnn", "style": "luong", "score": "dot", "embed_dim": 8, "hidden_dim": 8},
    "train": {
        "steps": 8,
        "batch_size": 8,
        "lr": 0.01,
        "log_every": 1,
        "checkpoint_every": 2,
        "keep_checkpoints": 3,
        "tensorboard": True,
    },
    "decode": {"max_length": 5, "max_eval_sentences": 2},
}


def _quiet(_: str) -> None:
    pass


def _scalar_steps(log_dir) -> dict[str, list[int]]:
    events = EventAccumulator(str(log_dir), size_guidance={SCALARS: 0})
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _raw_records(log_dir) -> list[tuple[str, int]]:
    """(tag, step) of every scalar record in every event file, as any reader sees them."""
    records = []
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():
            event = Event.FromString(raw)
            records += [(value.tag, event.step) for value in event.summary.value]
    return records


def test_a_resume_after_an_interruption_logs_each_step_once(tmp_path):
    config = validate(CONFIG)
    run_dir = tmp_path / "run"
    train(config, run_dir=run_dir, stop_after=5, quiet=True, log=_quiet)
    # interrupted after step 5 was logged, before its checkpoint: the newest is step 4's
    for suffix in (".json", ".safetensors"):
        (run_dir / "checkpoints" / f"step-00000005{suffix}").unlink()
    board = run_dir / "tensorboard"
    assert _scalar_steps(board)["train/loss"] == [1, 2, 3, 4, 5]
    train(config, resume=run_dir, stop_after=6, quiet=True, log=_quiet)
    metrics = [m for m in read_metrics(run_dir) if m["split"] == "train"]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    steps = _scalar_steps(board)
    assert set(steps) == {"train/loss", "train/nll", "train/lr"}
    for tag, logged in steps.items():
        assert logged == [1, 2, 3, 4, 5, 6], tag
    records = _raw_records(board)
    assert sorted(records) == sorted(set(records))  # no step twice in any file
    # the values are the resumed run's, as in metrics.jsonl
    events = EventAccumulator(str(board), size_guidance={SCALARS: 0})
    events.Reload()
    logged = [e.value for e in events.Scalars("train/loss")]
    assert logged == pytest.approx([m["loss"] for m in metrics], rel=1e-6)


def test_truncate_events_keeps_the_steps_up_to_the_checkpoint(tmp_path):
    board = tmp_path / "tb"
    with TensorBoardLogger(board) as tb:
        for step in range(1, 6):
            tb.log_scalars({"train/loss": 1.0 / step}, step)
    [events] = board.glob("events.out.tfevents.*")
    stale = board / f".{events.name}.a1b2c3d4.tmp"  # an interrupted rewrite's temporary file
    stale.write_bytes(events.read_bytes())
    before = events.stat().st_ino
    assert truncate_events(board, 5) is None
    assert events.stat().st_ino == before  # nothing after step 5: not rewritten
    assert not stale.exists()  # TensorBoard would have read it as a second event file
    assert truncate_events(board, 3) is None
    assert _scalar_steps(board) == {"train/loss": [1, 2, 3]}
    assert not list(board.glob(".*"))  # written atomically
    assert truncate_events(tmp_path / "absent", 3) is None
