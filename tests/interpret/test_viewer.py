"""The HTML attention viewer: embedded data, escaping, validation, atomic writes, and the page
itself driven in headless Chromium (system ``chromium`` + ``chromedriver``; skipped without them)
— a synthetic page, and the pages ``attnkit view`` writes for trained RNN and Transformer runs.
"""

import json
import math
import os
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

from attnkit.interpret import AttentionMap, render_viewer, write_viewer

NASTY = [
    "</script><script>console.error('escaped')</script>",
    "<img src=x onerror=\"console.error('xss')\">",
    "<!--",
    "&amp;",
    "\u2028",
    "%DATA%",
]


class _Page(HTMLParser):
    """What a browser's parser sees: elements opened, script bodies, text of the <h1>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.scripts: list[tuple[dict, str]] = []
        self.heading = ""
        self._script: dict | None = None
        self._in_h1 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))
        self._in_h1 = tag == "h1"

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None
        if tag == "h1":
            self._in_h1 = False

    def handle_data(self, data):
        if self._script is not None:
            attrs, body = self.scripts[-1]
            self.scripts[-1] = (attrs, body + data)
        elif self._in_h1:
            self.heading += data


def parse(page: str) -> tuple[_Page, dict]:
    parser = _Page()
    parser.feed(page)
    parser.close()
    data = [body for attrs, body in parser.scripts if attrs.get("type") == "application/json"]
    assert len(data) == 1
    return parser, json.loads(data[0])


def rollout_reference(weights: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema's rollout through each layer, float64: Ã = rows(½·mean_h A + ½·I)."""
    layers, _, length, _ = weights.shape
    rolled, out = np.eye(length), []
    for layer in range(layers):
        augmented = 0.5 * weights[layer].mean(0) + 0.5 * np.eye(length)
        augmented /= augmented.sum(-1, keepdims=True)
        rolled = augmented @ rolled
        out.append(rolled)
    return np.stack(out)


def attention_stack(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).softmax(-1)


def test_embedded_json_round_trips_weights_mean_and_rollout():
    encoder = attention_stack(2, 3, 4, 4)
    cross = attention_stack(3, 5, 4, seed=1).float()  # [heads, T, S], float32
    page = render_viewer(
        [
            AttentionMap("encoder self-attention", encoder, rows=["a", "b", "c", "d"]),
            AttentionMap("cross", cross, rows=["x", "y", "z", "w", "v"], columns=list("abcd")),
            AttentionMap("single", np.eye(3), rows=["p", "q", "r"]),
        ]
    )
    _, data = parse(page)
    enc, crs, single = data["maps"]
    assert [m["name"] for m in data["maps"]] == ["encoder self-attention", "cross", "single"]
    assert {m["encoding"] for m in data["maps"]} == {"json"}  # a small page is embedded exactly
    assert (enc["layers"], enc["heads"], enc["rows"], enc["columns"]) == (
        2,
        3,
        list("abcd"),
        list("abcd"),
    )
    # exact: JSON carries every float64 digit
    assert np.array_equal(np.array(enc["weights"]), encoder.numpy())
    np.testing.assert_allclose(enc["mean"], encoder.numpy().mean(1), rtol=1e-15, atol=0)
    np.testing.assert_allclose(enc["rollout"], rollout_reference(encoder.numpy()), rtol=1e-12)
    # a missing layer axis is one layer; float32 values survive exactly
    assert (crs["layers"], crs["heads"], crs["columns"]) == (1, 3, list("abcd"))
    assert np.array_equal(np.array(crs["weights"][0], dtype=np.float32), cross.numpy())
    assert crs["rollout"] is None  # cross-attention has no rollout
    assert (single["layers"], single["heads"]) == (1, 1) and single["rollout"] is None
    assert np.array_equal(np.array(single["weights"]), np.eye(3)[None, None])


