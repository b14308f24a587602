"""The BiLSTM classifier with additive attention pooling of Jain & Wallace (2019), "Attention is
not Explanation" (NAACL) — the model whose attention weights their experiments question.

    token ids [B, L] ─► embedding ─► BiLSTM ─► H [B, L, 2h]
    e_l = w^T tanh(W h_l + b)              the additive ("tanh") score, survey eq. (33)
    a   = softmax(e)  over the real words  [B, L]
    c   = Σ_l a_l h_l                      [B, 2h]
    logits = W_o c + b_o                   [B, C]

The query is constant (zero), so the additive score ``w^T tanh(W_1 q + W_2 h_l + b)`` of Table 2
reduces to eq. (33), ``w^T tanh(W_2 h_l + b)``: the self-attentive pooling of a
:class:`~attnkit.mechanisms.ConstantQueryAttention`, run through :func:`attnkit.attention`, so
:func:`attnkit.interpret.record` and :func:`attnkit.evaluate.ablate` (the uniform-attention
baseline of Wiegreffe & Pinter 2019) see ``a``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.core.scores import Additive
from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.hierarchical import RecurrentEncoder
from attnkit.mechanisms.self_attentive import ConstantQueryAttention
from attnkit.models.word_embeddings import word_embedding


class BiLSTMAttentionClassifier(nn.Module):
    """Embedding, a bidirectional LSTM over the real words, additive attention pooling and a
    linear classifier (see the module docstring).

    Args:
        vocab_size: ``V``, number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        embed_dim: ``D``, the word vectors' size.
        hidden_dim: ``h``, per direction of the LSTM (``H`` is ``[B, L, 2h]``).
        attention_hidden: ``d_w``, the hidden layer of the additive score (rows of ``W``).
        dropout: on the word vectors and the context vector, in training mode only.
        embeddings: ``[V, D]`` initial word vectors (e.g. GloVe), or ``None`` for random ones.

    Shapes: ``tokens`` long ``[B, L]`` (``PAD`` after each sentence) → logits ``[B, C]``.
    Padding never changes the logits (the LSTM is packed; padded words get zero weight).

    Example::

        >>> model = BiLSTMAttentionClassifier(50, 2, embed_dim=8, hidden_dim=4, attention_hidden=5)
        >>> model(torch.randint(1, 50, (3, 6))).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embed_dim: int = 100,
        hidden_dim: int = 128,
        attention_hidden: int = 128,
        dropout: float = 0.5,
        embeddings: Tensor | None = None,
    ) -> None:
        super().__init__()
        self.embedding = word_embedding(vocab_size, embed_dim, embeddings)
        self.dropout = nn.Dropout(dropout)
        self.encoder = RecurrentEncoder(
            nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        )
        d = 2 * hidden_dim
        # A zero query of size 1: W_1 q vanishes, leaving eq. (33)'s w^T tanh(W_2 h_l + b).
        score = Additive(d_query=1, d_key=d, d_hidden=attention_hidden)
        self.attention = ConstantQueryAttention(d, query=torch.zeros(1), score=score)
        self.classifier = nn.Linear(d, num_classes)

    def encode(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """``H [B, L, 2h]`` (zero at padding) and the bool word mask ``[B, L]``."""
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            given = (
                f"{tokens.dtype} {tuple(tokens.shape)}"
                if isinstance(tokens, Tensor)
                else type(tokens).__name__
            )
            raise ValueError(f"tokens must be long token ids [B, L], got {given}")
        mask = tokens != PAD
        return self.encoder(self.dropout(self.embedding(tokens)), mask), mask

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``[B, C]`` of the sentences ``tokens [B, L]``."""
        states, mask = self.encode(tokens)
        context = self.attention(states, mask).context  # c = Σ_l a_l h_l [B, 2h]
        return self.classifier(self.dropout(context))
