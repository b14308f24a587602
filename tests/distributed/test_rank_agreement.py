"""Data-parallel ranks must train one run: ranks given different settings (a seed, which orders
every rank's batches; a model size or a step count, which would fail later in a collective) are
refused at set-up with one line naming each key that differs, on every rank, before anything is
read or written. Two or three gloo processes forked by ``launch_local``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import attnkit.distributed as akd
from attnkit.config import ConfigError, validate
from attnkit.data_parallel import DataParallel
from attnkit.train import train

TINY = {
    "name": "agree",
    "seed": 0,
    "data": {"corpus": "tatoeba", "max_length": 5, "max_pairs": 40},
    "model": {"kind": "rnn", "style": "luong", "score": "dot", "embed_dim": 8, "hidden_dim": 8},
    "train": {"steps": 2, "batch_size": 8, "lr": 0.01, "log_every": 1},
    "decode": {"max_length": 5, "max_eval_sentences": 2},
}


def _agree(rank: int, world: int, settings: list[dict]) -> str | None:
    parallel = DataParallel(rank, world, timeout=None)
    try:
        parallel.agree(settings[rank])
    except ConfigError as error:
        return str(error)
    return None


def test_ranks_with_the_same_settings_agree():
    same = {"seed": 1, "model": {"hidden_dim": 8}}
    results = akd.launch_local(_agree, 3, [same, dict(same), dict(same)], timeout=20)
    assert [(r.error, r.value) for r in results] == [(None, None)] * 3


def test_every_rank_names_the_keys_that_differ():
    settings = [
        {"seed": 0, "model": {"hidden_dim": 8, "kind": "rnn"}, "train": {"steps": 4}},
        {"seed": 1, "model": {"hidden_dim": 8, "kind": "rnn"}, "train": {"steps": 4}},
        {"seed": 0, "model": {"hidden_dim": 16, "kind": "rnn"}, "train": {"steps": 4}},
    ]
    results = akd.launch_local(_agree, 3, settings, timeout=20)
    assert all(r.error is None for r in results), [r.error for r in results]
    messages = {r.value for r in results}
    assert len(messages) == 1  # every rank raises the same error
    [message] = messages
    assert message == (
        "the 3 data-parallel ranks were given different settings: model.hidden_dim: rank 0 has "
        "8, rank 2 has 16; seed: rank 0 has 0, rank 1 has 1 (start every rank with the same "
        "configuration and options)"
    )


def _train(rank: int, world: int, overrides: list[dict], runs: str) -> str | None:
    os.environ["WORLD_SIZE"] = str(world)  # as torchrun sets it: train() joins this group
    raw = {**TINY, **{k: v for k, v in overrides[rank].items() if k != "train"}}
    raw["train"] = {**TINY["train"], **overrides[rank].get("train", {})}
    try:
        train(validate(raw), run_dir=Path(runs) / "run", quiet=True, log=lambda _: None)
    except ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ([{"seed": 0}, {"seed": 1}], ["seed: rank 0 has 0, rank 1 has 1"]),
        (
            [{}, {"model": {**TINY["model"], "hidden_dim": 16}, "train": {"steps": 3}}],
            [
                "model.hidden_dim: rank 0 has 8, rank 1 has 16",
                "train.steps: rank 0 has 2, rank 1 has 3",
            ],
        ),
    ],
    ids=["seed", "hidden_dim and steps"],
)
def test_training_ranks_with_different_settings_are_refused_before_any_write(
    tmp_path, overrides, named
):
    results = akd.launch_local(_train, 2, overrides, str(tmp_path), timeout=30)
    assert all(r.error is None for r in results), [r.error for r in results]
    for result in results:
        assert result.value is not None, f"rank {result.rank} trained with different settings"
        assert "\n" not in result.value
        for key in named:
            assert key in result.value
    assert list(tmp_path.iterdir()) == []  # nothing written: no run directory
