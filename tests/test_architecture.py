"""The architecture's rules that an AST can check.

Nothing in ``src/`` rebinds a function or writes a module's ``forward`` or ``__dict__`` at run
time: attention is observed through the hooks of ``attnkit.core.hooks`` and torch's own module
hooks, never by patching. And no module of ``src/attnkit`` takes part in an import cycle, counting
every import in its file: at the top, inside functions, and those made only for type checking.
(The layer order of imports is import-linter's contract, run by ``make lint``.) And one shape
legend: the package docstring and docs/architecture.md define the same letters, and no docstring
or comment uses torch's ``N`` for the batch.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
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


#: the package's shape letters and their meanings (attnkit's docstring, docs/architecture.md)
LEGEND = {
    "B": "batch",
    "H": "heads (query heads)",
    "M": "queries",
    "G": "key/value heads (grouped-query attention)",
    "N": "keys (and values)",
    "L": "a sequence that gives both the queries and the keys",
    "D": "query/key features",
    "Dv": "value features",
    "E": "a layer's model size",
}

#: torch's letters, where N is the batch: [N, L, E], [L, N, E], [N, S], N·H, "N batch"
BATCH_N = re.compile(r"\[N, (?:L|S|T|H|G|M)\b|\[(?:L|S|T), N\b|\bN·H\b|\bN batch\b")


def test_one_shape_legend_in_the_package_docstring_and_the_architecture_page() -> None:
    import attnkit

    doc = attnkit.__doc__ or ""
    page = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for letter, meaning in LEGEND.items():
        assert re.search(rf"(?<!\w){letter}\s+{re.escape(meaning)}", doc), letter
        assert f"| `{letter}` | {meaning}" in page, letter


def test_the_batch_letter_check_catches_torchs_letters() -> None:
    for text in ("``[N, L, E]``", "``[L, N, E]``", "[N·H, L, S]", "N batch, L queries", "[N, S]"):
        assert BATCH_N.search(text), text
    for text in ("``[B, M, E]``", "``[B, H, M, N]``", "``[M, N]``", "[B·H, M, N]"):
        assert not BATCH_N.search(text), text


def test_no_docstring_or_comment_uses_n_for_the_batch() -> None:
    found = []
    for path in sorted((SRC / "attnkit").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if not BATCH_N.search(source):
            continue
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.COMMENT, tokenize.STRING) and BATCH_N.search(token.string):
                found.append(f"{path.relative_to(SRC)}:{token.start[0]}")
    assert not found, "N as the batch (the legend's letter is B):\n" + "\n".join(found)


def test_no_submodule_hides_a_name_its_package_exports() -> None:
    """Importing ``pkg.name`` binds the submodule as ``pkg.name``: a submodule named like a
    function its package exports (``attnkit.evaluate.bleu`` next to ``evaluate.bleu()``) would
    turn that function into a module for every later ``from pkg import name``."""
    import importlib
    import pkgutil
    import types

    import attnkit

    infos = [
        info
        for info in pkgutil.walk_packages(attnkit.__path__, "attnkit.")
        if not info.name.split(".")[-1].startswith("_") and "huggingface" not in info.name
    ]  # private modules and the optional Hugging Face integration aside
    packages = [attnkit] + [importlib.import_module(i.name) for i in infos if i.ispkg]
    exported = {
        (package.__name__, name): getattr(package, name)
        for package in packages
        for name in getattr(package, "__all__", ())
        if not isinstance(getattr(package, name), types.ModuleType)
    }
    for info in infos:
        importlib.import_module(info.name)
    hidden = [
        f"{package}.{name}"
        for (package, name), value in exported.items()
        if getattr(importlib.import_module(package), name) is not value
    ]
    assert hidden == []
