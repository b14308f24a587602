"""Wiegreffe & Pinter (2019), "Attention is not not Explanation", reproduced on SST-2 with the
BiLSTM: accuracy and F1 of the trained-attention model, of the same model with uniform weights
at test time, and of models trained with frozen uniform and frozen random attention; and their
model-consistent adversarial training: a new model trained to keep the base model's predictions
while moving its attention away, ``loss = TVD(ŷ_adv, ŷ_base) − λ·KL(α_adv ‖ α_base)``, for a
sweep of ``λ``, giving the test TVD/JSD trade-off (a table, and a figure ``tradeoff.png`` in the
store). ``λ = 0`` calibrates the sweep: a model trained only to agree with the base model's
predictions, whose attention is free to settle anywhere.

Shapes: probabilities ``[B, C]``, attention ``[B, L]`` (zero at padding).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.evaluate.adversarial import jensen_shannon, total_variation
from attnkit.evaluate.metrics import accuracy, macro_f1
from attnkit.explanation.data import Batch, Split, load_corpus
from attnkit.explanation.runs import Options, Store, new_figure, save_figure
from attnkit.explanation.training import Objective, Setting, evaluate, predict, train
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier


def kl_divergence(p: Tensor, q: Tensor, eps: float = 1e-10) -> Tensor:
    """``KL(p ‖ q) = Σ p log(p / q)`` per row ``[..., N] → [...]``."""
    # clamped logs: padded keys have p = q = 0 and must give a zero term with a finite gradient
    return (p * (p.clamp_min(eps).log() - q.clamp_min(eps).log())).sum(-1)


def adversarial_objective(
    base_probabilities: Tensor, base_attention: Tensor, lam: float
) -> Objective:
    """Wiegreffe & Pinter's model-consistent adversary (their §4): for each training example,
    ``TVD(ŷ_adv, ŷ_base) − λ·KL(α_adv ‖ α_base)``, averaged over the batch; the base model's
    predictions and attention (``[B, C]``, ``[B, L_max]``) are fixed targets."""

    def objective(model: AdditiveAttentionClassifier, batch: Batch, indices: list[int]) -> Tensor:
        states, query = model.encode(model.embed(batch.tokens), batch.mask, batch.question)
        logits, alpha = model.decode(states, batch.mask, query, return_attention=True)
        length = batch.tokens.shape[1]
        target_alpha = base_attention[indices, :length]
        tvd = total_variation(logits.softmax(-1), base_probabilities[indices])
        kl = kl_divergence(alpha, target_alpha)
        return (tvd - lam * kl).mean()

    return objective


def base_targets(model: AdditiveAttentionClassifier, split: Split) -> tuple[Tensor, Tensor]:
    """The base model's probabilities ``[B, C]`` and attention ``[B, L_max]`` on ``split``."""
    probabilities, attention = predict(model, split)
    padded = torch.zeros(len(split), max(len(a) for a in attention))
    for i, a in enumerate(attention):
        padded[i, : len(a)] = a
    return probabilities, padded


def consistency(
    adversary: AdditiveAttentionClassifier, base: AdditiveAttentionClassifier, split: Split
) -> dict[str, float]:
    """Mean ``TVD(ŷ_adv, ŷ_base)`` and mean ``JSD(α_adv, α_base)`` over ``split``, and the
    adversary's accuracy and F1."""
    p_adv, a_adv = predict(adversary, split)
    p_base, a_base = predict(base, split)
    jsd = torch.stack([jensen_shannon(x, y) for x, y in zip(a_adv, a_base, strict=True)])
    target = torch.tensor(split.labels)
    return {
        "tvd": float(total_variation(p_adv, p_base).mean()),
        "jsd": float(jsd.mean()),
        "accuracy": accuracy(p_adv.argmax(-1), target),
        "f1": macro_f1(p_adv.argmax(-1), target),
    }


def _wp_settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "setting": Setting(hidden_dim=16, attention_dim=16, epochs=1, train_limit=200),
            "lambdas": (0.1,),
        }
    return {
        "setting": Setting(),
        "lambdas": (0.0, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.1, 1.0),
    }


