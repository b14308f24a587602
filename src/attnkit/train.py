"""Training: the one loop of every task, checkpoints and exact resume, the final evaluation and
report.

A run writes a directory (see :mod:`attnkit.run`). What is trained — data, model, objective,
evaluation — is the configuration's :class:`~attnkit.tasks.job.Job` (:func:`attnkit.tasks.job_for`:
translation, or a classification task); this module is the same for all of them.
Everything that decides the numbers is a function of the seed and the step: initialisation under
``torch.manual_seed(seed)``, the batch of step ``t`` from ``Batches.batch(t)``, dropout from the
global generator whose state every checkpoint saves. So ``--resume`` continues bit-exactly, and two
runs with one seed give identical metrics (both tested).

The process that writes the run holds its lock (:class:`~attnkit.run.RunLock`) from before its
first write to the end; a second writer is refused, naming the holder's pid. With
``train.stop_on_nonfinite`` (the default) the run stops at the first NaN or infinite loss, before
that step updates the weights (:class:`NonFiniteLossError`).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from attnkit.checkpoint import Checkpoint, atomic_write, save_checkpoint
from attnkit.config import RunConfig, architecture
from attnkit.data_parallel import DEFAULT_TIMEOUT, DataParallel
from attnkit.early_stopping import EarlyStopping
from attnkit.report import describe_model, write_report
from attnkit.run import (
    MetricsLog,
    Run,
    attention_as_configured,
    read_metrics,
    truncate_metrics,
)
from attnkit.tasks import job_for
from attnkit.tasks.job import Job, Log
from attnkit.tensorboard import TensorBoardLogger, truncate_events


def learning_rate_factor(config: RunConfig) -> Callable[[int], float]:
    """The schedule's multiplier of ``train.lr`` at optimizer step ``t`` (0-based: the rate of
    the ``t+1``-th update): linear warm-up, then constant, cosine decay to 0, inverse square root
    as in Vaswani et al. 2017, or halving, ``0.5 ** ⌊(t − halve_after) / halve_every⌋`` for
    ``t ≥ halve_after`` and 1 before (Sukhbaatar et al. 2015 §4.2: "anneals every 25 epochs by
    η/2")."""
    t_cfg = config.train
    warmup, total = t_cfg.warmup, t_cfg.steps

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if t_cfg.schedule == "cosine":
            progress = (step - warmup) / max(1, total - warmup)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        if t_cfg.schedule == "inverse_sqrt":
            return math.sqrt(max(warmup, 1) / (step + 1))
        if t_cfg.schedule == "halving":
            start, every = t_cfg.halve_after, t_cfg.halve_every
            assert start is not None and every is not None  # TrainConfig requires both
            return 0.5 ** ((step - start) // every) if step >= start else 1.0
        return 1.0

    return factor


def make_optimizer(config: RunConfig, parameters: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """``train.optimizer``'s optimizer of ``parameters`` at ``train.lr``: Adam, or SGD without
    momentum (``p ← p − lr·(g + weight_decay·p)``), each with ``train.weight_decay``."""
    t = config.train
    if t.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=t.lr, momentum=0.0, weight_decay=t.weight_decay)
    # fused: one kernel per step instead of ~10 passes over every parameter (6x faster on CPU)
    return torch.optim.Adam(parameters, lr=t.lr, weight_decay=t.weight_decay, fused=True)


def clip_gradients(parameters: Iterable[nn.Parameter], max_norm: float, clip: str) -> None:
    """Scale gradients in place to an L2 norm of at most ``max_norm``: ``global``, all gradients
    as one vector (``torch.nn.utils.clip_grad_norm_``); ``per_parameter``, each parameter's
    gradient on its own, ``g ← g · min(1, max_norm / ‖g‖)`` (MemN2N's code clips each weight
    matrix separately)."""
    if clip == "global":
        nn.utils.clip_grad_norm_(parameters, max_norm)
    elif clip == "per_parameter":
        for parameter in parameters:
            if parameter.grad is not None:
                nn.utils.clip_grad_norm_(parameter, max_norm)
    else:
        raise ValueError(f"train.clip: expected 'global' or 'per_parameter', got {clip!r}")


class NonFiniteLossError(RuntimeError):
    """Training met a NaN or infinite loss (``train.stop_on_nonfinite``); the message is one
    line naming the step and the likely cause."""


def likely_cause(config: RunConfig, step: int) -> str:
    """The configuration's likeliest reason for a non-finite loss at ``step`` (a hint)."""
    t = config.train
    if t.lr > 0.1 and t.optimizer == "adam":
        return f"train.lr: {t.lr:g} is large for Adam (1e-4 to 1e-2 is usual)"
    if step == 1:
        return "the first step: the data or the initial model (a NaN or inf in the inputs?)"
    if t.clip_norm is None:
        return f"train.clip_norm: null (no gradient clipping) with train.lr: {t.lr:g}"
    return f"the step size: try a smaller train.lr (now {t.lr:g}) or more train.warmup"


def train(
    config: RunConfig,
    *,
    runs_dir: str | Path = "runs",
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    stop_after: int | None = None,
    quiet: bool = False,
    log: Log = print,
    timeout: float = DEFAULT_TIMEOUT,
) -> Run:
    """Train ``config`` in a new run directory (or continue the run ``resume`` bit-exactly).

    ``stop_after=k`` ends after step ``k`` with a checkpoint, as an interruption would (resume
    later). Returns the run; its final evaluation is in ``results.json`` once all steps ran.
    Under ``torchrun`` every process trains its share of each batch (see
    :mod:`attnkit.data_parallel`); rank 0 writes the run. ``timeout`` (seconds) bounds every
    wait for the other processes: a failed one raises
    :class:`~attnkit.distributed.PeerFailureError`."""
    parallel = DataParallel.from_environment(timeout)
    try:
        # every rank must train the same run: refused before anything is read or written
        parallel.agree(_agreed_settings(config, resume, stop_after))
        return _train(config, parallel, runs_dir, run_dir, resume, stop_after, quiet, log)
    except Exception as error:
        failure = parallel.peer_failure(error)
        if failure is None:
            raise
        raise failure from error
    finally:
        parallel.close()


def _agreed_settings(
    config: RunConfig, resume: str | Path | None, stop_after: int | None
) -> dict[str, Any]:
    """What every rank of a data-parallel run must agree on: the resolved configuration (the
    seed orders the batches of every rank), whether it resumes, and where it stops."""
    return {
        **config.model_dump(mode="json"),
        "--resume": resume is not None,
        "--stop-after": stop_after,
    }


def _train(
    config: RunConfig,
    parallel: DataParallel,
    runs_dir: str | Path,
    run_dir: str | Path | None,
    resume: str | Path | None,
    stop_after: int | None,
    quiet: bool,
    log: Log,
) -> Run:
    main = parallel.is_main
    quiet = quiet or not main
    if not main:
        log = _silent
    job = job_for(config)
    if resume is not None:
        # rank 0 locks the run it writes; the others only read it
        run = Run.resume(resume, config, job=job) if main else Run.open(resume, config, job=job)
    elif main:
        run = Run.create(config, runs_dir=runs_dir, path=run_dir, job=job)
    else:
        # every rank learns the run's state from the data at once, as rank 0 does: the others
        # then wait in share_text only while rank 0 writes the directory
        job.learnt()
        run = None
    with contextlib.ExitStack() as held:
        if run is not None:
            held.enter_context(run)  # rank 0 holds the run's lock until the end
        if resume is None:  # rank 0's new directory; every rank takes the state it wrote
            path = parallel.share_text(str(run.path) if run is not None else "")
            if run is None:
                run = Run.open(path, job=job)
        if resume is not None and main:
            _remove_stale(run, log)
            changed = run.changed_settings()
            if changed:
                log(f"resuming with changed settings: {'; '.join(changed)}")
        # read and verified before any work: a bad checkpoint stops the run, nothing changed
        checkpoint = run.resume_checkpoint() if resume is not None else None
        return _steps(config, parallel, run, job, checkpoint, resume, stop_after, quiet, log)


def _remove_stale(run: Run, log: Log) -> None:
    removed = run.removed  # by Run.resume, under the lock
    if removed:
        names = ", ".join(str(p.relative_to(run.path)) for p in removed[:3])
        more = f" and {len(removed) - 3} more" if len(removed) > 3 else ""
        log(
            f"{run.path}: removed {len(removed)} temporary file(s) of interrupted writes: {names}{more}"
        )


def _steps(
    config: RunConfig,
    parallel: DataParallel,
    run: Run,
    job: Job,
    checkpoint: Checkpoint | None,
    resume: str | Path | None,
    stop_after: int | None,
    quiet: bool,
    log: Log,
) -> Run:
    main = parallel.is_main
    # rank 0 prepares first (it may write files of the run, e.g. aligner links); the others
    # then read what it wrote
    epoch_size = job.prepare(run, log) if main else 0
    parallel.barrier()
    if not main:
        epoch_size = job.prepare(run, log)
    check_shards(config, job, parallel.world)

    model = run.new_model().to(parallel.device)  # cuda:LOCAL_RANK under NCCL, else the CPU
    optimizer = make_optimizer(config, model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate_factor(config))
    step = 0
    stopper = EarlyStopping(config.train.patience, run.path) if config.train.patience else None
    if stopper is not None and parallel.world > 1:
        raise ValueError("train.patience: early stopping runs in one process (not under torchrun)")
    if checkpoint is not None:
        if checkpoint.step > config.train.steps:
            raise ValueError(
                f"train.steps: {config.train.steps} is below the run's checkpoint at step "
                f"{checkpoint.step}: nothing to train (give train.steps above it to go on)"
            )
        checkpoint.restore(model, optimizer, scheduler, rng=True)
        step = checkpoint.step
        if stopper is not None:
            stopper.restore(checkpoint.extra.get("early_stopping"))
    else:  # a new run, or one resumed before its first checkpoint: start as a new run does
        torch.manual_seed(config.seed)  # dropout's stream starts from the seed too
    if resume is not None and main:
        note = truncate_metrics(run.metrics, step)
        if note:
            log(note)
        note = truncate_events(run.path / "tensorboard", step)  # as the metrics
        if note:
            log(note)
        run.save_config()  # translate and explain read the settings it goes on with
    trained = parallel.wrap(model)

    t = config.train
    last = t.steps if stop_after is None else min(t.steps, stop_after)
    model.train()
    progress = tqdm(
        total=t.steps,
        initial=step,
        desc=config.name,
        unit="step",
        disable=quiet,
        dynamic_ncols=True,
        mininterval=0.5,
    )
    start, window = time.perf_counter(), []
    tick = start
    with contextlib.ExitStack() as stack:
        stack.enter_context(attention_as_configured(config, model))
        metrics = stack.enter_context(MetricsLog(run.metrics)) if main else None
        board = None
        if main and t.tensorboard:
            board = stack.enter_context(TensorBoardLogger(run.path / "tensorboard"))
        while step < last and not (stopper is not None and stopper.stopped):
            parallel.stage = f"step {step + 1} of {t.steps}"
            share = parallel.place(parallel.shard(job.batch(step)))  # this rank's rows
            loss, parts = parallel.combine(job.loss(trained, share))
            # parts["loss"] is the global batch's: every rank stops at the same step
            if t.stop_on_nonfinite and not math.isfinite(parts["loss"]):
                raise NonFiniteLossError(
                    f"step {step + 1}: the loss is {parts['loss']} (train.stop_on_nonfinite); "
                    f"likely cause: {likely_cause(config, step + 1)}; stopped before that step "
                    f"changed the weights (metrics kept up to step {step})"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if t.clip_norm is not None:
                clip_gradients(model.parameters(), t.clip_norm, t.clip)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            step += 1
            if metrics is None:
                continue
            now = time.perf_counter()
            record = {"step": step, "split": "train", **parts, "lr": lr, "seconds": now - tick}
            tick = now
            metrics.write(record)
            if board is not None:
                board.log_scalars(
                    {f"train/{k}": v for k, v in parts.items()} | {"train/lr": lr}, step
                )
            window.append(parts["loss"])
            progress.update(1)
            if step % t.log_every == 0 or step == last:
                mean = sum(window) / len(window)
                window.clear()
                metrics.flush()  # a reader (or a crash) sees the run up to here
                progress.set_postfix(loss=f"{mean:.3f}")
                if quiet:
                    rate = step / max(time.perf_counter() - start, 1e-9)
                    log(f"step {step}/{t.steps}  loss {mean:.4f}  lr {lr:.2e}  {rate:.1f} step/s")
            if t.eval_every and (step % t.eval_every == 0 or step == t.steps):
                model.eval()
                with torch.no_grad():
                    valid = job.valid(parallel.on_cpu(model))
                model.train()
                metrics.write({"step": step, "split": "valid", **valid})
                if board is not None:
                    board.log_scalars({f"valid/{k}": v for k, v in valid.items()}, step)
                    _log_presentation(board, job, parallel.on_cpu(model), run.path, step)
                if quiet:
                    log(
                        f"step {step}  valid " + "  ".join(f"{k} {v:.4f}" for k, v in valid.items())
                    )
                if stopper is not None:
                    stopper.update(step, valid, model)
            stopping = stopper is not None and stopper.stopped
            if step == last or stopping or (t.checkpoint_every and step % t.checkpoint_every == 0):
                metrics.flush()
                save_checkpoint(
                    run.checkpoints,
                    step,
                    model=model,
                    optimizer=optimizer,
                    scheduler=scheduler,
                    architecture=architecture(config),
                    extra={
                        "data_position": step,
                        "epoch": step // epoch_size,
                        **({"early_stopping": stopper.state()} if stopper is not None else {}),
                    },
                    keep=t.keep_checkpoints,
                )
    progress.close()
    stopped = stopper is not None and stopper.stopped
    if (step == t.steps or stopped) and main:
        if stopper is not None:
            stopper.best_into(model)  # the model of the last evaluation that improved both
            log(stopper.describe())
        finish(run, parallel.on_cpu(model).eval(), log=log, quiet=quiet)
    return run


def check_shards(config: RunConfig, job: Job, world: int) -> None:
    """Refuse more processes than a batch of the run has examples (each needs a share)."""
    smallest = job.smallest_batch()
    if smallest is not None and smallest < world:
        raise ValueError(
            f"train.batch_size: each of the {world} processes needs an example of every batch; "
            f"batch_size={config.train.batch_size} leaves a batch of {smallest}"
        )


def _silent(_: str) -> None:
    pass


def _log_presentation(
    board: TensorBoardLogger, job: Job, model: nn.Module, run_dir: Path, step: int
) -> None:
    """What the report will show, at this step: the alignment matrices as heatmaps and the
    job's attention figures as images (drawn in a scratch folder of the run, then removed)."""
    scratch = Path(tempfile.mkdtemp(prefix=".tensorboard-", dir=run_dir))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            shown = job.present(model, scratch)
        for i, alignment in enumerate(shown.alignments):
            board.log_attention(
                f"alignment/{i}",
                alignment.weights,
                step,
                rows=alignment.target,
                columns=alignment.source,
                title=" ".join(alignment.source),
            )
        for image in shown.images:
            board.log_image(f"figure/{image.stem}", image, step)
    finally:
        model.train(was_training)
        shutil.rmtree(scratch, ignore_errors=True)


def finish(run: Run, model: nn.Module, *, log: Log = print, quiet: bool = False) -> dict[str, Any]:
    """The final evaluation of every run: the job's metrics on the test split with the time they
    took and the training time, what the job presents (translations and their alignments, or
    predicted classes and attention maps), ``results.json``, and the report (HTML + PNGs)."""
    config, job = run.config, run.job
    started = time.perf_counter()
    with attention_as_configured(config, model):
        results = job.evaluate(model, job.examples["test"], quiet=quiet)
        results["eval_seconds"] = round(time.perf_counter() - started, 1)
        # the translations and matrices shown are the evaluated model's (uniform or not)
        shown = job.present(model, run.path / "heatmaps")
    train_seconds = sum(m.get("seconds", 0.0) for m in read_metrics(run.path))
    results["train_seconds"] = round(train_seconds, 1)
    results.update(shown.results)
    atomic_write(run.path / "results.json", json.dumps(results, indent=1))
    summary = {
        "run": str(run.path),
        "model": describe_model(config),
        "data": f"{config.data.corpus}: {len(job.examples['train'])} training {job.example_noun}",
        "steps": config.train.steps,
        "training time": f"{train_seconds:.0f} s",
        **job.summary(results),
    }
    write_report(
        run.path / "report.html",
        title=f"attnkit run {run.path.name}",
        summary=summary,
        alignments=shown.alignments,
        metrics=read_metrics(run.path),
        images=shown.images,
    )
    log(job.headline(results))
    return results
