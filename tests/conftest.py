"""Test-wide settings."""

import torch

# `make test` runs two pytest workers on two cores: one thread each avoids oversubscription, under
# which tiny torch ops were seen to take ~15 ms instead of microseconds.
torch.set_num_threads(1)


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
