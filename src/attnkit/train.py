"""Training runs: data, model, the loop, checkpoints, exact resume, evaluation.

A run lives in a directory::

    runs/<name>-<timestamp>/
        config.yaml        the resolved configuration (defaults filled in)
        vocab.json         source and target vocabularies
        links.pharaoh      supervised attention: the aligner's links for the training pairs
        metrics.jsonl      one line per step ({"step", "loss", "nll", "lr", ...}) and per evaluation
        checkpoints/       step-XXXXXXXX.safetensors + .json (see attnkit.checkpoint)
        results.json       final evaluation (BLEU, AER, ...)

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from attnkit.checkpoint import (
    CheckpointError,
    atomic_write,
    latest_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from attnkit.config import (
    ConfigError,
    RunConfig,
    architecture,
    differing_keys,
    to_yaml,
    validate,
)
from attnkit.data.batching import Batch, Batches, encode
from attnkit.data.corpus import Example
from attnkit.data.tokenize import detokenize, tokenize
from attnkit.data.vocabulary import Vocabulary
from attnkit.data_parallel import DataParallel
from attnkit.evaluate.alignment import corpus_alignment_error_rate, links_from_weights
from attnkit.evaluate.metrics import bleu
from attnkit.evaluate.supervised import supervised_attention_loss

Log = Callable[[str], None]


# --------------------------------------------------------------------------- data and model


def load_examples(config: RunConfig) -> dict[str, list[Example]]:
    """The corpus of ``config.data``, split into "train", "valid" and "test"."""
    data = config.data
    if data.corpus == "tatoeba":
        from attnkit.data.tatoeba import load_tatoeba

        return load_tatoeba(max_length=data.max_length, max_pairs=data.max_pairs)
    from attnkit.data.hansards import load_hansards

    root = Path(data.root or "")
    if not root.is_dir():
        raise ConfigError(f"data.root: no such directory {str(root)!r}")
    return load_hansards(root, max_length=data.max_length, max_pairs=data.max_pairs)


@dataclass
class Vocabularies:
    source: Vocabulary
    target: Vocabulary

    @classmethod
    def build(cls, examples: Sequence[Example], config: RunConfig) -> Vocabularies:
        d = config.data
        return cls(
            Vocabulary.build((e.source for e in examples), d.min_freq, d.max_vocab),
            Vocabulary.build((e.target for e in examples), d.min_freq, d.max_vocab),
        )

    def to_json(self) -> str:
        return json.dumps({"source": self.source.to_dict(), "target": self.target.to_dict()})

    @classmethod
    def read(cls, path: Path) -> Vocabularies:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(Vocabulary.from_dict(raw["source"]), Vocabulary.from_dict(raw["target"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"{path}: unreadable vocabulary ({error})") from None


def build_model(config: RunConfig, vocabularies: Vocabularies) -> nn.Module:
    """The model of ``config.model`` for these vocabularies (initialised from the global RNG)."""
    m = config.model
    sizes = (len(vocabularies.source), len(vocabularies.target))
    if m.kind == "rnn":
        from attnkit.models import RNNSeq2Seq

        return RNNSeq2Seq(
            *sizes,
            style=m.style,
            score=m.score,
            align=m.align,
            embed_dim=m.embed_dim,
            hidden_dim=m.hidden_dim,
            num_layers=m.num_layers,
            dropout=m.dropout,
            window=m.window,
            input_feeding=m.input_feeding,
            max_source_length=m.max_source_length,
        )
    from attnkit.models import TransformerSeq2Seq

    return TransformerSeq2Seq(
        *sizes,
        d_model=m.d_model,
        nhead=m.nhead,
        num_layers=m.num_layers,
        dim_feedforward=m.dim_feedforward,
        dropout=m.dropout,
        max_length=m.max_length,
    )


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


# --------------------------------------------------------------------------- the run directory


class Run:
    """A run directory: its configuration, vocabularies, model and checkpoints."""

    def __init__(self, path: Path, config: RunConfig, vocabularies: Vocabularies) -> None:
        self.path, self.config, self.vocabularies = path, config, vocabularies

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @classmethod
    def create(
        cls,
        config: RunConfig,
        vocabularies: Vocabularies,
        runs_dir: str | Path = "runs",
        path: str | Path | None = None,
    ) -> Run:
        if path is None:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
            path = Path(runs_dir) / f"{config.name}-{stamp}"
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise ConfigError(f"run directory {str(path)!r} exists and is not empty (use --resume)")
        path.mkdir(parents=True, exist_ok=True)
        atomic_write(path / "config.yaml", to_yaml(config))
        atomic_write(path / "vocab.json", vocabularies.to_json())
        return cls(path, config, vocabularies)

    @classmethod
    def open(cls, path: str | Path, config: RunConfig | None = None) -> Run:
        """Open an existing run; with ``config``, refuse it if the architecture differs."""
        import yaml

        path = Path(path)
        config_path = path / "config.yaml"
        if not config_path.is_file():
            raise CheckpointError(f"{config_path}: not a run directory (no config.yaml)")
        try:
            raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            raise CheckpointError(f"{config_path}: unreadable run configuration") from None
        saved = validate(raw, str(config_path))
        if config is not None:
            differences = differing_keys(architecture(saved), architecture(config))
            if differences:
                raise CheckpointError(
                    f"{config_path}: the given configuration's architecture differs: "
                    + "; ".join(differences)
                )
        return cls(path, config or saved, Vocabularies.read(path / "vocab.json"))

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.config.seed)
        return build_model(self.config, self.vocabularies)

    def load_model(self, checkpoint: str | Path | None = None) -> tuple[nn.Module, int]:
        """The model of the newest (or the given) checkpoint, in eval mode, and its step."""
        path = checkpoint or latest_checkpoint(self.checkpoints)
        if path is None:
            raise CheckpointError(f"{self.checkpoints}: no checkpoint in this run")
        loaded = read_checkpoint(path, architecture(self.config))
        model = build_model(self.config, self.vocabularies)
        loaded.restore(model)
        return model.eval(), loaded.step


# --------------------------------------------------------------------------- training


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


def _truncate_metrics(path: Path, step: int) -> None:
    """Keep metric lines up to ``step`` (a resumed run rewrites what came after its checkpoint)."""
    if not path.is_file():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["step"] <= step
    ]
    atomic_write(path, "".join(line + "\n" for line in kept))


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def train(
    config: RunConfig,
    *,
    runs_dir: str | Path = "runs",
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    stop_after: int | None = None,
    quiet: bool = False,
    log: Log = print,
) -> Run:
    """Train ``config`` in a new run directory (or continue the run ``resume`` bit-exactly).

    ``stop_after=k`` ends after step ``k`` with a checkpoint, as an interruption would (resume
    later). Returns the run; its final evaluation is in ``results.json`` once all steps ran.
    Under ``torchrun`` every process trains its share of each batch (see
    :mod:`attnkit.data_parallel`); rank 0 writes the run."""
    parallel = DataParallel.from_environment()
    try:
        return _train(config, parallel, runs_dir, run_dir, resume, stop_after, quiet, log)
    finally:
        parallel.close()


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
    examples = load_examples(config)
    if resume is not None:
        run = Run.open(resume, config)
        saved = Run.open(resume).config
        others = differing_keys(saved.model_dump(mode="json"), config.model_dump(mode="json"))
        if others:
            log(f"resuming with changed settings: {'; '.join(others)}")
        run.config = config
    else:
        path = ""
        if main:
            vocabularies = Vocabularies.build(examples["train"], config)
            path = str(Run.create(config, vocabularies, runs_dir, run_dir).path)
        run = Run.open(parallel.share_text(path))  # the others wait for rank 0's directory
    train_examples = examples["train"]
    if config.data.supervision is not None:
        if main:
            train_examples = _alignment_targets(config, run, train_examples, log)
        parallel.total(torch.zeros(1))  # a barrier: rank 0 has written links.pharaoh
        if not main:
            train_examples = _alignment_targets(config, run, train_examples, log)
    vocab = run.vocabularies
    batches = Batches(
        encode(train_examples, vocab.source, vocab.target),
        config.train.batch_size,
        seed=config.seed,
    )
    valid = encode(examples["valid"], vocab.source, vocab.target)

    model = run.new_model()
    # fused: one kernel per step instead of ~10 passes over every parameter (6x faster on CPU)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate_factor(config))
    step = 0
    if resume is not None:
        path = latest_checkpoint(run.checkpoints)
        if path is not None:
            checkpoint = read_checkpoint(path, architecture(config))
            checkpoint.restore(model, optimizer, scheduler, rng=True)
            step = checkpoint.step
        if main:
            _truncate_metrics(run.metrics, step)
    else:
        torch.manual_seed(config.seed)  # dropout's stream starts from the seed too
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
            batch = parallel.shard(batches.batch(step))
            loss, parts = batch_loss(trained, batch, config, parallel)
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
                valid_loss = corpus_loss(model, valid, config)
                model.train()
                metrics.write(json.dumps({"step": step, "split": "valid", **valid_loss}) + "\n")
                if quiet:
                    log(f"step {step}  valid loss {valid_loss['loss']:.4f}")
            if step == last or (t.checkpoint_every and step % t.checkpoint_every == 0):
                metrics.flush()
                save_checkpoint(
                    run.checkpoints,
                    step,
                    model=model,
                    optimizer=optimizer,
                    scheduler=scheduler,
                    architecture=architecture(config),
                    extra={"data_position": step, "epoch": step // len(batches)},
                    keep=t.keep_checkpoints,
                )
    progress.close()
    if step == t.steps and main:
        finish(run, model.eval(), examples, log=log, quiet=quiet)
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


def describe_model(config: RunConfig) -> str:
    m = config.model
    if m.kind == "rnn":
        return f"{m.style} GRU encoder-decoder, {m.score} score, {m.align} alignment"
    return f"Transformer encoder-decoder, {m.num_layers} layers, {m.nhead} heads"


# --------------------------------------------------------------------------- evaluation


def _batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def corpus_loss(model: nn.Module, encoded: Sequence[Any], config: RunConfig) -> dict[str, float]:
    """Teacher-forced token-level cross-entropy (and perplexity) over ``encoded`` examples."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in Batches(encoded, config.train.batch_size, seed=0, shuffle=False):
            out = model(batch.source, batch.source_lengths, batch.target_in)
            total += float(
                F.cross_entropy(
                    out.logits.flatten(0, 1),
                    batch.target_out.flatten(),
                    ignore_index=0,
                    reduction="sum",
                )
            )
            tokens += int((batch.target_out != 0).sum())
    loss = total / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def translate(
    model: nn.Module,
    vocabularies: Vocabularies,
    sentences: Sequence[Sequence[str]],
    *,
    beam_size: int = 1,
    max_length: int = 50,
    batch_size: int = 64,
) -> list[tuple[list[str], Tensor]]:
    """Translate tokenised sentences: ``(target tokens, weights [len(target) + 1, len(source)])``
    (the last row is the attention of the end-of-sentence token)."""
    results = []
    model.eval()
    with torch.no_grad():
        for chunk in _batched(sentences, batch_size):
            ids = [vocabularies.source.encode(list(s)) for s in chunk]
            lengths = torch.tensor([len(x) for x in ids])
            source = torch.zeros(len(ids), max(1, int(lengths.max())), dtype=torch.long)
            for row, x in enumerate(ids):
                source[row, : len(x)] = torch.tensor(x, dtype=torch.long)
            for hyp, s_len in zip(
                model.translate(source, lengths, beam_size=beam_size, max_length=max_length),
                lengths.tolist(),
                strict=True,
            ):
                tokens = vocabularies.target.decode(hyp.tokens)
                results.append((tokens, hyp.weights[: len(tokens) + 1, :s_len]))
    return results


