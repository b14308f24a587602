"""A sentence-pair classifier with co-attention (Lu et al. 2016; survey §3.1.1, eq. 6-16).

    English ids [B, N_e] ─► embedding ─► BiGRU ─► E [B, N_e, 2h] ─┐
                                                                  ├─► co-attention ─► c^(1), c^(2)
    French ids  [B, N_f] ─► embedding ─► BiGRU ─► F [B, N_f, 2h] ─┘
    m = [c^(1); c^(2); c^(1) ⊙ c^(2); |c^(1) − c^(2)|] ─► tanh(W_h m + b_h) ─► W_o · + b_o ─► logits

Set 1 of the co-attention is the English sentence, set 2 the French one (Lu et al.'s image and
question). ``style="parallel"``: :class:`attnkit.mechanisms.ParallelCoAttention` with the bilinear
affinity ``A = tanh(E W_A F^T)`` (eq. 12) and additive aggregation (eq. 14-15); ``"alternating"``:
:class:`attnkit.mechanisms.AlternatingCoAttention` (eq. 6-9: English summarised without a query,
French attended with that summary, English again with the French context).

The matching features ``m`` (what this model adds beyond the mechanism) are the heuristic
matching of Mou et al. (2016): both context vectors, their element-wise product and absolute
difference, so the classifier can compare the two sentences' attended summaries feature by
feature. Every attention runs on :func:`attnkit.attention`, so :func:`attnkit.evaluate.ablate`
and :func:`attnkit.interpret.record` reach it.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.co_attention import (
    AlternatingCoAttention,
    CoAttentionOutput,
    ParallelCoAttention,
)
from attnkit.mechanisms.hierarchical import RecurrentEncoder

STYLES = ("parallel", "alternating")


def matching_features(c1: Tensor, c2: Tensor) -> Tensor:
    """``[c1; c2; c1 ⊙ c2; |c1 − c2|]`` (Mou et al. 2016): ``[B, d]`` twice → ``[B, 4d]``."""
    return torch.cat([c1, c2, c1 * c2, (c1 - c2).abs()], -1)


class SentenceEncoder(nn.Module):
    """Word embeddings and a bidirectional GRU over the real tokens (zero at padding).

    Shapes: ``tokens [B, N]`` (``PAD`` = 0) → ``(features [B, N, 2h], mask [B, N])``.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.rnn = RecurrentEncoder(
            nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        )

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        if tokens.shape[1] == 0:  # an RNN needs one step: one PAD, masked out (a zero context)
            tokens = tokens.new_full((tokens.shape[0], 1), PAD)
        mask = tokens != PAD
        return self.rnn(self.embedding(tokens), mask), mask


class CoAttentionClassifier(nn.Module):
    """Classifies a pair of sentences from their co-attended summaries (module docstring).

    Args:
        vocab_size1, vocab_size2: vocabulary sizes of the two sentences (English, French).
        num_classes: ``C``.
        style: ``"parallel"`` (eq. 12-16) or ``"alternating"`` (eq. 6-9).
        embed_dim: word embedding size of both sentences.
        hidden_dim: ``h``, per direction of each BiGRU (features ``2h``), and the size of the
            hidden layer of the classifier.
        dropout: on the embeddings and on the matching features, in training mode only.

    Shapes: ``tokens1 [B, N1]``, ``tokens2 [B, N2]`` (``PAD`` = 0) → logits ``[B, C]``.

    Example::

        >>> model = CoAttentionClassifier(50, 60, 2, style="alternating", embed_dim=8, hidden_dim=4)
        >>> model(torch.randint(1, 50, (3, 5)), torch.randint(1, 60, (3, 7))).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        vocab_size1: int,
        vocab_size2: int,
        num_classes: int,
        style: Literal["parallel", "alternating"] = "parallel",
        embed_dim: int = 64,
        hidden_dim: int = 64,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        self.style = style
        self.encoder1 = SentenceEncoder(vocab_size1, embed_dim, hidden_dim)
        self.encoder2 = SentenceEncoder(vocab_size2, embed_dim, hidden_dim)
        d = 2 * hidden_dim
        self.co_attention: ParallelCoAttention | AlternatingCoAttention
        if style == "parallel":
            self.co_attention = ParallelCoAttention(d, d, score="bilinear", aggregation="additive")
        else:
            self.co_attention = AlternatingCoAttention(d, d, score="additive")
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(4 * d, hidden_dim)
        self.output = nn.Linear(hidden_dim, num_classes)

    def attend(
        self, tokens1: Tensor, tokens2: Tensor, return_weights: bool = False
    ) -> CoAttentionOutput:
        """The co-attention of the two encoded sentences (``contexts["1"]``, ``contexts["2"]``)."""
        for name, tokens in (("tokens1", tokens1), ("tokens2", tokens2)):
            if tokens.dim() != 2 or tokens.dtype != torch.long:
                raise ValueError(
                    f"{name} must be int64 token ids [B, N], got {tokens.dtype} "
                    f"{tuple(tokens.shape)}"
                )
        if tokens1.shape[0] != tokens2.shape[0]:
            raise ValueError(
                f"tokens1 and tokens2 need one batch size, got {tokens1.shape[0]} and "
                f"{tokens2.shape[0]}"
            )
        f1, m1 = self.encoder1(tokens1)
        f2, m2 = self.encoder2(tokens2)
        f1, f2 = self.dropout(f1), self.dropout(f2)
        return self.co_attention(f1, f2, m1, m2, return_weights=return_weights)

    def classify(self, c1: Tensor, c2: Tensor) -> Tensor:
        """Logits from the two context vectors: ``W_o tanh(W_h m + b_h) + b_o``."""
        hidden = torch.tanh(self.hidden(self.dropout(matching_features(c1, c2))))
        return self.output(hidden)

    def forward(self, tokens1: Tensor, tokens2: Tensor) -> Tensor:
        out = self.attend(tokens1, tokens2)
        return self.classify(out.contexts["1"], out.contexts["2"])


__all__ = ["CoAttentionClassifier", "SentenceEncoder", "matching_features"]
