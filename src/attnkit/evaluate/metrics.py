"""Extrinsic performance measures (survey §4.1): BLEU, perplexity, accuracy and macro-F1."""

from __future__ import annotations

import math
from collections.abc import Sequence

import sacrebleu
import torch
import torch.nn.functional as F
from torch import Tensor


def bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]) -> float:
    """Corpus BLEU (Papineni et al. 2002) as sacrebleu computes it (13a tokenisation), 0-100.

    Args:
        hypotheses: one detokenised string per sentence.
        references: one reference per sentence, or several reference streams (each a sequence
            with one string per sentence).

    Returns:
        BLEU, 0-100.

    Example::

        >>> round(bleu(["the cat sat on the mat"], ["the cat sat on the mat"]), 6)
        100.0
    """
    if isinstance(hypotheses, str):
        raise TypeError("hypotheses must be a sequence of sentences, got one string")
    streams: list[list[str]]
    if len(references) and isinstance(references[0], str):
        streams = [[str(r) for r in references]]
    else:
        streams = [[str(s) for s in stream] for stream in references]
    for stream in streams:
        if len(stream) != len(hypotheses):
            raise ValueError(
                f"each reference stream needs one sentence per hypothesis: {len(hypotheses)} "
                f"hypotheses, {len(stream)} references"
            )
    return float(sacrebleu.corpus_bleu(list(hypotheses), streams).score)


def perplexity(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> float:
    """``exp`` of the mean negative log-likelihood per target token.

    Args:
        logits: ``[..., V]`` unnormalised scores.
        targets: ``[...]`` token ids.
        ignore_index: the id that marks padding (left out of the mean).

    Returns:
        ``exp(mean NLL)``.

    Example::

        >>> perplexity(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long))  # uniform over 4
        4.0
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits [..., V] and targets [...] must agree, got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).double(),
        targets.reshape(-1),
        ignore_index=ignore_index,
    )
    return math.exp(float(nll))


def accuracy(predicted: Tensor, target: Tensor) -> float:
    """Share of positions where ``predicted == target`` (class ids of one shape).

    Args:
        predicted: class ids, any shape.
        target: class ids, the same shape.

    Returns:
        The accuracy in ``[0, 1]``.

    Example::

        >>> accuracy(torch.tensor([1, 0, 2, 2]), torch.tensor([1, 1, 2, 2]))
        0.75
    """
    if predicted.shape != target.shape:
        raise ValueError(f"shapes differ: {tuple(predicted.shape)} and {tuple(target.shape)}")
    if predicted.numel() == 0:
        raise ValueError("accuracy of no predictions is undefined")
    return float((predicted == target).double().mean())


def macro_f1(predicted: Tensor, target: Tensor, num_classes: int | None = None) -> float:
    """Unweighted mean over classes of ``F1 = 2·TP / (2·TP + FP + FN)``.

    Classes absent from both prediction and target are left out (their F1 is undefined), as
    scikit-learn does with ``labels`` unset.

    Args:
        predicted: class ids, any shape.
        target: class ids, the same shape.
        num_classes: the classes ``0 … num_classes - 1`` (``None``: from the ids seen).

    Returns:
        Macro F1 in ``[0, 1]``.

    Example::

        >>> round(macro_f1(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0])), 4)
        0.6667
    """
    if predicted.shape != target.shape:
        raise ValueError(f"shapes differ: {tuple(predicted.shape)} and {tuple(target.shape)}")
    p, t = predicted.reshape(-1).long(), target.reshape(-1).long()
    if p.numel() == 0:
        raise ValueError("F1 of no predictions is undefined")
    n = num_classes if num_classes is not None else int(max(p.max(), t.max())) + 1
    scores = []
    for c in range(n):
        tp = int(((p == c) & (t == c)).sum())
        fp = int(((p == c) & (t != c)).sum())
        fn = int(((p != c) & (t == c)).sum())
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(torch.tensor(scores, dtype=torch.float64).mean())
