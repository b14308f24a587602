"""LCR-Rot-hop (Wallaart & Frasincar 2019): rotatory attention over left context, target, right.

    left ids   [B, N_l] ─► embedding ─► BiLSTM_l ─► H^l [B, N_l, 2h] ─┐
    target ids [B, N_t] ─► embedding ─► BiLSTM_t ─► H^t [B, N_t, 2h] ─┼─► rotatory attention × hops
    right ids  [B, N_r] ─► embedding ─► BiLSTM_r ─► H^r [B, N_r, 2h] ─┘   r = [r^l; r^r; r^lt; r^rt]
                                                                          ─► W r + b ─► logits

One embedding table is shared by the three parts (the same words); each part has its own
bidirectional LSTM, as in Zheng & Xia's LCR-Rot. The rotation (survey eq. 17-20) and its
repetition are :class:`attnkit.mechanisms.MultiHopRotatoryAttention` (activated general score with
tanh, softmax; each hop its own parameters): hop 1 queries the contexts with the mean target, every
later hop with the previous hop's ``r^lt``, ``r^rt``. The last hop's ``r [B, 8h]`` goes through a
linear layer to the class logits (the softmax layer of the paper; the trainer's cross-entropy takes
the log-softmax). Empty contexts (a target at the start or end) give zero representations.

With ``hops=1`` this is Zheng & Xia's LCR-Rot (one rotation, queried by the mean target). The
embedding table starts from ``embeddings`` when given (pretrained vectors such as GloVe's, from
:func:`attnkit.data.glove.embedding_matrix`) and is fine-tuned with the rest of the model, or kept
fixed (``freeze_embeddings``, as Wallaart & Frasincar's code keeps its GloVe table).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.hierarchical import RecurrentEncoder
from attnkit.mechanisms.rotatory import MultiHopRotatoryAttention, RotatoryOutput

PARTS = ("left", "target", "right")


class LCRRotHop(nn.Module):
    """LCR-Rot-hop sentiment classifier of a target in its context (module docstring).

    Args:
        vocab_size: number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        embed_dim: word embedding size.
        hidden_dim: ``h``, per direction of each BiLSTM (features ``2h``, ``r`` has ``8h``).
        hops: rotations (3 in Wallaart & Frasincar).
        dropout: on the embeddings and on ``r``, in training mode only.
        embeddings: the initial embedding weight ``[vocab_size, embed_dim]`` (pretrained word
            vectors), or ``None`` for PyTorch's ``N(0, 1)``; the ``PAD`` row is set to zero.
        freeze_embeddings: keep the embedding table as initialised (not trained).

    Shapes: ``left [B, N_l]``, ``target [B, N_t]``, ``right [B, N_r]`` token ids → logits
    ``[B, C]``.

    Example::

        >>> model = LCRRotHop(30, 2, embed_dim=8, hidden_dim=4, hops=2)
        >>> ids = lambda n: torch.randint(1, 30, (3, n))
        >>> model(ids(5), ids(2), ids(4)).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed_dim: int = 100,
        hidden_dim: int = 64,
        hops: int = 3,
        dropout: float = 0.0,
        embeddings: Tensor | None = None,
        freeze_embeddings: bool = False,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        if embeddings is not None:
            if not isinstance(embeddings, Tensor) or not embeddings.is_floating_point():
                given = (
                    embeddings.dtype if isinstance(embeddings, Tensor) else type(embeddings).__name__
                )
                raise ValueError(f"embeddings must be a floating-point tensor [V, D], got {given}")
            if tuple(embeddings.shape) != (vocab_size, embed_dim):
                raise ValueError(
                    f"embeddings must be [vocab_size, embed_dim] = [{vocab_size}, {embed_dim}], "
                    f"got {list(embeddings.shape)}"
                )
            with torch.no_grad():
                self.embedding.weight.copy_(embeddings)
                self.embedding.weight[PAD] = 0.0  # padding_idx's row is zero, as nn.Embedding's
        self.embedding.weight.requires_grad_(not freeze_embeddings)
        self.encoders = nn.ModuleDict(
            {
                part: RecurrentEncoder(
                    nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
                )
                for part in PARTS
            }
        )
        d = 2 * hidden_dim
        self.rotatory = MultiHopRotatoryAttention(d_left=d, d_target=d, hops=hops)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(4 * d, num_classes)

    def attend(
        self, left: Tensor, target: Tensor, right: Tensor, return_weights: bool = False
    ) -> RotatoryOutput:
        """The multi-hop rotatory attention over the three encoded parts."""
        given = {"left": left, "target": target, "right": right}
        for name, tokens in given.items():
            if tokens.dim() != 2 or tokens.dtype != torch.long:
                raise ValueError(
                    f"{name} must be int64 token ids [B, N], got {tokens.dtype} "
                    f"{tuple(tokens.shape)}"
                )
        if len({tokens.shape[0] for tokens in given.values()}) != 1:
            shapes = {name: tuple(tokens.shape) for name, tokens in given.items()}
            raise ValueError(f"left, target and right need one batch size, got {shapes}")
        features, masks = {}, {}
        for name, tokens in given.items():
            if tokens.shape[1] == 0:  # an RNN needs one step: one PAD, masked out, r^l = 0
                tokens = tokens.new_full((tokens.shape[0], 1), PAD)
            masks[name] = tokens != PAD
            embedded = self.dropout(self.embedding(tokens))
            features[name] = self.encoders[name](embedded, masks[name])
        return self.rotatory(
            features["left"],
            features["target"],
            features["right"],
            masks["left"],
            masks["target"],
            masks["right"],
            return_weights=return_weights,
        )

    def forward(self, left: Tensor, target: Tensor, right: Tensor) -> Tensor:
        return self.classifier(self.dropout(self.attend(left, target, right).context))


__all__ = ["LCRRotHop"]
