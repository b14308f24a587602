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
