"""Evaluating translation models: BLEU of their translations, teacher-forced loss, and the
alignment error rate of their attention under forced decoding (survey §4.1 extrinsic, §4.2
intrinsic evaluation; Luong et al. 2015 evaluate attention with AER this way).

Pure functions of a model, its vocabularies and examples; a run's evaluation with its
configuration's settings is :func:`attnkit.tasks.translation.evaluate_run`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from attnkit.data.batching import Batches, encode
from attnkit.data.corpus import Example, Vocabularies
from attnkit.data.tokenize import detokenize
from attnkit.evaluate.alignment import corpus_alignment_error_rate, links_from_weights
from attnkit.evaluate.metrics import bleu


def _batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def corpus_loss(model: nn.Module, encoded: Sequence[Any], batch_size: int = 64) -> dict[str, float]:
    """Teacher-forced token-level cross-entropy (and perplexity) over ``encoded`` examples
    (:func:`attnkit.data.batching.encode`), in batches of ``batch_size`` in order."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in Batches(encoded, batch_size, seed=0, shuffle=False):
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
    translation (forced decoding), one per example — what AER evaluates (Luong et al. 2015).
    A model with an alignment head (``Seq2SeqOutput.alignment``, Garg et al. 2019) gives that
    head's weights, otherwise its ``weights``."""
    encoded = encode(examples, vocabularies.source, vocabularies.target)
    weights = []
    model.eval()
    with torch.no_grad():
        for batch in Batches(encoded, batch_size, seed=0, shuffle=False):
            out = model(batch.source, batch.source_lengths, batch.target_in)
            attention = out.weights if out.alignment is None else out.alignment
            target_lengths = (batch.target_out != 0).sum(1) - 1  # without the EOS row
            for row in range(attention.shape[0]):
                t, s = int(target_lengths[row]), int(batch.source_lengths[row])
                weights.append(attention[row, :t, :s])
    return weights


def evaluate_translations(
    model: nn.Module,
    vocabularies: Vocabularies,
    examples: Sequence[Example],
    *,
    beam_size: int = 1,
    max_length: int = 50,
    batch_size: int = 64,
    quiet: bool = True,
) -> dict[str, Any]:
    """BLEU of the translations, teacher-forced loss, and — when the examples carry gold links —
    the alignment error rate of the attention weights (argmax source word per target word).

    Args:
        model: a translation model (``model(source, lengths, target_in)`` and
            ``model.translate``, see :mod:`attnkit.models.translation`).
        vocabularies: the vocabularies the model was built for.
        examples: the evaluated pairs (all of them).
        beam_size, max_length: the search's.
        batch_size: of the teacher-forced loss.
        quiet: no progress bar.

    Returns:
        ``{"sentences", "beam_size", "loss", "perplexity", "bleu", ["aer"], "samples"}``
        (the first five translations with their references).
    """
    examples = list(examples)
    results: dict[str, Any] = {"sentences": len(examples), "beam_size": beam_size}
    results.update(
        corpus_loss(model, encode(examples, vocabularies.source, vocabularies.target), batch_size)
    )
    hypotheses = []
    for chunk in tqdm(list(_batched(examples, 64)), desc="translating", disable=quiet):
        for tokens, _ in translate(
            model,
            vocabularies,
            [e.source for e in chunk],
            beam_size=beam_size,
            max_length=max_length,
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