def test_mapping_form_shares_labels_and_rollout_can_be_forced_or_refused():
    weights = attention_stack(1, 2, 3, 3)
    _, data = parse(render_viewer({"self": weights}, rows=["a", "b", "c"], decimals=3))
    assert data["maps"][0]["rollout"] is None  # one layer: nothing to roll out by default
    assert np.array_equal(np.array(data["maps"][0]["weights"]), np.round(weights.numpy(), 3))
    forced = AttentionMap("self", weights, rows=["a", "b", "c"], rollout=True)
    _, data = parse(render_viewer([forced]))
    np.testing.assert_allclose(data["maps"][0]["rollout"], rollout_reference(weights.numpy()))
    refused = AttentionMap("self", attention_stack(2, 2, 3, 3), rows=["a", "b", "c"], rollout=False)
    assert parse(render_viewer([refused]))[1]["maps"][0]["rollout"] is None


def test_nasty_tokens_title_and_notes_cannot_break_out_of_the_page():
    tokens = NASTY
    title = "<b>title</b> & %NOTES%"
    page = render_viewer(
        {"m": attention_stack(2, 2, 6, 6)}, rows=tokens, title=title, notes="<i>note</i>"
    )
    parser, data = parse(page)
    # the browser's parser sees exactly our two scripts and no injected element
    assert [attrs.get("type") for attrs, _ in parser.scripts] == ["application/json", None]
    assert page.lower().count("</script") == 2
    assert "b" not in parser.tags and "i" not in parser.tags and "img" not in parser.tags
    assert parser.heading == title
    assert data["title"] == title and data["maps"][0]["rows"] == tokens
    assert data["maps"][0]["columns"] == tokens


@pytest.mark.parametrize(
    ("maps", "kwargs", "error", "match"),
    [
        ({"m": torch.rand(2, 3, 4, 5)}, {"rows": list("abc")}, ValueError,
         r"map 'm' of shape \[2, 3, 4, 5\] has 4 rows but 3 rows labels"),
        ({"m": torch.rand(4, 5)}, {"rows": list("abcd"), "columns": list("abcd")}, ValueError,
         r"has 5 columns but 4 columns labels"),
        ({"m": torch.rand(4, 5)}, {"rows": list("abcd")}, ValueError,
         r"has 5 columns but 4 columns labels"),
        ({"m": torch.rand(1, 2, 2, 3, 3)}, {"rows": list("abc")}, ValueError,
         r"\[layers, heads, R, C\], \[heads, R, C\] or \[R, C\].*got \[1, 2, 2, 3, 3\]"),
        ({"m": torch.tensor([[float("nan")]])}, {"rows": ["a"]}, ValueError, "finite"),
        ({"m": torch.rand(3, 3)}, {}, ValueError, "need the token labels rows"),
        ({}, {"rows": []}, ValueError, "at least one attention map"),
        ({"m": torch.rand(2, 2)}, {"rows": ["a", 1]}, TypeError, "str tokens, got int"),
        ({"m": torch.rand(2, 2)}, {"rows": "ab"}, TypeError, "list of str, got str"),
        ([AttentionMap("m", torch.rand(2, 2), ["a", "b"])], {"rows": ["a", "b"]}, ValueError,
         "each AttentionMap carries its own labels"),
        ([AttentionMap("m", torch.rand(2, 2), ["a", "b"])] * 2, {}, ValueError,
         r"unique, got \['m'\]"),
        ([AttentionMap("m", torch.rand(2, 3), ["a", "b"], list("abc"), rollout=True)], {},
         ValueError, r"rollout needs square"),
        ([torch.rand(2, 2)], {}, TypeError, "expected an AttentionMap, got Tensor"),
        ({"m": torch.rand(2, 2)}, {"rows": ["a", "b"], "decimals": -1}, ValueError, "decimals"),
        ({"m": torch.rand(2, 2)}, {"rows": ["a", "b"], "exact": "yes"}, TypeError,
         "exact must be True, False or None, got 'yes'"),
        ({"m": torch.rand(2, 2)}, {"rows": ["a", "b"], "max_bytes": 0}, ValueError,
         "max_bytes must be a positive int or None, got 0"),
    ],
)  # fmt: skip
def test_bad_input_names_expected_and_given(maps, kwargs, error, match):
    with pytest.raises(error, match=match):
        render_viewer(maps, **kwargs)


