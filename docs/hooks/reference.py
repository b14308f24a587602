"""MkDocs hook: the API reference pages, generated from the package's ``__all__`` at build time.

One page per public module: ``attnkit`` itself, every module named in ``attnkit.__all__``
(``attnkit.scores`` is ``attnkit.core.scores``), every module named in one of those modules'
``__all__`` (``attnkit.mechanisms.vision``), and every other subpackage of ``attnkit`` (so a new
package such as ``attnkit.integrations`` gets its page without an edit here). Each page renders
exactly the names of its module's ``__all__`` with mkdocstrings; a module without ``__all__``
(``attnkit.scores``, ``attnkit.taxonomy``, ...) renders its public names (no leading underscore,
defined there). The pages are appended to the nav under "API reference".

Names are read by importing the package, so a computed ``__all__`` (the lazy top-level one)
counts, and a name that moves between modules moves in the reference with it.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PACKAGE = "attnkit"
SECTION = "API reference"
#: subpackages with no page of their own: ``core``'s public modules and names are attnkit's
#: (``attnkit.scores``, ``attnkit.align``, ``attnkit.masks``, ``attnkit.attention``, ...)
NO_PAGE = {"attnkit.core"}


@dataclass(frozen=True)
class Page:
    public: str  # the name users import: attnkit.scores
    module: ModuleType  # the module behind it: attnkit.core.scores

    @property
    def uri(self) -> str:
        return f"reference/{self.public}.md"


def _import_package(config: MkDocsConfig) -> ModuleType:
    """Import attnkit from the sources next to mkdocs.yml (not an installed copy)."""
    source = str(Path(config.config_file_path).parent / "src")
    if source not in sys.path:
        sys.path.insert(0, source)
    return importlib.import_module(PACKAGE)


def _exported_modules(module: ModuleType) -> list[tuple[str, ModuleType]]:
    return [
        (name, value)
        for name in getattr(module, "__all__", ())
        if isinstance(value := getattr(module, name), ModuleType)
    ]


def reference_pages(package: ModuleType) -> list[Page]:
    """Every page of the reference, in nav order: the package, then its modules by name."""
    pages = [Page(package.__name__, package)]
    queue = [(f"{package.__name__}.{name}", m) for name, m in _exported_modules(package)]
    for info in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
        if info.ispkg and info.name not in NO_PAGE:
            queue.append((info.name, importlib.import_module(info.name)))
    seen = {package.__name__}
    while queue:
        public, module = queue.pop(0)
        if module.__name__ in seen:
            continue
        seen.add(module.__name__)
        pages.append(Page(public, module))
        queue += [(f"{public}.{name}", m) for name, m in _exported_modules(module)]
    return [pages[0], *sorted(pages[1:], key=lambda page: page.public)]


def page_markdown(page: Page, pages: list[Page]) -> str:
    """The page's Markdown: a title, and one mkdocstrings block for the module."""
    lines = [f"# `{page.public}`", ""]
    if page.module.__name__ != page.public:
        lines += [f"`{page.public}` is the module `{page.module.__name__}`.", ""]
    options = ["    options:", "      show_root_heading: false"]
    exported = getattr(page.module, "__all__", None)
    shadowed: list[str] = []
    if exported is not None:
        members = [
            name for name in exported if not isinstance(getattr(page.module, name), ModuleType)
        ]
        # griffe keeps one object per path, and gives ``interpret.record`` to the submodule
        # record.py, not to the function ``record`` that the package imports from it: such names
        # are rendered from where they are defined, after the others
        shadowed = [name for name in members if name in _submodule_names(page.module)]
        members = [name for name in members if name not in shadowed]
        options.append(f"      members: [{', '.join(members)}]")
    lines += [f"::: {page.public}", *options, ""]
    for name in shadowed:
        value = getattr(page.module, name)
        lines += [
            f"::: {value.__module__}.{value.__qualname__}",
            "    options:",
            "      show_root_heading: true",
            "      show_root_full_path: false",
            "",
        ]
    submodules = [other for other in pages if other.public.rpartition(".")[0] == page.public]
    if submodules:
        lines += ["## Modules", ""]
        lines += [f"- [`{other.public}`]({other.public}.md)" for other in submodules]
        lines.append("")
    return "\n".join(lines)


def _submodule_names(module: ModuleType) -> set[str]:
    if not hasattr(module, "__path__"):
        return set()
    return {info.name for info in pkgutil.iter_modules(module.__path__)}


_pages: list[Page] = []


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    _pages[:] = reference_pages(_import_package(config))
    entries = [{page.public: page.uri} for page in _pages]
    config.nav = [item for item in config.nav or [] if SECTION not in item]
    config.nav.append({SECTION: entries})
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for page in _pages:
        files.append(File.generated(config, page.uri, content=page_markdown(page, _pages)))
    return files
