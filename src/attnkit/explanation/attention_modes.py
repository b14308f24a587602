"""How the classifier attends during an experiment: its own trained weights, uniform weights, or
a frozen random attention; each replacement is a hook of the attention engine
(:func:`attnkit.evaluate.ablate` on the module named :data:`ATTENTION`), never a rewritten
forward."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from attnkit.data.vocabulary import PAD
from attnkit.evaluate.ablation import ablate
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier

ATTENTION = "attention"  # the model's attention module, as named in model.named_modules()


def frozen_random_scores(vocab_size: int, seed: int) -> Tensor:
    """One standard-normal score per word id, drawn once: the frozen random attention of a
    sentence is ``softmax`` of its words' scores (random, but the same at training and test)."""
    return torch.randn(vocab_size, generator=torch.Generator().manual_seed(seed))


def attention_session(
    model: AdditiveAttentionClassifier,
    mode: str,
    tokens: Tensor,
    random_scores: Tensor | None = None,
) -> contextlib.AbstractContextManager:
    """The context in which ``model`` attends: ``"trained"`` (its own ``α``), ``"uniform"``
    (``1/L`` over the real tokens) or ``"random"`` (frozen random, :func:`frozen_random_scores`).
    Replacements are :func:`attnkit.evaluate.ablate` hooks on the attention module."""
    if mode == "trained":
        return contextlib.nullcontext()
    if mode == "uniform":
        return ablate(model, "uniform", modules=[ATTENTION])
    if mode == "random":
        assert random_scores is not None
        scores = random_scores[tokens].masked_fill(tokens == PAD, float("-inf"))

        def frozen(weights: Tensor, admissible: Tensor) -> Tensor:
            return scores.softmax(-1).to(weights.dtype).view(weights.shape)

        return ablate(model, frozen, modules=[ATTENTION])
    raise ValueError(f"attention mode must be 'trained', 'uniform' or 'random', got {mode!r}")
