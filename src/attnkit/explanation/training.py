"""Training and evaluating the classifier of the explanation experiments: Jain & Wallace's
embedding → encoder → additive attention → decoder model
(:class:`attnkit.models.additive_attention_classifier.AdditiveAttentionClassifier`), trained by
Adam on a :class:`Corpus`, the epoch of best validation accuracy kept.

Shapes: ``tokens`` long ``[B, L]``, probabilities ``[B, C]`` (``C`` classes), attention ``α``
over the real tokens of each example.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from attnkit.evaluate.metrics import accuracy, macro_f1
from attnkit.explanation.attention_modes import attention_session, frozen_random_scores
from attnkit.explanation.data import Batch, Corpus, Split, batch_of, batches
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier


@dataclass(frozen=True)
class Setting:
    """Sizes and optimisation of one training run (Jain & Wallace's values where stated)."""

    encoder: str = "lstm"
    hidden_dim: int = 128
    attention_dim: int = 128
    epochs: int = 8
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-5
    kernel_sizes: tuple[int, ...] = (1, 3, 5, 7)  # the CNN encoder's widths (theirs)
    # stop once this many epochs in a row have not raised the best validation accuracy, or
    # once it is 1 (None: always ``epochs``); the kept epoch is the same either way
    patience: int | None = None
    train_limit: int | None = None  # keep the first N training examples (--quick)


def encoder_setting(base: Setting, encoder: str) -> Setting:
    """``base`` for one of Jain & Wallace's encoders, sized as their configuration sizes it:
    the BiLSTM and the average encoder take ``base`` as it is; the CNN splits ``hidden_dim``
    among its kernel widths (``hidden_dim // len(kernel_sizes)`` filters each, so its states
    have about ``hidden_dim`` features, not one block of ``hidden_dim`` per width) and scores
    them with an additive attention of half that size (their tanh attention's ``d / 2``)."""
    if encoder != "cnn":
        return replace(base, encoder=encoder)
    filters = max(1, base.hidden_dim // len(base.kernel_sizes))
    size = filters * len(base.kernel_sizes)
    return replace(base, encoder=encoder, hidden_dim=filters, attention_dim=max(1, size // 2))


def build_model(corpus: Corpus, setting: Setting) -> AdditiveAttentionClassifier:
    return AdditiveAttentionClassifier(
        len(corpus.vocabulary),
        corpus.classes,
        encoder=setting.encoder,
        hidden_dim=setting.hidden_dim,
        attention_dim=setting.attention_dim,
        kernel_sizes=setting.kernel_sizes,
        embeddings=corpus.embeddings,
        question=corpus.answers_questions,
    )


Objective = Callable[[AdditiveAttentionClassifier, Batch, list[int]], Tensor]


def cross_entropy(model: AdditiveAttentionClassifier, batch: Batch, _indices: list[int]) -> Tensor:
    return F.cross_entropy(model(batch.tokens, batch.question), batch.labels)


def train(
    corpus: Corpus,
    setting: Setting,
    seed: int,
    *,
    mode: str = "trained",
    objective: Objective = cross_entropy,
    select: str = "accuracy",
    log: Callable[[str], None] = print,
    progress: bool = False,
) -> tuple[AdditiveAttentionClassifier, dict[str, float]]:
    """Train a model (Adam, ``setting.epochs`` epochs, fewer with ``setting.patience``) and
    keep the epoch best on validation.

    Args:
        corpus: the data.
        setting: sizes and optimisation.
        seed: seeds the initialisation and the batch order.
        mode: attention during training and evaluation (:func:`attention_session`).
        objective: ``fn(model, batch, train indices) -> loss`` (cross-entropy by default).
        select: ``"accuracy"`` (the epoch of highest validation accuracy) or ``"last"`` (the
            final epoch: an objective other than accuracy, e.g. the adversary's).
        log: where the line of each epoch goes.
        progress: a progress bar over each epoch's batches (tqdm, on stderr).

    Returns:
        The model (eval mode) and its validation/test accuracy and macro-F1.
    """
    torch.manual_seed(seed)
    model = build_model(corpus, setting)
    random_scores = frozen_random_scores(len(corpus.vocabulary), seed + 1)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(params, lr=setting.lr, weight_decay=setting.weight_decay)
    generator = torch.Generator().manual_seed(seed)
    train_split = corpus.train
    if setting.train_limit is not None:
        train_split = train_split.subset(range(min(setting.train_limit, len(train_split))))
    best: tuple[float, dict[str, Tensor]] | None = None
    since_best = 0
    for epoch in range(1, setting.epochs + 1):
        model.train()
        started, total, count = time.time(), 0.0, 0
        order = torch.randperm(len(train_split), generator=generator).tolist()
        starts = range(0, len(order), setting.batch_size)
        for start in tqdm(starts, desc=f"epoch {epoch}", leave=False, disable=not progress):
            indices = order[start : start + setting.batch_size]
            batch = batch_of(train_split, indices)
            with attention_session(model, mode, batch.tokens, random_scores):
                loss = objective(model, batch, indices)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total, count = total + loss.item() * len(indices), count + len(indices)
        model.eval()
        valid = evaluate(model, corpus.valid, mode, random_scores)["accuracy"]
        log(
            f"  epoch {epoch}: train loss {total / max(count, 1):.4f}, valid accuracy "
            f"{valid:.4f} ({time.time() - started:.0f} s)"
        )
        key = valid if select == "accuracy" else float(epoch)  # "last": the final epoch
        if best is None or key > best[0]:
            best = (key, {k: v.detach().clone() for k, v in model.state_dict().items()})
            since_best = 0
        else:
            since_best += 1
        if select == "accuracy" and setting.patience is not None:
            # no later epoch can be kept: none beats a perfect score, and a run of epochs
            # without a gain is taken as the end of the gains
            if best[0] >= 1.0 or since_best >= setting.patience:
                log(f"  stopped after epoch {epoch} (best validation accuracy {best[0]:.4f})")
                break
    assert best is not None
    model.load_state_dict(best[1])
    model.eval()
    metrics = {
        f"valid_{k}": v for k, v in evaluate(model, corpus.valid, mode, random_scores).items()
    }
    metrics.update(
        {f"test_{k}": v for k, v in evaluate(model, corpus.test, mode, random_scores).items()}
    )
    return model, metrics


@torch.no_grad()
def predict(
    model: AdditiveAttentionClassifier,
    split: Split,
    mode: str = "trained",
    random_scores: Tensor | None = None,
    size: int = 256,
) -> tuple[Tensor, list[Tensor]]:
    """Probabilities ``[len(split), C]`` and each example's attention over its real tokens."""
    probabilities, attention = [], []
    for batch in batches(split, size):
        with attention_session(model, mode, batch.tokens, random_scores):
            states, query = model.encode(model.embed(batch.tokens), batch.mask, batch.question)
            if mode == "trained":
                logits, weights = model.decode(states, batch.mask, query, return_attention=True)
            else:
                logits = model.decode(states, batch.mask, query)
                weights = torch.zeros(batch.tokens.shape)
        probabilities.append(logits.softmax(-1))
        for row, n in zip(weights, batch.mask.sum(-1).tolist(), strict=True):
            attention.append(row[:n].clone())
    return torch.cat(probabilities), attention


def evaluate(
    model: AdditiveAttentionClassifier,
    split: Split,
    mode: str = "trained",
    random_scores: Tensor | None = None,
) -> dict[str, float]:
    """Accuracy and macro-F1 on ``split``."""
    probabilities, _ = predict(model, split, mode, random_scores)
    predicted, target = probabilities.argmax(-1), torch.tensor(split.labels)
    return {"accuracy": accuracy(predicted, target), "f1": macro_f1(predicted, target)}
