"""A word-embedding table, randomly initialised or initialised from pretrained vectors.

The sentence classifiers of the benchmarks (SST, TREC, MR) are trained in two columns: a table
drawn at random (Kim 2014's "-rand") and one starting from pretrained word vectors (GloVe,
:func:`attnkit.data.glove.embedding_matrix`), fine-tuned with the rest of the model. Every such
classifier takes the matrix as its ``embeddings`` constructor argument and builds its table here.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.data.vocabulary import PAD


def word_embedding(
    vocab_size: int, embed_dim: int, embeddings: Tensor | None = None
) -> nn.Embedding:
    """An ``nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)``, its weight copied from
    ``embeddings`` when given (still trained; the ``PAD`` row is set to zero and gets no gradient).

    Args:
        vocab_size: ``V``, the number of token ids.
        embed_dim: ``D``, the size of a word vector.
        embeddings: ``[V, D]`` floating-point initial weights, or ``None`` for PyTorch's
            ``N(0, 1)`` initialisation.

    Raises:
        ValueError: ``embeddings`` is not a floating-point ``[V, D]`` tensor, naming both shapes.

    Example::

        >>> table = word_embedding(5, 3, torch.ones(5, 3))
        >>> table.weight[0].tolist(), table.weight[1].tolist()
        ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    """
    table = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
    if embeddings is None:
        return table
    if not isinstance(embeddings, Tensor) or not embeddings.is_floating_point():
        given = embeddings.dtype if isinstance(embeddings, Tensor) else type(embeddings).__name__
        raise ValueError(f"embeddings must be a floating-point tensor [V, D], got {given}")
    if tuple(embeddings.shape) != (vocab_size, embed_dim):
        raise ValueError(
            f"embeddings must be [vocab_size, embed_dim] = [{vocab_size}, {embed_dim}], got "
            f"{list(embeddings.shape)}"
        )
    with torch.no_grad():
        table.weight.copy_(embeddings)
        table.weight[PAD] = 0.0  # padding_idx's row must be zero, as nn.Embedding makes it
    return table
