"""The architecture's rules that an AST can check.

Nothing in ``src/`` rebinds a function or writes a module's ``forward`` or ``__dict__`` at run
time: attention is observed through the hooks of ``attnkit.core.hooks`` and torch's own module
hooks, never by patching. And no module of ``src/attnkit`` takes part in an import cycle, counting
every import in its file: at the top, inside functions, and those made only for type checking.
(The layer order of imports is import-linter's contract, run by ``make lint``.)
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


# --- no import cycle, type-only and function-level imports included -----------------------------


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``package`` under ``root``."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports anywhere in its file: at the top, inside
    functions, under ``if TYPE_CHECKING:``. ``from a import b`` names module ``a.b`` when that
    is a module, else ``a``; relative imports are resolved."""
    modules = module_names(root, package)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, *([base] if base else [])])
                names = [f"{base}.{alias.name}" for alias in node.names]
                targets = [t if t in modules else base for t in names]
            for target in targets:
                found = owner(target) if target.split(".")[0] == package else None
                if found is not None and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_sees_type_only_function_level_and_relative_imports(
    tmp_path: Path,
) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "def f():\n    from . import a\n",
        "pkg/c.py": "import pkg.d\n",
        "pkg/d.py": "from pkg import e\n",
        "pkg/e.py": "import os\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.c"] == {"pkg.d"} and graph["pkg.d"] == {"pkg.e"}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]


def test_src_has_no_import_cycle() -> None:
    """Not even through an import made only for type checking or inside a function."""
    graph = import_graph(SRC, "attnkit")
    assert len(graph) > 100 and graph["attnkit.core.engine"]
    assert import_cycles(graph) == []
