"""The command starts without PyTorch, and the lazy package still gives every
public name (PEP 562 ``__getattr__``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit

SRC = str(Path(attnkit.__file__).resolve().parent.parent)

PROBE = """
import sys
import attnkit.cli
try:
    attnkit.cli.main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
else:
    code = None
heavy = sorted(m for m in ("torch", "numpy", "attnkit.core", "attnkit.train") if m in sys.modules)
print("EXIT", code, "HEAVY", ",".join(heavy) or "-", file=sys.stderr)
"""


def _probe(*argv: str) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=120
    )
    return done.stdout, done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("--version",),
        *[(command, "--help") for command in ("train", "eval", "translate", "view", "demo")],
        *[(command, "--help") for command in ("info", "zoo")],
    ],
)
def test_help_and_version_do_not_import_torch(argv):
    out, status = _probe(*argv)
    assert status == "EXIT 0 HEAVY -"
    if argv == ("--version",):
        assert out.strip() == f"attnkit {attnkit.__version__}"
    else:
        assert "usage: attnkit" in out


def test_a_command_still_imports_what_it_needs():
    out, status = _probe("zoo")
    assert status.startswith("EXIT None HEAVY ") and "torch" in status
    assert "additive" in out.lower()


def test_importing_the_package_does_not_import_torch():
    env = {**os.environ, "PYTHONPATH": SRC}
    code = "import sys, attnkit; print('torch' in sys.modules, attnkit.__version__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.split() == ["False", attnkit.__version__]


def test_every_public_name_resolves():
    import importlib

    for name in attnkit.__all__:
        value = getattr(attnkit, name)
        assert value is not None, name
        assert name in dir(attnkit)
        namespace: dict[str, object] = {}
        exec(f"from attnkit import {name} as imported", namespace)  # the statement users write
        assert namespace["imported"] is value
    assert (
        attnkit.MultiHeadAttention
        is importlib.import_module("attnkit.mechanisms.multi_head").MultiHeadAttention
    )
    assert attnkit.attention is importlib.import_module("attnkit.core.engine").attention
    for module in ("scores", "align", "masks"):
        assert getattr(attnkit, module) is importlib.import_module(f"attnkit.core.{module}")
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        attnkit.not_a_name  # noqa: B018


@pytest.mark.parametrize(
    "module", ["attnkit.layers", "attnkit.distributed", "attnkit.train", "attnkit.data.pharaoh"]
)
def test_each_package_imports_first_in_a_fresh_process(module):
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
