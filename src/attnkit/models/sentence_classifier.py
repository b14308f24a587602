"""Sentence classifiers over a bidirectional GRU, one per attention of the survey's Table 3 (§3.3).

    token ids [B, L] ─► embedding ─► BiGRU ─► H [B, L, 2h] ─► attention head ─► logits [B, C]

The heads, by the name a configuration gives (``model.attention``):

* ``"capsule"`` — Wang et al.'s RNN-Capsule [89] (survey eq. 43-45): one capsule per class with
  its own learned query over ``H``; trained with :func:`attnkit.mechanisms.capsule_loss` (the
  model's :meth:`SentenceClassifier.objective`); the logits are each capsule's ``w_c^T c_c + b_c``
  (the log-odds of ``p_c``, so their argmax is the capsule prediction).
* ``"multi_dimensional"`` — Shen et al.'s multi-dimensional ("source2token") self-attention
  (survey eq. 30-32): the additive score with a learned query gives one score per feature of
  ``H``, ``e_l = W_d^T tanh(W_1 q + W_2 h_l + b)``, normalised over the words separately for
  each feature, ``c = Σ_l a_l ⊙ h_l``; then a linear classifier.
* ``"multi_representational"`` — Kiela et al.'s dynamic meta-embeddings (survey eq. 21-22): two
  embedding tables of different sizes (``embed_dim``, ``second_embed_dim``) trained together,
  projected to ``embed_dim`` and mixed per token by
  :class:`attnkit.mechanisms.MultiRepresentationalAttention`; the BiGRU reads the meta-embeddings
  and a self-attentive additive pooling (a learned query) summarises ``H``.
* ``"uniform"`` — the uniform-attention baseline: the same encoder, and the mean of ``H`` over
  the real words, computed as attention with a constant zero query and the dot score (every
  score 0, so ``softmax`` gives ``1/L`` to each real word). It runs through the engine like the
  others, so the ablation column of Table 3 is defined for it (and equals the model).

Every attention goes through :func:`attnkit.attention`, so :func:`attnkit.evaluate.ablate` and
:func:`attnkit.interpret.record` see it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.scores import Additive
from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.capsule import CapsuleAttention, CapsuleOutput, capsule_loss
from attnkit.mechanisms.hierarchical import RecurrentEncoder
from attnkit.mechanisms.multi_representational import MultiRepresentationalAttention
from attnkit.mechanisms.self_attentive import ConstantQueryAttention, LearnedQueryAttention


class MetaEmbedding(nn.Module):
    """Kiela et al.'s dynamic meta-embedding: several embedding tables of the same words, mixed per
    token by multi-representational attention (survey eq. 21-22).

    Args:
        vocab_size: number of token ids (``PAD`` = 0 is padding).
        sizes: the tables' sizes ``(d_e1, …, d_eE)``.
        d_meta: ``d_t``, the size of the meta-embeddings.

    Shapes: ``tokens [B, L]``, bool ``mask [B, L]`` → ``[B, L, d_meta]`` (zero at padding).
    """

    def __init__(self, vocab_size: int, sizes: tuple[int, ...], d_meta: int) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(vocab_size, d, padding_idx=PAD) for d in sizes)
        self.attention = MultiRepresentationalAttention(sizes, d_meta)  # eq. (21)-(22)
        self.d_meta = d_meta

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        return self.attention([table(tokens) for table in self.tables], mask).context


class WordEmbedding(nn.Module):
    """One embedding table, called like :class:`MetaEmbedding`."""

    def __init__(self, vocab_size: int, d: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab_size, d, padding_idx=PAD)
        self.d_meta = d

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        return self.table(tokens)


class PooledHead(nn.Module):
    """A pooling attention over ``H`` then a linear classifier, trained with cross-entropy.

    Args:
        pool: ``pool(features [B, L, d], mask [B, L]) -> AttentionOutput`` with ``context [B, d]``
            (a :class:`LearnedQueryAttention` or :class:`ConstantQueryAttention`).
        d: size of the pooled vector.
        num_classes: ``C``.
        dropout: on the pooled vector, in training mode only.
    """

    def __init__(self, pool: nn.Module, d: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        self.pool = pool
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d, num_classes)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        return self.classifier(self.dropout(self.pool(features, mask).context))

    def loss(self, features: Tensor, mask: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(self(features, mask), labels)


class CapsuleHead(nn.Module):
    """RNN-Capsule's capsules (one per class) over ``H``; trained with :func:`capsule_loss`."""

    def __init__(self, d: int, num_classes: int) -> None:
        super().__init__()
        self.capsules = CapsuleAttention(d_feature=d, num_classes=num_classes)  # eq. (43)-(45)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        context = self.capsules(features, mask).context  # c_c [B, C, d]
        # The log-odds of p_c (eq. 44) rather than p_c itself: the same argmax, and a finite
        # cross-entropy for the trainer's validation loss even when a p_c saturates.
        weight = self.capsules.probability_weight.to(context.dtype)
        return (context * weight).sum(-1) + self.capsules.probability_bias.to(context.dtype)

    def loss(self, features: Tensor, mask: Tensor, labels: Tensor) -> Tensor:
        out: CapsuleOutput = self.capsules(features, mask)
        return capsule_loss(out, labels)


