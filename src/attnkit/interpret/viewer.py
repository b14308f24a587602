"""A self-contained interactive HTML page for browsing attention maps (survey §4.2.2, manual
inspection of attention weights; rollout after Abnar & Zuidema 2020).

One file, no network: the CSS and the vanilla JavaScript are inline and the maps travel in a
``<script type="application/json">`` element, so the page can be mailed, archived next to a
checkpoint or opened from a laptop without a server. The page offers a map selector (e.g. encoder
self-attention / decoder cross-attention), a layer and a head selector (with the mean over heads),
a heatmap drawn on a canvas with query / target tokens as rows and key / source tokens as
columns, the value and both tokens on hover, and — for a stack of self-attention layers — the
attention rollout through the layers up to the selected one, ``Ã_l ⋯ Ã_1`` with
``Ã = normalise_rows(½A + ½I)``.

Size: a small page carries every value exactly, as JSON numbers; a large one (a 2,000-token
input has 4 million weights per head) carries them quantised to one byte per weight, deflated,
and the page decodes a head only when it is shown (:func:`render_viewer`, and the page's data
format in :mod:`attnkit.interpret.viewer_page`).

    >>> page = render_viewer({"self-attention": weights}, rows=tokens)   # weights [L, H, T, T]
    >>> write_viewer("attention.html", [AttentionMap("cross", w, rows=target, columns=source)])
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import tempfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.interpret.rollout import attention_rollout, residual_attention
from attnkit.interpret.viewer_page import CSS, PAGE, SCRIPT

#: a page holding at most this many numbers (weights, means and rollouts) embeds them exactly
EXACT_VALUES = 2**18
#: the default largest page, in bytes: a 2,000-token map of 2 layers x 2 heads fits
MAX_BYTES = 20_000_000
#: steps per row of a quantised page: 8 bits, then 4 bits when 8 do not fit ``max_bytes``
LEVELS = (255, 15)


@dataclass(frozen=True)
class AttentionMap:
    """One named attention map with its token labels.

    Args:
        name: shown in the map selector, e.g. ``"decoder cross-attention"``.
        weights: ``[layers, heads, R, C]``, ``[heads, R, C]`` or ``[R, C]`` (tensor, array or
            nested lists); row ``i`` is the distribution of query / target token ``i`` over the
            key / source tokens. A batch must be indexed out first (``w[b]``).
        rows: the ``R`` query / target tokens.
        columns: the ``C`` key / source tokens; ``None`` means self-attention (``columns = rows``).
        rollout: offer the rollout view; ``None`` decides by itself: a self-attention map
            (square, same labels on both axes) with at least two layers.

    Example::

        >>> weights = torch.softmax(torch.randn(2, 3, 3), -1)  # [heads, R, C]
        >>> AttentionMap("encoder self-attention", weights, ["the", "black", "cat"]).name
        'encoder self-attention'
    """

    name: str
    weights: Any
    rows: Sequence[str]
    columns: Sequence[str] | None = None
    rollout: bool | None = None


def render_viewer(
    maps: Mapping[str, Any] | Sequence[AttentionMap],
    *,
    rows: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    title: str = "Attention viewer",
    notes: str | None = None,
    decimals: int | None = None,
    exact: bool | None = None,
    max_bytes: int | None = MAX_BYTES,
) -> str:
    """The viewer page for some attention maps, as one HTML document.

    Small pages embed every value exactly, as JSON numbers. Larger ones (more than
    :data:`EXACT_VALUES` numbers, e.g. 2,000 tokens) are quantised per row to 8 bits,
    ``w ≈ low + q · step`` with ``q`` in ``0..255`` and ``step = (max(row, 0) − low) / 255``,
    ``low = min(row, 0)`` (an error of at most ``step / 2``, zeros stay exact), deflated and
    base64-encoded; the page inflates a head only when it is shown. When even that page exceeds
    ``max_bytes``, the rows are quantised to 15 steps (4 bits) instead.

    Args:
        maps: ``{name: weights}`` sharing the labels ``rows`` / ``columns``, or a sequence of
            :class:`AttentionMap` each with its own labels (maps of different shapes, e.g.
            encoder self-attention ``[L, H, S, S]`` and cross-attention ``[L, H, T, S]``).
            Weights are ``[layers, heads, R, C]``, ``[heads, R, C]`` or ``[R, C]``.
        rows: query / target tokens for a mapping (must be ``None`` with :class:`AttentionMap`).
        columns: key / source tokens for a mapping; ``None`` means ``rows`` (self-attention).
        title: page title and heading (plain text; escaped).
        notes: plain text shown under the heading, e.g. the model and the sentence (escaped;
            line breaks are kept).
        decimals: round the values of an exact page to this many decimals to shrink it;
            ``None`` embeds them exactly (a quantised page is not affected).
        exact: ``True`` embeds every value as a JSON number, ``False`` quantises, ``None``
            decides by size (exact up to :data:`EXACT_VALUES` numbers, weights, means and
            rollouts together).
        max_bytes: the largest page to write, in bytes (UTF-8); ``None`` for no limit.

    Returns:
        the HTML document as a string (write it with UTF-8, or use :func:`write_viewer`).

    Raises:
        ValueError: bad maps or labels, or a page above ``max_bytes`` (the message says how
            large it would be and what to leave out).

    Example::

        >>> page = render_viewer({"encoder": torch.rand(2, 4, 3, 3).softmax(-1)},
        ...                      rows=["je", "t'", "aime"])
    """
    entries = _entries(maps, rows, columns)
    if decimals is not None and (
        isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0
    ):
        raise ValueError(f"decimals must be a non-negative int or None, got {decimals!r}")
    if exact is not None and not isinstance(exact, bool):
        raise TypeError(f"exact must be True, False or None, got {exact!r}")
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
    checked = [_checked(entry) for entry in entries]
    if exact is None:
        exact = sum(entry.numbers() for entry in checked) <= EXACT_VALUES
    if exact:
        page = _page(title, notes, [_exact_payload(entry, decimals) for entry in checked])
        size = _size(page)
        if max_bytes is None or size <= max_bytes:
            return page
        raise ValueError(
            f"the exact page would be {size:,} bytes, above max_bytes={max_bytes:,}: "
            "quantise it (exact=False or None), show fewer maps, layers or heads, or raise max_bytes"
        )
    for levels in LEVELS:
        page = _page(title, notes, [_quantised_payload(entry, levels) for entry in checked])
        size = _size(page)
        if max_bytes is None or size <= max_bytes:
            return page
    raise ValueError(
        f"the page would be {size:,} bytes even at 4 bits per weight, above "
        f"max_bytes={max_bytes:,}: show fewer maps, layers or heads (e.g. record(heads=[...])), "
        "or raise max_bytes"
    )


def write_viewer(
    path: str | os.PathLike[str],
    maps: Mapping[str, Any] | Sequence[AttentionMap],
    **kwargs: Any,
) -> Path:
    """Render the viewer (arguments of :func:`render_viewer`) and write it to ``path`` atomically.

    The page goes to a temporary file in the destination directory which then replaces ``path``
    (``os.replace``), so a reader — or a browser reloading the page — never sees half a file and
    an interrupted run leaves the previous page intact.

    Args:
        path: the HTML file to write.
        maps: the maps, as for :func:`render_viewer`.
        **kwargs: the other arguments of :func:`render_viewer`.

    Returns:
        the path written.

    Example::

        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> maps = [AttentionMap("self", torch.softmax(torch.randn(2, 3, 3), -1), ["a", "b", "c"])]
        >>> write_viewer(folder / "attention.html", maps).name
        'attention.html'
    """
    path = Path(path)
    page = render_viewer(maps, **kwargs)  # render first: bad input must not touch the disk
    directory = path.parent if str(path.parent) else Path(".")
    temporary = None
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as file:
            file.write(page)
            file.flush()
            os.fsync(file.fileno())
        # mkstemp creates the file 0600; a report should get the usual permissions
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):  # the page's name, never the temporary file's
            raise OSError(error.errno, error.strerror or str(error), str(path)) from None
        raise
    return path


def json_for_script(value: Any) -> str:
    """``value`` as JSON that is safe inside an HTML ``<script>`` element.

    The HTML parser ends a script element at the first ``</script`` whatever the JSON means, and
    ``<!--`` changes how it scans; escaping every ``<``, ``>`` and ``&`` as a JSON ``\\uXXXX``
    escape removes both while ``JSON.parse`` returns the same strings. U+2028/U+2029 are escaped
    too because they end a line in older JavaScript.
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _entries(
    maps: Mapping[str, Any] | Sequence[AttentionMap],
    rows: Sequence[str] | None,
    columns: Sequence[str] | None,
) -> list[AttentionMap]:
    """The maps as :class:`AttentionMap` entries, whichever form was given."""
    if isinstance(maps, Mapping):
        if rows is None:
            raise ValueError("maps given as {name: weights} need the token labels rows=[...]")
        entries = [AttentionMap(str(name), w, rows, columns) for name, w in maps.items()]
    elif isinstance(maps, Sequence) and not isinstance(maps, (str, bytes)):
        entries = list(maps)
        for i, entry in enumerate(entries):
            if not isinstance(entry, AttentionMap):
                raise TypeError(f"maps[{i}]: expected an AttentionMap, got {type(entry).__name__}")
        if rows is not None or columns is not None:
            raise ValueError(
                "rows/columns are for maps given as {name: weights}; "
                "each AttentionMap carries its own labels"
            )
    else:
        raise TypeError(
            "maps must be a mapping {name: weights} or a sequence of AttentionMap, "
            f"got {type(maps).__name__}"
        )
    if not entries:
        raise ValueError("need at least one attention map, got none")
    names = [entry.name for entry in entries]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"map names must be unique, got {duplicates} more than once")
    return entries


