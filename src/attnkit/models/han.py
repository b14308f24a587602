"""Hierarchical attention network for document classification (Yang et al. 2016; survey §3.1.2).

    word ids [B, S, W] ─► embedding ─► word BiGRU ─► word attention (u_w) ─► sentence vectors
    sentence vectors [B, S, 2h] ─► sentence BiGRU ─► sentence attention (u_s) ─► v [B, 2h]
    v ─► softmax(W_c v + b_c)                                                   (HAN eq. 11)

HAN's word attention is ``u_it = tanh(W_w h_it + b_w)``, ``α_it = softmax_t(u_it^T u_w)``,
``s_i = Σ_t α_it h_it`` (HAN eq. 5-7), and the same at the sentence level (eq. 8-10). Both levels
are :class:`attnkit.mechanisms.HierarchicalAttention` with the additive score
``w^T tanh(W_1 q + W_2 k + b)`` over a learned query ``q``: ``W_2`` is ``W_w``, the constant
``W_1 q + b`` is ``b_w`` and ``w`` plays ``u_w`` — the same family of functions as HAN's, with
one redundant parameter. Every attention goes through :func:`attnkit.attention`, so
:func:`attnkit.evaluate.ablate` and :func:`attnkit.interpret.record` see both levels.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.hierarchical import (
    HierarchicalAttention,
    HierarchicalAttentionOutput,
    RecurrentEncoder,
)


class HierarchicalAttentionNetwork(nn.Module):
    """Yang et al.'s HAN: word and sentence BiGRUs, each followed by self-attentive pooling.

    Args:
        vocab_size: number of word ids (id ``PAD`` = 0 is padding).
        num_classes: ``C``.
        embed_dim: size of the word embeddings.
        hidden_dim: ``h``, per direction of each bidirectional GRU (annotations are ``2h``).
        dropout: on the embeddings and on the document vector, in training mode only.

    Shapes: ``words`` long ``[B, S, W]`` (``S`` sentences of ``W`` word ids, ``PAD`` = 0 where
    there is no word; a sentence of only padding is a padded sentence) → logits ``[B, C]``.
    Padding never changes the logits: padded words and sentences are left out of both GRUs
    (packed) and get zero attention weight.

    Example::

        >>> import torch
        >>> from attnkit.models.han import HierarchicalAttentionNetwork
        >>> han = HierarchicalAttentionNetwork(vocab_size=50, num_classes=2, embed_dim=8,
        ...                                    hidden_dim=4)
        >>> words = torch.randint(1, 50, (3, 5, 7))       # 3 documents, 5 sentences, 7 words
        >>> han(words).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embed_dim: int = 100,
        hidden_dim: int = 50,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        d = 2 * hidden_dim
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.attention = HierarchicalAttention(
            d_word=d,
            d_sentence=d,
            score="additive",  # HAN eq. 5-6 / 8-9
            align="softmax",
            word_encoder=RecurrentEncoder(
                nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
            ),
            sentence_encoder=RecurrentEncoder(
                nn.GRU(d, hidden_dim, batch_first=True, bidirectional=True)
            ),
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d, num_classes)  # HAN eq. 11 (softmax in the loss)

    def attend(self, words: Tensor, *, return_weights: bool = False) -> HierarchicalAttentionOutput:
        """The document vectors ``v`` ``[B, 2h]`` and, when asked, the word weights
        ``[B, S, W]`` and sentence weights ``[B, S]``."""
        if words.dim() != 3 or words.dtype != torch.long:
            raise ValueError(
                f"words must be long word ids [B, S, W], got {words.dtype} {tuple(words.shape)}"
            )
        mask = words != PAD
        embedded = self.dropout(self.embedding(words))  # [B, S, W, e]
        return self.attention(embedded, mask, return_weights=return_weights)

    def forward(self, words: Tensor) -> Tensor:
        """Logits ``[B, C]`` of the documents ``words [B, S, W]``."""
        return self.classifier(self.dropout(self.attend(words).context))
