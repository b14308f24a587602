"""Training: the loop, the objective, checkpoints and exact resume, the final evaluation and report.

A run writes a directory (see :mod:`attnkit.run`).
Everything that decides the numbers is a function of the seed and the step: initialisation under
``torch.manual_seed(seed)``, the batch of step ``t`` from ``Batches.batch(t)``, dropout from the
global generator whose state every checkpoint saves. So ``--resume`` continues bit-exactly, and two
runs with one seed give identical metrics (both tested).

The objective is the token-level cross-entropy of the reference; with supervised attention
(survey §4.2, Liu et al. 2016; Mi et al. 2016) the joint loss adds
``λ · L_attention(attention weights, alignment targets)``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from attnkit.checkpoint import atomic_write, latest_checkpoint, read_checkpoint, save_checkpoint
from attnkit.config import RunConfig, architecture, differing_keys
from attnkit.data.batching import Batch, Batches, encode
from attnkit.data.corpus import Example
from attnkit.data.tokenize import tokenize
from attnkit.data_parallel import DEFAULT_TIMEOUT, DataParallel
from attnkit.evaluate.supervised import supervised_attention_loss
from attnkit.evaluate.translation import corpus_loss, evaluate_run, translate
from attnkit.run import (
    Run,
    Vocabularies,
    describe_model,
    load_examples,
    read_metrics,
    truncate_metrics,
)

Log = Callable[[str], None]


def learning_rate_factor(config: RunConfig) -> Callable[[int], float]:
    """The schedule's multiplier of ``train.lr`` at optimizer step ``t`` (linear warm-up, then
    constant, cosine decay to 0, or inverse square root as in Vaswani et al. 2017)."""
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
        return 1.0

    return factor


def _alignment_targets(
    config: RunConfig, run: Run, train: list[Example], log: Log
) -> list[Example]:
    """Training examples with ``links`` from the configured aligner (cached in the run)."""
    from attnkit.data.ibm_model1 import IBMModel1

    cache = run.path / "links.pharaoh"
    if cache.is_file():
        lines = cache.read_text(encoding="utf-8").splitlines()
        if len(lines) == len(train):
            return [_with_links(e, line) for e, line in zip(train, lines, strict=True)]
    start = time.perf_counter()
    aligner = IBMModel1().fit(
        [(e.source, e.target) for e in train], iterations=config.data.aligner_iterations
    )
    linked = [_with_links(e, aligner.align(e.source, e.target)) for e in train]
    lines = [" ".join(f"{s}-{t}" for s, t in sorted(e.links or ())) for e in linked]
    atomic_write(cache, "\n".join(lines) + "\n")
    log(f"IBM Model 1 alignments of {len(train)} pairs in {time.perf_counter() - start:.0f} s")
    return linked


def _with_links(example: Example, links: Any) -> Example:
    from dataclasses import replace

    if isinstance(links, str):
        links = frozenset(
            (int(s), int(t)) for s, _, t in (tok.partition("-") for tok in links.split())
        )
    return replace(example, links=frozenset(links))


def batch_loss(
    model: nn.Module, batch: Batch, config: RunConfig, parallel: DataParallel | None = None
) -> tuple[Tensor, dict[str, float]]:
    """The training objective of one batch and its parts.

    Token-level cross-entropy averaged over the batch's target tokens; under data parallelism
    ``batch`` is this rank's share and the average is over the *global* batch's tokens (times the
    world size, which DDP's gradient averaging divides out), so the gradient equals the single
    process one. The parts are the global batch's values on every rank."""
    parallel = parallel or DataParallel()
    out = model(batch.source, batch.source_lengths, batch.target_in)
    tokens = parallel.total((batch.target_out != 0).sum())
    nll_sum = F.cross_entropy(
        out.logits.flatten(0, 1),
        batch.target_out.flatten(),
        ignore_index=0,
        label_smoothing=config.train.label_smoothing,
        reduction="sum",
    )
    nll = nll_sum * (parallel.world / tokens.clamp_min(1))
    loss = nll
    parts = {"nll": nll}
    weight = config.train.supervised_weight
    if weight > 0 and batch.alignment is not None:
        rows = (batch.alignment.sum(-1) > 0).sum()
        all_rows = parallel.total(rows)
        if all_rows > 0:
            attention_loss = (
                supervised_attention_loss(
                    out.weights, batch.alignment, config.train.supervised_kind
                )
                if rows > 0
                else out.weights.sum() * 0.0  # this rank has no gold row: no contribution
            ) * (rows * parallel.world / all_rows)
            loss = loss + weight * attention_loss
            parts["attention_loss"] = attention_loss
    parts["loss"] = loss
    values = parallel.total(torch.stack([v.detach() for v in parts.values()])) / parallel.world
    return loss, dict(zip(parts, values.tolist(), strict=True))


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
        return _train(config, parallel, runs_dir, run_dir, resume, stop_after, quiet, log)
    except Exception as error:
        failure = parallel.peer_failure(error)
        if failure is None:
            raise
        raise failure from error
    finally:
        parallel.close()


class Job(ABC):
    """What the training loop needs from one kind of run: translation here, a classification
    task in :mod:`attnkit.tasks.trainer`. Constructed with the configuration; ``examples`` holds
    the loaded ``"train"``, ``"valid"`` and ``"test"`` splits."""

    def __init__(self, config: RunConfig, examples: Mapping[str, Sequence[Any]]) -> None:
        self.config, self.examples = config, examples

    @abstractmethod
    def learnt(self) -> Any:
        """What the run directory keeps from the training split (see :meth:`Run.create`)."""

    @abstractmethod
    def prepare(self, run: Run, parallel: DataParallel, log: Log) -> int:
        """Get the batches ready once the run is open; returns the batches per epoch."""

    @abstractmethod
    def batch(self, step: int, parallel: DataParallel) -> Any:
        """This rank's share of the global batch of ``step``."""

    @abstractmethod
    def loss(
        self, model: nn.Module, batch: Any, parallel: DataParallel
    ) -> tuple[Tensor, dict[str, float]]:
        """The objective of one batch (averaged over the global batch) and its parts."""

    @abstractmethod
    def valid(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics (``"loss"`` first) of the model in eval mode."""

    @abstractmethod
    def finish(self, run: Run, model: nn.Module, log: Log, quiet: bool) -> dict[str, Any]:
        """The final evaluation, ``results.json`` and the report."""


class TranslationJob(Job):
    """Sequence-to-sequence training on a parallel corpus (Tatoeba, Hansards)."""

    def learnt(self) -> Vocabularies:
        return Vocabularies.build(self.examples["train"], self.config)

    def prepare(self, run: Run, parallel: DataParallel, log: Log) -> int:
        config, train_examples = self.config, self.examples["train"]
        if config.data.supervision is not None:
            if parallel.is_main:
                train_examples = _alignment_targets(config, run, train_examples, log)
            parallel.total(torch.zeros(1))  # a barrier: rank 0 has written links.pharaoh
            if not parallel.is_main:
                train_examples = _alignment_targets(config, run, train_examples, log)
        vocab = run.vocabularies
        self.batches = Batches(
            encode(train_examples, vocab.source, vocab.target),
            config.train.batch_size,
            seed=config.seed,
        )
        self.encoded_valid = encode(self.examples["valid"], vocab.source, vocab.target)
        return len(self.batches)

    def batch(self, step: int, parallel: DataParallel) -> Batch:
        return parallel.shard(self.batches.batch(step))

    def loss(
        self, model: nn.Module, batch: Batch, parallel: DataParallel
    ) -> tuple[Tensor, dict[str, float]]:
        return batch_loss(model, batch, self.config, parallel)

    def valid(self, model: nn.Module) -> dict[str, float]:
        return corpus_loss(model, self.encoded_valid, self.config)

    def finish(self, run: Run, model: nn.Module, log: Log, quiet: bool) -> dict[str, Any]:
        return finish(run, model, self.examples, log=log, quiet=quiet)


def make_job(config: RunConfig) -> Job:
    """The job of ``config``: translation, or the classification task of its corpus."""
    if config.is_translation:
        return TranslationJob(config, load_examples(config))
    from attnkit.tasks.trainer import ClassificationJob

    return ClassificationJob(config)


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
    job = make_job(config)
    checkpoint = None
    if resume is not None:
        run = Run.open(resume, config)
        saved = Run.open(resume).config
        others = differing_keys(saved.model_dump(mode="json"), config.model_dump(mode="json"))
        if others:
            log(f"resuming with changed settings: {'; '.join(others)}")
        run.config = config
        # read and verified before any work: a bad checkpoint stops the run with nothing changed
        newest = latest_checkpoint(run.checkpoints)
        checkpoint = None if newest is None else read_checkpoint(newest, architecture(config))
    else:
        path = ""
        if main:
            path = str(Run.create(config, job.learnt(), runs_dir, run_dir).path)
        run = Run.open(parallel.share_text(path))  # the others wait for rank 0's directory
    epoch_size = job.prepare(run, parallel, log)

    model = run.new_model().to(parallel.device)  # cuda:LOCAL_RANK under NCCL, else the CPU
    # fused: one kernel per step instead of ~10 passes over every parameter (6x faster on CPU)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate_factor(config))
    step = 0
    if checkpoint is not None:
        checkpoint.restore(model, optimizer, scheduler, rng=True)
        step = checkpoint.step
    else:  # a new run, or one resumed before its first checkpoint: start as a new run does
        torch.manual_seed(config.seed)  # dropout's stream starts from the seed too
    if resume is not None and main:
        truncate_metrics(run.metrics, step)
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
        metrics = stack.enter_context(run.metrics.open("a", encoding="utf-8")) if main else None
        while step < last:
            parallel.stage = f"step {step + 1} of {t.steps}"
            loss, parts = job.loss(trained, parallel.place(job.batch(step, parallel)), parallel)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if t.clip_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            step += 1
            if metrics is None:
                continue
            now = time.perf_counter()
            record = {"step": step, "split": "train", **parts, "lr": lr, "seconds": now - tick}
            tick = now
            metrics.write(json.dumps(record) + "\n")
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
                metrics.write(json.dumps({"step": step, "split": "valid", **valid}) + "\n")
                if quiet:
                    log(
                        f"step {step}  valid " + "  ".join(f"{k} {v:.4f}" for k, v in valid.items())
                    )
            if step == last or (t.checkpoint_every and step % t.checkpoint_every == 0):
                metrics.flush()
                save_checkpoint(
                    run.checkpoints,
                    step,
                    model=model,
                    optimizer=optimizer,
                    scheduler=scheduler,
                    architecture=architecture(config),
                    extra={"data_position": step, "epoch": step // epoch_size},
                    keep=t.keep_checkpoints,
                )
    progress.close()
    if step == t.steps and main:
        job.finish(run, parallel.on_cpu(model).eval(), log, quiet)
    return run


def _silent(_: str) -> None:
    pass


# Sentences each report translates; "I love you." is the seeds' running example (seed 000 Fig. 1).
SHOWCASE = ["I love you.", "I am cold.", "He is my brother.", "Where is the station?"]


def showcase(config: RunConfig, examples: Mapping[str, Sequence[Example]]) -> list[list[str]]:
    """Tokenised source sentences for the report: the seeds' examples on Tatoeba, the first test
    sentences elsewhere."""
    if config.data.corpus == "tatoeba":
        return [tokenize(s, "en") for s in SHOWCASE]
    return [list(e.source) for e in examples["test"][:4]]


def finish(
    run: Run,
    model: nn.Module,
    examples: Mapping[str, Sequence[Example]],
    *,
    log: Log = print,
    quiet: bool = False,
) -> dict[str, Any]:
    """Final evaluation on the test split, ``results.json``, and the report (HTML + PNGs)."""
    from attnkit.report import Alignment, save_heatmaps, write_report

    config = run.config
    started = time.perf_counter()
    results = evaluate_run(model, run.vocabularies, examples["test"], config, quiet=quiet)
    results["eval_seconds"] = round(time.perf_counter() - started, 1)
    train_seconds = sum(m.get("seconds", 0.0) for m in read_metrics(run.path))
    results["train_seconds"] = round(train_seconds, 1)
    alignments = [
        Alignment(source, target, weights)
        for source, (target, weights) in zip(
            showcase(config, examples),
            translate(
                model,
                run.vocabularies,
                showcase(config, examples),
                beam_size=config.decode.beam_size,
                max_length=config.decode.max_length,
            ),
            strict=True,
        )
    ]
    for a in alignments:  # the report shows words only: the end-of-sentence row is dropped
        if a.target:
            a.weights = a.weights[: len(a.target)]
        else:  # nothing but the end of the sentence was produced: show that row
            a.target = ["<eos>"]
    results["showcase"] = [
        {"source": a.source, "target": a.target, "weights": a.weights.tolist()} for a in alignments
    ]
    atomic_write(run.path / "results.json", json.dumps(results, indent=1))
    images = save_heatmaps(alignments, run.path / "heatmaps")
    summary = {
        "run": str(run.path),
        "model": describe_model(config),
        "data": f"{config.data.corpus}: {len(examples['train'])} training pairs",
        "steps": config.train.steps,
        "training time": f"{train_seconds:.0f} s",
        "test sentences": results["sentences"],
        "test BLEU": f"{results['bleu']:.2f}",
    }
    if "aer" in results:
        summary["test AER"] = f"{results['aer']:.3f}"
    write_report(
        run.path / "report.html",
        title=f"attnkit run {run.path.name}",
        summary=summary,
        alignments=alignments,
        metrics=read_metrics(run.path),
        images=images,
    )
    message = f"test BLEU {results['bleu']:.2f} on {results['sentences']} sentences"
    if "aer" in results:
        message += f", AER {results['aer']:.3f}"
    log(message)
    return results
