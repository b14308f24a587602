"""A translation model's word alignments read in each of the ways docs/results.md compares, with their
alignment error rate: naive attention, Shift-Att, the alignment head, the agreement of the last
two, and both directions symmetrized (survey §4.2; Chen et al. 2020; Garg et al. 2019; Liang et
al. 2006; Koehn et al. 2003).

Every reading starts from one teacher-forced pass of the reference (forced decoding,
:func:`forced_attention`): the decoder reads ``BOS, y_0, …, y_{T-1}`` and predicts
``y_0, …, y_{T-1}, EOS``. Each reading is a matrix ``[T, S]`` per sentence (:data:`READINGS`):

- ``"naive"``: the model's own attention (``Seq2SeqOutput.weights``: a Transformer's last layer,
  heads averaged; an RNN decoder's attention) at step ``i``, the step that *outputs* ``y_i``;
- ``"shift_att"`` (Chen et al. 2020): the cross-attention at step ``i + 1``, the step whose
  *input* is ``y_i``, of the layers and heads :func:`attnkit.evaluate.choose_attention` picks on
  the development sentences (without them: every layer and head averaged). An RNN decoder has
  one attention, so only the step changes;
- ``"alignment_head"``: a model's dedicated alignment head (``Seq2SeqOutput.alignment``), read
  at step ``i`` with the full target context (Garg et al. 2019);
- ``"alignment_head_x_shift_att"``: the two previous readings multiplied weight by weight — a
  link is strong only where both agree, as Liang et al. (2006) combine two aligners' link
  posteriors by their product.

and each is turned into links (:data:`EXTRACTIONS`, :func:`attnkit.evaluate.links_from_weights`)
by ``"argmax"`` (each target word to its largest weight; the method keeps the reading's name) or
``"mutual_argmax"`` (only links that are the largest of their row and column, SimAlign's ArgMax;
the method is named ``"<reading>+mutual_argmax"``).

:func:`compare_alignment_methods` scores each on the test sentences and, when development
sentences are given, on those, naming the best on the development part (choices are made there
only). :func:`symmetrize_methods` combines the links of an English→French and a French→English
model on the same sentences with each symmetrization, the method chosen on the development part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.data.batching import Batches, encode
from attnkit.data.corpus import Example, Vocabularies
from attnkit.data.symmetrize import SYMMETRIZATIONS, Links, symmetrize, transpose_links
from attnkit.evaluate.alignment import LinkInput, corpus_alignment_error_rate, links_from_weights
from attnkit.evaluate.attention_alignment import (
    AttentionChoice,
    average_attention,
    choose_attention,
    decoder_step_rows,
)
from attnkit.interpret.cross_attention import record_cross_attention
from attnkit.models import TransformerSeq2Seq

READINGS = ("naive", "shift_att", "alignment_head", "alignment_head_x_shift_att")
EXTRACTIONS = ("argmax", "mutual_argmax")


def method_name(reading: str, extraction: str) -> str:
    """The key of a (reading, extraction) pair: the reading's name for argmax links,
    ``"<reading>+<extraction>"`` otherwise (``"alignment_head+mutual_argmax"``)."""
    return reading if extraction == "argmax" else f"{reading}+{extraction}"


METHODS = tuple(method_name(r, e) for e in EXTRACTIONS for r in READINGS)
# the cross-attention modules of attnkit.models.TransformerSeq2Seq, bottom layer first
TRANSFORMER_CROSS_ATTENTION = ("transformer.decoder.layers.*.multihead_attn",)


@dataclass(frozen=True)
class ForcedAttention:
    """One sentence's attention under forced decoding of its reference (``T`` target words,
    ``S`` source words).

    Attributes:
        steps: ``[layers, heads, T + 1, S]``, every decoder step's cross-attention, step ``t``
            having read ``y_{t-1}`` (``BOS`` at ``t = 0``); an RNN decoder's one attention is
            ``[1, 1, T + 1, S]``.
        naive: ``[T, S]``, the model's own ``weights`` at the steps that output each word.
        head: ``[T, S]``, the alignment head's weights, or ``None`` for a model without one.
    """

    steps: Tensor
    naive: Tensor
    head: Tensor | None


def forced_attention(
    model: nn.Module, vocabularies: Vocabularies, examples: Sequence[Example], batch_size: int = 64
) -> list[ForcedAttention]:
    """The attention of ``model`` fed each example's reference, one :class:`ForcedAttention`
    per example, in order. A :class:`~attnkit.models.TransformerSeq2Seq`'s every decoder layer
    and head is recorded (:func:`attnkit.interpret.record_cross_attention`); any other model
    (``model(source, lengths, target_in) -> Seq2SeqOutput``) gives its ``weights``."""
    encoded = encode(list(examples), vocabularies.source, vocabularies.target)
    readings: list[ForcedAttention] = []
    model.eval()
    with torch.no_grad():
        for batch in Batches(encoded, batch_size, seed=0, shuffle=False):
            outputs = []

            def forward(batch=batch, outputs=outputs) -> None:
                outputs.append(model(batch.source, batch.source_lengths, batch.target_in))

            if isinstance(model, TransformerSeq2Seq):
                steps = record_cross_attention(model, forward, TRANSFORMER_CROSS_ATTENTION)
            else:
                forward()
                steps = outputs[0].weights[:, None, None]  # [B, 1, 1, T + 1, S]
            out = outputs[0]
            target_lengths = (batch.target_out != 0).sum(1) - 1  # without the EOS step
            for row in range(steps.shape[0]):
                t, s = int(target_lengths[row]), int(batch.source_lengths[row])
                head = None if out.alignment is None else out.alignment[row, :t, :s]
                readings.append(
                    ForcedAttention(steps[row, ..., : t + 1, :s], out.weights[row, :t, :s], head)
                )
    return readings


@dataclass(frozen=True)
class MethodResult:
    """One method's links and AER (``method``: :func:`method_name` of its reading and
    extraction). ``dev_*`` are ``None`` without development sentences; ``choice`` is Shift-Att's
    layers and heads (``None`` for readings without Shift-Att)."""

    method: str
    aer: float
    links: list[Links]
    dev_aer: float | None = None
    dev_links: list[Links] | None = None
    choice: AttentionChoice | None = None

    def summary(self) -> dict[str, object]:
        """The JSON-ready numbers (no links)."""
        out: dict[str, object] = {"aer": self.aer, "dev_aer": self.dev_aer}
        if self.choice is not None:
            out["layers"] = list(self.choice.layers)
            out["heads"] = None if self.choice.heads is None else list(self.choice.heads)
        return out


def _gold(examples: Sequence[Example]) -> tuple[list[LinkInput], list[LinkInput | None]]:
    if not examples or any(e.sure is None for e in examples):
        raise ValueError("every example needs gold links (sure and possible)")
    return [e.sure for e in examples], [e.possible for e in examples]  # type: ignore[misc]


def _aer(links: Sequence[Links], examples: Sequence[Example]) -> float:
    sure, possible = _gold(examples)
    return corpus_alignment_error_rate(list(links), sure, possible)


def _shift_rows(readings: Sequence[ForcedAttention]) -> list[Tensor]:
    return [decoder_step_rows(r.steps, r.naive.shape[0], "input") for r in readings]


def compare_alignment_methods(
    test: Sequence[ForcedAttention],
    test_examples: Sequence[Example],
    dev: Sequence[ForcedAttention] | None = None,
    dev_examples: Sequence[Example] | None = None,
    extractions: Sequence[str] = EXTRACTIONS,
) -> dict[str, MethodResult]:
    """Every reading of :data:`READINGS` the model has, with each extraction, scored.

    Args:
        test, test_examples: the held-out sentences' attention (:func:`forced_attention`) and
            the examples with their ``sure``/``possible`` gold links.
        dev, dev_examples: the development sentences, where Shift-Att's layers and heads are
            chosen (:func:`attnkit.evaluate.choose_attention`, on argmax links); ``None``:
            every layer and head averaged.
        extractions: link extractions of :data:`EXTRACTIONS` to score.

    Returns:
        ``{method: MethodResult}``, all argmax methods first (in the order of
        :data:`READINGS`), then each further extraction's; the alignment-head readings only when
        the model has a head.
    """
    if len(test) != len(test_examples):
        raise ValueError(f"{len(test)} readings for {len(test_examples)} test examples")
    if (dev is None) != (dev_examples is None):
        raise ValueError("give both dev and dev_examples, or neither")
    if dev is not None and dev_examples is not None and len(dev) != len(dev_examples):
        raise ValueError(f"{len(dev)} readings for {len(dev_examples)} development examples")
    unknown = [e for e in extractions if e not in EXTRACTIONS]
    if unknown or not extractions:
        raise ValueError(f"extractions: expected some of {EXTRACTIONS}, got {tuple(extractions)}")
    if dev is not None and dev_examples is not None:
        sure, possible = _gold(dev_examples)
        choice, _ = choose_attention(_shift_rows(dev), sure, possible)
    else:
        layers = test[0].steps.shape[0]
        choice = AttentionChoice(tuple(range(layers)), None, float("nan"))

    def shifted(r: ForcedAttention) -> Tensor:
        return average_attention(
            decoder_step_rows(r.steps, r.naive.shape[0], "input"), choice.layers, choice.heads
        )

    Matrices = tuple[list[Tensor], list[Tensor] | None]  # test sentences', dev sentences'

    def matrices(read) -> Matrices:  # each reading computed once, whatever the extractions
        return [read(r) for r in test], None if dev is None else [read(r) for r in dev]

    shift = matrices(shifted)
    matrix = {"naive": matrices(lambda r: r.naive), "shift_att": shift}
    if all(r.head is not None for r in test) and (
        dev is None or all(r.head is not None for r in dev)
    ):
        head = matrix["alignment_head"] = matrices(lambda r: r.head)
        test_product = [h * w for h, w in zip(head[0], shift[0], strict=True)]
        dev_product = None
        if head[1] is not None and shift[1] is not None:
            dev_product = [h * w for h, w in zip(head[1], shift[1], strict=True)]
        matrix["alignment_head_x_shift_att"] = (test_product, dev_product)
    results: dict[str, MethodResult] = {}
    for extraction in extractions:
        for reading, (test_w, dev_w) in matrix.items():
            links = [links_from_weights(w, method=extraction) for w in test_w]
            dev_links = (
                None if dev_w is None else [links_from_weights(w, method=extraction) for w in dev_w]
            )
            method = method_name(reading, extraction)
            results[method] = MethodResult(
                method,
                _aer(links, test_examples),
                links,
                None if dev_links is None else _aer(dev_links, dev_examples),  # type: ignore[arg-type]
                dev_links,
                choice if "shift_att" in reading else None,
            )
    return results


def best_on_dev(results: dict[str, MethodResult]) -> str:
    """The method with the lowest development AER (ties: the earlier in ``results``)."""
    scored = [(r.dev_aer, name) for name, r in results.items() if r.dev_aer is not None]
    if not scored:
        raise ValueError("no method was scored on development sentences")
    return min(scored, key=lambda pair: pair[0])[1]


def symmetrize_methods(
    forward: MethodResult,
    backward: MethodResult,
    test_examples: Sequence[Example],
    dev_examples: Sequence[Example],
    methods: Sequence[str] = SYMMETRIZATIONS,
) -> tuple[str, dict[str, dict[str, float]], list[Links]]:
    """Both translation directions' links combined, the symmetrization chosen on the
    development sentences.

    Args:
        forward: an English→French model's reading (links ``(English, French)``).
        backward: a French→English model's reading of the same sentences, with the languages
            swapped (links ``(French, English)``; transposed here).
        test_examples, dev_examples: the English→French examples with gold links.
        methods: symmetrizations to try (:data:`attnkit.data.symmetrize.SYMMETRIZATIONS`).

    Returns:
        ``(chosen, {method: {"aer", "dev_aer"}}, the chosen method's test links)``.
    """
    if forward.dev_links is None or backward.dev_links is None:
        raise ValueError("both readings need development links to choose a symmetrization")
    pairs = (
        (forward.links, backward.links, test_examples),
        (forward.dev_links, backward.dev_links, dev_examples),
    )
    for f, b, examples in pairs:
        if not len(f) == len(b) == len(examples):
            raise ValueError(
                f"both directions must read the same sentences: {len(f)}, {len(b)} links for "
                f"{len(examples)} examples"
            )
    scores: dict[str, dict[str, float]] = {}
    links: dict[str, list[Links]] = {}
    for method in methods:
        test_links, dev_links = (
            [symmetrize(a, transpose_links(b), method) for a, b in zip(f, b_, strict=True)]
            for f, b_, _ in pairs
        )
        links[method] = test_links
        scores[method] = {
            "aer": _aer(test_links, test_examples),
            "dev_aer": _aer(dev_links, dev_examples),
        }
    chosen = min(methods, key=lambda m: scores[m]["dev_aer"])
    return chosen, scores, links[chosen]
