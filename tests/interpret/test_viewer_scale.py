"""The viewer at scale: pages above a few hundred thousand weights store them quantised per row
(one byte per weight, deflated, base64) and the page draws on a canvas, decoding a head only when
it is shown. Checked against the format's definition decoded here with numpy (float64), against
float64 references of the mean and the rollout, and in headless Chromium with a 2,000-token page
of hostile labels (``browser`` fixture: skipped with its reason without Chromium)."""

from __future__ import annotations

import base64
import json
import math
import re
import zlib

import numpy as np
import pytest
import torch

from attnkit.interpret import AttentionMap, render_viewer, write_viewer
from attnkit.interpret.viewer import EXACT_VALUES, MAX_BYTES

HOSTILE = [
    "</script><script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "\"quoted\" & 'single' &amp;",
    "<!--",
    '<svg onload="window.__pwned = 3">',
    "\u2028",
    "%DATA%",
]
TITLE = "long </title><script>window.__pwned = 4</script>"


def page_data(page: str) -> dict:
    match = re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


def decode(block: dict, rows: int, columns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The documented format read back: ``low[i] + q[i, j] · step[i]`` (float64), with ``q``
    and ``step``."""
    low = np.frombuffer(base64.b64decode(block["low"]), "<f4").astype(np.float64)
    step = np.frombuffer(base64.b64decode(block["step"]), "<f4").astype(np.float64)
    raw = zlib.decompress(base64.b64decode(block["data"]))
    q = np.frombuffer(raw, np.uint8).reshape(rows, columns)
    return low[:, None] + q * step[:, None], q, step


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


def stack(layers: int, heads: int, length: int, seed: int = 0) -> torch.Tensor:
    """Softmax weights with a strong diagonal (a token attending to itself), float32."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(layers, heads, length, length, generator=generator)
    return (scores + 8 * torch.eye(length)).softmax(-1)


def labels(length: int) -> list[str]:
    return [*HOSTILE, *(f"w{i}" for i in range(len(HOSTILE), length))][:length]


# --- the stored format ----------------------------------------------------------------------


def test_quantised_rows_are_within_half_a_step_and_zeros_stay_exact():
    weights = stack(2, 3, 6, seed=1).double()
    weights[0, 0] = weights[0, 0].tril()  # causal: exact zeros above the diagonal
    weights[0, 1, 2] = 0.0  # a fully masked row
    weights[0, 1, 3] = 1 / 6  # a uniform row
    weights[1, 2, 4] = torch.tensor([-0.3, 0.1, 0.5, -0.05, 0.2, 0.55])  # signed weights
    page = render_viewer({"m": weights}, rows=list("abcdef"), exact=False)
    (entry,) = page_data(page)["maps"]
    assert (entry["encoding"], entry["levels"], entry["mean"]) == ("quantised", 255, None)
    for layer in range(2):
        for head in range(3):
            w = weights[layer, head].numpy()
            shown, q, step = decode(entry["weights"][layer][head], 6, 6)
            low = np.minimum(w.min(1), 0).astype(np.float32).astype(np.float64)
            expected_step = ((np.maximum(w.max(1), 0) - low) / 255).astype(np.float32)
            assert np.array_equal(step, expected_step.astype(np.float64))
            assert np.all(np.abs(shown - w) <= step[:, None] / 2 * (1 + 1e-9) + 1e-300)
            assert q.max() == 255 or np.all(w == 0)
            assert np.array_equal(shown[w == 0], w[w == 0]) or (w < 0).any()
    shown, q, step = decode(entry["weights"][0][1], 6, 6)
    assert np.all(shown[2] == 0) and step[2] == 0  # the masked row
    np.testing.assert_allclose(shown[3], 1 / 6, rtol=1e-7)  # the uniform row: float32 step
    assert np.all(np.triu(decode(entry["weights"][0][0], 6, 6)[0], 1) == 0)  # causal zeros
    # the rollout through each layer, stored the same way, within half a step of the formula
    reference = rollout_reference(weights.numpy())
    for layer in range(2):
        shown, _, step = decode(entry["rollout"][layer], 6, 6)
        assert np.all(np.abs(shown - reference[layer]) <= step[:, None] / 2 + 1e-12)


def test_size_decides_exact_or_quantised():
    small = torch.rand(1, 1, 300, 300).softmax(-1)  # 180,000 numbers (weights and mean)
    large = torch.rand(1, 1, 400, 400).softmax(-1)  # 320,000
    assert 2 * 300 * 300 <= EXACT_VALUES < 2 * 400 * 400
    names = [f"t{i}" for i in range(400)]
    assert page_data(render_viewer({"m": small}, rows=names[:300]))["maps"][0]["encoding"] == "json"
    assert page_data(render_viewer({"m": large}, rows=names))["maps"][0]["encoding"] == "quantised"
    forced = render_viewer({"m": large}, rows=names, exact=True, max_bytes=None)
    assert np.array_equal(np.array(page_data(forced)["maps"][0]["weights"]), large.double().numpy())


def test_a_page_above_max_bytes_is_coarsened_to_4_bits_then_refused():
    weights = torch.randn(1, 2, 200, 200, generator=torch.Generator().manual_seed(3)).softmax(-1)
    rows = [f"t{i}" for i in range(200)]
    fine = render_viewer({"m": weights}, rows=rows, exact=False)
    assert page_data(fine)["maps"][0]["levels"] == 255
    size = len(fine.encode("utf-8"))
    coarse = render_viewer({"m": weights}, rows=rows, exact=False, max_bytes=size - 1)
    assert len(coarse.encode("utf-8")) <= size - 1
    (entry,) = page_data(coarse)["maps"]
    assert entry["levels"] == 15
    shown, q, step = decode(entry["weights"][0][1], 200, 200)
    assert q.max() == 15
    assert np.all(np.abs(shown - weights[0, 1].double().numpy()) <= step[:, None] / 2 + 1e-12)
    with pytest.raises(ValueError, match=r"would be [\d,]+ bytes even at 4 bits per weight, "
                                         r"above max_bytes=10,000: show fewer maps"):  # fmt: skip
        render_viewer({"m": weights}, rows=rows, exact=False, max_bytes=10_000)
    with pytest.raises(ValueError, match=r"the exact page would be [\d,]+ bytes, above "):
        render_viewer({"m": weights}, rows=rows, exact=True, max_bytes=10_000)


# --- in the browser -------------------------------------------------------------------------


def settle(browser) -> None:
    """Wait until the page has drawn the view its selectors name (it inflates asynchronously)."""
    browser.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "window.attentionViewer.idle().then(function () { done(null); });"
    )