def test_write_viewer_replaces_atomically_and_leaves_old_page_on_error(tmp_path):
    path = tmp_path / "attention.html"
    path.write_text("old page", encoding="utf-8")
    weights = {"m": attention_stack(2, 2)}
    assert write_viewer(path, weights, rows=["é", "ß"]) == path
    assert path.read_text(encoding="utf-8") == render_viewer(weights, rows=["é", "ß"])
    assert os.listdir(tmp_path) == ["attention.html"]  # no temporary file left behind
    with pytest.raises(ValueError, match="2 rows but 1 rows labels"):
        write_viewer(path, weights, rows=["only one"])
    assert path.read_text(encoding="utf-8") == render_viewer(weights, rows=["é", "ß"])
    assert os.listdir(tmp_path) == ["attention.html"]


# --- the page in a real browser -------------------------------------------------------------


# The ``browser`` fixture (headless system Chromium, skipped with its reason without it) and the
# tiny trained ``runs`` are in conftest.py. The page draws on a canvas and exposes what it shows
# as ``window.attentionViewer`` (see attnkit.interpret.viewer_page).


def settle(browser) -> None:
    """Wait until the page has drawn the view its selectors name (decoding may be async)."""
    browser.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "window.attentionViewer.idle().then(function () { done(null); });"
    )


def shown(browser) -> np.ndarray:
    """The values of the view on screen, as the page holds them."""
    settle(browser)
    return np.array(browser.execute_script("return window.attentionViewer.shown();"))


