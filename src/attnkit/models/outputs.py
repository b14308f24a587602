"""What the sequence-to-sequence models return: :class:`Seq2SeqOutput` and :class:`Translation`."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class Seq2SeqOutput:
    """A teacher-forced pass of an encoder–decoder model.

    Attributes:
        logits: ``[B, T, V_target]``: unnormalised ``log p(y_t | y_<t, x)`` for each target
            position (``target_in`` row ``t`` predicts ``target_out`` row ``t``).
        weights: ``[B, T, S]``: the attention of each target position over the source (the
            survey's alignment matrix, ``[target, source]``); exactly zero on padded source
            positions.
        alignment: ``[B, T, S]``: the attention of a dedicated alignment head (Garg et al.
            2019; :class:`~attnkit.models.TransformerSeq2Seq`'s ``alignment_layer``), row ``t``
            the alignment of ``target_out`` row ``t``; ``None`` for a model without one.
    """

    logits: Tensor
    weights: Tensor
    alignment: Tensor | None = None


@dataclass
class Translation:
    """One decoded sentence.

    Attributes:
        tokens: target ids, without BOS and EOS.
        weights: ``[len(tokens) + 1, S_i]``: the attention when predicting each output token and
            then EOS, over the sentence's ``S_i`` real source positions (from a teacher-forced
            pass over ``BOS + tokens``).
        score: ``log p`` of the emitted tokens (and of EOS when it was emitted) divided by their
            number to the power ``length_penalty``: the quantity beam search ranks.
    """

    tokens: list[int]
    weights: Tensor
    score: float
