"""The BiGRU sentence classifiers of :mod:`attnkit.models.sentence_classifier` (capsule,
multi-dimensional and uniform attention heads) with word vectors that start from a given matrix.

The model is :class:`~attnkit.models.sentence_classifier.SentenceClassifier` unchanged — the same
encoder, heads and training objective — with its one embedding table initialised from
``embeddings`` (e.g. GloVe vectors from :func:`attnkit.data.glove.embedding_matrix`) and trained
with the rest, the "-non-static" column of Kim (2014). Without ``embeddings`` it is the
``SentenceClassifier`` itself (PyTorch's ``N(0, 1)`` table).
"""

from __future__ import annotations

from torch import Tensor

from attnkit.models.sentence_classifier import SentenceClassifier, WordEmbedding
from attnkit.models.word_embeddings import word_embedding

#: the heads of :class:`SentenceClassifier` that read one embedding table
ONE_TABLE_ATTENTIONS = ("capsule", "multi_dimensional", "uniform")


class PretrainedSentenceClassifier(SentenceClassifier):
    """A :class:`SentenceClassifier` whose embedding table starts from ``embeddings``.

    Args:
        vocab_size: ``V``, number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        attention: ``"capsule"``, ``"multi_dimensional"`` or ``"uniform"`` (one table; the
            meta-embeddings of ``"multi_representational"`` mix two tables of their own).
        embed_dim: ``D``, the word vectors' size.
        hidden_dim: ``h``, per direction of the GRU.
        dropout: on the word vectors and the pooled vector, in training mode only.
        embeddings: ``[V, D]`` initial word vectors, or ``None`` for random ones.

    Shapes: ``tokens`` long ``[B, L]`` → logits ``[B, C]``, as :class:`SentenceClassifier`.

    Example::

        >>> import torch
        >>> model = PretrainedSentenceClassifier(
        ...     20, 2, attention="capsule", embed_dim=4, hidden_dim=3, embeddings=torch.ones(20, 4))
        >>> model.embedding.table.weight[5].tolist()
        [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        attention: str = "capsule",
        embed_dim: int = 100,
        hidden_dim: int = 64,
        dropout: float = 0.0,
        embeddings: Tensor | None = None,
    ) -> None:
        if attention not in ONE_TABLE_ATTENTIONS:
            raise ValueError(
                f"attention must be one of {ONE_TABLE_ATTENTIONS} (one embedding table), got "
                f"{attention!r}"
            )
        super().__init__(
            vocab_size,
            num_classes,
            attention=attention,
            embed_dim=embed_dim,
            hidden_dim=hidden_dim,
            dropout=dropout,
        )
        assert isinstance(self.embedding, WordEmbedding)
        self.embedding.table = word_embedding(vocab_size, embed_dim, embeddings)
