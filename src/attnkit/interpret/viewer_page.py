"""The HTML, CSS and JavaScript of the attention viewer page (:mod:`attnkit.interpret.viewer`
fills in the title, the notes and the data).

The page reads one JSON object, ``{"title": str, "maps": [map, ...]}``, from a
``<script type="application/json" id="attention-data">`` element. Each map is
``{"name", "rows", "columns", "layers", "heads", "encoding", ...}`` with one of two encodings:

- ``"json"``: ``weights [layers][heads][R][C]``, ``mean [layers][R][C]`` and ``rollout
  [layers][R][C]`` (or ``null``) as JSON numbers, exactly;
- ``"quantised"``: ``levels`` (255 or 15), ``weights [layers][heads]`` and ``rollout [layers]``
  (or ``null``) as blocks ``{"low", "step", "data"}``: per row ``i`` the float32 ``low[i]`` and
  ``step[i]`` (base64, little-endian), and ``data`` the base64 of the zlib-deflated ``R·C`` bytes
  ``q`` (row-major), so that ``w[i, j] ≈ low[i] + q[i, j] · step[i]`` within ``step[i] / 2``. The
  mean over heads is computed by the page from the decoded heads.

The heatmap is drawn on a canvas, one ``cell × cell`` square per (row, column), so a 2,000-token
map is 4 million pixels instead of 4 million DOM elements. A quantised block is inflated
(``DecompressionStream``) only when a view needs it, and decoded views are kept in a cache of
bounded size: the page holds the compressed data plus what is shown. Tokens only ever reach the
DOM through ``textContent`` (and the canvas draws numbers only), so a token such as
``"<img onerror=...>"`` is shown as text and never parsed as markup.

The page exposes ``window.attentionViewer`` for scripts and tests: ``idle()`` (a promise settled
when the latest view is drawn), ``state()``, ``shown()`` (the view's values, row by row),
``value(i, j)`` and ``error(i)`` (the storage error bound of row ``i``, 0 when exact).
"""

from __future__ import annotations

PAGE = """<!DOCTYPE html>
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
  <label>cell <select id="cell-select"></select></label>
  <label><input type="checkbox" id="show-values"> values in cells</label>
</form>
<p id="readout" aria-live="polite">hover a cell for its weight</p>
<div id="heatmap-wrap"><div id="grid">
  <div id="corner"></div>
  <div id="column-labels"></div>
  <div id="row-labels"></div>
  <div id="plot"><canvas id="heatmap" role="img" aria-label="attention heatmap"></canvas><canvas
    id="overlay" aria-hidden="true"></canvas></div>
</div></div>
<p id="legend"></p>
<noscript><p>This viewer needs JavaScript.</p></noscript>
<script type="application/json" id="attention-data">%DATA%</script>
<script>%SCRIPT%</script>
</body>
</html>
"""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem;
       color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3rem; margin: 0 0 .5rem; }
[hidden] { display: none !important; }
.notes { white-space: pre-wrap; color: #444; margin: 0 0 1rem; }
#controls { display: flex; flex-wrap: wrap; gap: .5rem 1.2rem; align-items: center;
            margin-bottom: .6rem; }
#controls select { margin-left: .3rem; }
/* a fixed height: a long readout must not move the heatmap under the pointer */
#readout { font-family: ui-monospace, Menlo, Consolas, monospace; height: 4.2em;
           line-height: 1.4em; overflow: auto; margin: .3rem 0 .8rem; overflow-wrap: anywhere; }
