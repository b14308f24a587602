"""The docs site (mkdocs.yml): the strict build passes, so a broken link, anchor, reference or
docstring fails here; the API reference has every public name; and two built pages, served on
the loopback, show the navigation and an equation typeset by MathJax in headless Chromium.

Needs the ``docs`` extra (``pip install -e .[docs]``; ``make test`` installs it best-effort) and,
for the browser test, Chromium (the ``browser`` fixture of tests/conftest.py); skipped without.
"""

from __future__ import annotations

import functools
import http.server
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

# "optional:" lists the skip in the summary of missing optional dependencies (tests/conftest.py)
for _package in ("mkdocs", "mkdocstrings", "material"):
    pytest.importorskip(
        _package, reason=f"optional: {_package} is not installed (pip install -e .[docs])"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built by ``mkdocs build --strict`` from this checkout (any warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    problems = [line for line in result.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + (
        "\n".join(problems) or result.stderr[-3000:]
    )
    return out


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(value for name, value in attrs if name == "id" and value)


def page_ids(site: Path, page: str) -> set[str]:
    path = site / "reference" / page / "index.html"
    assert path.is_file(), f"no reference page {page}"
    parser = _Ids()
    parser.feed(path.read_text())
    return parser.ids


def public_names(module: ModuleType) -> list[str]:
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


def public_modules() -> Iterator[tuple[str, ModuleType]]:
    """(public path, module) for every module ``attnkit.__all__`` names, the modules their
    ``__all__`` name, and every other subpackage but ``core`` (whose names attnkit re-exports)."""
    import attnkit

    queue = [(f"attnkit.{n}", getattr(attnkit, n)) for n in attnkit.__all__]
    queue += [
        (info.name, importlib.import_module(info.name))
        for info in pkgutil.iter_modules(attnkit.__path__, prefix="attnkit.")
        if info.ispkg and info.name != "attnkit.core"
    ]
    seen = set()
    while queue:
        public, module = queue.pop(0)
        if not isinstance(module, ModuleType) or module.__name__ in seen:
            continue
        seen.add(module.__name__)
        yield public, module
        queue += [(f"{public}.{n}", getattr(module, n)) for n in getattr(module, "__all__", ())]


def test_reference_has_every_public_name(site: Path) -> None:
    import attnkit

    missing = []
    top = page_ids(site, "attnkit")
    for name in attnkit.__all__:
        if not isinstance(getattr(attnkit, name), ModuleType) and f"attnkit.{name}" not in top:
            missing.append(f"attnkit.{name}")
    modules = list(public_modules())
    assert {"attnkit.layers", "attnkit.scores", "attnkit.mechanisms.vision"} <= {
        public for public, _ in modules
    }
    for public, module in modules:
        ids = page_ids(site, public)
        for name in public_names(module):
            value = getattr(module, name)
            if isinstance(value, ModuleType):
                continue  # a module has its own page, checked in this loop
            # a name that is also a submodule's (interpret.record) has its defining path
            defined = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
            if f"{public}.{name}" not in ids and defined not in ids:
                missing.append(f"{public}.{name}")
    assert not missing, f"names missing from the API reference: {missing}"


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on the loopback (Material's search does not load from file://)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # no line per request in the test output
        pass


def load(browser, url: str) -> list[dict]:
    """Open ``url``, wait for MathJax to finish, and return the page's console errors."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(url)
    WebDriverWait(browser, 30).until(
        lambda driver: driver.execute_script(
            "return document.readyState === 'complete' && window.MathJax !== undefined"
            " && MathJax.startup !== undefined && MathJax.startup.promise !== undefined"
        )
    )
    browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; MathJax.startup.promise.then(() => done())"
    )
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def navigation(browser) -> dict[str, str]:
    """The primary navigation's links: text -> href."""
    from selenium.webdriver.common.by import By

    links = browser.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link[href]")
    return {link.get_attribute("textContent").strip(): link.get_attribute("href") for link in links}


def test_home_page_navigation_and_equation(browser, served: str) -> None:
    from selenium.webdriver.common.by import By

    errors = load(browser, f"{served}/")
    assert not errors, errors
    links = navigation(browser)
    for title in ("The general attention model", "Layers", "Benchmarks", "attnkit.layers"):
        assert title in links, f"{title!r} not in the navigation: {sorted(links)}"
    assert links["Layers"].endswith("/layers/")
    # eq. (4), typed as TeX in docs/index.md, is MathJax's CommonHTML output now, not TeX text
    display = browser.find_elements(By.CSS_SELECTOR, "div.arithmatex mjx-container[display]")
    assert len(display) >= 5
    assert "\\sum" not in display[3].text
    assert display[3].find_elements(By.CSS_SELECTOR, "mjx-munderover, mjx-munder, mjx-mover")
    assert "\\sum" not in browser.find_element(By.CSS_SELECTOR, "article").text


def test_reference_page_in_browser(browser, served: str) -> None:
    from selenium.webdriver.common.by import By

    errors = load(browser, f"{served}/reference/attnkit.layers/")
    assert not errors, errors
    assert "attnkit" in navigation(browser)
    heading = browser.find_element(By.ID, "attnkit.layers.TransformerEncoderLayer")
    assert "TransformerEncoderLayer" in heading.text
    # the docstring's Args became a parameter table with the constructor's arguments
    tables = browser.find_elements(By.CSS_SELECTOR, "div.doc-contents table")
    assert any("d_model" in table.text and "nhead" in table.text for table in tables)
