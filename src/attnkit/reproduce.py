"""``attnkit reproduce``: train a model of the literature on its paper's benchmark over several
seeds, and compare the mean with the paper's number.

A reproduction is a configuration of ``configs/reproduce/NAME.yaml``: an ordinary run
configuration (``attnkit train`` runs one seed of it) whose ``reproduce`` section names the paper,
the table cell, the metric of ``results.json`` and the number. Each seed is an ordinary run
directory, ``RUNS_DIR/reproduce/NAME/seed-S`` — and ``NAME-uniform/seed-S`` for the same model
with uniform attention (the ``reproduce.uniform`` overrides, by default
``train.attention: uniform``; survey §4.1; ``reproduce.uniform: null`` for a model without
attention, which has no such twin) — so an interrupted
reproduction resumes: a finished seed is read back, an unfinished one continues from its newest
checkpoint, a missing one is trained.

The command prints one row per seed, then the mean ± std beside the paper's number, and last one
JSON line (:func:`summary`), which ``benchmarks/reproductions_table.py`` turns into
``docs/reproductions.md``.

A paper's table over several settings (bAbI's 20 tasks) is one reproduction with
``reproduce.over`` (``key: data.task``, ``values: [1, …, 20]``): each value is its own
configuration, trained ``seeds`` times in ``RUNS_DIR/reproduce/NAME/LABEL-VALUE/seed-S``. Per
value the number is the mean over its seeds, or with ``reproduce.select: best_on_valid`` the
number of the seed whose last validation is best (the protocol of papers that report the best of
several runs chosen on held-out data). The command then prints the table (paper, ours, uniform
attention, per value), the mean over the values and, with ``reproduce.fail_above``, the number of
failed values; the JSON line adds ``per_value`` and ``failures`` (:func:`summary_over`).
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
from attnkit.config import ConfigError, ReproduceSection, RunConfig, load_config, task_of
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
    """One finished seed: the metric (in the paper's unit), the training minutes, seconds per
    step (an epoch, for full-batch tasks), and the metrics of the run's last validation
    (``None`` for a run without validations)."""

    seed: int
    value: float
    minutes: float
    run_dir: Path
    valid: dict[str, float] | None = None
    seconds_per_step: float = math.nan


def _value(config: RunConfig, results: dict[str, Any], source: Path) -> float:
    spec = config.reproduce
    assert spec is not None
    value: Any = results
    for key in spec.metric.split("."):
        if not isinstance(value, dict) or key not in value:
            raise CheckpointError(f"{source}: no {spec.metric!r} in the run's results")
        value = value[key]
    return (1.0 - float(value) if spec.complement else float(value)) * spec.scale


def metric_name(spec: ReproduceSection) -> str:
    """What the numbers are: ``spec.metric``, or ``1 - metric`` with ``complement``."""
    return f"1 - {spec.metric}" if spec.complement else spec.metric


def _last_valid(run_dir: Path) -> dict[str, float] | None:
    valid = [r for r in read_metrics(run_dir) if r.get("split") == "valid"]
    if not valid:
        return None
    return {k: float(v) for k, v in valid[-1].items() if k not in ("step", "split")}


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
    else:
        _check_same_settings(config, run_dir)
    try:
        finished = json.loads(results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{results}: unreadable results ({error})") from None
    minutes = float(finished.get("train_seconds", 0.0)) / 60.0
    steps = [m["seconds"] for m in read_metrics(run_dir) if m.get("split") == "train"]
    per_step = statistics.median(steps) if steps else math.nan
    value = _value(config, finished, results)
    return Seed(seed, value, minutes, run_dir, _last_valid(run_dir), per_step)


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train.steps": 3270, ...}`` of a nested mapping."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _check_same_settings(config: RunConfig, run_dir: Path) -> None:
    """Refuse to read back a finished seed trained with other settings than ``config`` (a
    configuration changed since): its result would stand for a model the config no longer
    describes. Where the data folder is (``data.root``) may differ, and so may the
    ``reproduce`` section: the paper's number, its source and the seed counts say how the
    seeds are compared, not how one trains."""
    saved = _flat(load_config(run_dir / "config.yaml").model_dump(mode="json"))
    given = _flat(config.model_dump(mode="json"))
    differ = [
        f"{key} (saved {saved.get(key, '<absent>')!r}, now {given.get(key, '<absent>')!r})"
        for key in sorted(set(saved) | set(given))
        if key != "data.root"
        and not key.startswith("reproduce.")
        and saved.get(key, "<absent>") != given.get(key, "<absent>")
    ]
    if differ:
        raise ValueError(
            f"{run_dir}: a finished seed trained with other settings: {'; '.join(differ)}; "
            "move it aside (or give another --runs-dir) to train it again"
        )


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


def uniform_count(spec: ReproduceSection, count: int) -> int:
    """Seeds of the uniform-attention model: ``reproduce.uniform_seeds`` (at most ``count``, the
    model's), else ``count``."""
    return count if spec.uniform_seeds is None else min(spec.uniform_seeds, count)


def peer_count(spec: ReproduceSection, count: int) -> int:
    """Seeds of the peer library's model: ``reproduce.peer_seeds`` (at most ``count``), else
    ``count``."""
    return count if spec.peer_seeds is None else min(spec.peer_seeds, count)


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
    if config.reproduce is not None and config.reproduce.over is not None:
        extra = [*spec.quick] if quick else []
        return _reproduce_over(
            name, config, [*overrides, *extra], count, root, uniform, log=log, quiet=quiet
        )
    started = time.perf_counter()
    variants = {"attention": config}
    if uniform and spec.uniform is not None:
        extra = [*spec.quick] if quick else []
        variants["uniform"] = load(name, [*overrides, *extra, *spec.uniform])
    done: dict[str, list[Seed]] = {}
    for variant, variant_config in variants.items():
        directory = root if variant == "attention" else root.with_name(root.name + "-uniform")
        done[variant] = []
        for seed in range(count if variant == "attention" else uniform_count(spec, count)):
            result = run_seed(
                variant_config, seed, directory / f"seed-{seed}", log=log, quiet=quiet
            )
            done[variant].append(result)
            log(
                f"{name} {variant:9s} seed {seed:2d}: {metric_name(spec)} {result.value:.2f}  "
                f"({result.minutes:.1f} min)  {result.run_dir}"
            )
    peers: list[dict[str, Any]] = []
    if spec.peer:
        for seed in range(peer_count(spec, count)):
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
        f"{name}: {line['metric']} {line['mean']:.2f} ± {line['std']:.2f} over {line['seeds']} "
        f"seeds{paper} ({spec.source}); uniform attention {line['uniform']:.2f}"
        if line["uniform"] is not None
        else f"{name}: {line['metric']} {line['mean']:.2f} ± {line['std']:.2f}{paper}"
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
    None), ``uniform_std``, ``uniform_seeds``, ``minutes`` (training minutes per seed),
    ``seconds_per_step`` (median), ``peer`` (the peer library's mean, std, seconds per epoch, or None),
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
        "metric": metric_name(spec),
        "mean": round(mean, 3),
        "std": round(std, 3),
        "seeds": len(values),
        "values": [round(v, 3) for v in values],
        "paper": spec.value,
        "paper_std": spec.std,
        "paper_source": f"{spec.paper}: {spec.source}",
        "uniform": round(u_mean, 3) if uniform else None,
        "uniform_std": round(u_std, 3) if uniform else None,
        "uniform_seeds": len(uniform) if uniform else None,
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


# --- reproductions over the values of one key (reproduce.over) ---------------------------------


def _literal(value: int | str) -> str:
    """``value`` as the YAML of a ``key=value`` override (a string that reads as a number stays
    a string)."""
    return json.dumps(value)


def best_on_valid(spec: ReproduceSection, done: Sequence[Seed]) -> Seed:
    """The seed whose last validation has the best ``select_metric`` (ties: the lower
    validation loss, then the lower seed)."""
    missing = [s.run_dir for s in done if s.valid is None or spec.select_metric not in s.valid]
    if missing:
        raise CheckpointError(
            f"{missing[0]}: reproduce.select: best_on_valid reads the validation "
            f"{spec.select_metric!r} of each run, and this run has none (set train.eval_every)"
        )
    sign = 1.0 if spec.select_lower_is_better else -1.0

    def rank(s: Seed) -> tuple[float, float, int]:
        assert s.valid is not None
        return sign * s.valid[spec.select_metric], s.valid.get("loss", math.inf), s.seed

    return min(done, key=rank)


@dataclass
class Value:
    """One value of ``reproduce.over``: its seeds, and its number (the chosen seed's, or the
    mean of the seeds'); ``chosen`` is the seed chosen on validation, if one was."""

    value: int | str
    seeds: list[Seed]
    number: float
    chosen: Seed | None


def _reproduce_over(
    name: str,
    config: RunConfig,
    overrides: Sequence[str],
    count: int,
    root: Path,
    uniform: bool,
    *,
    log: Log,
    quiet: bool,
) -> dict[str, Any]:
    """:func:`reproduce` of a configuration with ``reproduce.over`` (module docstring)."""
    spec = config.reproduce
    assert spec is not None and spec.over is not None
    over = spec.over
    if spec.select == "best_on_valid" and config.train.eval_every is None:
        raise ConfigError(
            f"{name}: reproduce.select: best_on_valid chooses on the validations; set "
            "train.eval_every"
        )
    started = time.perf_counter()
    variants = {"attention": list(overrides)}
    if uniform and spec.uniform is not None:
        variants["uniform"] = [*overrides, *spec.uniform]
    done: dict[str, list[Value]] = {}
    for variant, variant_overrides in variants.items():
        directory = root if variant == "attention" else root.with_name(root.name + "-uniform")
        done[variant] = []
        runs = count if variant == "attention" else uniform_count(spec, count)
        for value in over.values:
            value_config = load(name, [*variant_overrides, f"{over.key}={_literal(value)}"])
            value_dir = directory / f"{over.name}-{value}"
            seeds = []
            for seed in range(runs):
                result = run_seed(
                    value_config, seed, value_dir / f"seed-{seed}", log=log, quiet=quiet
                )
                seeds.append(result)
                valid = ""
                if result.valid is not None and spec.select_metric in result.valid:
                    valid = f"  valid {spec.select_metric} {result.valid[spec.select_metric]:.4f}"
                log(
                    f"{name} {variant:9s} {over.name} {value} seed {seed:2d}: {metric_name(spec)} "
                    f"{result.value:.2f}{valid}  ({result.minutes:.1f} min)  {result.run_dir}"
                )
            if spec.select == "best_on_valid":
                chosen = best_on_valid(spec, seeds)
                done[variant].append(Value(value, seeds, chosen.value, chosen))
            else:
                mean = statistics.fmean(s.value for s in seeds)
                done[variant].append(Value(value, seeds, mean, None))
    line = summary_over(name, config, done, (time.perf_counter() - started) / 60.0)
    for row in table_over(line):
        log(row)
    return line


def _failures(spec: ReproduceSection, numbers: Sequence[float]) -> int | None:
    if spec.fail_above is None:
        return None
    above = (n > spec.fail_above for n in numbers)
    return sum(above)


def summary_over(
    name: str, config: RunConfig, done: dict[str, list[Value]], wall_minutes: float
) -> dict[str, Any]:
    """The JSON line of a reproduction over ``reproduce.over``: the keys of :func:`summary`
    (``mean`` and ``std`` over the values' numbers, ``seeds`` = runs per value) and
    ``per_value`` ({value: number}), ``failures`` (values above ``fail_above``),
    ``paper_per_value``, ``paper_failures``, the same for uniform attention
    (``uniform_per_value``, ``uniform_failures``), ``chosen_seed`` ({value: seed} with
    ``best_on_valid``), ``over`` (the key) and ``select``."""
    spec = config.reproduce
    assert spec is not None and spec.over is not None
    values = done["attention"]
    numbers = [v.number for v in values]
    mean, std = _mean_std(numbers)
    uniform = done.get("uniform", [])
    u_numbers = [v.number for v in uniform]
    u_mean, u_std = _mean_std(u_numbers)
    runs = [s for v in values for s in v.seeds]
    return {
        "name": name,
        "metric": metric_name(spec),
        "mean": round(mean, 3),
        "std": round(std, 3),
        "seeds": len(values[0].seeds) if values else 0,
        "per_value": {str(v.value): round(v.number, 3) for v in values},
        "failures": _failures(spec, numbers),
        "paper": spec.value,
        "paper_std": spec.std,
        "paper_source": f"{spec.paper}: {spec.source}",
        "paper_per_value": (
            {str(v.value): spec.paper_values.get(str(v.value)) for v in values}
            if spec.paper_values is not None
            else None
        ),
        "paper_failures": spec.paper_failures,
        "uniform": round(u_mean, 3) if uniform else None,
        "uniform_std": round(u_std, 3) if uniform else None,
        "uniform_per_value": {str(v.value): round(v.number, 3) for v in uniform} or None,
        "uniform_failures": _failures(spec, u_numbers) if uniform else None,
        "uniform_seeds": len(uniform[0].seeds) if uniform else None,
        "chosen_seed": (
            {str(v.value): v.chosen.seed for v in values if v.chosen is not None}
            if spec.select == "best_on_valid"
            else None
        ),
        "over": spec.over.key,
        "select": spec.select,
        "minutes": round(statistics.fmean(s.minutes for s in runs), 2) if runs else 0.0,
        "wall_minutes": round(wall_minutes, 2),
        "config": f"configs/reproduce/{name}.yaml",
    }


def table_over(line: dict[str, Any]) -> list[str]:
    """The rows printed for a :func:`summary_over` line: one per value (paper, ours, uniform
    attention), then the mean and the failures."""
    paper = line["paper_per_value"] or {}
    uniform = line["uniform_per_value"] or {}
    label = line["over"].rsplit(".", 1)[-1]

    def cell(number: float | None) -> str:
        return f"{number:8.1f}" if number is not None else f"{'-':>8s}"

    rows = [f"{label:>8s} {'paper':>8s} {'attnkit':>8s} {'uniform':>8s}"]
    for value, number in line["per_value"].items():
        rows.append(
            f"{value:>8s} {cell(paper.get(value))} {cell(number)} {cell(uniform.get(value))}"
        )
    rows.append(f"{'mean':>8s} {cell(line['paper'])} {cell(line['mean'])} {cell(line['uniform'])}")
    if line["failures"] is not None:

        def count(n: int | None) -> str:
            return f"{n:8d}" if n is not None else f"{'-':>8s}"

        rows.append(
            f"{'failed':>8s} {count(line['paper_failures'])} {count(line['failures'])} "
            f"{count(line['uniform_failures'])}"
        )
    return rows
