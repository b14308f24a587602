"""The attention maps behind one translation, grouped for the attention viewer (survey §4.2.2,
manual inspection of attention weights; the viewer is :mod:`attnkit.interpret.viewer`).
``attnkit view RUN_DIR --input "..."`` (:func:`attnkit.run.view_run`) writes them for a
trained run as one self-contained HTML page.

The input is translated with the model, then the model is run once more,
teacher-forced on ``<bos> y_1 … y_n``, while every attention is recorded. That second pass is
the one ``translate`` itself scores (:mod:`attnkit.models.translation`), so the maps are exactly
the weights behind the translation shown. The recorded calls are grouped by role, read off the
model's structure (never guessed from shapes):

- a recurrent encoder–decoder (:class:`~attnkit.models.RNNSeq2Seq`) attends once per target
  step (eq. 2-4); the steps are stacked into one cross-attention map ``[T, S]``;
- a Transformer (:class:`~attnkit.models.TransformerSeq2Seq`) gives, per layer and head,
  encoder self-attention ``[L, H, S, S]``, decoder self-attention ``[L, H, T, T]`` (causal) and
  cross-attention ``[L, H, T, S]`` (eq. 39-42).

Cross-attention rows are the words the decoder emits (``y_1 … y_n``, then ``<eos>``), columns
the source words; decoder self-attention rows and columns are the decoder's inputs
(``<bos> y_1 … y_n``), so its rollout is defined.

    >>> shown = view_translation(model, vocab.source, vocab.target, ["i", "love", "you", "."])
    >>> write_viewer("page.html", shown.maps, title="I love you.")
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.data.vocabulary import Vocabulary
from attnkit.interpret.record import record
from attnkit.interpret.viewer import AttentionMap
from attnkit.layers.transformer import TransformerDecoder, TransformerEncoder
from attnkit.models.decoder_attention import DecoderAttention
from attnkit.models.outputs import Translation

ENCODER_SELF_ATTENTION = "encoder self-attention"
DECODER_SELF_ATTENTION = "decoder self-attention"
CROSS_ATTENTION = "cross-attention"
#: the label of the last row when the search stopped at ``max_length`` before emitting EOS:
#: that row is the attention of a position whose output was never produced.
CUT_LABEL = "<cut at max_length>"


@dataclass
class TranslationView:
    """The attention maps behind one translation.

    Attributes:
        source: the source tokens as shown (unknown words marked ``word(unk)``).
        translation: the target words emitted (without ``<bos>``/``<eos>``).
        ended: whether the search emitted ``<eos>`` (else it stopped at ``max_length``).
        maps: cross-attention first (the alignment), then, for a Transformer, encoder and
            decoder self-attention.
        model_weights: the model's own ``Seq2SeqOutput.weights`` ``[T, S]`` for this pass
            (for a Transformer, the last layer's cross-attention averaged over heads).
    """

    source: list[str]
    translation: list[str]
    ended: bool
    maps: list[AttentionMap]
    model_weights: Tensor


def view_translation(
    model: nn.Module,
    source_vocabulary: Vocabulary,
    target_vocabulary: Vocabulary,
    source: Sequence[str],
    *,
    beam_size: int = 1,
    max_length: int = 50,
) -> TranslationView:
    """Translate the tokens ``source`` and record the attention maps of that translation.

    Args:
        model: an :class:`~attnkit.models.RNNSeq2Seq` or
            :class:`~attnkit.models.TransformerSeq2Seq` (or any model built from their parts:
            a recurrent decoder's ``DecoderAttention``, attnkit's Transformer layers).
        source_vocabulary, target_vocabulary: the run's vocabularies.
        source: tokenised source sentence (``S`` tokens, at least one).
        beam_size, max_length: the search's (``model.translate``).

    Returns:
        a :class:`TranslationView`; every map's rows are query positions and columns key
        positions, ``T = len(translation) + 1`` target rows.
    """
    source = list(source)
    if not source:
        raise ValueError("need at least one source token, got none")
    ids = source_vocabulary.encode(source)
    source_ids = torch.tensor([ids], dtype=torch.long)
    lengths = torch.tensor([len(ids)])
    # model.translate, not attnkit.evaluate.translation.translate: the latter returns decoded
    # words, and a barely trained model may emit <pad>/<bos>, which decoding drops — the ids
    # must be kept to feed the very same sequence back.
    translate: Callable[..., list[Translation]] = getattr(model, "translate")  # noqa: B009
    (hypothesis,) = translate(source_ids, lengths, beam_size=beam_size, max_length=max_length)
    emitted = list(hypothesis.tokens)
    # the search returns max_length tokens exactly when it never emitted EOS
    ended = len(emitted) < max_length
    target_in = torch.tensor([[target_vocabulary.BOS, *emitted]], dtype=torch.long)

    with torch.no_grad(), record(model) as recorder:
        out = model(source_ids, lengths, target_in)
    steps = _decoder_attention_steps(model, recorder.weights)
    model_weights = out.weights[0].detach()  # [T, S]

    source_labels = [
        token if i != source_vocabulary.UNK else f"{token}{_UNK_MARK}"
        for token, i in zip(source, ids, strict=True)
    ]
    words = [target_vocabulary.itos[i] for i in emitted]
    emitted_labels = [*words, "<eos>" if ended else CUT_LABEL]  # the word each row emits
    input_labels = ["<bos>", *words]  # the decoder's input at each row

    transformer_roles = _transformer_roles(model)
    if steps:
        maps = _recurrent_maps(steps, emitted_labels, source_labels)
    elif transformer_roles:
        maps = _transformer_maps(
            recorder.weights, transformer_roles, source_labels, emitted_labels, input_labels
        )
    else:
        raise TypeError(
            "expected a recurrent decoder with DecoderAttention or a model with attnkit "
            f"Transformer layers, got {type(model).__name__} (no attention found to group)"
        )
    _check_cross_attention(maps[0], model_weights)
    return TranslationView(source_labels, words, ended, maps, model_weights)


def slug(sentence: str, max_length: int = 40) -> str:
    """A file-name-safe form of ``sentence``: lowercase ASCII words joined by ``-``
    (``"I love you."`` → ``"i-love-you"``); ``"input"`` when nothing is left."""
    words = re.findall(r"[a-z0-9]+", sentence.lower())
    text = "-".join(words)[:max_length].strip("-")
    return text or "input"


# --------------------------------------------------------------------------- internals

_UNK_MARK = "(unk)"


def _decoder_attention_steps(
    model: nn.Module, recorded: dict[str, list[Tensor]]
) -> dict[str, list[Tensor]]:
    """The recorded calls ``[B, 1, M, S]`` of the model's recurrent ``DecoderAttention``
    modules (one call per target step), by module name; empty for other models."""

    names = {name for name, m in model.named_modules() if isinstance(m, DecoderAttention)}
    return {name: calls for name, calls in recorded.items() if name in names and calls}


def _recurrent_maps(
    steps: dict[str, list[Tensor]], rows: list[str], columns: list[str]
) -> list[AttentionMap]:
    """One cross-attention map ``[T, S]``: the decoder's per-step calls stacked in call order."""
    if len(steps) != 1:
        raise ValueError(f"expected one recurrent decoder attention, found {sorted(steps)}")
    (calls,) = steps.values()
    weights = torch.cat(calls, dim=2)[0, 0]  # T calls of [1, 1, 1, S] → [T, S]
    if weights.shape != (len(rows), len(columns)):
        raise RuntimeError(
            f"recorded decoder attention {list(weights.shape)} does not match "
            f"{len(rows)} target rows x {len(columns)} source columns"
        )
    return [AttentionMap(CROSS_ATTENTION, weights, rows=rows, columns=columns)]


def _transformer_roles(model: nn.Module) -> dict[str, tuple[str, int]]:
    """``{module name: (role, layer index)}`` of the attention modules in attnkit's Transformer
    encoder and decoder layers, from the layers' own attributes."""

    names = {module: name for name, module in model.named_modules()}
    roles: dict[str, tuple[str, int]] = {}
    for module in names:
        if isinstance(module, TransformerEncoder):
            for index, layer in enumerate(module.layers):
                roles[names[layer.self_attn]] = (ENCODER_SELF_ATTENTION, index)
        elif isinstance(module, TransformerDecoder):
            for index, layer in enumerate(module.layers):
                roles[names[layer.self_attn]] = (DECODER_SELF_ATTENTION, index)
                roles[names[layer.multihead_attn]] = (CROSS_ATTENTION, index)
    return roles


def _transformer_maps(
    recorded: dict[str, list[Tensor]],
    roles: dict[str, tuple[str, int]],
    source: list[str],
    emitted: list[str],
    inputs: list[str],
) -> list[AttentionMap]:
    """Cross-attention ``[L, H, T, S]``, encoder ``[L, H, S, S]`` and decoder self-attention
    ``[L, H, T, T]``, each layer's single call of one teacher-forced pass."""
    by_role: dict[str, dict[int, Tensor]] = {}
    for name, (role, index) in roles.items():
        calls = recorded.get(name, [])
        # One call per module in one pass. The exception is a repeat of the same weights: the
        # model's forward records its own last cross-attention (Seq2SeqOutput.weights), and a
        # nested recording session recomputes that call for its weights, which the outer
        # session sees as a second, identical call. Anything else is not one pass.
        if not calls or any(not torch.equal(call, calls[0]) for call in calls[1:]):
            raise RuntimeError(
                f"{name} ({role}, layer {index}): expected one recorded call in the "
                f"teacher-forced pass, got {len(calls)} different ones"
            )
        by_role.setdefault(role, {})[index] = calls[0][0]  # [H, M, N] of the one sentence
    labels = {
        CROSS_ATTENTION: (emitted, source),
        ENCODER_SELF_ATTENTION: (source, source),
        DECODER_SELF_ATTENTION: (inputs, inputs),
    }
    maps = []
    for role in (CROSS_ATTENTION, ENCODER_SELF_ATTENTION, DECODER_SELF_ATTENTION):
        layers = by_role.get(role)
        if layers is None:
            raise RuntimeError(f"no {role} modules found in the model")
        stacked = torch.stack([layers[i] for i in sorted(layers)])  # [L, H, M, N]
        rows, columns = labels[role]
        maps.append(AttentionMap(role, stacked, rows=rows, columns=columns))
    return maps


def _check_cross_attention(cross: AttentionMap, model_weights: Tensor) -> None:
    """The cross-attention map must show what the model reports (``Seq2SeqOutput.weights``):
    the recurrent decoder's weights, or the Transformer's last layer averaged over heads. A
    mismatch means the recorded calls were grouped wrongly; better no page than a wrong one."""
    weights = cross.weights
    shown = weights if weights.dim() == 2 else weights[-1].mean(0)
    if shown.shape != model_weights.shape or not torch.allclose(
        shown.double(), model_weights.double(), rtol=1e-5, atol=1e-6
    ):
        raise RuntimeError(
            "the recorded cross-attention differs from the model's own attention weights "
            f"({list(shown.shape)} vs {list(model_weights.shape)})"
        )
