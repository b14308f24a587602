"""attnkit.tensorboard: what it writes is read back by TensorBoard's own event reader."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "tensorboard",
    reason="optional: tensorboard is not installed (pip install 'attnkit[tensorboard]'; "
    "`make test` tries it)",
)

from tensorboard.backend.event_processing.event_accumulator import (
    IMAGES,
    SCALARS,
    EventAccumulator,
)

from attnkit.tensorboard import TensorBoardLogger


def read(log_dir) -> EventAccumulator:
    events = EventAccumulator(str(log_dir), size_guidance={SCALARS: 0, IMAGES: 0})
    events.Reload()
    return events


def test_scalars_and_attention_images_are_read_back(tmp_path) -> None:
    weights = torch.softmax(torch.randn(2, 3, 4), dim=-1)  # [H, R, C]
    with TensorBoardLogger(tmp_path / "tb") as tb:
        tb.log_scalars({"train/loss": 2.5, "train/lr": 1e-3, "note": "text"}, step=10)
        tb.log_scalar("train/loss", torch.tensor(1.25), step=20)
        tb.log_scalars({"eval/accuracy": 0.75}, step=20)
        tb.log_attention(
            "cross-attention", weights, step=20, rows=list("abc"), columns=list("wxyz")
        )
    events = read(tmp_path / "tb")
    tags = events.Tags()
    assert set(tags["scalars"]) == {"train/loss", "train/lr", "eval/accuracy"}
    loss = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert loss == [(10, 2.5), (20, 1.25)]
    assert events.Scalars("train/lr")[0].value == pytest.approx(1e-3)
    assert events.Scalars("eval/accuracy")[0].step == 20
    assert tags["images"] == ["attention/cross-attention"]
    (image,) = events.Images("attention/cross-attention")
    assert image.step == 20 and image.width > 50 and image.height > 50
    assert image.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda tb: tb.log_scalar("x", "high", 0), TypeError),
        (lambda tb: tb.log_scalar("x", torch.ones(2), 0), ValueError),
        (lambda tb: tb.log_scalar("x", 1.0, -1), ValueError),
        (lambda tb: tb.log_attention("a", torch.ones(2, 2, 2, 2), 0), ValueError),
        (lambda tb: tb.log_attention("a", torch.full((2, 2), float("nan")), 0), ValueError),
    ],
)
def test_bad_input_is_refused(tmp_path, call, error) -> None:
    with TensorBoardLogger(tmp_path) as tb, pytest.raises(error):
        call(tb)


def test_attnkit_train_tensorboard_logs_the_run_and_the_reports_heatmaps(tmp_path) -> None:
    """``attnkit train --tensorboard`` through the real command: the event file holds the
    training and validation scalars, and an alignment heatmap per evaluation."""
    import subprocess
    import sys

    import yaml

    config = {
        "name": "tb",
        "seed": 5,
        "data": {"corpus": "tatoeba", "max_length": 6, "max_pairs": 200},
        "model": {"kind": "rnn", "style": "luong", "score": "general", "embed_dim": 16,
                  "hidden_dim": 16, "dropout": 0.0},
        "train": {"steps": 4, "batch_size": 16, "lr": 0.01, "log_every": 1, "eval_every": 2},
        "decode": {"max_length": 8, "max_eval_sentences": 10},
    }  # fmt: skip
    path = tmp_path / "tb.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir, flags = tmp_path / "run", ["--tensorboard", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", "train", str(path), "--run-dir", str(run_dir), *flags],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    events = read(run_dir / "tensorboard")
    scalars = events.Tags()["scalars"]
    assert {"train/loss", "train/lr", "valid/loss"} <= set(scalars)
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert [e.step for e in events.Scalars("valid/loss")] == [2, 4]
    heatmaps = [tag for tag in events.Tags()["images"] if tag.startswith("attention/alignment/")]
    assert heatmaps, events.Tags()["images"]
    assert [e.step for e in events.Images(heatmaps[0])] == [2, 4]
    assert not list(run_dir.glob(".tensorboard-*"))  # the scratch folders are gone
