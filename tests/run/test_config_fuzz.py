"""Fuzzing the configuration loader: random mutations of the shipped configs
in ``configs/`` — keys deleted, duplicated or unknown, values of the wrong type, huge, negative,
non-finite or unicode, anchors and aliases, roots that are not mappings — go through
:func:`attnkit.config.load_config` (what ``attnkit train`` and ``--check`` run). Each either
validates or is refused with a :class:`~attnkit.config.ConfigError`: one line naming the file
and the key (or the YAML problem); never another exception. A few go through the real
``attnkit train --check``."""

from __future__ import annotations

import copy
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnkit.config import ConfigError, RunConfig, load_config

ROOT = Path(__file__).parents[2]
FILES = sorted((ROOT / "configs").glob("*.yaml"))
BASES = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in FILES]

ODD_VALUES = [
    None,
    True,
    0,
    -1,
    -(10**30),
    10**30,
    2**63,
    1e308,
    -1e-300,
    float("inf"),
    float("nan"),
    "",
    "0.5",
    "ünïcödé ✓",
    "\u202eevil",
    "line\nbreak",
    [],
    [1, "a"],
    {},
    {"kind": "rnn"},
    {"deep": {"er": [1, {"x": None}]}},
]
ODD_KEYS = ["", "ünï", "kind", "train", "1", "a.b", "line\nbreak", "steps"]
# problems found before any key is read: the file itself, the YAML, the root
WHOLE_FILE = re.compile(r"(not valid YAML|unreadable YAML value|the top level must be a mapping)")


def _key_paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    paths = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            paths.append((*prefix, key))
            paths.extend(_key_paths(value, (*prefix, key)))
    return paths


def _parent(tree: dict, path: tuple) -> Any:
    node = tree
    for part in path[:-1]:
        node = node[part]
    return node


@st.composite
def mutated_configs(draw: st.DrawFn) -> tuple[str, set[str]]:
    """YAML text of a mutated shipped config, and the names of the keys the mutations touched
    (empty for whole-file mutations)."""
    tree = copy.deepcopy(draw(st.sampled_from(BASES)))
    touched: set[str] = set()
    text_mutation = None
    for _ in range(draw(st.integers(1, 3))):
        paths = _key_paths(tree)
        kind = draw(
            st.sampled_from(
                ["delete", "retype", "unknown key", "duplicate", "alias", "root", "scale"]
            )
        )
        if kind in ("delete", "retype", "scale", "duplicate") and paths:
            path = draw(st.sampled_from(paths))
            parent = _parent(tree, path)
            touched.update(str(p) for p in path)
            if kind == "delete":
                del parent[path[-1]]
            elif kind == "retype":
                parent[path[-1]] = draw(st.sampled_from(ODD_VALUES))
            elif kind == "scale" and isinstance(parent[path[-1]], (int, float)):
                factor = draw(st.sampled_from([-1, 0, 10**6, 10**20, -(10**20), 1e-30]))
                parent[path[-1]] = parent[path[-1]] * factor
            elif kind == "duplicate":
                text_mutation = ("duplicate", path[-1])
        elif kind == "unknown key":
            sections = [(), *[p for p in paths if isinstance(_parent(tree, p)[p[-1]], dict)]]
            where = draw(st.sampled_from(sections))
            node = tree
            for part in where:
                node = node[part]
            key = draw(st.sampled_from(ODD_KEYS))
            node[key] = draw(st.sampled_from(ODD_VALUES))
            touched.update([*map(str, where), key])
        elif kind == "alias":
            text_mutation = ("alias", None)
        elif kind == "root":
            tree = draw(st.sampled_from([[tree], "just a string", 42, None]))
            touched = {"name", "train"} if tree is None else set()  # empty: the required keys
            break
    text = yaml.safe_dump(tree, allow_unicode=True, sort_keys=False)
    if text_mutation and text_mutation[0] == "duplicate" and isinstance(tree, dict):
        lines = text.splitlines()
        index = next(
            (i for i, ln in enumerate(lines) if ln.lstrip().startswith(f"{text_mutation[1]}:")),
            None,
        )
        if index is not None:
            lines.insert(index, lines[index])
            text = "\n".join(lines) + "\n"
    elif text_mutation and text_mutation[0] == "alias":
        text = "shared: &shared {steps: 3}\n" + text + "extra: *shared\n"
    return text, touched


def _check_outcome(path: Path, touched: set[str]) -> None:
    try:
        config = load_config(path)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message, message
        assert message.startswith(f"{path}: "), message
        rest = message[len(f"{path}: ") :]
        if WHOLE_FILE.match(rest):
            return
        # a key's path first (a section of the configuration, or a key the mutation made up),
        # then what was wrong with it; a constraint between keys names one of them
        names = [*RunConfig.model_fields, *touched, *(repr(name) for name in touched)]
        assert any(rest.startswith((f"{name}: ", f"{name}.")) for name in names), (message, touched)
        assert touched, message  # an unchanged shipped config validates
        return
    assert isinstance(config, RunConfig)


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=mutated_configs())
def test_a_mutated_config_validates_or_is_one_line_naming_the_key(tmp_path, case):
    text, touched = case
    path = tmp_path / "mutated.yaml"
    path.write_text(text, encoding="utf-8")
    _check_outcome(path, touched)


def test_the_shipped_configs_validate():
    for path in FILES:
        assert isinstance(load_config(path), RunConfig), path


def test_a_few_mutations_through_the_real_check(tmp_path):
    """The same rule through ``attnkit train --check`` in its own process: exit 2 with one line
    naming the file and the key, or exit 0."""
    rng = random.Random(20)
    base = yaml.safe_load((ROOT / "configs" / "tatoeba-luong-general.yaml").read_text())
    cases = []
    for section, key, value in [
        ("model", "hidden_dim", -rng.randrange(1, 100)),
        ("train", "steps", "many"),
        ("train", "lr", float("inf")),
        ("model", "ünïcödé", 1),
    ]:
        tree = copy.deepcopy(base)
        tree[section][key] = value
        cases.append((yaml.safe_dump(tree, allow_unicode=True), f"{section}.{key}"))
    cases.append(("- a list\n", "top level must be a mapping"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    for i, (text, named) in enumerate(cases):
        path = tmp_path / f"case{i}.yaml"
        path.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "attnkit", "train", str(path), "--check"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 2, (named, done.stderr[-2000:])
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"attnkit train: error: {path}: "), done.stderr
        assert named in done.stderr, (named, done.stderr)
