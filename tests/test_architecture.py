"""The architecture's rules that an AST can check (DESIGN.md, issue 17).

Nothing in ``src/`` rebinds a function or writes a module's ``forward`` or ``__dict__`` at run
time: attention is observed through the hooks of ``attnkit.core.hooks`` and torch's own module
hooks, never by patching. (The layer order of imports is import-linter's contract, run by
``make lint``.)
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def violations(source: str, package: str = "attnkit") -> list[str]:
    """Rebindings in ``source``: ``x.forward = ...``, writes to a ``__dict__``,
    ``setattr(x, "forward", ...)``, assignments to attributes of imported modules."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to imported modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if _is_module(f"{node.module}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
    found = []

    def target_names(target: ast.expr) -> list[ast.expr]:
        if isinstance(target, ast.Tuple | ast.List):
            return [t for elt in target.elts for t in target_names(elt)]
        return [target]

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in target_names(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            if isinstance(target, ast.Attribute):
                if target.attr == "forward":
                    found.append(f"line {target.lineno}: writes .forward")
                elif isinstance(target.value, ast.Name) and target.value.id in modules:
                    found.append(f"line {target.lineno}: rebinds {target.value.id}.{target.attr}")
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr == "__dict__"
            ):
                found.append(f"line {target.lineno}: writes a __dict__")
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "__dict__"
                and func.attr in {"pop", "update", "setdefault", "clear", "popitem"}
            ):
                found.append(f"line {node.lineno}: changes a __dict__")
            if isinstance(func, ast.Name) and func.id in {"setattr", "delattr"} and node.args:
                obj = node.args[0]
                name = node.args[1] if len(node.args) > 1 else None
                if isinstance(name, ast.Constant) and name.value == "forward":
                    found.append(f"line {node.lineno}: {func.id}(..., 'forward')")
                elif isinstance(obj, ast.Name) and obj.id in modules:
                    found.append(f"line {node.lineno}: {func.id} on module {obj.id}")
    return found


@pytest.mark.parametrize(
    "source",
    [
        "def f(m):\n    m.forward = lambda x: x\n",
        "import attnkit.core.engine as engine\nengine.choose_backend = None\n",
        "from attnkit.core import engine\nengine.attention = print\n",
        "def f(m):\n    m.__dict__['_attend'] = 1\n",
        "def f(m):\n    m.__dict__.pop('forward', None)\n",
        "def f(m):\n    setattr(m, 'forward', print)\n",
        "import torch\ndef f():\n    setattr(torch, 'softmax', print)\n",
        "def f(m):\n    del m.forward\n",
    ],
)
def test_the_checker_catches_each_kind_of_rebinding(source: str) -> None:
    assert violations(source), source


def test_the_checker_allows_ordinary_attribute_writes() -> None:
    source = "import torch\nclass A:\n    def __init__(self):\n        self.weight = 1\n"
    assert violations(source) == []


def test_nothing_in_src_rebinds_functions_or_writes_forward_or_dict() -> None:
    found = {
        str(path.relative_to(SRC)): hits
        for path in sorted(SRC.rglob("*.py"))
        if (hits := violations(path.read_text(encoding="utf-8")))
    }
    assert found == {}
