"""Every name of the API reference has a complete docstring, and its examples run.

The reference (docs/hooks/reference.py) renders the ``__all__`` of ``attnkit`` and of its public
subpackages (``attnkit.scores``, ``attnkit.align`` and ``attnkit.masks``, which have none, render
the classes and functions they define). For each function and class there, the docstring has
(Google style, as mkdocstrings reads it): a summary line; an ``Args:`` section naming every
parameter of the signature (a class: of ``__init__``; ``self``, ``*args`` and ``**kwargs`` aside);
a ``Returns:`` (or ``Yields:``) section when the function returns something; and an example of
``>>>`` lines. A class's ``forward`` (or ``__call__``) has Args and Returns too, and its other
public methods at least a summary line (an override of a method its base class documents, such
as torch's ``extra_repr`` or ``Score.pairwise``, is covered by that documentation); a dataclass's
fields may be documented under ``Attributes:``, a base class's fields where the base declares them.

The examples then run as doctests (``ELLIPSIS | NORMALIZE_WHITESPACE``) in the defining module's
namespace, as ``python -m doctest`` would, with ``torch`` and ``ak`` (``import attnkit as ak``)
imported, as the docs assume, after ``torch.manual_seed(0)``; an example importing an optional
package that is not installed is skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

#: the reference's modules, as users import them (attnkit.scores is attnkit.core.scores)
MODULES = [
    "attnkit",
    "attnkit.scores",
    "attnkit.align",
    "attnkit.masks",
    "attnkit.layers",
    "attnkit.mechanisms",
    "attnkit.mechanisms.vision",
    "attnkit.efficient",
    "attnkit.interpret",
    "attnkit.evaluate",
    "attnkit.distributed",
    "attnkit.integrations.huggingface",
]

#: packages an example may import that ``pip install attnkit`` does not bring
OPTIONAL = ("transformers", "networkx", "torch_geometric", "matplotlib", "bertviz", "sacrebleu", "captum")

#: Google-style section titles griffe reads as parameters, returns, and examples
_PARAMETERS = ("Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments")
_RETURNS = ("Returns", "Yields")
_ATTRIBUTES = ("Attributes",)
_SECTION = re.compile(r"^(?P<indent>\s*)(?P<title>[A-Z][\w ]*):{1,2}\s*$")
_ENTRY = re.compile(r"^(?P<names>\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?:\([^)]*\))?\s*:")


def _module(public: str) -> ModuleType:
    import attnkit

    _, _, rest = public.partition(".")
    if rest and "." not in rest and rest in attnkit.__all__:
        return getattr(attnkit, rest)  # the lazy attnkit.scores, attnkit.align, attnkit.masks
    return importlib.import_module(public)


def _names(module: ModuleType) -> list[str]:
    """``__all__``, or (without one) the classes and functions the module defines, unprefixed."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    ]


def reference_objects() -> Iterator[tuple[str, Any]]:
    """(public path, object) for every class and function of the reference, each object once."""
    seen: set[int] = set()
    for public in MODULES:
        module = _module(public)
        for name in _names(module):
            value = getattr(module, name)
            if not (inspect.isclass(value) or callable(value)) or isinstance(value, ModuleType):
                continue  # constants (__version__, SYMMETRIZATIONS) and modules (own pages)
            if id(value) in seen:
                continue  # re-exported: attnkit.mechanisms.NonLocalBlock is the vision one
            seen.add(id(value))
            yield f"{public}.{name}", value


OBJECTS = list(reference_objects())


def sections(doc: str) -> dict[str, list[str]]:
    """The docstring's Google-style sections: title -> its lines (dedented by one level)."""
    lines = inspect.cleandoc(doc).splitlines()
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    indent = 0
    for line in lines:
        match = _SECTION.match(line)
        if match and match["title"] in (*_PARAMETERS, *_RETURNS, *_ATTRIBUTES, "Raises"):
            current = found.setdefault(match["title"], [])
            indent = len(match["indent"])
            continue
        if match and match["title"] in ("Example", "Examples"):
            current = found.setdefault("Examples", [])
            indent = len(match["indent"])
            continue
        if current is not None and line.strip() and len(line) - len(line.lstrip()) <= indent:
            current = None  # a line back at the title's level ends the section
        if current is not None:
            current.append(line[indent:])
    return found


def documented_parameters(lines: list[str]) -> set[str]:
    """The names an Args (or Attributes) section documents: ``q, k, v: [B, H, N, d]`` is three."""
    if not lines:
        return set()
    first = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    names: set[str] = set()
    for line in lines:
        if line.strip() and len(line) - len(line.lstrip()) == first:
            match = _ENTRY.match(line.strip())
            if match:
                names.update(n.strip().lstrip("*") for n in match["names"].split(","))
    return names


def signature_parameters(function: Callable[..., Any], skip_first: bool) -> list[str]:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return []
    if skip_first and parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    return [
        p.name
        for p in parameters
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")
    ]


def returns_something(function: Callable[..., Any]) -> bool:
    annotation = inspect.signature(function).return_annotation
    if annotation is inspect.Signature.empty:
        return True  # unannotated: say what comes back
    return annotation not in (None, "None", type(None), "NoReturn", "Never")


def _init(cls: type) -> Callable[..., Any] | None:
    """The class's own constructor (attnkit's, not torch's or object's), if it has one."""
    for klass in cls.__mro__:
        if klass is object or not klass.__module__.startswith("attnkit"):
            return None
        if "__init__" in vars(klass):
            return vars(klass)["__init__"]
    return None


def _attnkit_classes(cls: type) -> list[type]:
    return [klass for klass in cls.__mro__ if klass.__module__.startswith("attnkit")]


