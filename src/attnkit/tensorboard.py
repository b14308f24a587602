"""TensorBoard logging of a run: scalars and attention heatmaps (``torch.utils.tensorboard``).

The ``tensorboard`` package is an optional extra (``pip install "attnkit[tensorboard]"``); it is
imported when a :class:`TensorBoardLogger` is made, so ``import attnkit`` never needs it. Scalars
go under their names (``train/loss``, ``eval/bleu``), attention maps as images under
``attention/<name>``: the heatmap :func:`attnkit.interpret.plot_heatmap` draws (matplotlib,
no display needed), rendered by ``SummaryWriter.add_figure``.

    >>> with TensorBoardLogger("runs/tiny/tensorboard") as tb:
    ...     tb.log_scalars({"train/loss": 2.31, "train/lr": 1e-3}, step=100)
    ...     tb.log_attention("cross-attention", weights, step=100, rows=target, columns=source)

Then ``tensorboard --logdir runs/tiny/tensorboard``.

A resumed run first cuts its event files back to its checkpoint's step
(:func:`truncate_events`), as it cuts ``metrics.jsonl``: the steps it trains again are logged
once, not twice.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.image
from torch import Tensor

from attnkit.checkpoint import atomic_write
from attnkit.interpret.plots import plot_heatmap


class TensorBoardLogger:
    """Writes scalars and attention heatmaps to a TensorBoard event file.

    Args:
        log_dir: the directory of the event files (created if missing).
        flush_secs: how often pending events are written (also on :meth:`flush` and :meth:`close`).

    Raises:
        ImportError: the ``tensorboard`` package is not installed (the message names the extra).
    """

    def __init__(self, log_dir: str | os.PathLike[str], *, flush_secs: int = 30) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # torch's module needs the tensorboard package
            raise ImportError(
                "TensorBoard logging needs the tensorboard package: pip install 'attnkit[tensorboard]'"
            ) from error
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer: Any = SummaryWriter(log_dir=str(self.log_dir), flush_secs=flush_secs)

    def log_scalar(self, tag: str, value: float | Tensor, step: int) -> None:
        """One scalar (``tag`` like ``"train/loss"``) at ``step``; NaN and inf are logged as is."""
        _check_step(step)
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"scalar {tag!r} must have one element, got shape {tuple(value.shape)}"
                )
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"scalar {tag!r} must be a number, got {type(value).__name__}")
        self._writer.add_scalar(tag, float(value), global_step=step)

    def log_scalars(self, scalars: Mapping[str, float | Tensor], step: int) -> None:
        """Each ``{tag: value}`` at ``step`` (e.g. a row of ``metrics.jsonl``); non-numeric
        values (strings, ``None``) are skipped, since TensorBoard's scalars are numbers."""
        for tag, value in scalars.items():
            if isinstance(value, Tensor) or (
                isinstance(value, (int, float)) and not isinstance(value, bool)
            ):
                self.log_scalar(tag, value, step)

    def log_attention(
        self,
        name: str,
        weights: Tensor,
        step: int,
        *,
        rows: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        title: str | None = None,
    ) -> None:
        """A heatmap of one attention map under ``attention/<name>``.

        Args:
            name: e.g. ``"cross-attention"`` or ``"encoder.layers.0.self_attn"``.
            weights: ``[R, C]``, or ``[H, R, C]`` / ``[1, H, R, C]`` (heads averaged).
            step: the global step.
            rows, columns: token labels of the axes (query / key tokens).
            title: the figure's title (default: ``name`` and the step).
        """
        matrix = _matrix(name, weights)
        if not math.isfinite(float(matrix.sum())):
            raise ValueError(f"attention {name!r} has NaN or inf weights")
        figure = plot_heatmap(
            matrix,
            list(columns) if columns is not None else None,
            list(rows) if rows is not None else None,
            title=title if title is not None else f"{name} (step {step})",
        )
        self._writer.add_figure(
            f"attention/{name}", figure, global_step=step, close=False
        )  # not a pyplot figure: nothing to close

    def log_image(self, name: str, path: str | os.PathLike[str], step: int) -> None:
        """A PNG file (e.g. a report's attention figure) under ``<name>`` at ``step``."""
        _check_step(step)
        pixels = matplotlib.image.imread(os.fspath(path))  # [h, w, 3 or 4] floats in [0, 1]
        self._writer.add_image(name, pixels[..., :3], global_step=step, dataformats="HWC")

    def flush(self) -> None:
        """Write pending events to disk."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def __enter__(self) -> TensorBoardLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def truncate_events(log_dir: str | os.PathLike[str], step: int) -> str | None:
    """Keep only the events up to ``step`` in the event files of ``log_dir``: a run resumed from
    its checkpoint of ``step`` logs the later steps again (as :func:`attnkit.run.truncate_metrics`
    keeps ``metrics.jsonl``'s lines up to it).

    ``SummaryWriter(purge_step=...)`` only asks TensorBoard's reader to hide the later events,
    and only works when the new event file sorts after the old ones (their names start with the
    second they were made: a resume within that second may sort first); cutting the files makes
    every reader see each step once. Each file holding a later event is rewritten atomically,
    its records unchanged; a torn last record (a crash mid-write) ends the file. Call it holding
    the run's lock. Returns a one-line note when event files exist but the ``tensorboard``
    package to read them is not installed (nothing is changed then), else ``None``."""
    _check_step(step)
    directory = Path(log_dir)
    if not directory.is_dir():
        return None
    events = []
    for path in sorted(directory.iterdir()):
        if "tfevents" not in path.name or not path.is_file():
            continue
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            # an interrupted rewrite's temporary file: TensorBoard reads any "*tfevents*" file
            path.unlink(missing_ok=True)
        else:
            events.append(path)
    if not events:
        return None
    try:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError:
        return (
            f"{directory}: its events after step {step} were not removed (the tensorboard "
            "package is not installed): TensorBoard will show the steps trained again twice"
        )
    for path in events:
        records = list(RawEventFileLoader(str(path)).Load())
        kept = [record for record in records if Event.FromString(record).step <= step]
        if len(kept) < len(records):
            data = io.BytesIO()
            writer = RecordWriter(data)
            for record in kept:
                writer.write(record)
            atomic_write(path, data.getvalue())
    return None


def _check_step(step: int) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")


def _matrix(name: str, weights: Tensor) -> Tensor:
    if not isinstance(weights, Tensor):
        raise TypeError(f"attention {name!r} must be a Tensor, got {type(weights).__name__}")
    w = weights.detach().float().cpu()
    if w.dim() == 4 and w.shape[0] == 1:
        w = w[0]
    if w.dim() == 3:
        w = w.mean(0)  # the mean over heads, as the report shows
    if w.dim() != 2:
        raise ValueError(
            f"attention {name!r} must be [R, C], [H, R, C] or [1, H, R, C], got {tuple(weights.shape)}"
        )
    return w
