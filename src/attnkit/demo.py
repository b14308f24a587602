"""``attnkit demo``: the main job on the embedded default configuration.

Trains an English→French GRU encoder–decoder with Bahdanau (additive) attention on the Tatoeba
pairs bundled in the package (``attnkit/data/tatoeba_en_fr.tsv.gz``, CC-BY 2.0 France, see
``attnkit/data/TATOEBA_LICENSE.md``), then prints the held-out BLEU and the attention's alignment
error rate on the 50 hand-aligned Tatoeba test sentences bundled in the package
(``attnkit/data/TATOEBA_GOLD.md``; forced decoding, argmax links of the attention at the step that
outputs each French word, :func:`attnkit.tasks.translation.tatoeba_gold_aer`), translates the
running example "I love you." and a few more sentences with their alignment matrices
(target words as rows, source words as columns; the classic figure links je to I, t' to you,
aime to love; the demo says which of those links its argmax reproduces), and writes ``report.html``
and PNG heatmaps into ``runs/demo-<timestamp>/``. The run's checkpoint serves ``attnkit eval``
and ``attnkit translate``.

The attention is *supervised* (survey §4.2, Liu et al. 2016): a model trained to translate
only puts its attention wherever it helps predict the next word, which need not be the aligned
word (docs/results.md measures this), so the loss adds a term pulling each attention row
towards the links of a statistical aligner (fast_align, both directions intersected) that the
demo fits on the training pairs first. The demo says so on screen and in its report, and trains
an *unsupervised twin* (the same configuration without that term, in ``RUN_DIR/unsupervised``)
whose matrices it shows beside the supervised ones.

The configuration is ``attnkit/demo.yaml`` (also ``configs/demo.yaml``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path

import torch

from attnkit.config import RunConfig, apply_overrides, parse_yaml, validate
from attnkit.data.tokenize import detokenize
from attnkit.report import Alignment, describe_model, format_matrix, write_report
from attnkit.run import read_metrics
from attnkit.train import train

Log = Callable[[str], None]

# The classic figure's links ("I love you." → "Je t'aime."): French word → English word.
SEED_LINKS = {"je": "i", "j'": "i", "vous": "you", "t'": "you", "te": "you", "aime": "love"}


def seed_links(source: Sequence[str], target: Sequence[str], weights: torch.Tensor) -> str:
    """Each target word's argmax source word, and how many of the classic figure's links
    (:data:`SEED_LINKS`: je–I, vous/t'–you, aime–love) that reproduces.

    Args:
        source, target: the tokens of the translation (columns, rows of ``weights``).
        weights: ``[len(target), len(source)]`` attention.

    Returns:
        e.g. ``"je → i, vous → you, aime → love, . → .  (seed Fig. 1's je–I, vous/t'–you,
        aime–love: 3 of 3)"``.

    Example::

        >>> seed_links(["i", "love", "you"], ["je", "aime"], torch.tensor([[0.1, 0.2, 0.7],
        ...                                                                  [0.0, 0.9, 0.1]]))
        "je → you, aime → love  (seed Fig. 1's je–I, vous/t'–you, aime–love: 1 of 2)"
    """
    if weights.shape != (len(target), len(source)):
        raise ValueError(
            f"weights must be [len(target), len(source)] = [{len(target)}, {len(source)}], "
            f"got {tuple(weights.shape)}"
        )
    best = [source[int(i)] for i in weights.argmax(-1)]
    pairs = ", ".join(f"{t} → {s}" for t, s in zip(target, best, strict=True))
    expected = [(t, s) for t, s in zip(target, best, strict=True) if t in SEED_LINKS]
    if not expected:
        return f"{pairs}  (the translation has none of je, vous/t', aime)"
    matched = sum(SEED_LINKS[t] == s for t, s in expected)
    return f"{pairs}  (seed Fig. 1's je–I, vous/t'–you, aime–love: {matched} of {len(expected)})"


def demo_config(overrides: Sequence[str] = ()) -> RunConfig:
    """The embedded default configuration, with ``key.path=value`` overrides."""
    raw = parse_yaml(
        files("attnkit").joinpath("demo.yaml").read_text(encoding="utf-8"), "demo.yaml"
    )
    return validate(apply_overrides(raw, overrides, "demo.yaml"), "demo.yaml")


def guided(config: RunConfig) -> bool:
    """Whether ``config`` trains supervised attention (a teacher's links in the loss)."""
    return config.data.supervision is not None and config.train.supervised_weight > 0


def teacher_name(config: RunConfig) -> str:
    """The teacher of supervised attention in words, e.g. ``"fast_align (IBM Model 2,
    variational Bayes α = 0.01), intersection of both directions"``."""
    data = config.data
    if data.supervision == "fast_align":
        name = "fast_align (reparameterized IBM Model 2"
        name += f", variational Bayes α = {data.aligner_alpha:g})" if data.aligner_alpha else ")"
    else:
        name = "IBM Model 1"
    if data.symmetrization:
        name += f", {data.symmetrization} of both directions"
    return name


def unsupervised_twin(config: RunConfig) -> RunConfig:
    """``config`` without supervised attention: the same model, data and seed trained on the
    translation loss alone, for two fifths of the steps (the demo's time budget of 5 minutes
    holds two trainings only so: 2,000 + 1,000 steps measured 5 min 6 s alone; its unsupervised
    attention pattern is set well before then, docs/results.md)."""
    data = config.data.model_copy(
        update={"supervision": None, "symmetrization": None, "aligner_alpha": None}
    )
    steps = max(1, config.train.steps * 2 // 5)
    t = config.train

    def within(every: int | None) -> int | None:
        return None if every is None else min(every, steps)

    train_ = t.model_copy(
        update={
            "supervised_weight": 0.0,
            "steps": steps,
            "warmup": min(t.warmup, steps - 1),
            "eval_every": within(t.eval_every),
            "checkpoint_every": within(t.checkpoint_every),
        }
    )
    return config.model_copy(
        update={"name": f"{config.name}-unsupervised", "data": data, "train": train_}
    )


def side_by_side(left: str, right: str, gap: int = 6) -> str:
    """Two blocks of text lines next to each other (the left one padded to its widest line)."""
    a, b = left.splitlines(), right.splitlines()
    width = max((len(line) for line in a), default=0)
    rows = max(len(a), len(b))
    a += [""] * (rows - len(a))
    b += [""] * (rows - len(b))
    return "\n".join(f"{x.ljust(width)}{' ' * gap}{y}".rstrip() for x, y in zip(a, b, strict=True))


def _alignments(results: dict) -> list[Alignment]:
    return [
        Alignment(
            shown["source"],
            shown["target"],
            torch.tensor(shown["weights"]).reshape(len(shown["target"]), len(shown["source"])),
        )
        for shown in results["showcase"]
    ]


def _block(title: str, alignment: Alignment) -> str:
    return f"{title}: {detokenize(alignment.target, 'fr')}\n{format_matrix(alignment)}"


def _scores(results: dict) -> str:
    gold = results["tatoeba_gold"]
    search = "greedy" if results["beam_size"] == 1 else f"beam {results['beam_size']}"
    return (
        f"held-out BLEU {results['bleu']:.2f} ({search}) on {results['sentences']} test sentences, "
        f"attention AER {gold['aer']:.3f} on the {gold['sentences']} hand-aligned Tatoeba test "
        "sentences (argmax)"
    )


def _i_love_you(results: dict) -> str | None:
    for a in _alignments(results):
        if a.source == ["i", "love", "you", "."]:
            return seed_links(a.source, a.target, a.weights)
    return None


def run(
    *,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    quiet: bool = False,
    log: Log = print,
) -> int:
    """Train, evaluate, show the alignments; the last line printed names the report.

    With supervised attention in the configuration (the default: ``data.supervision``), the
    demo first fits the teacher on the training pairs (inside the run's preparation), trains the
    guided model, then its :func:`unsupervised_twin` in ``RUN_DIR/unsupervised``, and shows
    both matrices of each sentence side by side; the run's ``report.html`` shows both too."""
    config = demo_config(overrides)
    log(
        f"attnkit demo: {config.model.style} attention, English→French on Tatoeba "  # type: ignore[union-attr]
        f"({config.train.steps} steps, {torch.get_num_threads()} threads)"
    )
    with_teacher = guided(config)
    if with_teacher:
        log(
            f"supervised attention: the loss adds {config.train.supervised_weight:g} × "
            f"{config.train.supervised_kind} of the attention against the links of "
            f"{teacher_name(config)}, fitted first on the training pairs (survey §4.2); an "
            f"unsupervised twin (the same model without that term, "
            f"{unsupervised_twin(config).train.steps} steps) trains after it, to compare"
        )
    run_ = train(config, runs_dir=runs_dir, quiet=quiet, log=log)
    results = json.loads((run_.path / "results.json").read_text(encoding="utf-8"))
    twin_results = None
    if with_teacher:
        log("")
        log(f"the unsupervised twin ({unsupervised_twin(config).train.steps} steps):")
        twin = train(
            unsupervised_twin(config), run_dir=run_.path / "unsupervised", quiet=quiet, log=log
        )
        twin_results = json.loads((twin.path / "results.json").read_text(encoding="utf-8"))
    show(results, twin_results, log)
    if twin_results is not None:
        write_joint_report(run_.path, config, results, twin.path, twin_results)
    log(f'try: attnkit translate {run_.path} "I am hungry."')
    log(f"report: {run_.path / 'report.html'}")
    return 0


def show(results: dict, twin_results: dict | None = None, log: Log = print) -> None:
    """Print a finished demo run's matrices (beside its unsupervised twin's, when given), its
    BLEU and AER, and the argmax links of "I love you."."""
    twins = _alignments(twin_results) if twin_results else []
    for i, a in enumerate(_alignments(results)):
        log("")
        log(f"{detokenize(a.source, 'en')}  →  {detokenize(a.target, 'fr')}")
        if i < len(twins):
            log(
                side_by_side(
                    _block("supervised attention", a), _block("unsupervised twin", twins[i])
                )
            )
        else:
            log(format_matrix(a))
    log("")
    if twin_results is None:
        log(_scores(results))
    else:
        log(f"supervised attention: {_scores(results)}")
        log(f"unsupervised twin:    {_scores(twin_results)}")
    links = _i_love_you(results)
    if links is not None:
        label = "by argmax" if twin_results is None else "supervised attention"
        log(f'"I love you." {label}: {links}')
    twin_links = _i_love_you(twin_results) if twin_results else None
    if twin_links is not None:
        log(f'"I love you." unsupervised twin: {twin_links}')


def write_joint_report(
    path: Path, config: RunConfig, results: dict, twin_path: Path, twin_results: dict
) -> Path:
    """``path / "report.html"``: the guided run's report with its teacher named and, after each
    of its matrices, the unsupervised twin's matrix of the same sentence."""
    guided_alignments, twin_alignments = _alignments(results), _alignments(twin_results)
    alignments, images = [], []
    guided_images = sorted((path / "heatmaps").glob("*.png"))
    twin_images = sorted((twin_path / "heatmaps").glob("*.png"))
    for i, a in enumerate(guided_alignments):
        alignments.append(a)
        images.append(guided_images[i])
        if i < len(twin_alignments):
            alignments.append(twin_alignments[i])
            images.append(twin_images[i])
    gold, twin_gold = results["tatoeba_gold"], twin_results["tatoeba_gold"]
    summary = {
        "run": str(path),
        "model": describe_model(config),
        "attention": f"supervised: {config.train.supervised_weight:g} × "
        f"{config.train.supervised_kind} against the links of {teacher_name(config)}, fitted by "
        "the demo on the training pairs (survey §4.2)",
        "steps": f"{config.train.steps} (unsupervised twin {unsupervised_twin(config).train.steps})",
        "training time": f"{results['train_seconds']:.0f} s (twin {twin_results['train_seconds']:.0f} s)",
        "test BLEU": f"{results['bleu']:.2f} (unsupervised twin {twin_results['bleu']:.2f})",
        f"attention AER, Tatoeba gold ({gold['sentences']} test sentences)": (
            f"{gold['aer']:.3f} (unsupervised twin {twin_gold['aer']:.3f})"
        ),
        "unsupervised twin": str(twin_path),
    }
    notes = (
        "This model's attention is supervised: its loss adds a term pulling each attention row "
        f"towards the links {teacher_name(config)} gives that French word. Each sentence is "
        "shown twice: first the supervised model, then its unsupervised twin (the same "
        f"configuration trained on the translation loss alone, for "
        f"{unsupervised_twin(config).train.steps} steps)."
    )
    return write_report(
        path / "report.html",
        title=f"attnkit demo {path.name}: supervised attention and its unsupervised twin",
        summary=summary,
        alignments=alignments,
        metrics=read_metrics(path),
        images=images,
        notes=notes,
    )
