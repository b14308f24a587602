"""Word alignments read from a decoder's cross-attention: which decoder step, which layers and
heads, and both translation directions combined (survey §4.2; Chen et al. 2020; Koehn et al. 2003).

**Which step (Shift-Att, Chen et al. 2020).** Under forced decoding the decoder reads
``BOS, y_0, …, y_{T-1}`` and predicts ``y_0, …, y_{T-1}, EOS``: step ``t`` has input ``y_{t-1}``
(``BOS`` at ``t = 0``) and output ``y_t``. *Naive-Att* reads the alignment of target word ``y_i``
from step ``i``, where ``y_i`` is the *output*: the attention there was computed before the model
saw ``y_i``. *Shift-Att* reads it from step ``i + 1``, where ``y_i`` is the decoder's *input*;
Chen et al. find this roughly halves a Transformer's AER. So Shift-Att needs the ``T + 1`` rows
of the whole teacher-forced pass (the last one is the step that predicts ``EOS``).

**Which layer and heads.** Chen et al. average the heads of one decoder layer and choose the layer
by AER on a development set (the third of six in their Transformer). :func:`choose_attention`
does that choice on the development part (Hansards gold sentences 1–100) among every single layer
(heads averaged), every single head, and the mean of all layers; the choice is then applied
unchanged to the test part (101–447).

**Links.** Every target word links to the source word of largest weight (argmax, Chen et al.;
:func:`attnkit.evaluate.alignment.links_from_weights`); links are ``(source, target)``. Both
directions (an English→French and a French→English model) are combined with the
symmetrizations of :mod:`attnkit.data.symmetrize` (intersection, union, grow-diag,
grow-diag-final, grow-diag-final-and), re-exported by :mod:`attnkit.evaluate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.data.symmetrize import Links, symmetrize, transpose_links
from attnkit.evaluate.alignment import LinkInput, corpus_alignment_error_rate, links_from_weights

STEPS = ("input", "output")


def decoder_step_rows(attention: Tensor, target_length: int, step: str = "input") -> Tensor:
    """The attention rows that align the ``target_length`` target words, one per word.

    Args:
        attention: ``[..., steps, S]`` cross-attention of a teacher-forced pass, step ``t`` having
            read ``BOS, y_0, …, y_{t-1}`` (any leading dims: layers, heads).
        target_length: ``T``, the number of target words (without ``EOS``).
        step: ``"input"`` (Shift-Att: word ``i`` ← step ``i + 1``, needs ``steps >= T + 1``) or
            ``"output"`` (Naive-Att: word ``i`` ← step ``i``, needs ``steps >= T``).

    Returns:
        ``[..., T, S]``, row ``i`` for target word ``i``.

    Example::

        >>> a = torch.eye(4)                       # 4 steps, 4 source words
        >>> decoder_step_rows(a, 3)[0].tolist()    # word 0 read at step 1
        [0.0, 1.0, 0.0, 0.0]
    """
    if not isinstance(attention, Tensor) or attention.dim() < 2:
        raise ValueError(
            f"attention must be a tensor [..., steps, S], got {getattr(attention, 'shape', attention)}"
        )
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    if isinstance(target_length, bool) or not isinstance(target_length, int) or target_length < 0:
        raise ValueError(f"target_length must be an int >= 0, got {target_length!r}")
    offset = 1 if step == "input" else 0
    steps = attention.shape[-2]
    if steps < target_length + offset:
        raise ValueError(
            f"step={step!r} needs at least {target_length + offset} decoder steps for "
            f"{target_length} target words, got attention of shape {tuple(attention.shape)}"
        )
    return attention[..., offset : offset + target_length, :]


def _stacked(attention: Tensor | Sequence[Tensor]) -> Tensor:
    if isinstance(attention, Tensor):
        stacked = attention
    else:
        stacked = torch.stack(list(attention))
    if stacked.dim() != 4:
        raise ValueError(
            "attention must be [layers, heads, T, S] or a list of [heads, T, S] per layer, got "
            f"shape {tuple(stacked.shape)}"
        )
    return stacked


def average_attention(
    attention: Tensor | Sequence[Tensor],
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
) -> Tensor:
    """Mean of the chosen layers' chosen heads.

    Args:
        attention: ``[layers, heads, T, S]``, or a sequence of ``[heads, T, S]`` per layer.
        layers: layer indices (default: all).
        heads: head indices, the same in every chosen layer (default: all).

    Returns:
        ``[T, S]``.

    Example::

        >>> average_attention(torch.rand(2, 4, 3, 5), layers=[1], heads=[0, 2]).shape
        torch.Size([3, 5])
    """
    stacked = _stacked(attention)
    n_layers, n_heads = stacked.shape[:2]
    layers = list(range(n_layers)) if layers is None else list(layers)
    heads = list(range(n_heads)) if heads is None else list(heads)
    if not layers or any(not -n_layers <= i < n_layers for i in layers):
        raise ValueError(f"layers must be indices into {n_layers} layers, got {layers}")
    if not heads or any(not -n_heads <= h < n_heads for h in heads):
        raise ValueError(f"heads must be indices into {n_heads} heads, got {heads}")
    return stacked[layers][:, heads].mean(dim=(0, 1))


@dataclass(frozen=True)
class AttentionChoice:
    """A set of layers and heads whose mean attention gives the alignment, and its AER on the
    sentences it was chosen on. ``heads=None`` means every head.

    Attributes:
        layers: the layer indices averaged.
        heads: the head indices averaged in each, or ``None`` for all.
        aer: the corpus AER of this choice on the sentences it was chosen on.

    Example::

        >>> choice = AttentionChoice(layers=(1,), heads=None, aer=0.3)
        >>> choice.weights(torch.rand(2, 4, 3, 5)).shape  # [L, H, T, S] -> [T, S]
        torch.Size([3, 5])
    """

    layers: tuple[int, ...]
    heads: tuple[int, ...] | None
    aer: float

    def weights(self, attention: Tensor | Sequence[Tensor]) -> Tensor:
        """The ``[T, S]`` mean attention of this choice for one sentence's ``[L, H, T, S]``."""
        return average_attention(attention, self.layers, self.heads)


