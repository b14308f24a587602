"""The ```py snippets of docs/huggingface.md run as written, in order, in one namespace (they
need transformers and the MiniLM package, so tests/test_docs.py, which runs ```python blocks
without optional packages, leaves them to this test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "huggingface.md"


def test_the_page_has_no_unfilled_numbers() -> None:
    text = PAGE.read_text()
    assert not re.findall(r"\b[A-Z]{4,}_[A-Z_]+\b", text)


def test_snippets_run_in_order(minilm_dir) -> None:
    snippets = re.findall(r"```py\n(.*?)```", PAGE.read_text(), re.S)
    assert len(snippets) >= 6
    namespace: dict = {"__name__": "__snippet__"}
    for i, code in enumerate(snippets):
        try:
            exec(compile(code, f"<huggingface.md snippet {i}>", "exec"), namespace)
        except Exception as error:  # name the snippet that failed
            pytest.fail(f"snippet {i} of docs/huggingface.md failed: {error!r}\n{code}")
    assert namespace["rollout"].shape == (1, 15, 15)
    assert namespace["page"].is_file()
