"""``attnkit reproduce``: train a model of the literature on its paper's benchmark over several
seeds, and compare the mean with the paper's number.

A reproduction is a configuration of ``configs/reproduce/NAME.yaml``: an ordinary run
configuration (``attnkit train`` runs one seed of it) whose ``reproduce`` section names the paper,
the table cell, the metric of ``results.json`` and the number. Each seed is an ordinary run
directory, ``RUNS_DIR/reproduce/NAME/seed-S`` — and ``NAME-uniform/seed-S`` for the same model
with uniform attention (the ``reproduce.uniform`` overrides, by default
``train.attention: uniform``; survey §4.1) — so an interrupted
reproduction resumes: a finished seed is read back, an unfinished one continues from its newest
checkpoint, a missing one is trained.

The command prints one row per seed, then the mean ± std beside the paper's number, and last one
JSON line (:func:`summary`), which ``benchmarks/reproductions_table.py`` turns into
``docs/reproductions.md``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.checkpoint import CheckpointError, atomic_write
from attnkit.config import ConfigError, RunConfig, load_config, task_of
from attnkit.run import read_metrics
from attnkit.tasks.job import Log

#: where reproduction configurations are found, in order: the working directory's, then the
#: source tree's (an editable install run from elsewhere)
CONFIG_DIRS = (Path("configs/reproduce"), Path(__file__).resolve().parents[2] / "configs/reproduce")


def config_dir() -> Path:
    """The first of :data:`CONFIG_DIRS` that exists (``ConfigError`` when none does)."""
    for directory in CONFIG_DIRS:
        if directory.is_dir():
            return directory
    raise ConfigError(
        f"no reproduction configurations: none of {', '.join(map(str, CONFIG_DIRS))} exists "
        "(run from the repository's root)"
    )


def names() -> list[str]:
    """Every reproduction's name, sorted."""
    return sorted(path.stem for path in config_dir().glob("*.yaml"))


def load(name: str, overrides: Sequence[str] = ()) -> RunConfig:
    """The configuration of reproduction ``name`` (``ConfigError`` for an unknown name or a
    configuration without its ``reproduce`` section)."""
    path = config_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown reproduction {name!r}; expected one of: {', '.join(names())}")
    config = load_config(path, overrides)
    if config.reproduce is None:
        raise ConfigError(f"{path}: a reproduction needs its `reproduce` section")
    return config


@dataclass
class Seed:
    """One finished seed: the metric (in the paper's unit), the training minutes and seconds
    per step (an epoch, for full-batch tasks)."""

    seed: int
    value: float
    minutes: float
    run_dir: Path
    seconds_per_step: float = math.nan


def _value(config: RunConfig, results: dict[str, Any], source: Path) -> float:
    spec = config.reproduce
    assert spec is not None
    value: Any = results
    for key in spec.metric.split("."):
        if not isinstance(value, dict) or key not in value:
            raise CheckpointError(f"{source}: no {spec.metric!r} in the run's results")
        value = value[key]
    return float(value) * spec.scale