def forced_alignment(
    model: nn.Module, vocabularies: Vocabularies, examples: Sequence[Example], batch_size: int = 64
) -> list[Tensor]:
    """Attention weights ``[len(target), len(source)]`` when the model is fed the reference
    translation (forced decoding), one per example — what AER evaluates (Luong et al. 2015)."""
    encoded = encode(examples, vocabularies.source, vocabularies.target)
    weights = []
    model.eval()
    with torch.no_grad():
        for batch in Batches(encoded, batch_size, seed=0, shuffle=False):
            out = model(batch.source, batch.source_lengths, batch.target_in)
            target_lengths = (batch.target_out != 0).sum(1) - 1  # without the EOS row
            for row in range(out.weights.shape[0]):
                t, s = int(target_lengths[row]), int(batch.source_lengths[row])
                weights.append(out.weights[row, :t, :s])
    return weights


def evaluate_run(
    model: nn.Module,
    vocabularies: Vocabularies,
    examples: Sequence[Example],
    config: RunConfig,
    *,
    beam_size: int | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """BLEU of the translations, teacher-forced loss, and — when the examples carry gold links —
    the alignment error rate of the attention weights (argmax source word per target word)."""
    limit = config.decode.max_eval_sentences
    examples = list(examples[:limit] if limit else examples)
    beam = beam_size or config.decode.beam_size
    results: dict[str, Any] = {"sentences": len(examples), "beam_size": beam}
    results.update(
        corpus_loss(model, encode(examples, vocabularies.source, vocabularies.target), config)
    )
    hypotheses = []
    for chunk in tqdm(list(_batched(examples, 64)), desc="translating", disable=quiet):
        for tokens, _ in translate(
            model,
            vocabularies,
            [e.source for e in chunk],
            beam_size=beam,
            max_length=config.decode.max_length,
        ):
            hypotheses.append(detokenize(tokens, "fr"))
    references = [detokenize(list(e.target), "fr") for e in examples]
    results["bleu"] = bleu(hypotheses, references)
    if examples and all(e.sure is not None for e in examples):
        weights = forced_alignment(model, vocabularies, examples)
        predicted = [links_from_weights(w) for w in weights]
        results["aer"] = corpus_alignment_error_rate(
            predicted, [e.sure for e in examples], [e.possible for e in examples]
        )
    results["samples"] = [
        {"source": detokenize(list(e.source), "en"), "reference": r, "hypothesis": h}
        for e, r, h in list(zip(examples, references, hypotheses, strict=True))[:5]
    ]
    return results


def tokenize_source(sentence: str) -> list[str]:
    return tokenize(sentence, "en")