def run_wiegreffe_pinter(options: Options) -> dict[str, Any]:
    """Baselines (test-time uniform, frozen uniform, frozen random) and the λ sweep of the
    model-consistent adversary on SST-2 with the BiLSTM; prints the tables."""
    plan = _wp_settings(options.quick)
    setting: Setting = plan["setting"]
    corpus = load_corpus("sst", options.data, options.seed)
    # the base model is Jain & Wallace's SST-2 BiLSTM: the same run directory and name
    jw_store = Store(options.runs / "explanation" / "jain-wallace")
    store = Store(options.runs / "explanation" / "wiegreffe-pinter")
    seed = options.seed
    key = f"sst-lstm-seed{seed}"
    options.log(f"{key}: base model")
    base, base_metrics = jw_store.model(
        key,
        corpus,
        setting,
        lambda: train(corpus, setting, seed, log=options.log, progress=options.progress),
    )
    baselines = {"trained": base_metrics}
    uniform_at_test = store.result(f"{key}.uniform-at-test")
    if uniform_at_test is None:
        uniform_at_test = {
            f"{split}_{k}": v
            for split in ("valid", "test")
            for k, v in evaluate(base, getattr(corpus, split), "uniform").items()
        }
        store.save_result(f"{key}.uniform-at-test", uniform_at_test)
    baselines["uniform at test"] = uniform_at_test
    for mode in ("uniform", "random"):
        options.log(f"{key}: trained with frozen {mode} attention")
        _, metrics = store.model(
            f"{key}-frozen-{mode}",
            corpus,
            setting,
            lambda m=mode: train(
                corpus, setting, seed, mode=m, log=options.log, progress=options.progress
            ),
        )
        baselines[f"frozen {mode}"] = metrics
    train_split = corpus.train
    if setting.train_limit is not None:
        train_split = train_split.subset(range(min(setting.train_limit, len(train_split))))
    probabilities, attention = base_targets(base, train_split)
    sweep = []
    for lam in plan["lambdas"]:
        name = f"{key}-adversary-lambda{lam:g}"
        options.log(f"{name}: model-consistent adversarial training")
        adversary, _ = store.model(
            name,
            corpus,
            setting,
            lambda lam=lam: train(
                corpus,
                setting,
                seed,
                objective=adversarial_objective(probabilities, attention, lam),
                select="last",
                log=options.log,
                progress=options.progress,
            ),
        )
        result = store.result(f"{name}.consistency")
        if result is None:
            result = consistency(adversary, base, corpus.test)
            store.save_result(f"{name}.consistency", result)
        sweep.append({"lambda": lam, **result})
    out = {"baselines": baselines, "adversarial": sweep}
    options.log(wiegreffe_pinter_tables(out))
    figure = plot_tradeoff(sweep, store.root / "tradeoff.png")
    options.log(f"trade-off curve: {figure}")
    return out


def plot_tradeoff(sweep: list[dict[str, Any]], path: Path) -> Path:
    """The test trade-off of the adversaries: output change TVD(ŷ_adv, ŷ_base) against attention
    distance JSD(α_adv, α_base), one point per ``λ`` (labelled), joined in order of ``λ``, with
    the JSD's ceiling ln 2. Written atomically to ``path`` (PNG)."""
    from matplotlib import colormaps

    points = sorted(sweep, key=lambda r: r["lambda"])
    fig = new_figure(5.6, 3.6)
    ax = fig.add_subplot()
    ax.plot([r["tvd"] for r in points], [r["jsd"] for r in points], "-", color="lightgrey")
    colours = colormaps["viridis"]
    for i, r in enumerate(points):  # a legend, not labels: nearby points would overlap
        colour = colours(i / max(len(points) - 1, 1))
        ax.plot(r["tvd"], r["jsd"], "o", color=colour, label=f"λ = {r['lambda']:g}")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    ax.axhline(math.log(2), color="grey", linestyle="--", linewidth=0.8)
    ax.text(0.0, math.log(2), " ln 2: the JSD's ceiling", va="bottom", fontsize=7, color="grey")
    ax.set_xlabel("test TVD(ŷ_adv, ŷ_base): output change")
    ax.set_ylabel("test JSD(α_adv, α_base): attention change")
    ax.set_xlim(left=0.0)
    ax.set_ylim(0.0, 0.75)
    ax.set_title("Model-consistent adversaries, SST-2 BiLSTM", fontsize=9)
    return save_figure(fig, path, dpi=120)


def wiegreffe_pinter_tables(out: dict[str, Any]) -> str:
    """Markdown tables of :func:`run_wiegreffe_pinter`'s result."""
    lines = [
        "| SST-2, BiLSTM | valid acc | test acc | test F1 |",
        "|---|---|---|---|",
    ]
    for name, m in out["baselines"].items():
        lines.append(
            f"| {name} | {m['valid_accuracy']:.3f} | {m['test_accuracy']:.3f} "
            f"| {m['test_f1']:.3f} |"
        )
    lines += [
        "",
        "| λ | test TVD(ŷ_adv, ŷ_base) | test JSD(α_adv, α_base) | adversary test acc | F1 |",
        "|---|---|---|---|---|",
    ]
    for r in out["adversarial"]:
        lines.append(
            f"| {r['lambda']:g} | {r['tvd']:.3f} | {r['jsd']:.3f} | {r['accuracy']:.3f} "
            f"| {r['f1']:.3f} |"
        )
    return "\n".join(lines)
