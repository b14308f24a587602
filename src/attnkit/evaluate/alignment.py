"""Alignment Error Rate (Och & Ney 2003): how well attention weights match gold word alignments
(survey §4.2; Luong et al. 2015 evaluate attention with it).

Gold alignments have *sure* links ``S`` and *possible* links ``P`` (``S ⊆ P``). For predicted
links ``A``:

    AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Links are pairs ``(source position, target position)``, 0-based (Pharaoh's ``i-j``). An attention
matrix is ``[target, source]`` (rows are the decoder's queries, columns the source words), so the
link of weight ``[t, s]`` is ``(s, t)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from attnkit.data.pharaoh import parse_pharaoh

__all__ = [
    "alignment_counts",
    "alignment_error_rate",
    "as_links",
    "corpus_alignment_error_rate",
    "links_from_weights",
    "parse_pharaoh",  # lives in attnkit.data.pharaoh (the data layer reads the gold with it)
]

Links = set[tuple[int, int]]
LinkInput = str | Tensor | Iterable[tuple[int, int]]


def links_from_weights(weights: Tensor, *, method: str = "argmax", threshold: float = 0.5) -> Links:
    """Predicted links ``(source, target)`` from an attention matrix ``[target, source]``.

    ``"argmax"``: each target word links to the source word it attends most (one link per row;
    rows of all zeros give none). ``"mutual_argmax"``: only the links that are the largest
    weight of both their row and their column — the target word attends that source word most,
    and that source word is attended most by that target word (SimAlign's *ArgMax*, Jalili Sabet
    et al. 2020: the intersection of the two directions' argmax links read from one matrix;
    fewer, surer links). ``"threshold"``: every weight ``>= threshold``.

    Args:
        weights: ``[target, source]`` (``[T, S]``).
        method: ``"argmax"``, ``"mutual_argmax"`` or ``"threshold"``.
        threshold: for ``"threshold"``.

    Returns:
        A set of ``(source, target)`` pairs.

    Example::

        >>> weights = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
        >>> sorted(links_from_weights(weights))
        [(0, 0), (0, 2), (1, 1)]
        >>> sorted(links_from_weights(weights, method="mutual_argmax"))  # 0.6 < 0.9 in column 0
        [(0, 0), (1, 1)]
    """
    if not isinstance(weights, Tensor) or weights.dim() != 2:
        raise ValueError(
            f"weights must be a 2-D tensor [target, source], got {getattr(weights, 'shape', weights)}"
        )
    if method == "argmax":
        best = weights.argmax(-1)
        return {(int(best[t]), t) for t in range(weights.shape[0]) if weights[t].max() > 0}
    if method == "mutual_argmax":
        # ties go to the first index in both directions, as argmax does
        rows, columns = weights.argmax(-1), weights.argmax(0)
        return {
            (int(rows[t]), t)
            for t in range(weights.shape[0])
            if weights[t].max() > 0 and int(columns[rows[t]]) == t
        }
    if method == "threshold":
        return {(int(s), int(t)) for t, s in torch.nonzero(weights >= threshold).tolist()}
    raise ValueError(f"method must be 'argmax', 'mutual_argmax' or 'threshold', got {method!r}")


def as_links(links: LinkInput) -> Links:
    """Links from a set/iterable of pairs, a Pharaoh line (all its links), or a 0/1 matrix
    ``[target, source]`` (nonzero = link)."""
    if isinstance(links, str):
        return parse_pharaoh(links)[1]
    if isinstance(links, Tensor):
        if links.dim() != 2:
            raise ValueError(f"a link matrix must be [target, source], got {tuple(links.shape)}")
        return {(int(s), int(t)) for t, s in torch.nonzero(links).tolist()}
    out = set()
    for pair in links:
        if len(pair) != 2:
            raise ValueError(f"a link is a pair (source, target), got {pair!r}")
        out.add((int(pair[0]), int(pair[1])))
    return out


def alignment_counts(
    predicted: LinkInput, sure: LinkInput, possible: LinkInput | None = None
) -> tuple[int, int, int, int]:
    """``(|A ∩ S|, |A ∩ P|, |A|, |S|)`` of one sentence; ``P`` is taken as ``P ∪ S``. A Pharaoh
    line given as ``sure`` (with ``possible=None``) gives both its sure and possible links."""
    if isinstance(sure, str) and possible is None:
        s, p = parse_pharaoh(sure)
    else:
        s = as_links(sure)
        p = s | (as_links(possible) if possible is not None else set())
    a = as_links(predicted)
    return len(a & s), len(a & p), len(a), len(s)


def alignment_error_rate(
    predicted: LinkInput, sure: LinkInput, possible: LinkInput | None = None
) -> float:
    """AER of one sentence: ``1 - (|A∩S| + |A∩P|) / (|A| + |S|)`` (Och & Ney 2003).

    Args:
        predicted: links ``A``: pairs ``(source, target)``, a Pharaoh line, or a 0/1 matrix
            ``[target, source]`` (for attention weights use :func:`links_from_weights`).
        sure: ``S``, in the same forms; a Pharaoh line with ``?`` links gives ``S`` and ``P``.
        possible: ``P`` (``S`` is added to it); default ``P = S``.

    Returns:
        AER in ``[0, 1]`` (0: perfect).

    Example::

        >>> alignment_error_rate("0-0 1-1", "0-0 1?1 2-2")   # 1 - (1 + 2) / (2 + 2)
        0.25
    """
    a_s, a_p, a, s = alignment_counts(predicted, sure, possible)
    if a + s == 0:
        raise ValueError("AER is undefined when both the prediction and the sure links are empty")
    return 1.0 - (a_s + a_p) / (a + s)


def corpus_alignment_error_rate(
    predicted: Sequence[LinkInput],
    sure: Sequence[LinkInput],
    possible: Sequence[LinkInput | None] | None = None,
) -> float:
    """AER of a corpus: the counts summed over sentences before the ratio (as Och & Ney report).

    Args:
        predicted: per sentence, links in any form of :func:`alignment_error_rate`.
        sure: per sentence, the sure links ``S``.
        possible: per sentence, the possible links ``P`` (``None``: ``P = S``).

    Returns:
        AER in ``[0, 1]``.

    Example::

        >>> round(corpus_alignment_error_rate(["0-0 1-1", "0-1"], ["0-0 1-1", "0-0"]), 4)
        0.3333
    """
    if len(predicted) != len(sure) or (possible is not None and len(possible) != len(sure)):
        raise ValueError(
            f"need one prediction per gold sentence, got {len(predicted)} predictions, "
            f"{len(sure)} sure, {None if possible is None else len(possible)} possible"
        )
    totals = [0, 0, 0, 0]
    for i, (pred, gold) in enumerate(zip(predicted, sure, strict=True)):
        counts = alignment_counts(pred, gold, None if possible is None else possible[i])
        totals = [t + c for t, c in zip(totals, counts, strict=True)]
    a_s, a_p, a, s = totals
    if a + s == 0:
        raise ValueError("AER is undefined when both the predictions and the sure links are empty")
    return 1.0 - (a_s + a_p) / (a + s)