def choose_attention(
    attentions: Sequence[Tensor | Sequence[Tensor]],
    sure: Sequence[LinkInput],
    possible: Sequence[LinkInput | None] | None = None,
    per_head: bool = True,
) -> tuple[AttentionChoice, list[AttentionChoice]]:
    """The layers/heads whose argmax links have the lowest corpus AER on development sentences.

    Candidates, in this order (ties go to the earlier): the mean of all layers and heads, each
    layer with its heads averaged (Chen et al. 2020), and with ``per_head`` each single head.

    Args:
        attentions: per sentence ``[layers, heads, T, S]`` (target rows already chosen, e.g. by
            :func:`decoder_step_rows`), every sentence with the same layers and heads.
        sure, possible: the gold links of each sentence, ``(source, target)``.
        per_head: also try every single head.

    Returns:
        ``(best, every candidate)``; apply ``best.weights(attention)`` to held-out sentences.

    Example::

        >>> attentions = [torch.softmax(torch.randn(2, 2, 3, 3), -1) for _ in range(2)]
        >>> best, candidates = choose_attention(attentions, ["0-0 1-1 2-2", "0-0 1-1 2-2"])
        >>> len(candidates)  # all, 2 layers, 4 single heads
        7
    """
    if not attentions:
        raise ValueError("choose_attention needs at least one sentence")
    stacked = [_stacked(a) for a in attentions]
    n_layers, n_heads = stacked[0].shape[:2]
    for a in stacked:
        if tuple(a.shape[:2]) != (n_layers, n_heads):
            raise ValueError(
                f"every sentence needs the same [layers, heads], got {tuple(stacked[0].shape[:2])} "
                f"and {tuple(a.shape[:2])}"
            )
    options: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = [(tuple(range(n_layers)), None)]
    options += [((layer,), None) for layer in range(n_layers)]
    if per_head:
        options += [((layer,), (head,)) for layer in range(n_layers) for head in range(n_heads)]
    candidates = []
    for layers, heads in options:
        predicted = [links_from_weights(average_attention(a, layers, heads)) for a in stacked]
        aer = corpus_alignment_error_rate(predicted, sure, possible)
        candidates.append(AttentionChoice(layers, heads, aer))
    best = min(candidates, key=lambda c: c.aer)  # min keeps the first of equal values
    return best, candidates


def symmetrized_attention_links(
    forward_weights: Tensor, backward_weights: Tensor, method: str = "grow-diag-final-and"
) -> Links:
    """Argmax links of both directions' attention, combined.

    Args:
        forward_weights: ``[T_f, S_e]`` attention of the e→f model (rows: its target words).
        backward_weights: ``[T_e, S_f]`` attention of the f→e model on the same sentence pair.
        method: a symmetrization of :data:`attnkit.data.symmetrize.SYMMETRIZATIONS`.

    Returns:
        Links ``(e position, f position)``, 0-based.

    Example::

        >>> fw = torch.tensor([[0.9, 0.1], [0.2, 0.8]])   # f0 -> e0, f1 -> e1
        >>> bw = torch.tensor([[0.7, 0.3], [0.4, 0.6]])   # e0 -> f0, e1 -> f1
        >>> sorted(symmetrized_attention_links(fw, bw, "intersection"))
        [(0, 0), (1, 1)]
    """
    for name, w in (("forward_weights", forward_weights), ("backward_weights", backward_weights)):
        if not isinstance(w, Tensor) or w.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor [target, source], got {w!r:.60}")
    if forward_weights.shape != backward_weights.shape[::-1]:
        raise ValueError(
            "the two directions must cover the same sentence pair: forward [T_f, S_e] "
            f"{tuple(forward_weights.shape)} and backward [T_e, S_f] {tuple(backward_weights.shape)}"
        )
    forward = links_from_weights(forward_weights)
    backward = transpose_links(links_from_weights(backward_weights))
    return symmetrize(forward, backward, method)
