"""Heatmaps of attention (survey §4.2.2, manual inspection): one map, the alignment matrix of a
translation (target words as rows, source words as columns, the weight in each cell — the
classic "I love you" figure), and a grid of a layer's heads.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global backend switch), so
they work on machines without a display and leave the user's matplotlib state alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor


def _matrix(weights: Tensor, what: str) -> list[list[float]]:
    if not isinstance(weights, Tensor) or weights.dim() != 2:
        raise ValueError(f"{what} must be a 2-D tensor, got {getattr(weights, 'shape', weights)}")
    return weights.detach().double().cpu().tolist()


def _check_labels(labels: Sequence[str] | None, n: int, what: str) -> None:
    if labels is not None and len(labels) != n:
        raise ValueError(f"{what} needs {n} labels, got {len(labels)}")


def draw_heatmap(
    ax: Axes,
    weights: Tensor,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    *,
    annotate: bool = False,
    cmap: str = "viridis",
    vmin: float | None = 0.0,
    vmax: float | None = None,
) -> None:
    """Draw ``weights [rows, columns]`` on ``ax``: rows are queries, columns keys."""
    rows = _matrix(weights, "weights")
    n_rows, n_cols = len(rows), len(rows[0]) if rows else 0
    _check_labels(x_labels, n_cols, "the key (column) axis")
    _check_labels(y_labels, n_rows, "the query (row) axis")
    image = ax.imshow(rows, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if x_labels is not None:
        ax.set_xticks(range(n_cols), list(x_labels), rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(n_rows), list(y_labels))
    if annotate:
        lo, hi = image.get_clim()
        for i, row in enumerate(rows):
            for j, value in enumerate(row):
                bright = (value - lo) / (hi - lo) > 0.5 if hi > lo else False
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if bright else "white",
                )


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        fig.savefig(path, format="png", dpi=100)
    return fig


def plot_heatmap(
    weights: Tensor,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    path: str | Path | None = None,
    *,
    title: str | None = None,
    annotate: bool = False,
) -> Figure:
    """A heatmap of one attention map ``[M, N]`` (queries as rows, keys as columns), with token
    labels; saved as PNG when ``path`` is given. Returns the figure.

    Args:
        weights: ``[M, N]``.
        x_labels: the ``N`` key tokens.
        y_labels: the ``M`` query tokens.
        path: save the figure there as PNG (``None``: do not save).
        title: above the plot.
        annotate: write each weight in its cell.

    Returns:
        The matplotlib ``Figure``.

    Example::

        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> figure = plot_heatmap(torch.softmax(torch.randn(2, 3), -1), ["a", "b", "c"], ["x", "y"])
        >>> type(figure).__name__
        'Figure'"""
    rows = len(_matrix(weights, "weights"))
    fig = _new_figure(max(3.0, 0.5 * weights.shape[1] + 1.5), max(3.0, 0.4 * rows + 1.5))
    ax = fig.add_subplot()
    draw_heatmap(ax, weights, x_labels, y_labels, annotate=annotate)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_alignment(
    weights: Tensor,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """The alignment matrix of a translation: ``weights [target, source]``, target words as rows,
    source words as columns (on top), each cell's weight written in it, in grey.

    Args:
        weights: ``[T, S]``.
        source_tokens: the ``S`` source words.
        target_tokens: the ``T`` target words.
        path: save the figure there as PNG (``None``: do not save).
        title: above the plot.

    Returns:
        The matplotlib ``Figure``.

    Example::

        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> weights = torch.softmax(torch.randn(3, 4), -1)
        >>> figure = plot_alignment(weights, ["le", "chat", "noir", "."], ["the", "black", "cat"])
        >>> type(figure).__name__
        'Figure'"""
    fig = _new_figure(
        max(3.0, 0.8 * len(source_tokens) + 1.5), max(3.0, 0.6 * len(target_tokens) + 1.5)
    )
    ax = fig.add_subplot()
    draw_heatmap(ax, weights, source_tokens, target_tokens, annotate=True, vmax=1.0)
    ax.images[0].set_cmap("gray")
    ax.xaxis.tick_top()
    ax.set_xlabel("source")
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title, pad=30)
    fig.tight_layout()
    return _save(fig, path)


def plot_heads(
    weights: Tensor,
    tokens: Sequence[str] | None = None,
    path: str | Path | None = None,
    *,
    query_tokens: Sequence[str] | None = None,
    columns: int = 4,
    title: str | None = None,
) -> Figure:
    """A grid with one heatmap per head of ``weights [H, M, N]`` (``[1, H, M, N]`` accepted):
    ``tokens`` label the keys, ``query_tokens`` the queries (default ``tokens`` when M == N).

    Args:
        weights: ``[H, M, N]`` (or ``[1, H, M, N]``).
        tokens: the ``N`` key tokens.
        path: save the figure there as PNG (``None``: do not save).
        query_tokens: the ``M`` query tokens.
        columns: heatmaps per row of the grid.
        title: above the grid.

    Returns:
        The matplotlib ``Figure``.

    Example::

        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> figure = plot_heads(torch.softmax(torch.randn(4, 3, 3), -1), ["a", "b", "c"])
        >>> type(figure).__name__
        'Figure'"""
    if weights.dim() == 4 and weights.shape[0] == 1:
        weights = weights[0]
    if weights.dim() != 3:
        raise ValueError(f"weights must be [H, M, N] or [1, H, M, N], got {tuple(weights.shape)}")
    if columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    heads, m, n = weights.shape
    if query_tokens is None and tokens is not None and m == n:
        query_tokens = tokens
    cols = min(columns, heads)
    grid_rows = math.ceil(heads / cols)
    fig = _new_figure(cols * max(2.5, 0.35 * n + 1), grid_rows * max(2.5, 0.3 * m + 1))
    vmax = float(weights.max())
    for h in range(heads):
        ax = fig.add_subplot(grid_rows, cols, h + 1)
        draw_heatmap(ax, weights[h], tokens, query_tokens, vmax=vmax)
        ax.set_title(f"head {h}")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)
