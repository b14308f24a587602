"""Jain & Wallace's (2019) text classifier with additive attention ("Attention is not
Explanation", §2), and its question-answering variant.

    token ids [B, L] ─► embedding x_t ─► encoder h_t ─► additive attention α ─► h_α = Σ_t α_t h_t
                     ─► decoder ─► logits [B, C]

* Embeddings ``x_t`` ``[B, L, d_e]``, optionally initialised from a given matrix (e.g. GloVe,
  :mod:`attnkit.data.glove`).
* Encoders (their §2, "Encoder"):

  - ``"lstm"``: a single-layer bidirectional LSTM, ``h_t = [→h_t; ←h_t]`` (size ``2·hidden_dim``);
  - ``"average"``: an affine map and ``tanh`` of each embedding, ``h_t = tanh(W_e x_t + b_e)``
    (size ``hidden_dim``); the pooled ``h_α`` is then an attention-weighted average of projected
    embeddings;
  - ``"cnn"``: 1-D convolutions of the embeddings with the kernel sizes ``kernel_sizes`` (their
    1, 3, 5, 7), ``hidden_dim`` filters each, "same" padding and ReLU, concatenated
    (size ``hidden_dim · len(kernel_sizes)``; their configuration gives 128 // 4 = 32 filters per
    width, states of size 128), zero at padding: the hidden representation of each token that
    the attention scores.

* Additive (tanh) attention pooling, Bahdanau et al.'s score (survey Table 2 "additive"):

      e_t = wᵀ tanh(W_1 q + W_2 h_t + b),   α = softmax(e) over the real tokens,   h_α = Σ_t α_t h_t

  computed by :func:`attnkit.attention` (through :class:`attnkit.GeneralAttention`, the module
  named ``"attention"``) so :func:`attnkit.interpret.record` sees ``α`` and
  :func:`attnkit.evaluate.ablate` can replace it (permuted, adversarial or frozen weights are
  hooks, never a rewritten forward). For classification ``q`` is a learned vector, so ``W_1 q``
  is a learned bias and the score is their ``wᵀ tanh(W_1 h_t + b)``.
* Decoder: ``ŷ = softmax(W_d h_α + b_d)`` (their sigmoid of one logit for binary tasks is the
  softmax of two logits), returned as logits.

Question answering (their bAbI and CNN models): with ``question=`` the question is encoded by an
encoder of the same kind with its own parameters, pooled into ``Q`` (the last states of the
BiLSTM, the max over the question's tokens for the CNN (their max-pooling), the mean for the
average encoder); ``Q`` is the attention's query (``W_1 Q``) and the decoder is
``W_d tanh(W_p h_α + W_q Q)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnkit.core.general import GeneralAttention
from attnkit.core.scores import Additive
from attnkit.data.vocabulary import PAD
from attnkit.mechanisms.hierarchical import RecurrentEncoder

ENCODERS = ("lstm", "average", "cnn")


def _check_tokens(name: str, tokens: object) -> Tensor:
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
        given = (
            f"{tokens.dtype} {tuple(tokens.shape)}"
            if isinstance(tokens, Tensor)
            else type(tokens).__name__
        )
        raise ValueError(f"{name} must be long token ids [B, L], got {given}")
    return tokens


class TokenEncoder(nn.Module):
    """One of Jain & Wallace's encoders over the embeddings of the real tokens.

    Args:
        kind: ``"lstm"``, ``"average"`` or ``"cnn"`` (module docstring).
        embed_dim: ``d_e``.
        hidden_dim: per direction (lstm), output size (average), filters per kernel (cnn).
        kernel_sizes: the CNN's kernel widths (odd, so the output keeps the length).

    Shapes: ``embedded [B, L, d_e]``, bool ``mask [B, L]`` → ``H [B, L, d_h]``, zero at padding;
    the outputs at real tokens do not depend on how much padding follows.
    """

    def __init__(
        self, kind: str, embed_dim: int, hidden_dim: int, kernel_sizes: Sequence[int]
    ) -> None:
        super().__init__()
        if kind not in ENCODERS:
            raise ValueError(f"encoder must be one of {ENCODERS}, got {kind!r}")
        self.kind = kind
        if kind == "lstm":
            self.rnn = RecurrentEncoder(
                nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
            )
            self.d_out = 2 * hidden_dim
        elif kind == "average":
            self.projection = nn.Linear(embed_dim, hidden_dim)  # W_e, b_e
            self.d_out = hidden_dim
        else:
            sizes = list(kernel_sizes)
            if not sizes or any(k < 1 or k % 2 == 0 for k in sizes):
                raise ValueError(f"kernel_sizes must be odd widths >= 1, got {kernel_sizes}")
            self.convolutions = nn.ModuleList(
                nn.Conv1d(embed_dim, hidden_dim, k, padding=k // 2) for k in sizes
            )
            self.d_out = hidden_dim * len(sizes)

    def forward(self, embedded: Tensor, mask: Tensor) -> Tensor:
        keep = mask.unsqueeze(-1).to(embedded.dtype)
        embedded = embedded * keep  # padding reads as zeros, like the convolution's own padding
        if self.kind == "lstm":
            return self.rnn(embedded, mask)
        if self.kind == "average":
            return torch.tanh(self.projection(embedded)) * keep
        x = embedded.transpose(1, 2)  # [B, d_e, L]
        out = torch.cat([torch.relu(conv(x)) for conv in self.convolutions], dim=1)
        return out.transpose(1, 2) * keep

    def summary(self, states: Tensor, mask: Tensor) -> Tensor:
        """``Q [B, d_h]``: the BiLSTM's last states (forward at the last real token, backward at
        the first), the feature-wise max over the real tokens for the CNN (Jain & Wallace's
        max-pooling), the mean over the real tokens for the average encoder."""
        if self.kind == "lstm":
            half = states.shape[-1] // 2
            positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
            last = positions.masked_fill(~mask, -1).amax(-1).clamp_min(0)
            first = (
                positions.masked_fill(~mask, mask.shape[1]).amin(-1).clamp_max(mask.shape[1] - 1)
            )
            rows = torch.arange(states.shape[0], device=states.device)
            return torch.cat([states[rows, last, :half], states[rows, first, half:]], dim=-1)
        if self.kind == "cnn":
            # ReLU states are >= 0 and zero at padding: the max over every position is the max
            # over the real tokens (their max-pooling of the masked output)
            return states.amax(1)
        count = mask.sum(-1, keepdim=True).clamp_min(1).to(states.dtype)
        return states.sum(1) / count


class AdditiveAttentionClassifier(nn.Module):
    """Jain & Wallace's (2019) embedding → encoder → additive attention → decoder model.

    Args:
        vocab_size: number of token ids (``PAD`` = 0 is padding).
        num_classes: ``C``.
        encoder: ``"lstm"`` (BiLSTM), ``"average"`` (tanh of an affine map) or ``"cnn"``.
        embed_dim: ``d_e`` (ignored when ``embeddings`` is given).
        hidden_dim: encoder size (see :class:`TokenEncoder`); their 128.
        attention_dim: ``d_w``, hidden size of the additive score; their 128.
        kernel_sizes: the CNN's kernel widths; their (1, 3, 5, 7).
        embeddings: ``[vocab_size, d_e]`` initial embedding matrix (e.g. GloVe), else random.
        freeze_embeddings: keep the embeddings fixed during training.
        dropout: on the embeddings, in training mode only.
        question: build the question-answering variant (``forward(tokens, question=...)``).

    Shapes: ``tokens`` long ``[B, L]`` (``PAD`` where there is no token),
    ``question`` long ``[B, L_q]`` → logits ``[B, C]``. Padding never changes the logits: it gets
    zero attention and the encoders do not read it.

    Example::

        >>> import torch
        >>> from attnkit.models.additive_attention_classifier import AdditiveAttentionClassifier
        >>> model = AdditiveAttentionClassifier(50, 2, encoder="average", embed_dim=8,
        ...                                     hidden_dim=6, attention_dim=5)
        >>> model(torch.randint(1, 50, (3, 7))).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        encoder: str = "lstm",
        embed_dim: int = 300,
        hidden_dim: int = 128,
        attention_dim: int = 128,
        kernel_sizes: Sequence[int] = (1, 3, 5, 7),
        embeddings: Tensor | None = None,
        freeze_embeddings: bool = False,
        dropout: float = 0.0,
        question: bool = False,
    ) -> None:
        super().__init__()
        if embeddings is not None:
            if embeddings.dim() != 2 or embeddings.shape[0] != vocab_size:
                raise ValueError(
                    f"embeddings must be [vocab_size={vocab_size}, d_e], "
                    f"got {tuple(embeddings.shape)}"
                )
            embed_dim = embeddings.shape[1]
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        if embeddings is not None:
            with torch.no_grad():
                self.embedding.weight.copy_(embeddings)
        self.embedding.weight.requires_grad_(not freeze_embeddings)
        self.dropout = nn.Dropout(dropout)
        self.encoder = TokenEncoder(encoder, embed_dim, hidden_dim, kernel_sizes)
        d = self.encoder.d_out
        self.question_encoder = (
            TokenEncoder(encoder, embed_dim, hidden_dim, kernel_sizes) if question else None
        )
        if question:
            self.query = None
        else:
            # the learned query q: W_1 q is the bias of their score w^T tanh(W_1 h_t + b)
            self.query = nn.Parameter(torch.empty(d).uniform_(-(d**-0.5), d**-0.5))
        self.attention = GeneralAttention(
            d_query=d,
            d_feature=d,
            score=Additive(d_query=d, d_key=d, d_hidden=attention_dim, activation="tanh"),
            query_type="Basic" if question else "Self-Attentive",
        )
        if question:
            self.passage_proj = nn.Linear(d, d)  # W_p
            self.question_proj = nn.Linear(d, d, bias=False)  # W_q
        self.decoder = nn.Linear(d, num_classes)  # W_d, b_d
        self.encoder_kind = encoder
        self.num_classes = num_classes

    @property
    def answers_questions(self) -> bool:
        """Whether this is the question-answering variant."""
        return self.question_encoder is not None

    def embed(self, tokens: Tensor) -> Tensor:
        """``x [B, L, d_e]`` of ``tokens [B, L]`` (before dropout)."""
        return self.embedding(_check_tokens("tokens", tokens))

    def encode(
        self, embedded: Tensor, mask: Tensor, question: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The encoder's states ``h`` ``[B, L, d]`` (zero at padding) and the attention's query
        ``[B, d]`` (the learned ``q``, or the question's summary ``Q``).

        Args:
            embedded: ``x`` ``[B, L, d_e]`` (e.g. :meth:`embed`, or a leaf for gradients).
            mask: bool ``[B, L]``, True at real tokens.
            question: long ``[B, L_q]`` for the question-answering variant.
        """
        if (question is None) == self.answers_questions:
            need = "needs a question" if self.answers_questions else "takes no question"
            given = "none" if question is None else f"one of shape {tuple(question.shape)}"
            raise ValueError(f"this model {need} (question=), got {given}")
        states = self.encoder(self.dropout(embedded), mask)  # h_t
        if self.question_encoder is None:
            assert self.query is not None
            return states, self.query.to(states.dtype).expand(states.shape[0], -1)
        assert question is not None
        q_tokens = _check_tokens("question", question)
        q_mask = q_tokens != PAD
        q_states = self.question_encoder(self.dropout(self.embedding(q_tokens)), q_mask)
        return states, self.question_encoder.summary(q_states, q_mask)  # Q

    def decode(
        self, states: Tensor, mask: Tensor, query: Tensor, *, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attention over the encoder's states and the decoder: logits ``[B, C]`` (and the
        attention ``α`` ``[B, L]`` with ``return_attention``, in the autograd graph).

        The states do not depend on the attention, so analyses that change only ``α``
        (permutations, adversarial search) can encode once and decode many times.
        """
        out = self.attention(query, states, mask, return_weights=return_attention)
        pooled = out.context  # h_α [B, d]
        if self.question_encoder is not None:
            pooled = torch.tanh(self.passage_proj(pooled) + self.question_proj(query))
        logits = self.decoder(pooled)
        if return_attention:
            assert out.weights is not None
            return logits, out.weights
        return logits

    def classify(self, embedded: Tensor, mask: Tensor, question: Tensor | None = None) -> Tensor:
        """Logits ``[B, C]`` from given embeddings ``[B, L, d_e]`` and the bool token mask
        ``[B, L]`` (gradients with respect to the embeddings: Jain & Wallace's importance)."""
        states, query = self.encode(embedded, mask, question)
        logits = self.decode(states, mask, query)
        assert isinstance(logits, Tensor)
        return logits

    def forward(self, tokens: Tensor, question: Tensor | None = None) -> Tensor:
        """Logits ``[B, C]`` of ``tokens [B, L]`` (and ``question [B, L_q]`` for QA)."""
        mask = _check_tokens("tokens", tokens) != PAD
        return self.classify(self.embedding(tokens), mask, question)
