"""A self-contained interactive HTML page for browsing attention maps (survey §4.2.2, manual
inspection of attention weights; rollout after Abnar & Zuidema 2020).

One file, no network: the CSS and the vanilla JavaScript are inline and the maps travel as JSON
in a ``<script type="application/json">`` element, so the page can be mailed, archived next to a
checkpoint or opened from a laptop without a server. The page offers a map selector (e.g. encoder
self-attention / decoder cross-attention), a layer and a head selector (with the mean over heads),
a heatmap with query / target tokens as rows and key / source tokens as columns, the exact value
and both tokens on hover, and — for a stack of self-attention layers — the attention rollout
through the layers up to the selected one, ``Ã_l ⋯ Ã_1`` with ``Ã = normalise_rows(½A + ½I)``.

    >>> page = render_viewer({"self-attention": weights}, rows=tokens)   # weights [L, H, T, T]
    >>> write_viewer("attention.html", [AttentionMap("cross", w, rows=target, columns=source)])
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.interpret.rollout import attention_rollout


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
) -> str:
    """The viewer page for some attention maps, as one HTML document.

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
        decimals: round the embedded values to this many decimals to shrink large pages;
            ``None`` embeds them exactly.

    Returns:
        the HTML document as a string (write it with UTF-8, or use :func:`write_viewer`).

    Example::

        >>> page = render_viewer({"encoder": torch.rand(2, 4, 3, 3).softmax(-1)},
        ...                      rows=["je", "t'", "aime"])
    """
    entries = _entries(maps, rows, columns)
    if decimals is not None and (not isinstance(decimals, int) or decimals < 0):
        raise ValueError(f"decimals must be a non-negative int or None, got {decimals!r}")
    payload = {
        "title": str(title),
        "maps": [_map_payload(entry, decimals) for entry in entries],
    }
    notes_html = (
        f'<p class="notes" id="notes">{html.escape(notes)}</p>' if notes is not None else ""
    )
    parts = {
        "TITLE": html.escape(str(title)),
        "NOTES": notes_html,
        "CSS": _CSS,
        "SCRIPT": _SCRIPT,
        "DATA": json_for_script(payload),
    }
    # one pass, so a title or token that reads "%DATA%" is never substituted a second time
    return re.sub(r"%(TITLE|NOTES|CSS|SCRIPT|DATA)%", lambda m: parts[m.group(1)], _PAGE)


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
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as file:
            file.write(page)
            file.flush()
            os.fsync(file.fileno())
        # mkstemp creates the file 0600; a report should get the usual permissions
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
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


def _map_payload(entry: AttentionMap, decimals: int | None) -> dict[str, Any]:
    """The JSON object the page reads for one map (see ``_SCRIPT``)."""
    name = entry.name
    if not isinstance(name, str):
        raise TypeError(f"map names must be str, got {type(name).__name__} {name!r}")
    weights = entry.weights
    if isinstance(weights, Tensor):
        weights = weights.detach().cpu()
    # float64: the mean over heads and the rollout are computed once here, at full precision
    weights = torch.as_tensor(weights).to(torch.float64)
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
    layers, heads, n_rows, n_columns = weights.shape
    rows = _labels(name, "rows", entry.rows, n_rows, shape)
    columns = _labels(
        name, "columns", rows if entry.columns is None else entry.columns, n_columns, shape
    )

    self_attention = n_rows == n_columns and rows == columns
    if entry.rollout is None:
        with_rollout = self_attention and layers >= 2
    elif entry.rollout:
        if n_rows != n_columns:
            raise ValueError(
                f"map {name!r}: rollout needs square self-attention maps, got {list(shape)}"
            )
        with_rollout = True
    else:
        with_rollout = False
    rollout = None
    if with_rollout:
        stack = list(weights.unbind(0))
        # rollout "at layer l" = through layers 0..l, so the layer selector walks up the stack
        rollout = torch.stack([attention_rollout(stack[: top + 1]) for top in range(layers)])

    def values(t: Tensor) -> list:
        return (t.round(decimals=decimals) if decimals is not None else t).tolist()

    return {
        "name": name,
        "rows": rows,
        "columns": columns,
        "layers": layers,
        "heads": heads,
        "weights": values(weights),  # [layers][heads][R][C]
        "mean": values(weights.mean(1)),  # [layers][R][C]
        "rollout": None if rollout is None else values(rollout),  # [layers][R][C]
    }


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>%TITLE%</title>
<style>%CSS%</style>
</head>
<body>
<h1 id="title">%TITLE%</h1>
%NOTES%
<form id="controls" onsubmit="return false">
  <label>map <select id="map-select"></select></label>
  <label>view <select id="view-select">
    <option value="attention">attention</option>
    <option value="rollout">rollout</option>
  </select></label>
  <label>layer <select id="layer-select"></select></label>
  <label>head <select id="head-select"></select></label>
  <label>colour scale <select id="scale-select">
    <option value="absolute">0 to 1</option>
    <option value="relative">0 to max of view</option>
  </select></label>
  <label><input type="checkbox" id="show-values"> values in cells</label>
</form>
<p id="readout" aria-live="polite">hover a cell for its weight</p>
<div id="heatmap-wrap"><table id="heatmap"></table></div>
<p id="legend"></p>
<noscript><p>This viewer needs JavaScript.</p></noscript>
<script type="application/json" id="attention-data">%DATA%</script>
<script>%SCRIPT%</script>
</body>
</html>
"""

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem;
       color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3rem; margin: 0 0 .5rem; }