def run_seed(
    config: RunConfig, seed: int, run_dir: Path, *, log: Log = print, quiet: bool = True
) -> Seed:
    """Seed ``seed`` of ``config`` in ``run_dir``: read back when finished, resumed when
    interrupted, trained when absent."""
    from attnkit.train import train

    config = config.model_copy(update={"seed": seed})
    results = run_dir / "results.json"
    if not results.is_file():
        if (run_dir / "config.yaml").is_file():
            log(f"seed {seed}: resuming {run_dir}")
            train(config, resume=run_dir, quiet=quiet, log=log)
        else:
            train(config, run_dir=run_dir, quiet=quiet, log=log)
    try:
        finished = json.loads(results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{results}: unreadable results ({error})") from None
    minutes = float(finished.get("train_seconds", 0.0)) / 60.0
    steps = [m["seconds"] for m in read_metrics(run_dir) if m.get("split") == "train"]
    per_step = statistics.median(steps) if steps else math.nan
    return Seed(seed, _value(config, finished, results), minutes, run_dir, per_step)


def run_peer(config: RunConfig, seed: int, path: Path, log: Log) -> dict[str, Any] | None:
    """The peer library's result for ``seed`` (the task's ``run_peer``), cached in ``path`` so
    a resumed reproduction does not train it again; None when the library is absent."""
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    result = task_of(config.data.corpus).run_peer(config.model_copy(update={"seed": seed}))
    if result is None:
        log("the peer column is skipped: its library is not installed")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(result))
    return result  # type: ignore[no-any-return]


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def reproduce(
    name: str,
    *,
    seeds: int | None = None,
    data: str | None = None,
    quick: bool = False,
    runs_dir: str | Path = "runs",
    uniform: bool = True,
    log: Log = print,
    quiet: bool = True,
) -> dict[str, Any]:
    """Train and evaluate the seeds of reproduction ``name`` (and, with ``uniform``, the same
    model with uniform attention); returns :func:`summary`'s dict. ``data`` is the shared data
    folder (``data.root``); ``quick`` applies the configuration's ``reproduce.quick`` overrides
    and trains one seed, as the tests do."""
    overrides = [f"data.root={data}"] if data is not None else []
    config = load(name, overrides)
    spec = config.reproduce
    assert spec is not None
    if quick:
        config = load(name, [*overrides, *spec.quick])
    count = 1 if quick else (seeds or spec.seeds)
    if not 1 <= count <= 20:
        raise ValueError(f"--seeds must be between 1 and 20, got {count}")
    root = Path(runs_dir) / "reproduce" / (f"{name}-quick" if quick else name)
    started = time.perf_counter()
    variants = {"attention": config}
    if uniform:
        extra = [*spec.quick] if quick else []
        variants["uniform"] = load(name, [*overrides, *extra, *spec.uniform])
    done: dict[str, list[Seed]] = {}
    for variant, variant_config in variants.items():
        directory = root if variant == "attention" else root.with_name(root.name + "-uniform")
        done[variant] = []
        for seed in range(count):
            result = run_seed(variant_config, seed, directory / f"seed-{seed}", log=log, quiet=quiet)
            done[variant].append(result)
            log(
                f"{name} {variant:9s} seed {seed:2d}: {spec.metric} {result.value:.2f}  "
                f"({result.minutes:.1f} min)  {result.run_dir}"
            )
    peers: list[dict[str, Any]] = []
    if spec.peer:
        for seed in range(count):
            result = run_peer(config, seed, root / f"peer-seed-{seed}.json", log)
            if result is None:
                break
            peers.append(result)
            log(
                f"{name} peer      seed {seed:2d}: {spec.metric} "
                f"{result['accuracy'] * spec.scale:.2f}  ({result['seconds_per_epoch']:.3f} s "
                f"per epoch, {result['library']})"
            )
    line = summary(name, config, done, (time.perf_counter() - started) / 60.0, peers)
    paper = "" if spec.value is None else f"; paper {spec.value:g}"
    paper += "" if spec.std is None else f" ± {spec.std:g}"
    log(
        f"{name}: {spec.metric} {line['mean']:.2f} ± {line['std']:.2f} over {line['seeds']} "
        f"seeds{paper} ({spec.source}); uniform attention {line['uniform']:.2f}"
        if line["uniform"] is not None
        else f"{name}: {spec.metric} {line['mean']:.2f} ± {line['std']:.2f}{paper}"
    )
    return line


def summary(
    name: str,
    config: RunConfig,
    done: dict[str, list[Seed]],
    wall_minutes: float,
    peers: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The reproduction's JSON line: ``name``, ``metric``, ``mean``, ``std``, ``seeds``,
    ``paper``, ``paper_std``, ``paper_source``, ``uniform`` (mean with uniform attention, or
    None), ``uniform_std``, ``minutes`` (training minutes per seed), ``seconds_per_step``
    (median), ``peer`` (the peer library's mean, std, seconds per epoch, or None),
    ``wall_minutes`` and the ``config`` it ran."""
    spec = config.reproduce
    assert spec is not None
    values = [s.value for s in done["attention"]]
    mean, std = _mean_std(values)
    uniform = [s.value for s in done.get("uniform", [])]
    u_mean, u_std = _mean_std(uniform)
    minutes = statistics.fmean(s.minutes for s in done["attention"])
    return {
        "name": name,
        "metric": spec.metric,
        "mean": round(mean, 3),
        "std": round(std, 3),
        "seeds": len(values),
        "values": [round(v, 3) for v in values],
        "paper": spec.value,
        "paper_std": spec.std,
        "paper_source": f"{spec.paper}: {spec.source}",
        "uniform": round(u_mean, 3) if uniform else None,
        "uniform_std": round(u_std, 3) if uniform else None,
        "minutes": round(minutes, 2),
        "seconds_per_step": round(
            statistics.median(s.seconds_per_step for s in done["attention"]), 4
        ),
        "peer": _peer_summary(peers, spec.scale),
        "wall_minutes": round(wall_minutes, 2),
        "config": f"configs/reproduce/{name}.yaml",
    }


def _peer_summary(peers: Sequence[dict[str, Any]], scale: float) -> dict[str, Any] | None:
    if not peers:
        return None
    mean, std = _mean_std([p["accuracy"] * scale for p in peers])
    return {
        "library": peers[0]["library"],
        "mean": round(mean, 3),
        "std": round(std, 3),
        "seeds": len(peers),
        "seconds_per_epoch": round(statistics.median(p["seconds_per_epoch"] for p in peers), 4),
    }
