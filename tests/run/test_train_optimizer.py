"""The trainer's optimisers, clipping and halving schedule against their formulas in float64:
``train.optimizer: sgd`` (p ← p − lr·(g + λ·p), no momentum), ``train.clip: per_parameter``
(each gradient scaled to norm ≤ clip_norm on its own), ``train.schedule: halving``
(0.5 ** ⌊(t − halve_after) / halve_every⌋), and a bit-exact resume of such a run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import attnkit.tasks  # noqa: F401  (registers the tasks validate needs)
from attnkit.config import ConfigError, RunConfig, validate
from attnkit.run import Run, read_metrics
from attnkit.train import clip_gradients, learning_rate_factor, train

QUIET = {"quiet": True, "log": lambda _: None}


def tiny(**train_keys) -> RunConfig:
    """A memory network on 64 generated questions: a few steps take well under a second."""
    return validate(
        {
            "name": "tiny-sgd",
            "seed": 5,
            "data": {"corpus": "memory_qa", "max_examples": 64, "max_eval_examples": 16},
            "model": {"kind": "memory_network", "embed_dim": 6, "hops": 2, "memory_size": 20},
            "train": {"steps": 6, "batch_size": 16, "log_every": 1, **train_keys},
        }
    )


def halving(step: int, start: int, every: int) -> float:
    return 0.5 ** math.floor((step - start) / every) if step >= start else 1.0


def test_halving_factor_is_its_formula() -> None:
    config = tiny(lr=0.1, schedule="halving", halve_after=7, halve_every=4, steps=40)
    factor = learning_rate_factor(config)
    assert [factor(t) for t in range(40)] == [halving(t, 7, 4) for t in range(40)]
    assert factor(6) == 1.0 and factor(7) == 1.0 and factor(11) == 0.5 and factor(39) == 2.0**-8
    start_at_zero = learning_rate_factor(tiny(schedule="halving", halve_after=0, halve_every=3))
    assert [start_at_zero(t) for t in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]


def test_per_parameter_clipping_scales_each_gradient_alone() -> None:
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(4, 3)) for _ in range(3)]
    grads = [torch.randn(4, 3) * s for s in (10.0, 0.1, 3.0)]  # norms ≈ 35, 0.35, 10
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    clip = 1.25
    clip_gradients(params, clip, "per_parameter")
    for p, g in zip(params, grads, strict=True):
        g64 = g.double()
        expected = g64 * min(1.0, clip / float(g64.norm()))
        torch.testing.assert_close(p.grad.double(), expected, rtol=1e-5, atol=1e-7)
        assert float(p.grad.norm()) <= clip * (1 + 1e-6)
        alone = nn.Parameter(torch.zeros(4, 3))
        alone.grad = g.clone()
        nn.utils.clip_grad_norm_([alone], clip)  # the same clip on its own
        torch.testing.assert_close(p.grad, alone.grad, rtol=0, atol=0)
    # global: one norm over all gradients (the small one is scaled too)
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    clip_gradients(params, clip, "global")
    total = math.sqrt(sum(float(g.double().norm()) ** 2 for g in grads))
    for p, g in zip(params, grads, strict=True):
        torch.testing.assert_close(p.grad.double(), g.double() * clip / total, rtol=1e-5, atol=1e-7)


def test_one_sgd_step_is_p_minus_lr_times_the_clipped_gradient(tmp_path: Path) -> None:
    lr, clip, decay = 0.3, 0.05, 0.01
    config = tiny(
        steps=1, optimizer="sgd", lr=lr, clip="per_parameter", clip_norm=clip, weight_decay=decay
    )
    run = train(config, run_dir=tmp_path / "run", **QUIET)
    after = load_file(run.path / "checkpoints" / "step-00000001.safetensors")
    # the same first step by hand: the initial model, the first batch, its mean loss
    opened = Run.open(run.path)
    opened.job.prepare(opened, lambda _: None)
    model = opened.new_model().train()
    names, params = zip(*model.named_parameters(), strict=True)
    mean = opened.job.loss(model, opened.job.batch(0))["loss"].mean
    grads = torch.autograd.grad(mean, params)
    clipped = 0
    for name, p, g in zip(names, params, grads, strict=True):
        g64, p64 = g.double(), p.detach().double()
        norm = float(g64.norm())
        clipped += norm > clip
        expected = p64 - lr * (g64 * min(1.0, clip / norm) + decay * p64)
        torch.testing.assert_close(after[f"model.{name}"].double(), expected, rtol=0, atol=1e-6)
    assert clipped >= 2  # the clip acted, on several parameters separately
    assert not any(k.startswith("optimizer.") for k in after)  # no momentum buffers


def test_sgd_with_halving_resumes_bit_exactly(tmp_path: Path) -> None:
    config = tiny(
        steps=7,
        optimizer="sgd",
        lr=0.2,
        schedule="halving",
        halve_after=2,
        halve_every=2,
        clip="per_parameter",
        clip_norm=0.5,
        eval_every=2,
        checkpoint_every=2,
    )
    whole = train(config, run_dir=tmp_path / "whole", **QUIET)
    part = train(config, run_dir=tmp_path / "part", stop_after=3, **QUIET)
    train(config, resume=part.path, **QUIET)
    a = load_file(whole.path / "checkpoints" / "step-00000007.safetensors")
    b = load_file(part.path / "checkpoints" / "step-00000007.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    rates = [m["lr"] for m in read_metrics(part.path) if m["split"] == "train"]
    assert rates == [0.2 * halving(t, 2, 2) for t in range(7)]  # the rate of each update


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"schedule": "halving", "halve_after": 3}, r"train\.halve_every: .*halving schedule"),
        ({"schedule": "halving", "halve_every": 3}, r"train\.halve_after: .*halving schedule"),
        ({"schedule": "cosine", "halve_every": 3}, r"train\.halve_every: only the halving"),
        ({"schedule": "halving", "halve_after": 0, "halve_every": 0}, r"train\.halve_every"),
        ({"schedule": "halving", "halve_after": -1, "halve_every": 2}, r"train\.halve_after"),
        ({"clip": "per_parameter", "clip_norm": None}, r"train\.clip: per_parameter"),
        ({"optimizer": "momentum"}, r"train\.optimizer"),
        ({"clip": "each"}, r"train\.clip"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(keys: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        tiny(**keys)
    assert "\n" not in str(caught.value)
