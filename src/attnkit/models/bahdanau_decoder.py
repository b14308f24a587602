"""The decoder of Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate" (RNNsearch), with attnkit's additive score (survey Table 2, eq. 2-4).

At target step ``i``, with ``s_{i-1}`` the previous decoder state and ``h_j`` the annotations:

- ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)``, ``a_ij = softmax_j(e_ij)``, ``c_i = sum_j a_ij h_j``
  (the query is the *previous* state: attention decides what to read before the state updates);
- ``s_i = GRU([E y_{i-1}; c_i], s_{i-1})``;
- ``t~_i = U_o s_i + V_o E y_{i-1} + C_o c_i``, ``t_i = maxout(t~_i)`` (pairs), ``logits = W_o t_i``.

The paper's main text (eq. 4) reads the output from ``s_i``; its appendix A.2.2 writes ``s_{i-1}``.
The main text is followed here. The initial state is ``s_0 = tanh(W_s <-h_1)``, from the backward
encoder state of the first word (appendix A.2.2).

``query="conditional"`` is the conditional GRU of the dl4mt/Nematus decoder (Sennrich et al. 2017,
"Nematus: a Toolkit for Neural Machine Translation", §2.2): the paper's query ``s_{i-1}`` has read
``y_{i-2}`` but not the word just emitted, ``y_{i-1}``, so it must place ``a_i`` without knowing
where the translation stands; the conditional GRU first reads ``y_{i-1}``:

- ``s'_i = GRU_1(E y_{i-1}, s_{i-1})``, ``e_ij = v_a^T tanh(W_a s'_i + U_a h_j)``;
- ``s_i = GRU_2(c_i, s'_i)``; the readout as above.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.models.decoder_attention import DecoderAttention
from attnkit.models.decoder_state import EncoderMemory, RecurrentState

QUERIES = ("previous_state", "conditional")


class BahdanauDecoder(nn.Module):
    """One-layer GRU decoder whose attention query is its previous state ``s_{i-1}`` (or, with
    ``query="conditional"``, that state after reading ``E y_{i-1}``).

    Args:
        vocab_size: target vocabulary size ``V``.
        embed_dim: target embedding size (also the maxout size ``l``).
        hidden_dim: decoder state size ``n``.
        annotation_dim: size of the encoder's annotations ``h_j`` (``2 · n_enc``).
        attention: scores ``s_{i-1}`` (size ``hidden_dim``) against the annotations.
        dropout: on the maxout output before the vocabulary projection.
        query: ``"previous_state"`` (the paper's ``s_{i-1}``) or ``"conditional"`` (``s'_i``,
            the conditional GRU; see the module docstring).

    Shapes: :meth:`step` takes ``E y_{i-1} [B, embed_dim]`` and returns the readout features
    ``[s_i; E y_{i-1}; c_i]`` ``[B, hidden_dim + embed_dim + annotation_dim]`` and the weights
    ``a_i [B, S]``; :meth:`readout` maps features ``[..., F]`` to logits ``[..., V]``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        annotation_dim: int,
        attention: DecoderAttention,
        dropout: float = 0.0,
        query: Literal["previous_state", "conditional"] = "previous_state",
    ) -> None:
        super().__init__()
        if query not in QUERIES:
            raise ValueError(f"unknown query {query!r}; expected one of: {', '.join(QUERIES)}")
        self.attention = attention
        self.query = query
        self.init_proj = nn.Linear(annotation_dim // 2, hidden_dim)  # W_s
        if query == "conditional":
            self.query_cell = nn.GRUCell(embed_dim, hidden_dim)  # GRU_1: s'_i
            self.cell = nn.GRUCell(annotation_dim, hidden_dim)  # GRU_2: s_i from c_i
        else:
            self.cell = nn.GRUCell(embed_dim + annotation_dim, hidden_dim)
        # U_o, V_o, C_o as one matrix over [s_i; E y_{i-1}; c_i]: one product per sentence.
        self.maxout_dim = embed_dim
        self.readout_proj = nn.Linear(hidden_dim + embed_dim + annotation_dim, 2 * embed_dim)
        self.output = nn.Linear(embed_dim, vocab_size)  # W_o
        self.dropout = nn.Dropout(dropout)

    def initial_state(self, backward_first: Tensor) -> RecurrentState:
        """``s_0 = tanh(W_s <-h_1)`` from the backward state of the first word ``[B, n_enc]``."""
        return RecurrentState([torch.tanh(self.init_proj(backward_first))])

    def step(
        self, embedded: Tensor, state: RecurrentState, memory: EncoderMemory
    ) -> tuple[Tensor, Tensor]:
        """One target position: updates ``state`` in place, returns ``(features, weights)``."""
        previous = state.hidden[0]
        if self.query == "conditional":
            query = self.query_cell(embedded, previous)  # s'_i has read y_{i-1}
        else:
            query = previous  # s_{i-1}
        context, weights = self.attention(
            query[:, None], memory.key_features, memory.values, memory.mask, state.position
        )
        context, weights = context[:, 0], weights[:, 0]  # c_i [B, 2n], a_i [B, S]
        if self.query == "conditional":
            hidden = self.cell(context, query)  # s_i = GRU_2(c_i, s'_i)
        else:
            hidden = self.cell(torch.cat([embedded, context], -1), previous)  # s_i
        state.hidden, state.position = [hidden], state.position + 1
        return torch.cat([hidden, embedded, context], -1), weights

    def readout(self, features: Tensor) -> Tensor:
        """Logits ``W_o maxout(U_o s_i + V_o E y_{i-1} + C_o c_i)``, ``[..., V]``."""
        pre = self.readout_proj(features)  # t~_i [..., 2l]
        t = pre.unflatten(-1, (self.maxout_dim, 2)).amax(-1)  # max over pairs: t_i [..., l]
        return self.output(self.dropout(t))