def _multi_dimensional_pool(d: int) -> nn.Module:
    # One score per feature of h_l (eq. 31); the learned query makes W_1 q a learned bias.
    score = Additive(d_query=d, d_key=d, d_hidden=d, value_features=d)
    return LearnedQueryAttention(d, d_query=d, score=score)


def _uniform_pool(d: int) -> nn.Module:
    # A constant zero query with the dot score: every score is 0, softmax gives 1/L per real word.
    return ConstantQueryAttention(d, query=torch.zeros(d), score="dot")


def _additive_pool(d: int) -> nn.Module:
    return LearnedQueryAttention(d, d_query=d, score="additive")


#: ``model.attention`` → the pooling attention of a :class:`PooledHead` over ``d`` features
POOLS: dict[str, Callable[[int], nn.Module]] = {
    "multi_dimensional": _multi_dimensional_pool,
    "multi_representational": _additive_pool,
    "uniform": _uniform_pool,
}
ATTENTIONS = ("capsule", *POOLS)


class SentenceClassifier(nn.Module):
    """Embedding, a bidirectional GRU over the real tokens, and an attention head (see the
    module docstring).

    Args:
        vocab_size: number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        attention: one of :data:`ATTENTIONS`.
        embed_dim: size of the (first) embedding; the meta-embedding's size for
            ``"multi_representational"``.
        second_embed_dim: size of the second embedding of ``"multi_representational"``.
        hidden_dim: ``h``, per direction of the GRU (``H`` is ``[B, L, 2h]``).
        dropout: on the embeddings and the pooled vector, in training mode only.

    Shapes: ``tokens`` long ``[B, L]`` (``PAD`` where there is no token) → logits ``[B, C]``.
    Padding never changes the logits (the GRU is packed; padded tokens get zero weight).

    Example::

        >>> import torch
        >>> from attnkit.models.sentence_classifier import SentenceClassifier
        >>> model = SentenceClassifier(50, 2, attention="multi_dimensional", embed_dim=8,
        ...                            hidden_dim=4)
        >>> model(torch.randint(1, 50, (3, 7))).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        attention: str = "capsule",
        embed_dim: int = 100,
        second_embed_dim: int = 50,
        hidden_dim: int = 64,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        self.attention = attention
        if attention == "multi_representational":
            self.embedding: nn.Module = MetaEmbedding(
                vocab_size, (embed_dim, second_embed_dim), embed_dim
            )
        else:
            self.embedding = WordEmbedding(vocab_size, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.encoder = RecurrentEncoder(
            nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        )
        d = 2 * hidden_dim
        if attention == "capsule":
            self.head: CapsuleHead | PooledHead = CapsuleHead(d, num_classes)
        else:
            self.head = PooledHead(POOLS[attention](d), d, num_classes, dropout)

    def encode(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """``H [B, L, 2h]`` (zero at padding) and the bool token mask ``[B, L]``."""
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            given = (
                f"{tokens.dtype} {tuple(tokens.shape)}"
                if isinstance(tokens, Tensor)
                else type(tokens).__name__
            )
            raise ValueError(f"tokens must be long token ids [B, L], got {given}")
        mask = tokens != PAD
        embedded = self.dropout(self.embedding(tokens, mask))
        return self.encoder(embedded, mask), mask

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``[B, C]`` of the sentences ``tokens [B, L]``."""
        return self.head(*self.encode(tokens))

    def objective(self, inputs: dict[str, Tensor], labels: Tensor) -> Tensor:
        """The training loss (mean over the batch): :func:`capsule_loss` for the capsule head,
        cross-entropy of the logits otherwise."""
        features, mask = self.encode(**inputs)
        return self.head.loss(features, mask, labels)
