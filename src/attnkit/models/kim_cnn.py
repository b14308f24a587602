"""Kim's (2014) convolutional network for sentence classification: the non-attentive anchor of
the sentence benchmarks (CNN-rand when its word vectors are drawn at random).

    token ids [B, L] ─► word vectors x_1 … x_n
        ─► for each filter w of width h: c_i = ReLU(w · x_{i:i+h−1} + b)
        ─► ĉ = max_i c_i (max-over-time) ─► z = [ĉ_1, …, ĉ_m] ─► dropout ─► W z + b_o

Kim (2014), §2: "a filter w ∈ R^{hk} … applied to a window of h words to produce a new feature
c_i = f(w · x_{i:i+h−1} + b)", then "a max-over-time pooling operation over the feature map
… ĉ = max{c}", one feature per filter; §2.1: dropout on the penultimate layer ``z`` and "we
additionally constrain l2-norms of the weight vectors by rescaling w to have ||w||_2 = s whenever
||w||_2 > s after a gradient descent step". §3.1: filter windows 3, 4, 5 with 100 feature maps
each, dropout 0.5, s = 3.

As in Kim's published (Theano) code:

* Padding: each sentence is read with ``max(widths) − 1`` zero vectors before it and zero
  vectors after it. His code pads every sentence with four zero vectors before and with zero
  vectors after, up to the corpus's longest sentence plus four, and pools over the whole padded
  length, so the windows lying wholly in the padding (value ``ReLU(b)``) take part in the max of
  every sentence shorter than the longest; here every sentence gets ``max(widths)`` zero vectors
  after it, so those windows are in every max and the logits do not depend on how much padding
  a batch adds.
* Initialisation: filters ``U[−0.01, 0.01]`` with zero biases (his ReLU layers); the output layer
  ``W, b_o`` zero.
* The max-norm constraint applies to the rows of the output layer's weight ``W [C, m]`` (his
  columns: one weight vector per class); it is the projection ``w ← w · s / ||w||`` of a row
  whose norm exceeds ``s``. Kim applies it after each update; here it is applied, in place, at
  the start of every forward pass: the forward of step ``t + 1`` (and any evaluation) sees and
  differentiates the projected weights, and the optimizer updates them, exactly as after his
  update, without a hook in the training loop.
* Dropout is the inverted kind (kept units scaled by ``1 / (1 − p)`` in training); his scales the
  output weights by ``1 − p`` at test time instead: the same expectation.

There is no attention: the model is the benchmark's reference without one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.vocabulary import PAD
from attnkit.models.word_embeddings import word_embedding

#: Kim's filters of his ReLU layers are drawn from U[-FILTER_RANGE, FILTER_RANGE]
FILTER_RANGE = 0.01


class KimCNN(nn.Module):
    """Kim's (2014) CNN: convolutions of several widths over the word vectors, max-over-time
    pooling, dropout, and a linear output layer whose class weight vectors have norm at most
    ``max_norm``.

    Args:
        vocab_size: ``V``, the number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        embed_dim: ``k``, the size of a word vector (ignored when ``embeddings`` is given);
            Kim's 300.
        widths: the filter widths ``h``; Kim's (3, 4, 5).
        feature_maps: filters per width; Kim's 100, so ``m = 100 · len(widths)`` features.
        dropout: ``p`` on the penultimate layer ``z`` in training; Kim's 0.5.
        max_norm: ``s``, the largest l2-norm of a class's output weight vector, or ``None``
            for no constraint; Kim's 3.
        embeddings: ``[V, k]`` initial word vectors (random ``U[−0.25, 0.25]`` for CNN-rand,
            or pretrained), fine-tuned; ``None``: PyTorch's ``N(0, 1)``.

    Shapes: ``tokens`` long ``[B, L]`` (``PAD`` after each sentence) → logits ``[B, C]``.

    Example::

        >>> import torch
        >>> from attnkit.models.kim_cnn import KimCNN
        >>> model = KimCNN(50, 6, embed_dim=8, feature_maps=4)
        >>> model(torch.randint(1, 50, (3, 7))).shape
        torch.Size([3, 6])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embed_dim: int = 300,
        widths: Sequence[int] = (3, 4, 5),
        feature_maps: int = 100,
        dropout: float = 0.5,
        max_norm: float | None = 3.0,
        embeddings: Tensor | None = None,
    ) -> None:
        super().__init__()
        widths = tuple(widths)
        if not widths or any(not isinstance(h, int) or h < 1 for h in widths):
            raise ValueError(f"widths must be filter widths >= 1, got {widths}")
        if max_norm is not None and max_norm <= 0:
            raise ValueError(f"max_norm must be positive (or None), got {max_norm}")
        if embeddings is not None:
            embed_dim = int(embeddings.shape[-1])
        self.embedding = word_embedding(vocab_size, embed_dim, embeddings)
        self.widths, self.max_norm = widths, max_norm
        convolutions = [nn.Conv1d(embed_dim, feature_maps, h) for h in widths]
        for convolution in convolutions:
            nn.init.uniform_(convolution.weight, -FILTER_RANGE, FILTER_RANGE)
            assert convolution.bias is not None  # nn.Conv1d's default bias=True
            nn.init.zeros_(convolution.bias)
        self.convolutions = nn.ModuleList(convolutions)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(feature_maps * len(widths), num_classes)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def constrain(self) -> None:
        """Rescale, in place, each row ``w`` of the output weight with ``||w||_2 > s`` to norm
        ``s`` (Kim's max-norm constraint; nothing when ``max_norm`` is ``None``)."""
        if self.max_norm is None:
            return
        with torch.no_grad():
            weight = self.output.weight
            # written only when a row is too long: an unchanged weight keeps its version, so a
            # graph built by an earlier forward (not yet backpropagated) stays valid
            if bool((weight.norm(dim=1) > self.max_norm).any()):
                weight.copy_(torch.renorm(weight, p=2, dim=0, maxnorm=self.max_norm))

    def features(self, tokens: Tensor) -> Tensor:
        """The penultimate layer: for each width and filter, the max over time of
        ``ReLU(w · x_{i:i+h−1} + b)`` over the sentence padded with zero vectors (module
        docstring).

        Args:
            tokens: long ``[B, L]``, ``PAD`` after each sentence.

        Returns:
            ``z [B, m]``, ``m = feature_maps · len(widths)``, widths in order.
        """
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            given = (
                f"{tokens.dtype} {tuple(tokens.shape)}"
                if isinstance(tokens, Tensor)
                else type(tokens).__name__
            )
            raise ValueError(f"tokens must be long token ids [B, L], got {given}")
        words = tokens != PAD
        x = self.embedding(tokens) * words.unsqueeze(-1).to(self.embedding.weight.dtype)
        widest = max(self.widths)
        x = F.pad(x.transpose(1, 2), (widest - 1, widest))  # [B, k, (h-1) + L + h]
        pooled = [torch.relu(conv(x)).amax(dim=-1) for conv in self.convolutions]  # [B, maps]
        return torch.cat(pooled, dim=-1)

    def forward(self, tokens: Tensor) -> Tensor:
        """Project the output weights onto the max-norm ball (:meth:`constrain`), then classify.

        Args:
            tokens: long ``[B, L]``, ``PAD`` after each sentence.

        Returns:
            logits ``[B, C]``: ``W · dropout(z) + b_o``.
        """
        self.constrain()
        return self.output(self.dropout(self.features(tokens)))