def choose(browser, select: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    Select(browser.find_element(By.ID, select)).select_by_value(value)
    settle(browser)


def pixel(browser, i: int, j: int) -> list[int]:
    """The RGB the heatmap canvas holds at the centre of cell (i, j)."""
    return browser.execute_script(
        "var size = attentionViewer.state().cell, context ="
        " document.getElementById('heatmap').getContext('2d');"
        f"return Array.from(context.getImageData(Math.floor(({j} + 0.5) * size),"
        f" Math.floor(({i} + 0.5) * size), 1, 1).data).slice(0, 3);"
    )


def ramp(value: float, top: float = 1.0) -> list[int]:
    """The page's colour for ``value`` (light at 0, dark blue at ``top``; Math.round)."""
    shade = min(max(value / top, 0.0), 1.0)
    return [math.floor(a - b * shade + 0.5) for a, b in ((247, 239), (251, 203), (255, 148))]


def hover(browser, i: int, j: int) -> str:
    """Move the real mouse pointer over cell (i, j); the readout's text."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

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
    return browser.find_element(By.ID, "readout").get_attribute("textContent")


def test_quantised_page_shows_the_decoded_heads_their_mean_and_the_rollout(browser, tmp_path):
    weights = stack(2, 3, 5, seed=4)
    path = write_viewer(tmp_path / "q.html", {"self": weights}, rows=HOSTILE[:5], exact=False)
    (entry,) = page_data(path.read_text(encoding="utf-8"))["maps"]
    heads = [[decode(entry["weights"][l][h], 5, 5) for h in range(3)] for l in range(2)]
    browser.get_log("browser")
    browser.get(path.as_uri())
    settle(browser)
    state = browser.execute_script("return attentionViewer.state();")
    assert (state["encoding"], state["levels"]) == ("quantised", 255)

    def shown():
        settle(browser)
        return np.array(browser.execute_script("return attentionViewer.shown();"))

    # the mean over heads is the page's own: of the decoded heads, within their mean half-step
    mean = sum(heads[0][h][0] for h in range(3)) / 3
    np.testing.assert_allclose(shown(), mean, rtol=1e-15, atol=0)
    bound = sum(heads[0][h][2] for h in range(3)) / 3 / 2
    assert np.all(np.abs(shown() - weights[0].double().mean(0).numpy()) <= bound[:, None] + 1e-12)
    for i in range(5):
        assert browser.execute_script(f"return attentionViewer.error({i});") == pytest.approx(
            bound[i], rel=1e-12
        )
    choose(browser, "layer-select", "1")
    choose(browser, "head-select", "2")
    assert np.array_equal(shown(), heads[1][2][0])  # exactly the stored values, decoded
    assert pixel(browser, 3, 3) == ramp(heads[1][2][0][3, 3])
    readout = hover(browser, 0, 1)
    value, half_step = heads[1][2][0][0, 1], heads[1][2][2][0] / 2
    # "…: ≈VALUE ±BOUND (…)": the stored value to 4 digits and its storage bound to 2
    prefix = f"row 0 \u201c{HOSTILE[0]}\u201d \u2192 column 1 \u201c{HOSTILE[1]}\u201d: \u2248"
    assert readout.startswith(prefix) and readout.endswith(" (layer 1, head 2)")
    shown_value, shown_bound = readout[len(prefix) :].split(" (")[0].split(" \u00b1")
    assert float(shown_value) == pytest.approx(value, rel=5e-4)
    assert float(shown_bound) == pytest.approx(half_step, rel=5e-2)
    choose(browser, "view-select", "rollout")
    assert np.array_equal(shown(), decode(entry["rollout"][1], 5, 5)[0])
    assert browser.execute_script("return window.__pwned === undefined;")
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_a_2000_token_page_with_hostile_labels_opens_and_draws_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By

    n = 2000
    weights = stack(2, 2, n, seed=0)  # float32, as a model gives them
    tokens = labels(n)
    path = write_viewer(
        tmp_path / "long.html", [AttentionMap("self-attention", weights, tokens)], title=TITLE
    )
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size <= MAX_BYTES == 20_000_000
    assert text.lower().count("</script") == 2  # the page's own two scripts only
    (entry,) = page_data(text)["maps"]
    assert entry["encoding"] == "quantised" and entry["rows"] == tokens

    browser.get_log("browser")
    browser.get(path.as_uri())
    settle(browser)
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    state = browser.execute_script("return attentionViewer.state();")
    assert (state["rows"], state["columns"], state["cell"]) == (n, n, 1)
    # nothing the labels or the title carry ran or became an element
    assert browser.execute_script("return window.__pwned === undefined;")
    assert browser.find_elements(By.CSS_SELECTOR, "img, svg, #plot script") == []
    assert browser.find_element(By.ID, "title").get_attribute("textContent") == TITLE
    assert browser.title == TITLE

    def check(reference: np.ndarray, cells) -> None:
        for i, j in cells:
            value = browser.execute_script(f"return attentionViewer.value({i}, {j});")
            error = browser.execute_script(f"return attentionViewer.error({i});")
            assert abs(value - reference[i, j]) <= error + 1e-12, (i, j)
            assert pixel(browser, i, j) == ramp(value), (i, j)  # drawn, on the 0-to-1 ramp

    cells = [(0, 0), (1, 2), (5, 5), (1000, 1000), (1999, 3), (1999, 1999), (7, 1500)]
    check(weights[0].double().mean(0).numpy(), cells)  # first view: layer 0, mean over heads
    choose(browser, "layer-select", "1")
    choose(browser, "head-select", "1")
    check(weights[1, 1].double().numpy(), cells)
    readout = hover(browser, 1, 2)
    assert readout.startswith(
        f"row 1 \u201c{HOSTILE[1]}\u201d \u2192 column 2 \u201c{HOSTILE[2]}\u201d: \u2248"
    )
    assert readout.endswith("(layer 1, head 1)")

    # the rollout through layer 1, rows of Ã_1 · Ã_0 in float64 (Ã = rows(½ mean_h A + ½ I))
    choose(browser, "view-select", "rollout")
    w = weights.double().numpy()
    fused = [0.5 * w[layer].mean(0) + 0.5 * np.eye(n) for layer in range(2)]
    fused = [f / f.sum(-1, keepdims=True) for f in fused]
    picked = sorted({i for i, _ in cells})
    reference = np.zeros((n, n))
    reference[picked] = fused[1][picked] @ fused[0]
    check(reference, cells)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_view_hf_page_of_2000_tokens_fits_and_holds_the_models_attention(tmp_path):
    """``attnkit view --hf`` on 2,000 tokens (a tiny random BERT, 2 layers x 2 heads):
    the page is at most 20 MB and holds every head within half a step of transformers' own
    eager attention."""
    transformers = pytest.importorskip(
        "transformers", reason="optional: transformers is not installed (pip install -e .[hf])"
    )
    from attnkit.integrations.huggingface import view_model

    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "."]
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]), encoding="utf-8"
    )
    folder = tmp_path / "model"
    transformers.BertTokenizer(str(tmp_path / "vocab.txt")).save_pretrained(folder)
    config = transformers.BertConfig(
        vocab_size=20, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=2048,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder)
    text = " ".join(words[i % len(words)] for i in range(1998))  # + [CLS] and [SEP]

    path = view_model(folder, text, output=tmp_path / "page.html")
    assert path.stat().st_size <= 20_000_000
    (entry,) = page_data(path.read_text(encoding="utf-8"))["maps"]
    assert len(entry["rows"]) == 2000 and entry["encoding"] == "quantised"
    eager = transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = transformers.BertTokenizer.from_pretrained(folder)
    with torch.no_grad():
        attentions = eager(**tokenizer(text, return_tensors="pt"), output_attentions=True)
    for layer in range(2):
        for head in range(2):
            shown, _, step = decode(entry["weights"][layer][head], 2000, 2000)
            expected = attentions.attentions[layer][0, head].double().numpy()
            # half a step of storage, and attnkit's engine against eager in float32
            assert np.all(np.abs(shown - expected) <= step[:, None] / 2 + 1e-6)
