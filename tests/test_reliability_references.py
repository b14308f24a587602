"""Every test docs/reliability.md names as ``tests/FILE.py::test_name`` exists: a renamed or
removed test cannot leave a guarantee pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reliability.md"
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[[^\]`]*\])?`")


def test_every_named_test_exists() -> None:
    references = REFERENCE.findall(PAGE.read_text(encoding="utf-8"))
    assert len(references) >= 50
    missing = [
        f"{file}::{name}"
        for file, name in sorted(set(references))
        if not (ROOT / file).is_file()
        or not re.search(rf"^\s*def {name}\(", (ROOT / file).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []
