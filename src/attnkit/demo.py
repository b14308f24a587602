"""``attnkit demo``: the main job on the embedded default configuration.

Trains an English→French GRU encoder–decoder with Bahdanau (additive) attention on the Tatoeba
pairs bundled in the package (``attnkit/data/tatoeba_en_fr.tsv.gz``, CC-BY 2.0 France, see
``attnkit/data/TATOEBA_LICENSE.md``) in a few minutes on two CPU cores, then prints the held-out
BLEU and the attention's alignment error rate on the 50 hand-aligned Tatoeba test sentences
bundled in the package (``attnkit/data/TATOEBA_GOLD.md``; forced decoding, argmax links of the
attention at the step that outputs each French word, :func:`attnkit.tasks.translation.tatoeba_gold_aer`),
translates the running example "I love you." and a few more sentences with their
alignment matrices (target words as rows, source words as columns; the classic figure links je to I,
t' on you, aime on love; the demo says which of those links its argmax reproduces), and writes ``report.html`` and PNG heatmaps into
``runs/demo-<timestamp>/``. The run's checkpoint serves ``attnkit eval`` and ``attnkit translate``.

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
from attnkit.report import Alignment, format_matrix
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


def run(
    *,
    runs_dir: str | Path = "runs",
    overrides: Sequence[str] = (),
    quiet: bool = False,
    log: Log = print,
) -> int:
    """Train, evaluate, show the alignments; the last line printed names the report."""
    config = demo_config(overrides)
    log(
        f"attnkit demo: {config.model.style} attention, English→French on Tatoeba "  # type: ignore[union-attr]
        f"({config.train.steps} steps, {torch.get_num_threads()} threads)"
    )
    run_ = train(config, runs_dir=runs_dir, quiet=quiet, log=log)
    results = json.loads((run_.path / "results.json").read_text(encoding="utf-8"))
    for shown in results["showcase"]:
        weights = torch.tensor(shown["weights"]).reshape(len(shown["target"]), len(shown["source"]))
        log("")
        log(f"{detokenize(shown['source'], 'en')}  →  {detokenize(shown['target'], 'fr')}")
        log(format_matrix(Alignment(shown["source"], shown["target"], weights)))
    log("")
    gold = results["tatoeba_gold"]
    log(
        f"held-out BLEU {results['bleu']:.2f} on {results['sentences']} test sentences, "
        f"attention AER {gold['aer']:.3f} on the {gold['sentences']} hand-aligned Tatoeba test "
        "sentences (argmax)"
    )
    for shown in results["showcase"]:
        if shown["source"] == ["i", "love", "you", "."]:
            weights = torch.tensor(shown["weights"]).reshape(
                len(shown["target"]), len(shown["source"])
            )
            log(f'"I love you." by argmax: {seed_links(shown["source"], shown["target"], weights)}')
    log(f'try: attnkit translate {run_.path} "I am hungry."')
    log(f"report: {run_.path / 'report.html'}")
    return 0
