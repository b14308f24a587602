"""Lin et al. (2017), "A Structured Self-Attentive Sentence Embedding" (ICLR): a bidirectional LSTM,
``r`` hops of structured self-attention, and an MLP over the ``r × 2u`` sentence-embedding matrix.

    token ids [B, L] ─► embedding ─► BiLSTM ─► H [B, L, 2u]
    A = softmax(W_s2 tanh(W_s1 Hᵀ))                 [B, r, L]   one distribution per hop
    M = A H                                          [B, r, 2u]  the sentence embedding
    logits = W_2 ReLU(W_1 vec(M) + b_1) + b_2        [B, C]
    loss   = cross-entropy + coefficient · ‖A Aᵀ − I‖²_F          (mean over the batch)

In the survey's words each hop is a learned self-attentive query (eq. 34) ``q_i``, the ``i``-th row
of ``W_s2 [r, d_a]``, scored against the keys ``tanh(W_s1 h_l)`` by a dot product:
``e_{i,l} = q_i^T tanh(W_s1 h_l)`` — the additive score of Table 2 without a query term and with
one output vector per query (:class:`StructuredScore`). The ``r`` queries are run by one
:class:`~attnkit.mechanisms.LearnedQueryAttention` call through :func:`attnkit.attention`, so
:func:`attnkit.interpret.record` and :func:`attnkit.evaluate.ablate` see ``A``.

The penalty ``P = ‖A Aᵀ − I‖²_F`` (:func:`structured_penalty`) pushes the hops apart: each row of
``A`` towards one word (the diagonal of ``A Aᵀ`` towards 1) and different rows towards different
words (the off-diagonal towards 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.scores import Score
from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.hierarchical import RecurrentEncoder
from attnkit.mechanisms.self_attentive import LearnedQueryAttention
from attnkit.models.word_embeddings import word_embedding


class StructuredScore(Score):
    """Lin et al.'s score ``e_{i,l} = q_i^T tanh(W_s1 k_l)`` (the rows of ``W_s2`` are the ``q_i``).

    The additive score of Table 2, ``w^T tanh(W_1 q + W_2 k + b)``, with no query term
    (``W_1 = 0``, ``b = 0``, as eq. 33) and a vector ``w = q_i`` of its own for each query; written
    as a dot product of the query with the per-key features ``tanh(W_s1 k_l)``, so the engine's
    dot-product paths compute it.

    Args:
        d_key: ``2u``, the size of the keys (the BiLSTM states).
        d_hidden: ``d_a``, the rows of ``W_s1 [d_a, 2u]`` and the size of the queries.

    Shapes: ``q [..., r, d_a]``, ``k [..., N, 2u]`` → ``e [..., r, N]``.

    Example::

        >>> score = StructuredScore(d_key=8, d_hidden=5)
        >>> score(torch.randn(2, 3, 5), torch.randn(2, 7, 8)).shape
        torch.Size([2, 3, 7])
    """

    parametric = True
    pairwise_is_dot = True
    taxonomy = {"scoring": "Additive"}

    def __init__(self, d_key: int, d_hidden: int) -> None:
        super().__init__()
        self.d_key, self.d_hidden = d_key, d_hidden
        self.key_proj = nn.Linear(d_key, d_hidden, bias=False)  # W_s1
        self.elements_per_score = 1

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        if d_query != self.d_hidden or d_key != self.d_key:
            raise ValueError(
                f"StructuredScore was built for queries of d_a={self.d_hidden} and keys of "
                f"2u={self.d_key}, got d_q={d_query} and d_k={d_key}"
            )

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q, torch.tanh(self.key_proj(k))  # q_i, tanh(W_s1 k_l)


def structured_penalty(weights: Tensor) -> Tensor:
    """Lin et al.'s penalty ``P = ‖A Aᵀ − I‖²_F`` of each example.

    Args:
        weights: ``A [B, r, N]``, each row a distribution over the ``N`` words.

    Returns:
        ``[B]``: the squared Frobenius norm of ``A Aᵀ − I_r`` per example.

    Example::

        >>> structured_penalty(torch.eye(2, 3)[None])  # two hops on two different words
        tensor([0.])
    """
    if weights.dim() != 3:
        raise ValueError(f"weights must be A [B, r, N], got {tuple(weights.shape)}")
    gram = weights @ weights.transpose(-2, -1)  # A Aᵀ [B, r, r]
    identity = torch.eye(weights.shape[-2], dtype=weights.dtype, device=weights.device)
    return (gram - identity).pow(2).sum((-2, -1))


class SelfAttentiveClassifier(nn.Module):
    """Lin et al.'s structured self-attentive sentence classifier (see the module docstring).

    Args:
        vocab_size: ``V``, number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        embed_dim: ``D``, the word vectors' size.
        hidden_dim: ``u``, per direction of the LSTM (``H`` is ``[B, L, 2u]``).
        attention_hidden: ``d_a``, the rows of ``W_s1``.
        hops: ``r``, the rows of ``W_s2`` (attention distributions per sentence).
        mlp_hidden: hidden units of the MLP classifier.
        penalty: the coefficient of ``‖A Aᵀ − I‖²_F`` in :meth:`objective` (0: none).
        dropout: on the word vectors and on the MLP's hidden layer, in training mode only.
        embeddings: ``[V, D]`` initial word vectors (e.g. GloVe), or ``None`` for random ones.

    Shapes: ``tokens`` long ``[B, L]`` (``PAD`` after each sentence) → logits ``[B, C]``.
    Padding never changes the logits (the LSTM is packed; padded words get zero weight).

    Example::

        >>> model = SelfAttentiveClassifier(50, 3, embed_dim=8, hidden_dim=4,
        ...                                 attention_hidden=6, hops=2, mlp_hidden=10)
        >>> tokens = torch.randint(1, 50, (4, 7))
        >>> model(tokens).shape
        torch.Size([4, 3])
        >>> float(model.objective({"tokens": tokens}, torch.tensor([0, 1, 2, 0]))) > 0
        True
    """

    taxonomy = {"query_multiplicity": "Multi-Head"}  # r learned queries over the same keys

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embed_dim: int = 100,
        hidden_dim: int = 150,
        attention_hidden: int = 100,
        hops: int = 10,
        mlp_hidden: int = 500,
        penalty: float = 1.0,
        dropout: float = 0.5,
        embeddings: Tensor | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("embed_dim", embed_dim),
            ("hidden_dim", hidden_dim),
            ("attention_hidden", attention_hidden),
            ("hops", hops),
            ("mlp_hidden", mlp_hidden),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not penalty >= 0.0:
            raise ValueError(f"penalty must be >= 0, got {penalty!r}")
        self.penalty = float(penalty)
        self.embedding = word_embedding(vocab_size, embed_dim, embeddings)
        self.dropout = nn.Dropout(dropout)
        self.encoder = RecurrentEncoder(
            nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        )
        d = 2 * hidden_dim
        # W_s2 is the queries [r, d_a] of the learned self-attentive queries; W_s1 is the score's.
        self.attention = LearnedQueryAttention(
            d,
            num_queries=hops,
            d_query=attention_hidden,
            score=StructuredScore(d, attention_hidden),
        )
        self.hidden = nn.Linear(hops * d, mlp_hidden)
        self.classifier = nn.Linear(mlp_hidden, num_classes)

    def encode(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """``H [B, L, 2u]`` (zero at padding) and the bool word mask ``[B, L]``."""
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            given = (
                f"{tokens.dtype} {tuple(tokens.shape)}"
                if isinstance(tokens, Tensor)
                else type(tokens).__name__
            )
            raise ValueError(f"tokens must be long token ids [B, L], got {given}")
        mask = tokens != PAD
        return self.encoder(self.dropout(self.embedding(tokens)), mask), mask

    def _logits(self, tokens: Tensor, *, weights: bool) -> tuple[Tensor, Tensor | None]:
        states, mask = self.encode(tokens)
        out = self.attention(states, mask, return_weights=weights)  # M = A H [B, r, 2u]
        hidden = self.dropout(F.relu(self.hidden(out.context.flatten(1))))
        return self.classifier(hidden), out.weights

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``[B, C]`` of the sentences ``tokens [B, L]``."""
        return self._logits(tokens, weights=False)[0]

    def objective(self, inputs: dict[str, Tensor], labels: Tensor) -> Tensor:
        """Cross-entropy plus ``penalty`` times the batch mean of ``‖A Aᵀ − I‖²_F``."""
        logits, weights = self._logits(inputs["tokens"], weights=self.penalty > 0)
        loss = F.cross_entropy(logits, labels)
        if weights is None:
            return loss
        return loss + self.penalty * structured_penalty(weights).mean()