def _labels(name: str, axis: str, labels: Any, expected: int, shape: tuple[int, ...]) -> list[str]:
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise TypeError(f"map {name!r}: {axis} must be a list of str, got {type(labels).__name__}")
    for token in labels:
        if not isinstance(token, str):
            raise TypeError(
                f"map {name!r}: {axis} must be str tokens, got {type(token).__name__} {token!r}"
            )
    if len(labels) != expected:
        raise ValueError(
            f"map {name!r} of shape {list(shape)} has {expected} {axis} but "
            f"{len(labels)} {axis} labels were given"
        )
    return list(labels)


@dataclass(frozen=True)
class _Checked:
    """A map's validated weights ``[layers, heads, R, C]`` (its own floating dtype, on the CPU)
    and labels, and whether it offers the rollout."""

    name: str
    weights: Tensor
    rows: list[str]
    columns: list[str]
    rollout: bool

    def numbers(self) -> int:
        """How many numbers an exact page holds for this map: weights, mean and rollout."""
        layers, heads, n_rows, n_columns = self.weights.shape
        return layers * (heads + 1 + int(self.rollout)) * n_rows * n_columns


def _checked(entry: AttentionMap) -> _Checked:
    """The map validated, with a missing layer / head axis added."""
    name = entry.name
    if not isinstance(name, str):
        raise TypeError(f"map names must be str, got {type(name).__name__} {name!r}")
    weights = entry.weights
    if isinstance(weights, Tensor):
        weights = weights.detach().cpu()
        if not weights.is_floating_point():
            weights = weights.to(torch.float64)
    else:  # lists and arrays at full precision (torch would make a list of floats float32)
        weights = torch.as_tensor(weights, dtype=torch.float64)
    shape = tuple(weights.shape)
    if weights.dim() not in (2, 3, 4) or 0 in shape:
        raise ValueError(
            f"map {name!r}: weights must be [layers, heads, R, C], [heads, R, C] or [R, C] "
            f"with no empty axis, got {list(shape)}"
        )
    if not torch.isfinite(weights).all():
        raise ValueError(f"map {name!r}: weights must be finite, got NaN or infinity")
    while weights.dim() < 4:
        weights = weights.unsqueeze(0)  # a missing layer / head axis is one layer / one head
    layers, _, n_rows, n_columns = weights.shape
    rows = _labels(name, "rows", entry.rows, n_rows, shape)
    columns = _labels(
        name, "columns", rows if entry.columns is None else entry.columns, n_columns, shape
    )
    if entry.rollout is None:
        with_rollout = n_rows == n_columns and rows == columns and layers >= 2
    elif entry.rollout:
        if n_rows != n_columns:
            raise ValueError(
                f"map {name!r}: rollout needs square self-attention maps, got {list(shape)}"
            )
        with_rollout = True
    else:
        with_rollout = False
    return _Checked(name, weights, rows, columns, with_rollout)