def class_entries(cls: type) -> set[str]:
    """The names the class's own docstring documents under Args or Attributes."""
    found = sections(cls.__doc__ or "")
    return documented_parameters(found.get("Args", [])) | documented_parameters(
        found.get("Attributes", [])
    )


def _overrides_documented(cls: type, name: str) -> bool:
    """``name`` overrides a method of a base class that documents it: torch's ``extra_repr``, or
    an attnkit base's contract (``Score.pairwise``), which the override fulfils."""
    for klass in cls.__mro__[1:]:
        base = vars(klass).get(name)
        if base is not None and (getattr(base, "__doc__", None) or "").strip():
            return True
    return False


def problems(public: str, obj: Any) -> list[str]:
    """What the docstring of ``obj`` (a function or class of the reference) lacks."""
    doc = inspect.getdoc(obj) if inspect.isclass(obj) else obj.__doc__
    if inspect.isclass(obj) and obj.__doc__ is None:
        doc = None  # inspect.getdoc would inherit the base class's
    if not doc or not doc.strip():
        return ["no docstring"]
    found = sections(doc)
    issues = []
    if not inspect.cleandoc(doc).splitlines()[0].strip():
        issues.append("no summary line")
    obj = inspect.unwrap(obj)  # a @contextmanager function: the generator it wraps
    is_record = inspect.isclass(obj) and (
        dataclasses.is_dataclass(obj) or issubclass(obj, tuple) or issubclass(obj, BaseException)
    )
    if inspect.isclass(obj):
        init = _init(obj)
        wanted = signature_parameters(obj, skip_first=False) if init or is_record else []
        # a field of a base class (AttentionOutput's context, lse, ...) is documented there
        documented = set()
        for klass in _attnkit_classes(obj):
            documented |= class_entries(klass)
    else:
        wanted = signature_parameters(obj, skip_first=False)
        documented = documented_parameters(
            [line for title in _PARAMETERS for line in found.get(title, [])]
        )
    missing = [name for name in wanted if name not in documented]
    if missing:
        issues.append(f"Args: does not document {missing}")
    if not inspect.isclass(obj) and returns_something(obj):
        if not any(title in found for title in _RETURNS):
            issues.append("no Returns: section")
    if not any(line.lstrip().startswith(">>>") for line in found.get("Examples", [])):
        issues.append("no example (Example:: with >>> lines)")
    if inspect.isclass(obj):
        issues += method_problems(obj)
    return issues


def method_problems(cls: type) -> list[str]:
    """``forward`` / ``__call__``: Args and Returns; other public methods: a summary line."""
    issues = []
    for name, value in vars(cls).items():
        function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        if not inspect.isfunction(function):
            continue
        main = name in ("forward", "__call__")
        if name.startswith("_") and not main:
            continue
        if not main and _overrides_documented(cls, name):
            continue  # its contract is documented on the base class
        doc = function.__doc__
        if not doc or not doc.strip():
            issues.append(f"{name}: no docstring")
            continue
        if not main:
            continue
        found = sections(doc)
        wanted = signature_parameters(function, skip_first=not isinstance(value, staticmethod))
        documented = documented_parameters(
            [line for title in _PARAMETERS for line in found.get(title, [])]
        )
        missing = [p for p in wanted if p not in documented]
        if missing:
            issues.append(f"{name}: Args: does not document {missing}")
        if returns_something(function) and not any(title in found for title in _RETURNS):
            issues.append(f"{name}: no Returns: section")
    return issues


def test_the_reference_is_walked() -> None:
    names = {public for public, _ in OBJECTS}
    assert {
        "attnkit.attention",
        "attnkit.scores.Additive",
        "attnkit.align.Softmax",
        "attnkit.masks.causal",
        "attnkit.layers.TransformerEncoderLayer",
        "attnkit.efficient.PerformerAttention",
        "attnkit.integrations.huggingface.swap_attention",
    } <= names
    assert len(OBJECTS) >= 200


@pytest.mark.parametrize(("public", "obj"), OBJECTS, ids=[public for public, _ in OBJECTS])
def test_docstring_is_complete(public: str, obj: Any) -> None:
    issues = problems(public, obj)
    assert not issues, f"{public}: " + "; ".join(issues)


def _doctests(public: str, obj: Any) -> list[doctest.DocTest]:
    import torch

    import attnkit

    finder = doctest.DocTestFinder(recurse=True, exclude_empty=True)
    module = inspect.getmodule(obj)
    tests = finder.find(
        obj, public, module=module, globs={**vars(module), "torch": torch, "ak": attnkit}
    )
    return [test for test in tests if test.examples]


def _needs(test: doctest.DocTest) -> list[str]:
    source = "\n".join(example.source for example in test.examples)
    return [
        package
        for package in OPTIONAL
        if re.search(rf"^\s*(?:import|from)\s+{package}\b", source, re.M)
    ]


@pytest.mark.parametrize(("public", "obj"), OBJECTS, ids=[public for public, _ in OBJECTS])
def test_examples_run(public: str, obj: Any) -> None:
    tests = _doctests(public, obj)
    if not tests:
        pytest.skip(f"{public} has no example yet")
    for package in sorted({p for test in tests for p in _needs(test)}):
        pytest.importorskip(package, reason=f"optional: {public}'s example needs {package}")
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    failures = []
    for test in tests:
        import torch

        torch.manual_seed(0)  # an example that prints values gets the same ones every run
        output: list[str] = []
        result = runner.run(test, out=output.append, clear_globs=True)
        if result.failed:
            failures.append("".join(output))
    assert not failures, "\n".join(failures)