.notes { white-space: pre-wrap; color: #444; margin: 0 0 1rem; }
#controls { display: flex; flex-wrap: wrap; gap: .5rem 1.2rem; align-items: center;
            margin-bottom: .6rem; }
#controls select { margin-left: .3rem; }
#readout { font-family: ui-monospace, Menlo, Consolas, monospace; min-height: 1.4em;
           margin: .3rem 0 .8rem; }
#heatmap-wrap { overflow: auto; max-width: 100%; }
#heatmap { border-collapse: collapse; }
#heatmap th { font-weight: normal; font-size: .85rem; white-space: pre; padding: 2px 4px; }
#heatmap thead th { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                    vertical-align: bottom; }
#heatmap tbody th { text-align: right; }
#heatmap td.cell { width: 28px; height: 28px; min-width: 28px; border: 1px solid #eee;
                   font-size: .65rem; text-align: center; cursor: crosshair; padding: 0; }
#heatmap td.cell:hover, #heatmap td.cell.active { outline: 2px solid #d62728; }
#heatmap th.active { color: #d62728; font-weight: bold; }
#legend { color: #555; font-size: .85rem; }
"""

# Cells are shaded on one blue ramp; tokens only ever reach the DOM through textContent, so a
# token such as "<img onerror=...>" is shown as text and never parsed as markup.
_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var mapSelect = $("map-select"), viewSelect = $("view-select"), layerSelect = $("layer-select"),
      headSelect = $("head-select"), scaleSelect = $("scale-select"), showValues = $("show-values"),
      table = $("heatmap"), readout = $("readout"), legend = $("legend");

  function option(select, value, text) {
    var o = document.createElement("option");
    o.value = String(value);
    o.textContent = text;
    select.appendChild(o);
  }
  function current() { return data.maps[Number(mapSelect.value)]; }

  function matrix() {
    var m = current(), layer = Number(layerSelect.value);
    if (viewSelect.value === "rollout") { return m.rollout[layer]; }
    if (headSelect.value === "mean") { return m.mean[layer]; }
    return m.weights[layer][Number(headSelect.value)];
  }

  function fillSelectors() {
    var m = current();
    var layer = layerSelect.value, head = headSelect.value;
    layerSelect.textContent = "";
    for (var l = 0; l < m.layers; l++) { option(layerSelect, l, "layer " + l); }
    headSelect.textContent = "";
    option(headSelect, "mean", "mean over heads");
    for (var h = 0; h < m.heads; h++) { option(headSelect, h, "head " + h); }
    // keep the layer / head when the new map has them, so maps are easy to compare
    layerSelect.value = layer !== "" && Number(layer) < m.layers ? layer : "0";
    headSelect.value = head !== "" && (head === "mean" || Number(head) < m.heads) ? head : "mean";
    viewSelect.querySelector("option[value=rollout]").disabled = m.rollout === null;
    if (m.rollout === null) { viewSelect.value = "attention"; }
    layerSelect.disabled = m.layers < 2;
    updateHeadState();
  }

  function updateHeadState() {
    // rollout fuses the heads (their mean, as Abnar & Zuidema do)
    headSelect.disabled = viewSelect.value === "rollout";
  }

  function build() {
    var m = current();
    table.textContent = "";
    var thead = table.createTHead(), head = thead.insertRow();
    var corner = document.createElement("th");
    corner.className = "corner";
    head.appendChild(corner);
    m.columns.forEach(function (token, j) {
      var th = document.createElement("th");
      th.textContent = token;
      th.dataset.col = String(j);
      th.scope = "col";
      head.appendChild(th);
    });
    var tbody = table.createTBody();
    m.rows.forEach(function (token, i) {
      var tr = tbody.insertRow();
      var th = document.createElement("th");
      th.textContent = token;
      th.dataset.row = String(i);
      th.scope = "row";
      tr.appendChild(th);
      for (var j = 0; j < m.columns.length; j++) {
        var td = tr.insertCell();
        td.className = "cell";
        td.dataset.row = String(i);
        td.dataset.col = String(j);
      }
    });
    paint();
  }

  function describe(i, j, value) {
    var m = current();
    var what = viewSelect.value === "rollout" ? "rollout through layer " + layerSelect.value
      : "layer " + layerSelect.value + ", " +
        (headSelect.value === "mean" ? "mean over heads" : "head " + headSelect.value);
    return "row " + i + " \u201c" + m.rows[i] + "\u201d \u2192 column " + j + " \u201c" +
      m.columns[j] + "\u201d: " + String(value) + " (" + what + ")";
  }

  function paint() {
    var w = matrix(), max = 0, i, j;
    for (i = 0; i < w.length; i++) {
      for (j = 0; j < w[i].length; j++) { max = Math.max(max, w[i][j]); }
    }
    var top = scaleSelect.value === "relative" ? (max > 0 ? max : 1) : 1;
    var cells = table.querySelectorAll("td.cell");
    for (var k = 0; k < cells.length; k++) {
      var td = cells[k];
      i = Number(td.dataset.row);
      j = Number(td.dataset.col);
      var value = w[i][j], shade = Math.max(0, Math.min(1, value / top));
      td.dataset.value = String(value);
      // light (low weight) to dark blue (high weight); white text on the dark half
      td.style.backgroundColor = "rgb(" + Math.round(247 - 239 * shade) + "," +
        Math.round(251 - 203 * shade) + "," + Math.round(255 - 148 * shade) + ")";
      td.style.color = shade > 0.55 ? "#fff" : "#1d1d1f";
      td.textContent = showValues.checked ? value.toFixed(2) : "";
      td.title = describe(i, j, value);
    }
    legend.textContent = "shade: 0 (white) to " + top.toPrecision(3) +
      " (dark blue); largest value in view " + max.toPrecision(4);
    readout.textContent = "hover a cell for its weight";
  }

  function highlight(i, j, on) {
    var marks = table.querySelectorAll(
      'th[data-row="' + i + '"], thead th[data-col="' + j + '"]');
    for (var k = 0; k < marks.length; k++) { marks[k].classList.toggle("active", on); }
  }

  table.addEventListener("mouseover", function (event) {
    var td = event.target.closest("td.cell");
    if (!td) { return; }
    var i = Number(td.dataset.row), j = Number(td.dataset.col);
    readout.textContent = describe(i, j, Number(td.dataset.value));
    highlight(i, j, true);
  });
  table.addEventListener("mouseout", function (event) {
    var td = event.target.closest("td.cell");
    if (td) { highlight(td.dataset.row, td.dataset.col, false); }
  });

  data.maps.forEach(function (m, index) { option(mapSelect, index, m.name); });
  mapSelect.addEventListener("change", function () { fillSelectors(); build(); });
  viewSelect.addEventListener("change", function () { updateHeadState(); paint(); });
  [layerSelect, headSelect, scaleSelect, showValues].forEach(function (control) {
    control.addEventListener("change", paint);
  });
  fillSelectors();
  build();
  document.body.dataset.ready = "true";
})();
"""
