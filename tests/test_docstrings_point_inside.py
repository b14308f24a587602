"""Comments and docstrings point only at things inside the repository.

A reader of a clone has the repository and nothing else: no tracker issues, no planning notes
(``DESIGN.md``, ``STYLE.md``, ``RELIABILITY.md`` outside it), no specification documents by their
numbers ("seed 000", "lecture notes 001"), and no function that no longer exists. Every comment
and string of ``src/``, ``tests/`` and ``benchmarks/`` is read with ``tokenize`` and checked for
such pointers; a path the text names under ``docs/``, ``src/``, ``tests/`` or ``benchmarks/``
must exist.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "tests", "benchmarks")

#: pointers outside the repository: (what it is, pattern)
OUTSIDE = [
    (
        "a planning file outside the repository",
        r"\b(?:DESIGN|STYLE|RELIABILITY|HELPERS|FRAMEWORK)\.md\b",
    ),
    ("an issue number", r"\b[Ii]ssues?\s*#?\d+"),
    (
        "a specification document by number",
        r"\b(?:seeds?|lecture notes|encyclopedia)\s*'?s?\s*0\d\d\b",
    ),
    ("the seed documents", r"\bshared/seeds\b|\b00\d_[0-9a-f]{16}\b"),
    ("a function that no longer exists", r"\bmulti_head_attend\b"),
]

#: a repository path named in the text: docs/x.md, src/attnkit/x.py, tests/x.py, benchmarks/x.py
PATH = re.compile(r"(?<![\w/.])((?:docs|src|tests|benchmarks)/[\w./-]*\w\.(?:md|py|yaml|jsonl?))\b")
#: a placeholder in a named path (``results/efficient_quality_TASK.json``): a pattern, not a file
PLACEHOLDER = re.compile(r"[A-Z]{3,}|[*{<]")


def sources() -> list[Path]:
    """The Python files checked (this one aside: it names what it looks for)."""
    files = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    return [p for p in files if p.resolve() != Path(__file__).resolve()]


@functools.cache
def texts(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment and string literal of a Python file."""
    source = path.read_text(encoding="utf-8")
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING)]


def matching(pattern: re.Pattern[str] | str) -> list[Path]:
    """The files whose raw text matches (only those are tokenised: most match nothing)."""
    return [p for p in sources() if re.search(pattern, p.read_text(encoding="utf-8"))]


def pointers(text: str) -> list[str]:
    return [what for what, pattern in OUTSIDE if re.search(pattern, text)]


@pytest.mark.parametrize(
    "text",
    [
        "# see DESIGN.md",
        '"""(RELIABILITY.md, "Bad input")"""',
        "# issue 20 item 2",
        '"""Issue 18(c): dropout"""',
        "# seed 000 Fig. 1",
        "# (lecture notes 001)",
        "# as multi_head_attend did",
    ],
)
def test_the_checker_catches_each_kind_of_pointer(text: str) -> None:
    assert pointers(text)


@pytest.mark.parametrize(
    "text",
    ["# see docs/reliability.md", '"""survey eq. (3), Table 2"""', "# over the seeds of a run"],
)
def test_the_checker_allows_pointers_inside(text: str) -> None:
    assert not pointers(text)


def test_comments_and_docstrings_point_inside_the_repository() -> None:
    anything = "|".join(f"(?:{pattern})" for _, pattern in OUTSIDE)
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in matching(anything)
        for line, text in texts(path)
        for what in pointers(text)
    ]
    assert not found, "pointers outside the repository:\n" + "\n".join(found)


def test_paths_named_in_comments_and_docstrings_exist() -> None:
    missing = [
        f"{path.relative_to(ROOT)}:{line}: {named}"
        for path in matching(PATH)
        for line, text in texts(path)
        for named in PATH.findall(text)
        if not (ROOT / named).exists() and not PLACEHOLDER.search(named)
    ]
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)
