"""Faithfulness of a token-importance map (ERASER: DeYoung et al. 2020, "ERASER: A Benchmark to
Evaluate Rationalized NLP Models", §4.2).

A map is faithful when the tokens it ranks highest are the ones the prediction rests on. With
``m(x)_y`` the model's probability of class ``y`` (the class it predicts on the whole input
``x``, unless ``target`` says otherwise) and ``r_k`` the ``k`` most important tokens:

    comprehensiveness(k) = m(x)_y - m(x \\ r_k)_y      (removing the rationale should hurt)
    sufficiency(k)       = m(x)_y - m(r_k)_y          (the rationale alone should suffice)
    AOPC                 = (1 / |F|) Σ_{f ∈ F} score(k_f)

for the bins ``F = {1, 5, 10, 20, 50} %`` of the paper: the area over the perturbation curve
(Samek et al. 2017) as ERASER's evaluation script averages it, the mean over the bins. Higher
comprehensiveness and lower sufficiency are more faithful.

How tokens are removed, exactly:

* the candidates are the tokens a map may select: ``candidates`` if given, else the positions
  where the input's ``attention_mask`` is 1, else every position (so padding is never selected;
  pass ``candidates`` to keep special tokens such as ``[CLS]`` and ``[SEP]`` out too);
* for a fraction ``f`` of an example with ``n`` candidates, ``r`` holds its ``k = ⌈f·n⌉``
  candidates of highest importance (ties: the earlier position first);
* a removed token is replaced by ``replacement_id`` (a pad or mask id, say): the sequence keeps
  its length, its ``attention_mask`` and every other input, so the model sees where a token was.
  ``x \\ r`` replaces the tokens of ``r``; ``r`` alone replaces every other candidate.

The probability is the softmax of the class scores the model returns (see
:mod:`attnkit.evaluate.classifier_outputs`; ``output=fn`` reads them from any output).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.evaluate.classifier_outputs import ScoresFrom, class_scores, run_model

#: the bins of ERASER (DeYoung et al. 2020, §4.2): 1, 5, 10, 20 and 50 % of the tokens
ERASER_FRACTIONS = (0.01, 0.05, 0.1, 0.2, 0.5)


@dataclass(frozen=True)
class AOPC:
    """Both ERASER AOPC scores of each example (what :func:`aopc` returns).

    Attributes:
        comprehensiveness: ``[B]``, the mean over the fractions of
            ``m(x)_y - m(x \\ r_k)_y`` (higher: more faithful).
        sufficiency: ``[B]``, the mean over the fractions of ``m(x)_y - m(r_k)_y`` (lower: more
            faithful).
        fractions: the fractions averaged over.

    Example::

        >>> scores = AOPC(torch.tensor([0.5, 0.25]), torch.tensor([0.0, 0.5]), (0.1, 0.5))
        >>> float(scores.comprehensiveness.mean()), float(scores.sufficiency.mean())
        (0.375, 0.25)
    """

    comprehensiveness: Tensor
    sufficiency: Tensor
    fractions: tuple[float, ...]


def comprehensiveness(
    model: nn.Module,
    inputs: Tensor | Mapping[str, Any],
    importance: Tensor,
    fractions: float | Sequence[float] = ERASER_FRACTIONS,
    *,
    replacement_id: int,
    candidates: Tensor | None = None,
    target: int | Tensor | None = None,
    output: ScoresFrom | None = None,
    token_key: str = "input_ids",
) -> Tensor:
    """ERASER's comprehensiveness ``m(x)_y - m(x \\ r_k)_y`` at each fraction (module docstring).

    Args:
        model: a classifier in eval mode.
        inputs: token ids ``[B, N]`` (called ``model(ids)``) or a mapping holding them under
            ``token_key`` (called ``model(**inputs)``, e.g. a tokenizer's output).
        importance: ``[B, N]``, one score per token (higher: more important), from any map.
        fractions: the fractions ``f`` of the candidates removed (each in ``(0, 1]``).
        replacement_id: the id that replaces a removed token (a pad or mask id).
        candidates: bool ``[B, N]``, the tokens that may be removed (default: the
            ``attention_mask`` of ``inputs``, else all).
        target: the class ``y`` (an int, or ``[B]``); default the class predicted on ``x``.
        output: ``fn(model_output) -> [B, C]`` logits (default: the output itself, its
            ``.logits``, or its first element).
        token_key: where a mapping holds the token ids.

    Returns:
        ``[B, F]`` float64: column ``f`` is the probability the prediction loses when the top
        ``⌈f·n⌉`` tokens are removed.

    Example::

        >>> bag = torch.nn.EmbeddingBag(5, 2, mode="sum").eval()  # logits: sum of token rows
        >>> with torch.no_grad():
        ...     _ = bag.weight.copy_(torch.tensor([[0, 0], [3, 0], [0, 1], [1, 0], [0, 0.]]))
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> importance = bag.weight[ids, 0] - bag.weight[ids, 1]  # exact for this model
        >>> comprehensiveness(bag, ids, importance, [0.3], replacement_id=0).shape
        torch.Size([1, 1])
    """
    return _scores(
        model, inputs, importance, fractions, replacement_id, candidates, target, output,
        token_key, keep_rationale=False,
    )  # fmt: skip


def sufficiency(
    model: nn.Module,
    inputs: Tensor | Mapping[str, Any],
    importance: Tensor,
    fractions: float | Sequence[float] = ERASER_FRACTIONS,
    *,
    replacement_id: int,
    candidates: Tensor | None = None,
    target: int | Tensor | None = None,
    output: ScoresFrom | None = None,
    token_key: str = "input_ids",
) -> Tensor:
    """ERASER's sufficiency ``m(x)_y - m(r_k)_y`` at each fraction (module docstring).

    Args:
        model: a classifier in eval mode.
        inputs: token ids ``[B, N]`` or a mapping holding them under ``token_key``.
        importance: ``[B, N]``, one score per token (higher: more important).
        fractions: the fractions ``f`` of the candidates kept (each in ``(0, 1]``).
        replacement_id: the id that replaces every candidate outside the rationale.
        candidates: bool ``[B, N]``, the tokens that may be removed (default: the
            ``attention_mask`` of ``inputs``, else all).
        target: the class ``y`` (an int, or ``[B]``); default the class predicted on ``x``.
        output: ``fn(model_output) -> [B, C]`` logits.
        token_key: where a mapping holds the token ids.

    Returns:
        ``[B, F]`` float64: column ``f`` is the probability the prediction loses when only the
        top ``⌈f·n⌉`` tokens are kept.

    Example::

        >>> bag = torch.nn.EmbeddingBag(5, 2, mode="sum").eval()
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> sufficiency(bag, ids, torch.rand(1, 3), [0.3, 1.0], replacement_id=0)[:, 1]
        tensor([0.], dtype=torch.float64)
    """
    return _scores(
        model, inputs, importance, fractions, replacement_id, candidates, target, output,
        token_key, keep_rationale=True,
    )  # fmt: skip


def aopc(
    model: nn.Module,
    inputs: Tensor | Mapping[str, Any],
    importance: Tensor,
    fractions: float | Sequence[float] = ERASER_FRACTIONS,
    *,
    replacement_id: int,
    candidates: Tensor | None = None,
    target: int | Tensor | None = None,
    output: ScoresFrom | None = None,
    token_key: str = "input_ids",
) -> AOPC:
    """ERASER's aggregated comprehensiveness and sufficiency: each averaged over the fractions
    (the area over the perturbation curve; module docstring).

    Args:
        model: a classifier in eval mode.
        inputs: token ids ``[B, N]`` or a mapping holding them under ``token_key``.
        importance: ``[B, N]``, one score per token (higher: more important).
        fractions: the bins (ERASER's 1, 5, 10, 20, 50 % by default).
        replacement_id: the id that replaces a removed token.
        candidates: bool ``[B, N]``, the tokens that may be removed.
        target: the class ``y`` (an int, or ``[B]``); default the class predicted on ``x``.
        output: ``fn(model_output) -> [B, C]`` logits.
        token_key: where a mapping holds the token ids.

    Returns:
        an :class:`AOPC` with ``comprehensiveness [B]`` and ``sufficiency [B]`` (a data set's
        score is their mean).

    Example::

        >>> bag = torch.nn.EmbeddingBag(5, 2, mode="sum").eval()
        >>> scores = aopc(bag, torch.tensor([[1, 2, 3, 4]]), torch.rand(1, 4), replacement_id=0)
        >>> scores.comprehensiveness.shape, scores.fractions
        (torch.Size([1]), (0.01, 0.05, 0.1, 0.2, 0.5))
    """
    options: dict[str, Any] = {
        "replacement_id": replacement_id, "candidates": candidates, "target": target,
        "output": output, "token_key": token_key,
    }  # fmt: skip
    kept = _fractions(fractions)
    comprehensive = comprehensiveness(model, inputs, importance, kept, **options)
    sufficient = sufficiency(model, inputs, importance, kept, **options)
    return AOPC(comprehensive.mean(-1), sufficient.mean(-1), kept)


def rationale_mask(importance: Tensor, candidates: Tensor, fraction: float) -> Tensor:
    """bool ``[B, N]``: the ``⌈fraction · n⌉`` candidates of highest importance of each row
    (``n`` its candidates; ties: the earlier position first).

    Example::

        >>> every = torch.ones(1, 4, dtype=torch.bool)
        >>> rationale_mask(torch.tensor([[0.1, 0.7, 0.7, 0.2]]), every, 0.5)
        tensor([[False,  True,  True, False]])
    """
    count = candidates.sum(-1)  # [B]
    k = torch.ceil(count.double() * fraction).long().clamp(max=count)
    ranked = importance.double().masked_fill(~candidates, float("-inf"))
    order = ranked.sort(dim=-1, descending=True, stable=True).indices
    positions = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(-1, order, positions)  # rank of each position
    return (rank < k[:, None]) & candidates


def _fractions(fractions: float | Sequence[float]) -> tuple[float, ...]:
    kept = (fractions,) if isinstance(fractions, int | float) else tuple(fractions)
    if not kept or any(not 0 < f <= 1 for f in kept):
        raise ValueError(f"fractions must be one or more numbers in (0, 1], got {fractions!r}")
    return tuple(float(f) for f in kept)


def _scores(
    model: nn.Module,
    inputs: Tensor | Mapping[str, Any],
    importance: Tensor,
    fractions: float | Sequence[float],
    replacement_id: int,
    candidates: Tensor | None,
    target: int | Tensor | None,
    output: ScoresFrom | None,
    token_key: str,
    keep_rationale: bool,
) -> Tensor:
    kept = _fractions(fractions)
    if model.training:
        raise ValueError(
            "faithfulness compares the model's predictions on changed inputs: put it in eval "
            "mode first (model.eval()), so that dropout does not change them"
        )
    ids = _token_ids(inputs, token_key)
    if not isinstance(importance, Tensor) or importance.shape != ids.shape:
        shape = tuple(importance.shape) if isinstance(importance, Tensor) else type(importance)
        raise ValueError(
            f"importance must be one score per token, [B, N] = {tuple(ids.shape)}, got {shape}"
        )
    if importance.is_floating_point() and bool(importance.isnan().any()):
        raise ValueError("importance holds NaN: a map must rank every candidate token")
    candidates = _candidates(inputs, ids, candidates)
    with torch.no_grad():
        full = _probabilities(model, inputs, output)  # [B, C]
        classes = _target(target, full)
        rows = torch.arange(len(ids), device=ids.device)
        before = full[rows, classes]
        changes = []
        for fraction in kept:
            rationale = rationale_mask(importance.to(ids.device), candidates, fraction)
            removed = candidates & ~rationale if keep_rationale else rationale
            changed = ids.masked_fill(removed, replacement_id)
            after = _probabilities(model, _replace_ids(inputs, changed, token_key), output)
            changes.append(before - after[rows, classes])
    return torch.stack(changes, -1)


def _token_ids(inputs: Tensor | Mapping[str, Any], token_key: str) -> Tensor:
    if isinstance(inputs, Mapping):
        if token_key not in inputs:
            raise ValueError(f"inputs hold no token ids under {token_key!r}; keys: {list(inputs)}")
        ids = inputs[token_key]
    else:
        ids = inputs
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.is_complex():
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        dtype = f", dtype {ids.dtype}" if isinstance(ids, Tensor) else ""
        raise ValueError(f"expected integer token ids [B, N], got {shape}{dtype}")
    return ids


def _candidates(
    inputs: Tensor | Mapping[str, Any], ids: Tensor, candidates: Tensor | None
) -> Tensor:
    if candidates is None:
        mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
        if mask is None:
            return torch.ones_like(ids, dtype=torch.bool)
        candidates = mask
    if not isinstance(candidates, Tensor) or candidates.shape != ids.shape:
        shape = tuple(candidates.shape) if isinstance(candidates, Tensor) else type(candidates)
        raise ValueError(f"candidates must be bool [B, N] = {tuple(ids.shape)}, got {shape}")
    return candidates.to(device=ids.device).bool()


def _replace_ids(
    inputs: Tensor | Mapping[str, Any], ids: Tensor, token_key: str
) -> Tensor | dict[str, Any]:
    return {**inputs, token_key: ids} if isinstance(inputs, Mapping) else ids


def _probabilities(model: nn.Module, inputs: Any, output: ScoresFrom | None) -> Tensor:
    return class_scores(run_model(model, inputs), output).double().softmax(-1)


def _target(target: int | Tensor | None, probabilities: Tensor) -> Tensor:
    batch, classes = probabilities.shape
    if target is None:
        return probabilities.argmax(-1)
    chosen = torch.as_tensor(target, device=probabilities.device).long().expand(batch)
    if bool(((chosen < 0) | (chosen >= classes)).any()):
        raise ValueError(f"target must be class indices in [0, {classes}), got {target!r}")
    return chosen