def _rollouts(weights: Tensor) -> Iterator[Tensor]:
    """The rollout through layers ``0..l`` for each ``l`` (float64 ``[R, R]``), one layer at a
    time: ``Ã_l ⋯ Ã_0`` with ``Ã = normalise_rows(½ mean_h A + ½ I)``, the product
    :func:`attention_rollout` forms for the stack up to ``l``."""
    rolled: Tensor | None = None
    for layer in weights:
        # the heads' mean one head at a time: no float64 copy of the whole layer
        total = torch.zeros(layer.shape[1:], dtype=torch.float64)
        for head in layer:
            total += head
        fused = residual_attention(total / layer.shape[0])
        rolled = fused if rolled is None else fused @ rolled
        yield rolled


def _exact_payload(entry: _Checked, decimals: int | None) -> dict[str, Any]:
    """The JSON object the page reads for one map embedded exactly (``"json"`` encoding of
    :mod:`attnkit.interpret.viewer_page`)."""
    # float64: the mean over heads and the rollout are computed once here, at full precision
    weights = entry.weights.to(torch.float64)
    rollout = None
    if entry.rollout:
        stack = list(weights.unbind(0))
        # rollout "at layer l" = through layers 0..l, so the layer selector walks up the stack
        rollout = torch.stack([attention_rollout(stack[: top + 1]) for top in range(len(stack))])

    def values(t: Tensor) -> list:
        return (t.round(decimals=decimals) if decimals is not None else t).tolist()

    layers, heads = weights.shape[:2]
    return {
        "name": entry.name,
        "rows": entry.rows,
        "columns": entry.columns,
        "layers": layers,
        "heads": heads,
        "encoding": "json",
        "weights": values(weights),  # [layers][heads][R][C]
        "mean": values(weights.mean(1)),  # [layers][R][C]
        "rollout": None if rollout is None else values(rollout),  # [layers][R][C]
    }


