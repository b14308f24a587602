"""Faithfulness of token-importance maps (ERASER, DeYoung et al. 2020) on SST-2: every map of
:data:`FAITHFULNESS_METHODS` scored by AOPC comprehensiveness and sufficiency
(:func:`attnkit.evaluate.aopc`, fractions 1, 5, 10, 20, 50 %) for the BiLSTM of the Jain &
Wallace experiment and for all-MiniLM-L6-v2 fine-tuned on SST-2, with the seconds each map took.

Shapes: importance maps ``[B, N]`` over a batch's tokens, per-sentence scores ``[B]``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attnkit.explanation.data import load_corpus, sst2_sentences
from attnkit.explanation.minilm import FineTuning, finetune_minilm, load_minilm
from attnkit.explanation.runs import Options, Store
from attnkit.explanation.subjects import (
    FAITHFULNESS_METHODS,
    BiLSTMSubject,
    FaithfulnessSubject,
    MiniLMSubject,
)
from attnkit.explanation.training import Setting, train


def faithfulness_table_rows(
    subject: FaithfulnessSubject,
    sentences: Sequence[Sequence[str]],
    *,
    batch_size: int,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """ERASER's AOPC comprehensiveness and sufficiency (fractions 1, 5, 10, 20, 50 %) of every
    map of :data:`FAITHFULNESS_METHODS` on ``sentences``, with the seconds each map took to
    compute (the scoring's forward passes excluded). ``random`` draws uniform scores (seeded).

    Returns one row per method: ``{"method", "comprehensiveness", "sufficiency", "seconds",
    "sentences"}``, or ``{"method", "not_applicable": why}``.
    """
    from tqdm import tqdm

    from attnkit.evaluate import aopc

    applicable = [m for m in FAITHFULNESS_METHODS if m not in subject.not_applicable]
    scores: dict[str, dict[str, list[float]]] = {
        m: {"comprehensiveness": [], "sufficiency": []} for m in applicable
    }
    seconds = dict.fromkeys(applicable, 0.0)
    generator = torch.Generator().manual_seed(seed)
    total = math.ceil(len(sentences) / batch_size)
    for batch in tqdm(
        subject.batches(sentences, batch_size),
        total=total,
        desc=f"faithfulness, {subject.name}",
        disable=not progress,
    ):
        for method in applicable:
            started = time.perf_counter()
            if method == "random":
                importance = torch.rand(batch.ids.shape, generator=generator)
            else:
                importance = subject.importance(method, batch)
            seconds[method] += time.perf_counter() - started
            result = aopc(
                subject.model,
                batch.inputs,
                importance.detach().double(),
                replacement_id=subject.replacement_id,
                candidates=batch.candidates,
                target=batch.predicted,
            )
            scores[method]["comprehensiveness"].extend(result.comprehensiveness.tolist())
            scores[method]["sufficiency"].extend(result.sufficiency.tolist())
    rows = []
    for method in FAITHFULNESS_METHODS:
        if method in subject.not_applicable:
            rows.append({"method": method, "not_applicable": subject.not_applicable[method]})
            continue
        comp = np.asarray(scores[method]["comprehensiveness"])
        suff = np.asarray(scores[method]["sufficiency"])
        rows.append(
            {
                "method": method,
                "comprehensiveness": float(comp.mean()),
                "comprehensiveness_se": float(comp.std() / math.sqrt(max(len(comp), 1))),
                "sufficiency": float(suff.mean()),
                "sufficiency_se": float(suff.std() / math.sqrt(max(len(suff), 1))),
                "seconds": seconds[method],
                "sentences": len(comp),
            }
        )
    return rows


def _faithfulness_settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "setting": Setting(hidden_dim=16, attention_dim=16, epochs=1, train_limit=200),
            "recipe": FineTuning(
                epochs=1, batch_size=8, train_limit=16, steps_limit=2, eval_limit=16
            ),
            "sentences": 2,
            "batch_size": 2,
            "ig_steps": 4,
        }
    return {
        "setting": Setting(),
        "recipe": FineTuning(),
        "sentences": 200,
        "batch_size": 20,
        "ig_steps": 16,
    }


def run_faithfulness(options: Options, models: Sequence[str], sentences: int | None) -> dict:
    """The faithfulness table on a seeded sample of SST-2 test sentences, for the BiLSTM of the
    Jain & Wallace experiment (trained if absent) and for all-MiniLM-L6-v2 fine-tuned on SST-2
    (fine-tuned if absent). Each model's rows are saved and reused."""
    plan = _faithfulness_settings(options.quick)
    count = sentences if sentences is not None else plan["sentences"]
    store = Store(options.runs / "explanation" / "faithfulness")
    test_texts, _ = sst2_sentences(options.data, "test")
    order = torch.randperm(
        len(test_texts), generator=torch.Generator().manual_seed(options.seed)
    ).tolist()
    chosen = [test_texts[i] for i in sorted(order[: min(count, len(test_texts))])]
    out: dict[str, Any] = {"sentences": len(chosen), "models": {}}
    for kind in models:
        key = f"{kind}-seed{options.seed}-n{len(chosen)}"
        result = store.result(key)
        if result is None:
            if kind == "bilstm":
                corpus = load_corpus("sst", options.data, options.seed)
                setting: Setting = plan["setting"]
                name = f"sst-lstm-seed{options.seed}"
                jw_store = Store(options.runs / "explanation" / "jain-wallace")
                model, metrics = jw_store.model(
                    name,
                    corpus,
                    setting,
                    lambda c=corpus, s=setting: train(
                        c, s, options.seed, log=options.log, progress=options.progress
                    ),
                )
                subject: FaithfulnessSubject = BiLSTMSubject(
                    model, corpus.vocabulary, plan["ig_steps"]
                )
                trained = {"test_accuracy": metrics["test_accuracy"]}
            elif kind == "minilm":
                directory = store.root / f"minilm-sst2-seed{options.seed}"
                info_file = directory / "finetuning.json"
                if info_file.is_file():
                    trained = json.loads(info_file.read_text())
                else:
                    options.log(f"fine-tuning all-MiniLM-L6-v2 on SST-2 ({plan['recipe']})")
                    trained = finetune_minilm(
                        options.data,
                        directory,
                        plan["recipe"],
                        options.seed,
                        options.log,
                        progress=options.progress,
                    )
                model, tokenizer = load_minilm(directory)
                subject = MiniLMSubject(
                    model, tokenizer, plan["ig_steps"], plan["recipe"].max_length
                )
            else:
                raise ValueError(f"models must be 'bilstm' or 'minilm', got {kind!r}")
            rows = faithfulness_table_rows(
                subject,
                chosen,
                batch_size=plan["batch_size"],
                seed=options.seed,
                progress=options.progress,
            )
            result = {"model": subject.name, "trained": trained, "rows": rows}
            store.save_result(key, result)
        out["models"][kind] = result
    options.log(faithfulness_table(out))
    return out


def faithfulness_table(out: dict[str, Any]) -> str:
    """Markdown: per model, the maps ranked by AOPC comprehensiveness (higher is better), with
    sufficiency (lower is better), their rank, and the seconds per map."""
    lines = []
    for result in out["models"].values():
        rows = result["rows"]
        scored = [r for r in rows if "not_applicable" not in r]
        by_suff = sorted(scored, key=lambda r: r["sufficiency"])
        suff_rank = {r["method"]: i + 1 for i, r in enumerate(by_suff)}
        lines += [
            f"**{result['model']}** (test accuracy {result['trained']['test_accuracy']:.3f}; "
            f"{out['sentences']} SST-2 test sentences)",
            "",
            "| rank | map | AOPC comprehensiveness ↑ | AOPC sufficiency ↓ (rank) | seconds |",
            "|---|---|---|---|---|",
        ]
        for i, r in enumerate(sorted(scored, key=lambda r: -r["comprehensiveness"])):
            lines.append(
                f"| {i + 1} | {r['method']} | {r['comprehensiveness']:.3f} "
                f"± {r['comprehensiveness_se']:.3f} | {r['sufficiency']:.3f} "
                f"± {r['sufficiency_se']:.3f} ({suff_rank[r['method']]}) | {r['seconds']:.1f} |"
            )
        for r in rows:
            if "not_applicable" in r:
                lines.append(f"| – | {r['method']} | not applicable: {r['not_applicable']} | | |")
        lines.append("")
    return "\n".join(lines)
