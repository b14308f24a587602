"""The ```py snippets of "Beyond the weights" in docs/interpret.md run as written: they need
transformers, captum and the MiniLM package, so tests/test_docs.py (which runs the ```python
snippets) leaves them to this test."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

PAGE = Path(__file__).resolve().parents[2] / "docs" / "interpret.md"


def section() -> str:
    text = PAGE.read_text()
    start = text.index("## Beyond the weights")
    return text[start : text.index("\n## ", start + 1)]


def test_every_function_has_an_example() -> None:
    text = section()
    for name in ("value_norm", "value_zeroing", "alti", "patch", "integrated_gradients", "aopc"):
        assert re.search(rf"```py(thon)?\n[^`]*\b{name}\(", text), name


def test_py_snippets_run() -> None:
    for package in ("transformers", "captum", "all_minilm_l6_v2"):
        pytest.importorskip(package, reason=f"optional: the snippet needs {package}")
    import transformers

    transformers.logging.set_verbosity_error()
    snippets = re.findall(r"```py\n(.*?)```", section(), re.S)
    assert snippets
    for i, code in enumerate(snippets):
        namespace: dict = {"__name__": "__snippet__"}
        exec(compile(code, f"<interpret.md py snippet {i}>", "exec"), namespace)
    assert namespace["norms"]["bert.encoder.layer.5.attention.self"].shape[1] == 12
    assert namespace["scores"].comprehensiveness.shape == (1,)