def _quantised_payload(entry: _Checked, levels: int) -> dict[str, Any]:
    """The JSON object the page reads for one map quantised to ``levels`` steps per row
    (``"quantised"`` encoding of :mod:`attnkit.interpret.viewer_page`); one head at a time."""
    weights = entry.weights
    layers, heads = weights.shape[:2]
    return {
        "name": entry.name,
        "rows": entry.rows,
        "columns": entry.columns,
        "layers": layers,
        "heads": heads,
        "encoding": "quantised",
        "levels": levels,
        "weights": [[quantise_rows(head, levels) for head in layer] for layer in weights],
        "mean": None,  # the page averages the decoded heads
        "rollout": (
            [quantise_rows(rolled, levels) for rolled in _rollouts(weights)]
            if entry.rollout
            else None
        ),
    }


def quantise_rows(block: Tensor, levels: int = 255) -> dict[str, str]:
    """One ``[R, C]`` map quantised per row, as the viewer page stores it.

    Row ``i`` becomes ``low[i] + q[i, j] · step[i]`` with integers ``0 <= q <= levels``,
    ``low = min(row, 0)`` and ``step = (max(row, 0) − low) / levels`` (float32), so every value is
    within ``step / 2`` of the given one and a zero weight stays exactly zero.

    Args:
        block: ``[R, C]`` finite weights.
        levels: steps per row, at most 255 (one byte per weight).

    Returns:
        ``{"low", "step", "data"}``: base64 of the little-endian float32 ``low`` and ``step``
        ``[R]`` and of the zlib-deflated bytes ``q`` ``[R, C]`` (row-major).

    Example::

        >>> import base64, zlib
        >>> stored = quantise_rows(torch.tensor([[0.25, 0.75], [1.0, 0.0]]), levels=3)
        >>> list(zlib.decompress(base64.b64decode(stored["data"])))
        [1, 3, 3, 0]
    """
    if not 1 <= levels <= 255:
        raise ValueError(f"levels must be in 1..255 (one byte per weight), got {levels}")
    w = block.to(torch.float64)
    low = w.amin(1).clamp(max=0).to(torch.float32).to(torch.float64)  # as stored
    step = ((w.amax(1).clamp(min=0) - low) / levels).to(torch.float32).to(torch.float64)
    # an all-zero row has step 0: q = 0 / tiny = 0
    q = (w - low[:, None]).div_(step.clamp_min(torch.finfo(torch.float64).tiny)[:, None])
    q = q.round_().clamp_(0, levels).to(torch.uint8)

    def base64_of(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return {
        "low": base64_of(low.numpy().astype("<f4").tobytes()),
        "step": base64_of(step.numpy().astype("<f4").tobytes()),
        # level 1: within ~5% of level 9's size on attention maps, several times faster
        "data": base64_of(zlib.compress(q.numpy().tobytes(), 1)),
    }


def _page(title: str, notes: str | None, maps: list[dict[str, Any]]) -> str:
    notes_html = (
        f'<p class="notes" id="notes">{html.escape(notes)}</p>' if notes is not None else ""
    )
    parts = {
        "TITLE": html.escape(str(title)),
        "NOTES": notes_html,
        "CSS": CSS,
        "SCRIPT": SCRIPT,
        "DATA": json_for_script({"title": str(title), "maps": maps}),
    }
    # one pass, so a title or token that reads "%DATA%" is never substituted a second time
    return re.sub(r"%(TITLE|NOTES|CSS|SCRIPT|DATA)%", lambda m: parts[m.group(1)], PAGE)


def _size(page: str) -> int:
    """The page's size in bytes as written (UTF-8)."""
    return len(page.encode("utf-8"))
