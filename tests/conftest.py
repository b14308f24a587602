"""Test-wide settings, and fixtures used in more than one directory."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

import attnkit.tasks  # noqa: F401  (registers the built-in tasks that configurations name)

# `make test` runs two pytest workers on two cores: one thread each avoids oversubscription, under
# which tiny torch ops were seen to take ~15 ms instead of microseconds.
torch.set_num_threads(1)

# Kernels compiled by the flex backend go to a cache of this process's own: inductor's default,
# /tmp/torchinductor_<user>, is shared by every process of the user, and a kernel another process
# was still writing has been read half-written there ("file too short").
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _KERNELS = tempfile.mkdtemp(prefix="attnkit-tests-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _KERNELS
    atexit.register(shutil.rmtree, _KERNELS, ignore_errors=True)


# Tests skipped for a missing optional package or system tool (PyTorch Geometric, Chromium) start
# their reason with this prefix; the summary lists those, and only those: `-rs` would also print
# the ~1000 parametrised skips of backends that cannot run a case.
OPTIONAL_SKIP = "optional:"


def pytest_terminal_summary(terminalreporter) -> None:
    """Name each test skipped for a missing optional dependency, and why (also under xdist:
    this root conftest is loaded by the controlling process too)."""
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if not (isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
            continue
        path, line, reason = report.longrepr
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(OPTIONAL_SKIP):
            root = str(terminalreporter.config.rootpath) + "/"
            key = f"{path.removeprefix(root)}:{line}: {reason}"
            counts[key] = counts.get(key, 0) + 1
    if counts:
        terminalreporter.section("skipped for a missing optional dependency")
        for key, count in counts.items():
            terminalreporter.line(f"SKIPPED [{count}] {key}")


@pytest.fixture(scope="session")
def browser():
    """Headless system Chromium through its own chromedriver (Selenium Manager never runs)."""
    # "optional:" puts the reason in the summary of optional-dependency skips (above)
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="optional: selenium is not installed (pip install -e .[dev])"
    )
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip(
            "optional: browser test needs the Debian packages chromium and chromium-driver "
            f"(chromium: {chromium}, chromedriver: {chromedriver}); `make test` installs them"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # containers run as root, where Chromium's sandbox cannot start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1000,800",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data pack of the real benchmarks: ``<repo root>/../shared/data`` if present,
    else ``/work/shared/data``; tests of the real files skip when neither exists."""
    for candidate in (
        Path(__file__).resolve().parents[1].parent / "shared" / "data",
        Path("/work/shared/data"),
    ):
        if candidate.is_dir():
            return candidate
    pytest.skip("the shared data pack is absent (../shared/data, /work/shared/data)")
