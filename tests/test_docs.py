"""Every Python snippet in the README and docs/ runs as written (so the docs cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SNIPPETS = [
    pytest.param(code, id=f"{page.name}:{i}")
    for page in PAGES
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
]


def test_there_are_snippets() -> None:
    assert len(SNIPPETS) >= 20


@pytest.mark.parametrize("code", SNIPPETS)
def test_snippet_runs(code: str) -> None:
    exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})