def choose(browser, select: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    Select(browser.find_element(By.ID, select)).select_by_value(value)
    settle(browser)


def hover(browser, i: int, j: int) -> None:
    """Move the real mouse pointer to the centre of cell (i, j)."""
    from selenium.webdriver.common.action_chains import ActionChains

    x, y = browser.execute_script(
        "var canvas = document.getElementById('overlay'), size = attentionViewer.state().cell;"
        f"var x = ({j} + 0.5) * size, y = ({i} + 0.5) * size;"
        "var wrap = document.getElementById('heatmap-wrap'), box = canvas.getBoundingClientRect();"
        "wrap.scrollLeft += box.left + x - wrap.getBoundingClientRect().left - 100;"
        "wrap.scrollTop += box.top + y - wrap.getBoundingClientRect().top - 100;"
        "canvas.scrollIntoView({block: 'nearest', inline: 'nearest'});"
        "box = canvas.getBoundingClientRect();"
        "return [Math.floor(box.left + x), Math.floor(box.top + y)];"
    )
    actions = ActionChains(browser)
    actions.w3c_actions.pointer_action.move_to_location(x, y)
    actions.perform()


def pixel(browser, i: int, j: int) -> list[int]:
    """The RGB the heatmap canvas holds at the centre of cell (i, j)."""
    return browser.execute_script(
        "var size = attentionViewer.state().cell, context ="
        " document.getElementById('heatmap').getContext('2d');"
        f"return Array.from(context.getImageData(Math.floor(({j} + 0.5) * size),"
        f" Math.floor(({i} + 0.5) * size), 1, 1).data).slice(0, 3);"
    )


def ramp(value: float, top: float = 1.0) -> list[int]:
    """The page's colour for ``value``: light (0) to dark blue (``top``), rounded half up as
    JavaScript's Math.round."""
    shade = min(max(value / top, 0.0), 1.0)
    return [math.floor(a - b * shade + 0.5) for a, b in ((247, 239), (251, 203), (255, 148))]


def test_page_renders_and_reacts_in_headless_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By

    tokens = ["je", NASTY[0], NASTY[1], "aime"]
    encoder = attention_stack(2, 3, 4, 4, seed=2)
    cross = attention_stack(2, 3, 3, 4, seed=3)
    path = write_viewer(
        tmp_path / "viewer.html",
        [
            AttentionMap("encoder self-attention", encoder, rows=tokens),
            AttentionMap(
                "decoder cross-attention", cross, rows=["i", "love", "you"], columns=tokens
            ),
        ],
        title="viewer test",
    )
    browser.get(path.as_uri())
    settle(browser)
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    state = browser.execute_script("return attentionViewer.state();")
    assert state["encoding"] == "json" and state["cell"] == 28  # small: exact, large cells

    # first view: layer 0, mean over heads, one cell per (row, column) token pair
    assert shown(browser).shape == (4, 4)
    np.testing.assert_allclose(shown(browser), encoder[0].mean(0).numpy(), rtol=1e-15)
    columns = browser.find_elements(By.CSS_SELECTOR, "#column-labels .label")
    rows = browser.find_elements(By.CSS_SELECTOR, "#row-labels .label")
    assert [h.get_attribute("textContent") for h in columns] == tokens  # shown as text
    assert [h.get_attribute("textContent") for h in rows] == tokens
    assert browser.find_elements(By.TAG_NAME, "img") == []
    # the canvas holds each cell's colour on the page's ramp (colour scale 0 to 1)
    for i, j in [(0, 0), (2, 3), (3, 1)]:
        assert pixel(browser, i, j) == ramp(encoder[0].mean(0)[i, j].item())

    choose(browser, "head-select", "1")
    assert np.array_equal(shown(browser), encoder[0, 1].numpy())
    choose(browser, "layer-select", "1")
    assert np.array_equal(shown(browser), encoder[1, 1].numpy())
    choose(browser, "scale-select", "relative")  # 0 to the largest value in view
    assert pixel(browser, 3, 1) == ramp(encoder[1, 1, 3, 1].item(), encoder[1, 1].max().item())

    hover(browser, 3, 1)
    readout = browser.find_element(By.ID, "readout").text
    assert "\u201caime\u201d" in readout and NASTY[0] in readout
    assert f": {encoder[1, 1, 3, 1].item()!r} (" in readout and "head 1" in readout
    assert "active" in rows[3].get_attribute("class").split()
    assert "active" in columns[1].get_attribute("class").split()

    # values in cells: drawn on the canvas (the cells change), not as elements
    before = browser.execute_script("return document.getElementById('heatmap').toDataURL();")
    browser.find_element(By.ID, "show-values").click()
    after = browser.execute_script("return document.getElementById('heatmap').toDataURL();")
    assert before != after

    choose(browser, "view-select", "rollout")
    np.testing.assert_allclose(shown(browser), rollout_reference(encoder.numpy())[1], rtol=1e-12)
    assert not browser.find_element(By.ID, "head-select").is_enabled()

    choose(browser, "map-select", "1")
    assert np.array_equal(shown(browser), cross[1, 1].numpy())  # layer and head kept, rollout left
    rollout_option = browser.find_element(By.CSS_SELECTOR, "#view-select option[value=rollout]")
    assert not rollout_option.is_enabled()
    assert [
        h.get_attribute("textContent")
        for h in browser.find_elements(By.CSS_SELECTOR, "#row-labels .label")
    ] == ["i", "love", "you"]

    # a smaller cell size redraws the same view; below 12 px the axes lose their labels
    choose(browser, "cell-select", "8")
    assert browser.execute_script("return attentionViewer.state().cell;") == 8
    assert not browser.find_element(By.ID, "row-labels").is_displayed()
    assert pixel(browser, 2, 3) == ramp(cross[1, 1, 2, 3].item(), cross[1, 1].max().item())
    choose(browser, "cell-select", "auto")

    screenshot = tmp_path / "viewer.png"
    assert browser.save_screenshot(str(screenshot))
    png = screenshot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5_000
    import matplotlib.image

    pixels = matplotlib.image.imread(screenshot)
    assert pixels.std() > 0.01  # something was drawn, not a blank page

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    # the log check itself works: an error the page does raise is caught
    browser.execute_script("console.error('probe')")
    assert any(
        "probe" in e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"
    )


# --- the pages `attnkit view` writes, in the same browser --------------------------------

EXPLAINED = "I love you, Zorblax."  # "zorblax" is in no vocabulary: shown as "zorblax(unk)"


@pytest.mark.parametrize("kind", ["bahdanau", "transformer"])
def test_view_page_renders_and_reacts_in_headless_chromium(
    browser, runs, attention_reference, kind, tmp_path, capsys
):
    """The page of ``attnkit view RUN_DIR --input ...`` for a tiny trained run: every map,
    layer and head the selectors offer shows the model's attention (recomputed without
    attnkit.interpret, float64), hovering reads one weight out, and Chromium logs no error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    from attnkit.cli import main

    page = tmp_path / f"view-{kind}.html"
    command = ["view", str(runs[kind]), "--input", EXPLAINED, "--output", str(page)]
    assert main(command) == 0
    assert capsys.readouterr().out == f"attention viewer: {page}\n"
    reference = attention_reference(runs[kind], EXPLAINED)

    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(page.as_uri())
    settle(browser)
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    map_select = Select(browser.find_element(By.ID, "map-select"))
    layer_select = Select(browser.find_element(By.ID, "layer-select"))
    head_select = Select(browser.find_element(By.ID, "head-select"))
    assert [option.text for option in map_select.options] == list(reference)

    for index, (name, weights) in enumerate(reference.items()):
        choose(browser, "map-select", str(index))
        layers, heads = weights.shape[:2]
        assert [o.get_attribute("value") for o in layer_select.options] == [
            str(layer) for layer in range(layers)
        ]
        assert [o.get_attribute("value") for o in head_select.options] == [
            "mean",
            *(str(head) for head in range(heads)),
        ]
        assert browser.find_element(By.ID, "layer-select").is_enabled() == (layers > 1)
        assert browser.find_element(By.ID, "head-select").is_enabled()
        for layer in range(layers):
            if layers > 1:  # one layer: the selector is disabled and stays at layer 0
                choose(browser, "layer-select", str(layer))
            for head in ["mean", *range(heads)]:
                choose(browser, "head-select", str(head))
                expected = weights[layer].mean(0) if head == "mean" else weights[layer, head]
                np.testing.assert_allclose(
                    shown(browser), expected, rtol=0, atol=1e-5, err_msg=f"{name}/{layer}"
                )

    # hover the unknown source word in the last target row of the cross-attention
    choose(browser, "map-select", "0")
    cross = reference["cross-attention"]
    layer, head = cross.shape[0] - 1, cross.shape[1] - 1
    if cross.shape[0] > 1:
        choose(browser, "layer-select", str(layer))
    choose(browser, "head-select", str(head))
    columns = [
        label.get_attribute("textContent")
        for label in browser.find_elements(By.CSS_SELECTOR, "#column-labels .label")
    ]
    assert columns[0] == "i" and "zorblax(unk)" in columns  # tiny vocabulary: more are unknown
    row, column = cross.shape[2] - 1, columns.index("zorblax(unk)")
    hover(browser, row, column)
    readout = browser.find_element(By.ID, "readout").text
    assert readout.startswith(f"row {row} ") and "column" in readout
    assert "\u201czorblax(unk)\u201d" in readout and f"(layer {layer}, head {head})" in readout
    value = float(readout.split(": ")[-1].split(" (")[0])
    assert value == browser.execute_script(f"return attentionViewer.value({row}, {column});")
    assert value == pytest.approx(cross[layer, head, row, column], abs=1e-5)

    screenshot = tmp_path / f"view-{kind}.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    import matplotlib.image

    assert matplotlib.image.imread(screenshot).std() > 0.01  # drawn, not a blank page
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
