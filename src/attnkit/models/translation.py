"""Translating with any encoder–decoder model: search (greedy or beam), then a teacher-forced pass.

The search runs on the model's step function and caches (``attnkit.layers.decoding``). The
returned weights and scores come from one teacher-forced ``forward`` over ``BOS + tokens``, so a
translation's attention is exactly what ``forward`` shows for that output, and greedy and beam
hypotheses are scored by the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from attnkit.layers.decoding import beam_search, greedy
from attnkit.models.outputs import Seq2SeqOutput, Translation


def check_translate_arguments(beam_size: int, max_length: int, length_penalty: float) -> None:
    """Raise ``ValueError``/``TypeError`` for a bad ``translate`` call."""
    for name, value in (("beam_size", beam_size), ("max_length", max_length)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
        raise TypeError(f"length_penalty must be a float, got {type(length_penalty).__name__}")


def search(
    step: Callable[[Tensor, Any], Tensor],
    caches: Sequence[Any] | None,
    rows: int,
    *,
    beam_size: int,
    max_length: int,
    bos_id: int,
    eos_id: int,
    length_penalty: float,
    device: torch.device,
) -> list[tuple[list[int], bool]]:
    """Per sentence, ``(tokens without BOS/EOS, whether EOS ended it)``.

    ``caches`` hold ``rows`` decoder states for greedy search, ``rows · beam_size`` (each
    sentence's beams consecutive) for beam search.
    """
    prompt = torch.full((rows, 1), bos_id, dtype=torch.long, device=device)
    if beam_size == 1:
        out = greedy(step, prompt, max_length, caches, eos_token_id=eos_id)
    else:
        out, _ = beam_search(
            step,
            prompt,
            max_length,
            beam_size,
            caches,
            length_penalty=length_penalty,
            eos_token_id=eos_id,
        )
    hypotheses = []
    for row in out.tolist():
        if eos_id in row:
            hypotheses.append((row[: row.index(eos_id)], True))
        else:
            hypotheses.append((row, False))
    return hypotheses


def score_translations(
    model: Callable[[Tensor, Tensor, Tensor], Seq2SeqOutput],
    source: Tensor,
    source_lengths: Tensor,
    hypotheses: list[tuple[list[int], bool]],
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    length_penalty: float,
) -> list[Translation]:
    """Weights and scores of ``hypotheses`` from a teacher-forced pass of ``model``."""
    length = max(len(tokens) for tokens, _ in hypotheses) + 1
    target_in = torch.full((len(hypotheses), length), pad_id, dtype=torch.long)
    for i, (tokens, _) in enumerate(hypotheses):
        target_in[i, : len(tokens) + 1] = torch.tensor([bos_id, *tokens], dtype=torch.long)
    out = model(source, source_lengths, target_in.to(source.device))
    # At least float32 (half logits would round the scores), float64 kept for exact tests.
    log_probs = out.logits.to(torch.promote_types(out.logits.dtype, torch.float32)).log_softmax(-1)
    translations = []
    for i, (tokens, ended) in enumerate(hypotheses):
        targets = [*tokens, eos_id] if ended else tokens
        positions = torch.arange(len(targets))
        log_p = float(log_probs[i, positions, torch.tensor(targets, dtype=torch.long)].sum())
        score = log_p / max(len(targets), 1) ** length_penalty
        weights = out.weights[i, : len(tokens) + 1, : int(source_lengths[i])]
        translations.append(Translation(tokens=list(tokens), weights=weights, score=score))
    return translations


class Seq2SeqModel(Protocol):
    """What :func:`search_and_score` needs of a model: its special tokens and a teacher-forced
    ``model(source, source_lengths, target_in) -> Seq2SeqOutput``."""

    bos_id: int
    eos_id: int
    pad_id: int

    def __call__(self, source: Tensor, source_lengths: Tensor, target_in: Tensor) -> Any: ...


def search_and_score(
    model: Seq2SeqModel,
    source: Tensor,
    source_lengths: Tensor,
    step: Callable[[Tensor, Any], Tensor],
    caches: Sequence[Any] | None,
    *,
    beam_size: int,
    max_length: int,
    length_penalty: float,
) -> list[Translation]:
    """The part of ``translate`` every encoder–decoder shares once its memory is encoded (and
    repeated per beam): greedy or beam :func:`search` with the model's ``step`` and ``caches``,
    then :func:`score_translations` by one teacher-forced pass."""
    hypotheses = search(
        step,
        caches,
        source.shape[0],
        beam_size=beam_size,
        max_length=max_length,
        bos_id=model.bos_id,
        eos_id=model.eos_id,
        length_penalty=length_penalty,
        device=source.device,
    )
    return score_translations(
        model,
        source,
        source_lengths,
        hypotheses,
        bos_id=model.bos_id,
        eos_id=model.eos_id,
        pad_id=model.pad_id,
        length_penalty=length_penalty,
    )


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Put ``module`` in eval mode (no dropout) for a ``with`` block, then restore its mode."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)