#heatmap-wrap { overflow: auto; max-width: 100%; max-height: 85vh; }
#grid { display: inline-grid; grid-template-columns: auto auto; grid-template-rows: auto auto; }
#corner { grid-area: 1 / 1; }
#column-labels { grid-area: 1 / 2; display: flex; align-items: flex-end; }
#row-labels { grid-area: 2 / 1; }
#plot { grid-area: 2 / 2; position: relative; line-height: 0; }
#heatmap { display: block; }
#overlay { position: absolute; left: 0; top: 0; cursor: crosshair; }
.label { white-space: pre; overflow: hidden; text-overflow: ellipsis; }
#row-labels .label { text-align: right; max-width: 16em; padding-right: 4px; }
#column-labels .label { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                        max-height: 12em; padding-bottom: 4px; }
/* colour only: a bold label would be wider and move the heatmap */
.label.active { color: #d62728; background: #fdecec; }
#legend { color: #555; font-size: .85rem; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("attention-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var mapSelect = $("map-select"), viewSelect = $("view-select"), layerSelect = $("layer-select"),
      headSelect = $("head-select"), scaleSelect = $("scale-select"), cellSelect = $("cell-select"),
      showValues = $("show-values"), canvas = $("heatmap"), overlay = $("overlay"),
      rowLabels = $("row-labels"), columnLabels = $("column-labels"), readout = $("readout"),
      legend = $("legend");
  var HINT = "hover a cell for its weight";
  // cells of at least LABEL_MIN px get token labels on both axes, of VALUES_MIN px their value;
  // the automatic cell size spreads the larger side over about AUTO_SPAN px
  var LABEL_MIN = 12, VALUES_MIN = 24, CELL_MAX = 28, AUTO_SPAN = 1600;
  // a zoomed canvas stays below 2^24 pixels (64 MB of RGBA); one pixel per cell is always offered
  var MAX_PIXELS = 16777216, MAX_SIDE = 16384, MAX_SIDE_ONE = 32767;
  var CELL_SIZES = [1, 2, 4, 8, 12, 16, 20, 28];
  // decoded views kept for quick switching; what is shown is kept besides
  var CACHE_BYTES = 96 * 1048576;

  function option(select, value, text) {
    var o = document.createElement("option");
    o.value = String(value);
    o.textContent = text;
    select.appendChild(o);
  }
  function current() { return data.maps[Number(mapSelect.value)]; }

  // --- decoding ----------------------------------------------------------------------------

  function bytes(base64) {
    var text = atob(base64), out = new Uint8Array(text.length);
    for (var k = 0; k < text.length; k++) { out[k] = text.charCodeAt(k); }
    return out;
  }
  function float32s(base64) {  // little-endian float32, widened to float64
    var raw = bytes(base64), view = new DataView(raw.buffer);
    var out = new Float64Array(raw.length / 4);
    for (var k = 0; k < out.length; k++) { out[k] = view.getFloat32(4 * k, true); }
    return out;
  }
  function inflate(raw) {
    if (typeof DecompressionStream !== "function") {
      return Promise.reject(new Error("this browser cannot inflate the page's data " +
        "(DecompressionStream: Chrome 80, Firefox 113, Safari 16.4 or later)"));
    }
    var stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (b) { return new Uint8Array(b); });
  }

  // A view is the R x C matrix on screen: row(i) is row i (a buffer valid until the next call)
  // and error(i) bounds how far row i's stored values are from the model's (0: exact).
  function listView(rows) {
    return { R: rows.length, C: rows[0].length, bytes: 0, exact: true,
             row: function (i) { return rows[i]; }, error: function () { return 0; } };
  }
  function arrayView(values, errors, R, C) {
    return { R: R, C: C, bytes: values.byteLength + errors.byteLength, exact: false,
             row: function (i) { return values.subarray(i * C, (i + 1) * C); },
             error: function (i) { return errors[i]; } };
  }
  function quantisedView(block, R, C) {
    return inflate(bytes(block.data)).then(function (q) {
      if (q.length !== R * C) {
        throw new Error("a stored block holds " + q.length + " values, expected " + R * C);
      }
      var low = float32s(block.low), step = float32s(block.step), buffer = new Float64Array(C);
      return { R: R, C: C, bytes: q.length + 16 * R + 8 * C, exact: false,
        row: function (i) {
          var base = i * C, lo = low[i], st = step[i];
          for (var j = 0; j < C; j++) { buffer[j] = lo + q[base + j] * st; }
          return buffer;
        },
        error: function (i) { return step[i] / 2; } };
    });
  }
  function meanView(views, R, C) {
    var values = new Float64Array(R * C), errors = new Float64Array(R), H = views.length;
    views.forEach(function (view) {
      for (var i = 0; i < R; i++) {
        var row = view.row(i), base = i * C;
        for (var j = 0; j < C; j++) { values[base + j] += row[j]; }
        errors[i] += view.error(i);
      }
    });
    for (var k = 0; k < values.length; k++) { values[k] /= H; }
    for (var i = 0; i < R; i++) { errors[i] /= H; }
    return arrayView(values, errors, R, C);
  }

  var cache = new Map(), cachedBytes = 0;
  function cached(key, make) {
    var entry = cache.get(key);
    if (entry) {  // most recently used goes last, so eviction takes the oldest first
      cache.delete(key);
      cache.set(key, entry);
      return entry.promise;
    }
    entry = { bytes: 0, promise: null };
    entry.promise = make().then(function (view) {
      if (cache.get(key) === entry) {
        entry.bytes = view.bytes;
        cachedBytes += view.bytes;
        cache.forEach(function (other, name) {
          if (cachedBytes > CACHE_BYTES && name !== key && other.bytes > 0) {
            cache.delete(name);
            cachedBytes -= other.bytes;
          }
        });
      }
      return view;
    }, function (error) { cache.delete(key); throw error; });
    cache.set(key, entry);
    return entry.promise;
  }

  function viewOf(index, kind, layer, head) {
    var m = data.maps[index];
    if (m.encoding === "json") {
      return Promise.resolve(listView(kind === "rollout" ? m.rollout[layer]
        : kind === "mean" ? m.mean[layer] : m.weights[layer][head]));
    }
    var R = m.rows.length, C = m.columns.length;
    return cached([index, kind, layer, head].join("/"), function () {
      if (kind === "rollout") { return quantisedView(m.rollout[layer], R, C); }
      if (kind === "head") { return quantisedView(m.weights[layer][head], R, C); }
      var heads = [];
      for (var h = 0; h < m.heads; h++) { heads.push(viewOf(index, "head", layer, h)); }
      return Promise.all(heads).then(function (views) { return meanView(views, R, C); });
    });
  }

  // --- selectors ---------------------------------------------------------------------------

  function selection() {
    var index = Number(mapSelect.value), m = data.maps[index];
    var chosen = { index: index, layer: Number(layerSelect.value), head: null };
    if (viewSelect.value === "rollout") { chosen.kind = "rollout"; }
    else if (headSelect.value !== "mean") { chosen.kind = "head"; chosen.head = Number(headSelect.value); }
    else if (m.heads === 1 && m.encoding !== "json") { chosen.kind = "head"; chosen.head = 0; }
    else { chosen.kind = "mean"; }
    chosen.what = chosen.kind === "rollout" ? "rollout through layer " + chosen.layer
      : "layer " + chosen.layer + ", " +
        (headSelect.value === "mean" ? "mean over heads" : "head " + chosen.head);
    return chosen;
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

  function fits(m, size) {
    var R = m.rows.length, C = m.columns.length;
    if (size === 1) { return R <= MAX_SIDE_ONE && C <= MAX_SIDE_ONE; }
    return R * size <= MAX_SIDE && C * size <= MAX_SIDE && R * C * size * size <= MAX_PIXELS;
  }
  function autoCell(m) {
    var size = Math.floor(AUTO_SPAN / Math.max(m.rows.length, m.columns.length));
    size = Math.max(1, Math.min(CELL_MAX, size));
    while (size > 1 && !fits(m, size)) { size--; }
    return size;
  }
  function fillCellSizes() {
    var m = current(), chosen = cellSelect.value;
    cellSelect.textContent = "";
    option(cellSelect, "auto", "auto (" + autoCell(m) + " px)");
    CELL_SIZES.forEach(function (size) { if (fits(m, size)) { option(cellSelect, size, size + " px"); } });
    cellSelect.value = chosen !== "" && cellSelect.querySelector('option[value="' + chosen + '"]')
      ? chosen : "auto";
  }

  // --- drawing -----------------------------------------------------------------------------

  var cell = 1, shown = null, hovered = null, generation = 0, pending = Promise.resolve();

  function layout() {
    var m = current(), R = m.rows.length, C = m.columns.length;
    cell = cellSelect.value === "auto" ? autoCell(m) : Number(cellSelect.value);
    [canvas, overlay].forEach(function (c) {
      c.width = C * cell;
      c.height = R * cell;
      c.style.width = C * cell + "px";  // one canvas pixel per CSS pixel
      c.style.height = R * cell + "px";
    });
    rowLabels.textContent = "";
    columnLabels.textContent = "";
    var labelled = cell >= LABEL_MIN, font = Math.min(13, cell - 2) + "px";
    rowLabels.hidden = columnLabels.hidden = !labelled;
    $("corner").hidden = !labelled;
    if (labelled) {
      m.rows.forEach(function (token, i) {
        var div = document.createElement("div");
        div.className = "label";
        div.textContent = token;
        div.dataset.row = String(i);
        div.style.height = div.style.lineHeight = cell + "px";
        div.style.fontSize = font;
        rowLabels.appendChild(div);
      });
      m.columns.forEach(function (token, j) {
        var div = document.createElement("div");
        div.className = "label";
        div.textContent = token;
        div.dataset.col = String(j);
        div.style.width = div.style.lineHeight = cell + "px";
        div.style.fontSize = font;
        columnLabels.appendChild(div);
      });
    }
    showValues.disabled = cell < VALUES_MIN;
    hovered = null;
  }

  function shade(value, top) { return Math.max(0, Math.min(1, value / top)); }

  function paint() {
    if (shown === null || shown.selection.index !== Number(mapSelect.value)) { return; }
    var view = shown.view, R = view.R, C = view.C, max = 0, i, j, row;
    for (i = 0; i < R; i++) {
      row = view.row(i);
      for (j = 0; j < C; j++) { if (row[j] > max) { max = row[j]; } }
    }
    var top = scaleSelect.value === "relative" ? (max > 0 ? max : 1) : 1;
    var image = new ImageData(C, R), pixels = image.data;
    for (i = 0; i < R; i++) {
      row = view.row(i);
      for (j = 0; j < C; j++) {
        // light (low weight) to dark blue (high weight)
        var s = shade(row[j], top), p = 4 * (i * C + j);
        pixels[p] = Math.round(247 - 239 * s);
        pixels[p + 1] = Math.round(251 - 203 * s);
        pixels[p + 2] = Math.round(255 - 148 * s);
        pixels[p + 3] = 255;
      }
    }
    var context = canvas.getContext("2d");
    if (cell === 1) {
      context.putImageData(image, 0, 0);
    } else {
      var scratch = document.createElement("canvas");
      scratch.width = C;
      scratch.height = R;
      scratch.getContext("2d").putImageData(image, 0, 0);
      context.imageSmoothingEnabled = false;
      context.drawImage(scratch, 0, 0, C * cell, R * cell);
    }
    if (cell >= LABEL_MIN) {  // thin white lines between cells, as between table cells
      context.fillStyle = "#fff";
      for (i = 1; i < R; i++) { context.fillRect(0, i * cell, C * cell, 1); }
      for (j = 1; j < C; j++) { context.fillRect(j * cell, 0, 1, R * cell); }
    }
    if (showValues.checked && cell >= VALUES_MIN) {
      context.font = Math.floor(cell / 2.6) + "px system-ui, sans-serif";
      context.textAlign = "center";
      context.textBaseline = "middle";
      for (i = 0; i < R; i++) {
        row = view.row(i);
        for (j = 0; j < C; j++) {
          // white text on the dark half
          context.fillStyle = shade(row[j], top) > 0.55 ? "#fff" : "#1d1d1f";
          context.fillText(row[j].toFixed(2), (j + 0.5) * cell, (i + 0.5) * cell);
        }
      }
    }
    var m = current(), stored = "";
    if (m.encoding === "quantised") {
      stored = "; stored in " + Math.round(Math.log2(m.levels + 1)) + " bits: each value within " +
        "\u00b11/" + 2 * m.levels + " of its row's range (hover shows the bound)";
    }
    legend.textContent = "shade: 0 (white) to " + top.toPrecision(3) +
      " (dark blue); largest value in view " + max.toPrecision(4) + stored;
    unhover();
    document.body.dataset.ready = "true";
  }

  function render() {
    var token = ++generation, chosen = selection();
    pending = viewOf(chosen.index, chosen.kind, chosen.layer, chosen.head).then(function (view) {
      if (token !== generation) { return; }
      shown = { view: view, selection: chosen };
      paint();
    }).catch(function (error) {
      if (token !== generation) { return; }
      shown = null;
      document.body.dataset.error = String(error.message);
      readout.textContent = "cannot show this view: " + error.message;
    });
    return pending;
  }

  function formatted(value, error) {
    return error > 0 ? "\u2248" + value.toPrecision(4) + " \u00b1" + error.toPrecision(2)
      : String(value);
  }

  function describe(i, j) {
    var m = data.maps[shown.selection.index];
    return "row " + i + " \u201c" + m.rows[i] + "\u201d \u2192 column " + j + " \u201c" +
      m.columns[j] + "\u201d: " + formatted(shown.view.row(i)[j], shown.view.error(i)) +
      " (" + shown.selection.what + ")";
  }

  function mark(i, j, on) {
    var marks = [rowLabels.children[i], columnLabels.children[j]];
    marks.forEach(function (label) { if (label) { label.classList.toggle("active", on); } });
  }

  function unhover() {
    if (hovered !== null) { mark(hovered[0], hovered[1], false); }
    hovered = null;
    overlay.getContext("2d").clearRect(0, 0, overlay.width, overlay.height);
    readout.textContent = HINT;
  }

  function hover(i, j) {
    unhover();
    hovered = [i, j];
    mark(i, j, true);
    readout.textContent = describe(i, j);
    var context = overlay.getContext("2d");
    context.fillStyle = "rgba(214, 39, 40, 0.15)";  // the row and column, faintly
    context.fillRect(0, i * cell, overlay.width, cell);
    context.fillRect(j * cell, 0, cell, overlay.height);
    context.strokeStyle = "#d62728";
    context.lineWidth = 2;
    var pad = cell >= 4 ? 1 : -1;  // a small cell gets a ring around it, a large one inside
    context.strokeRect(j * cell + pad, i * cell + pad, cell - 2 * pad, cell - 2 * pad);
  }

  overlay.addEventListener("mousemove", function (event) {
    if (shown === null || shown.selection.index !== Number(mapSelect.value)) { return; }
    var box = overlay.getBoundingClientRect();
    var i = Math.floor((event.clientY - box.top) / cell);
    var j = Math.floor((event.clientX - box.left) / cell);
    if (i < 0 || j < 0 || i >= shown.view.R || j >= shown.view.C) { unhover(); return; }
    if (hovered === null || hovered[0] !== i || hovered[1] !== j) { hover(i, j); }
  });
  overlay.addEventListener("mouseleave", unhover);

  data.maps.forEach(function (m, index) { option(mapSelect, index, m.name); });
  mapSelect.addEventListener("change", function () {
    fillSelectors(); fillCellSizes(); layout(); render();
  });
  viewSelect.addEventListener("change", function () { updateHeadState(); render(); });
  [layerSelect, headSelect].forEach(function (c) { c.addEventListener("change", render); });
  [scaleSelect, showValues].forEach(function (c) { c.addEventListener("change", paint); });
  cellSelect.addEventListener("change", function () { layout(); paint(); });

  function idle() {
    var waiting = pending;
    return waiting.then(function () { return waiting === pending ? undefined : idle(); });
  }
  window.attentionViewer = {
    idle: idle,
    state: function () {
      var m = current();
      return { map: Number(mapSelect.value), view: viewSelect.value,
               layer: Number(layerSelect.value), head: headSelect.value, cell: cell,
               rows: m.rows.length, columns: m.columns.length, encoding: m.encoding,
               levels: m.levels === undefined ? null : m.levels,
               shown: shown === null ? null : shown.selection.what };
    },
    shown: function () {
      var out = [];
      for (var i = 0; i < shown.view.R; i++) { out.push(Array.from(shown.view.row(i))); }
      return out;
    },
    value: function (i, j) { return shown.view.row(i)[j]; },
    error: function (i) { return shown.view.error(i); }
  };

  fillSelectors();
  fillCellSizes();
  layout();
  render();
})();
"""
