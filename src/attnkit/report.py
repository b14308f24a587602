"""Run reports: alignment matrices in the terminal, PNG heatmaps, one self-contained HTML page.

The alignment matrix is the classic figure of attention ("I love you." → "Je t'aime."): target words as rows, source
words as columns, each cell the attention weight of that target word on that source word.
The HTML report embeds its images (base64 PNG) and styles, so it opens without network access.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from torch import Tensor

from attnkit.checkpoint import atomic_write
from attnkit.config import RunConfig
from attnkit.interpret.plots import _new_figure, plot_alignment


@dataclass
class Alignment:
    """One translation with its attention: ``weights [len(target), len(source)]``."""

    source: list[str]
    target: list[str]
    weights: Tensor


def describe_model(config: RunConfig) -> str:
    """The model of ``config`` in a few words, for reports and the attention viewer
    (``"bahdanau GRU encoder-decoder, additive score, global alignment"``): its section's
    :meth:`~attnkit.config.ModelSection.describe`."""
    return config.model.describe()


def format_matrix(alignment: Alignment, digits: int = 2) -> str:
    """The alignment matrix as text: a header of source words, one row per target word."""
    source, target, w = alignment.source, alignment.target, alignment.weights
    if tuple(w.shape) != (len(target), len(source)):
        raise ValueError(
            f"weights must be [len(target), len(source)] = [{len(target)}, {len(source)}], "
            f"got {tuple(w.shape)}"
        )
    width = max([digits + 2, *(len(s) for s in source)])
    label = max([6, *(len(t) for t in target)])
    lines = [" " * label + " " + " ".join(s.rjust(width) for s in source)]
    for t, row in zip(target, w.tolist(), strict=True):
        cells = " ".join(f"{v:.{digits}f}".rjust(width) for v in row)
        lines.append(t.ljust(label) + " " + cells)
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "sentence"


def save_heatmaps(alignments: Sequence[Alignment], directory: str | Path) -> list[Path]:
    """One PNG per alignment (``NN-<source words>.png``) in ``directory``."""

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, a in enumerate(alignments):
        path = directory / f"{i + 1:02d}-{_slug(' '.join(a.source))}.png"
        buffer = io.BytesIO()
        fig = plot_alignment(a.weights, a.source, a.target)
        fig.savefig(buffer, format="png", dpi=100)
        plt.close(fig)
        atomic_write(path, buffer.getvalue())
        paths.append(path)
    return paths


def _loss_curve_png(metrics: Sequence[Mapping[str, Any]]) -> bytes | None:

    train = [(m["step"], m["loss"]) for m in metrics if m.get("split") == "train"]
    valid = [(m["step"], m["loss"]) for m in metrics if m.get("split") == "valid"]
    if not train:
        return None
    fig = _new_figure(6.0, 3.2)
    ax = fig.add_subplot()
    k = max(1, len(train) // 200)  # a running mean over ~0.5% of the run keeps the curve readable
    steps = [s for s, _ in train][k - 1 :]
    smooth = [sum(v for _, v in train[i - k + 1 : i + 1]) / k for i in range(k - 1, len(train))]
    ax.plot(steps, smooth, label="train loss")
    if valid:
        ax.plot(*zip(*valid, strict=True), "o-", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _cell(value: float) -> str:
    if not math.isfinite(value):  # a diverged model (train.stop_on_nonfinite: false)
        return f'<td style="background:#c00;color:#fff">{value}</td>'
    # the classic alignment figure: white = all the weight, black = none (as the PNG heatmaps)
    shade = int(255 * min(max(value, 0.0), 1.0))
    ink = "#000" if value > 0.5 else "#fff"
    return f'<td style="background:rgb({shade},{shade},{shade});color:{ink}">{value:.2f}</td>'


def _matrix_html(a: Alignment) -> str:
    head = "".join(f"<th>{html.escape(s)}</th>" for s in a.source)
    rows = "".join(
        f"<tr><th>{html.escape(t)}</th>{''.join(_cell(v) for v in row)}</tr>"
        for t, row in zip(a.target, a.weights.tolist(), strict=True)
    )
    return f'<table class="matrix"><tr><th></th>{head}</tr>{rows}</table>'


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.5rem} h2{font-size:1.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0} td,th{padding:.25rem .5rem;text-align:right}
table.kv td,table.kv th{border-bottom:1px solid #ddd;text-align:left}
table.matrix td{font-variant-numeric:tabular-nums;min-width:2.6rem;text-align:center}
table.matrix th{font-weight:600} .pair{margin:1.5rem 0} img{max-width:100%}
.note{color:#555;font-size:.9rem}
"""


def write_report(
    path: str | Path,
    *,
    title: str,
    summary: Mapping[str, Any],
    alignments: Sequence[Alignment],
    metrics: Sequence[Mapping[str, Any]] = (),
    images: Sequence[Path] = (),
    notes: str = "",
) -> Path:
    """Write the self-contained HTML report: summary table, loss curve, each translation with its
    alignment matrix (as a shaded table and as the PNG heatmap). Returns ``path``."""
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if notes:
        parts.append(f'<p class="note">{html.escape(notes)}</p>')
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in summary.items()
    )
    parts.append(f'<h2>Run</h2><table class="kv">{rows}</table>')
    curve = _loss_curve_png(metrics)
    if curve is not None:
        encoded = base64.b64encode(curve).decode()
        parts.append(
            f'<h2>Training</h2><img alt="loss curve" src="data:image/png;base64,{encoded}">'
        )
    parts.append("<h2>Translations and their attention</h2>")
    parts.append(
        '<p class="note">Rows: target (French) words; columns: source (English) words; each '
        "cell is the attention weight (rows sum to 1).</p>"
    )
    for i, a in enumerate(alignments):
        block = [
            f'<div class="pair"><p><b>{html.escape(" ".join(a.source))}</b> → '
            f"{html.escape(' '.join(a.target))}</p>",
            _matrix_html(a),
        ]
        if i < len(images):
            data = base64.b64encode(Path(images[i]).read_bytes()).decode()
            block.append(f'<img alt="alignment heatmap" src="data:image/png;base64,{data}">')
        block.append("</div>")
        parts.append("".join(block))
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )
    path = Path(path)
    atomic_write(path, page)
    return path
