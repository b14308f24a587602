"""The models under the faithfulness table ("subjects"): how to batch SST-2 test sentences for
each, which token-importance maps apply to it, and how to compute each map
(``importance(method, batch) -> [B, N]``, higher: more important for the predicted class).

Two subjects: :class:`BiLSTMSubject`, Jain & Wallace's BiLSTM with additive attention, and
:class:`MiniLMSubject`, a BERT-style Hugging Face classifier on attnkit's attention engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnkit.data.vocabulary import PAD, UNK, Vocabulary
from attnkit.explanation.attention_modes import ATTENTION
from attnkit.explanation.data import pad
from attnkit.explanation.flow import cls_flow
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier

#: the maps ranked, in the order of the table
FAITHFULNESS_METHODS = (
    "attention",
    "rollout",
    "flow",
    "gradient_attention",
    "value_norm",
    "value_zeroing",
    "alti",
    "input_x_gradient",
    "integrated_gradients",
    "random",
)

#: why a map does not apply to the BiLSTM + additive attention model (its only attention is one
#: learned query pooling the BiLSTM states)
NOT_APPLICABLE_BILSTM = {
    "rollout": "one attention layer, a single query pooling the BiLSTM states: there is no "
    "token-to-token map to multiply across layers, and the BiLSTM mixes tokens outside any "
    "attention, so rollout would be the raw attention under another name",
    "flow": "as rollout: one pooling layer, no layered token-to-token graph to take a "
    "max-flow through",
    "value_zeroing": "it measures the change of each token's output representation in a "
    "token-to-token attention layer; the pooling's output is the classifier's input, not a "
    "token sequence (attnkit.interpret.value_zeroing refuses it)",
    "alti": "it decomposes a Transformer block's residual and layer norm; the pooling has "
    "neither (attnkit.interpret.alti refuses it)",
}


@dataclass
class FaithfulnessBatch:
    """What ERASER's scores need for one batch: the model's inputs (ids ``[B, N]`` or a
    mapping), the ids, the removable tokens (bool ``[B, N]``) and the predicted class ``[B]``."""

    inputs: Any
    ids: Tensor
    candidates: Tensor
    predicted: Tensor


class FaithfulnessSubject:
    """A model under the faithfulness table: how to batch its test sentences, which maps apply
    and how to compute each (``importance(method, batch) -> [B, N]``, higher: more important
    for the predicted class)."""

    name: str
    model: torch.nn.Module
    replacement_id: int
    not_applicable: dict[str, str]

    def batches(self, sentences: Sequence[Sequence[str]], size: int) -> Iterator[FaithfulnessBatch]:
        raise NotImplementedError

    def importance(self, method: str, batch: FaithfulnessBatch) -> Tensor:
        raise NotImplementedError


def _predicted_score(predicted: Tensor) -> Callable[[Tensor], Tensor]:
    """``fn(logits) -> Σ_b logits[b, ŷ_b]``: the target whose gradient the maps take."""
    return lambda logits: logits.gather(-1, predicted[:, None]).sum()


class BiLSTMSubject(FaithfulnessSubject):
    """The BiLSTM + additive attention classifier. Removed tokens become ``UNK`` (so the
    sentence keeps its length and the attention its keys); Integrated Gradients starts from the
    ``PAD`` embedding, the zero vector."""

    def __init__(self, model: AdditiveAttentionClassifier, vocabulary: Vocabulary, ig_steps: int):
        self.name = "BiLSTM + additive attention"
        self.model = model.eval()
        self.vocabulary = vocabulary
        self.replacement_id = UNK
        self.ig_steps = ig_steps
        self.not_applicable = dict(NOT_APPLICABLE_BILSTM)
        d = model.encoder.d_out
        # the model has no value or output projection: f(h) = h (Kobayashi et al.'s ‖α_t f(h_t)‖
        # with f the identity), given to value_norm as an identity linear map
        self.identity = torch.nn.Linear(d, d, bias=False)
        with torch.no_grad():
            self.identity.weight.copy_(torch.eye(d))

    def batches(self, sentences: Sequence[Sequence[str]], size: int) -> Iterator[FaithfulnessBatch]:
        for start in range(0, len(sentences), size):
            ids = pad([self.vocabulary.encode(list(s)) for s in sentences[start : start + size]])
            with torch.no_grad():
                predicted = self.model(ids).argmax(-1)
            yield FaithfulnessBatch(ids, ids, ids != PAD, predicted)

    def importance(self, method: str, batch: FaithfulnessBatch) -> Tensor:
        from attnkit.interpret import (
            gradient_weighted_attention,
            input_x_gradient,
            integrated_gradients,
            record,
            value_norm,
        )

        model, ids = self.model, batch.ids
        if method == "attention":
            with torch.no_grad(), record(model, modules=[ATTENTION]) as rec:
                model(ids)
            return rec[ATTENTION][:, 0, 0]
        if method == "gradient_attention":
            maps = gradient_weighted_attention(
                model, lambda: model(ids), _predicted_score(batch.predicted), modules=[ATTENTION]
            )
            return maps[ATTENTION][:, 0, 0]
        if method == "value_norm":
            with torch.no_grad():
                maps = value_norm(model, ids, output_projections={ATTENTION: self.identity})
            return maps[ATTENTION][:, 0, 0]
        if method == "input_x_gradient":
            return input_x_gradient(model, ids, target=batch.predicted)["embedding"]
        if method == "integrated_gradients":
            maps = integrated_gradients(
                model, ids, target=batch.predicted, baseline=PAD, steps=self.ig_steps
            )
            return maps["embedding"]
        raise ValueError(f"{method!r} is not computed for the BiLSTM")


class MiniLMSubject(FaithfulnessSubject):
    """A BERT-style Hugging Face classifier loaded with ``attn_implementation="attnkit"`` (the
    fine-tuned all-MiniLM-L6-v2). The maps are read from the ``[CLS]`` row (the token the
    classifier reads): the last layer's attention (heads averaged), rollout and flow over all
    layers, the last layer's gradient-weighted attention (heads averaged) and value norms
    (heads summed), value zeroing's rollout, ALTI's rollout; input×gradient and Integrated
    Gradients at the word embeddings (IG from the ``[PAD]`` embedding). Removed tokens become
    ``[MASK]``; ``[CLS]``, ``[SEP]`` and padding are never removed."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, ig_steps: int, max_length: int):
        self.name = "MiniLM-L6 (all-MiniLM-L6-v2, fine-tuned)"
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.replacement_id = int(tokenizer.mask_token_id)
        self.ig_steps = ig_steps
        self.max_length = max_length
        self.not_applicable: dict[str, str] = {}
        layers = [
            n for n, _ in model.named_modules() if n.endswith("attention.self")
        ]  # bottom first, as named_modules() walks encoder.layer.0, 1, ...
        self.layers, self.top = layers, layers[-1]
        self.embedding = next(
            n for n, m in model.named_modules() if m is model.get_input_embeddings()
        )

    def batches(self, sentences: Sequence[Sequence[str]], size: int) -> Iterator[FaithfulnessBatch]:
        for start in range(0, len(sentences), size):
            texts = [" ".join(s) for s in sentences[start : start + size]]
            encoded = self.tokenizer(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_special_tokens_mask=True,
            )
            specials = encoded.pop("special_tokens_mask").bool()
            inputs = {
                "input_ids": encoded["input_ids"],
                "attention_mask": encoded["attention_mask"],
            }
            with torch.no_grad():
                predicted = self.model(**inputs).logits.argmax(-1)
            candidates = inputs["attention_mask"].bool() & ~specials
            yield FaithfulnessBatch(inputs, inputs["input_ids"], candidates, predicted)

    def _maps(self, inputs: dict[str, Tensor]) -> list[Tensor]:
        from attnkit.interpret import record

        with torch.no_grad(), record(self.model, modules=self.layers) as rec:
            self.model(**inputs)
        return [rec[name] for name in self.layers]

    def importance(self, method: str, batch: FaithfulnessBatch) -> Tensor:
        from attnkit.interpret import (
            alti,
            attention_rollout,
            gradient_weighted_attention,
            input_x_gradient,
            integrated_gradients,
            value_norm,
            value_zeroing,
        )

        model, inputs = self.model, batch.inputs
        if method == "attention":
            return self._maps(inputs)[-1].mean(1)[:, 0]
        if method == "rollout":
            return attention_rollout(self._maps(inputs))[:, 0]
        if method == "flow":
            return cls_flow(self._maps(inputs), inputs["attention_mask"].sum(-1).tolist())
        if method == "gradient_attention":
            maps = gradient_weighted_attention(
                model,
                lambda: model(**inputs).logits,
                _predicted_score(batch.predicted),
                modules=[self.top],
            )
            return maps[self.top].mean(1)[:, 0]
        if method == "value_norm":
            with torch.no_grad():
                maps = value_norm(model, **inputs, heads="sum", modules=[self.top])
            return maps[self.top][:, 0, 0]
        if method == "value_zeroing":
            with torch.no_grad():
                scores = value_zeroing(model, **inputs, modules=self.layers)
            zeroed = [scores[name].unsqueeze(1) for name in self.layers]
            # the paper's rollout: rows normalised, layers multiplied without a residual
            return attention_rollout(zeroed, residual=0.0)[:, 0]
        if method == "alti":
            with torch.no_grad():
                result = alti(model, **inputs, modules=self.layers)
            return result.rollout[self.top][:, 0]
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        if method == "input_x_gradient":
            maps = input_x_gradient(model, ids, attention_mask=mask, target=batch.predicted)
            return maps[self.embedding]
        if method == "integrated_gradients":
            maps = integrated_gradients(
                model,
                ids,
                attention_mask=mask,
                target=batch.predicted,
                baseline=int(self.tokenizer.pad_token_id),
                steps=self.ig_steps,
            )
            return maps[self.embedding]
        raise ValueError(f"{method!r} is not computed for MiniLM")
