"""The decoder of Luong, Pham & Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", with a GRU in place of the paper's LSTM (survey eq. 2-4, 23-29).

At target step ``t``, with ``h_t`` the top decoder state and ``h̄_s`` the top encoder states:

- ``h_t = GRU([E y_{t-1}; h~_{t-1}], h_{t-1})`` (input feeding, §3.3: the previous attentional
  vector is fed back so the decoder knows what it attended to), stacked over layers;
- ``a_t = align(score(h_t, h̄_s))`` with the *current* state as query: global softmax (§3.1),
  local-monotonic (``p_t = t``) or local-predictive (``p_t = S · sigmoid(v_p^T tanh(W_p h_t))``,
  Gaussian with ``σ = D/2``) in the window ``[p_t - D, p_t + D]`` (§3.2);
  scores dot, general, concat (additive) or location (``a_t = softmax(W_a h_t)``);
- ``c_t = sum_s a_t(s) h̄_s``, ``h~_t = tanh(W_c [c_t; h_t])``, ``logits = W_s h~_t``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.models.decoder_attention import DecoderAttention
from attnkit.models.decoder_state import EncoderMemory, RecurrentState


class LuongDecoder(nn.Module):
    """Stacked GRU decoder whose attention query is its current top state ``h_t``.

    Args:
        vocab_size: target vocabulary size ``V``.
        embed_dim: target embedding size.
        hidden_dim: state size of every layer (the encoder's too: it starts the decoder).
        attention: scores ``h_t`` against the encoder's top states.
        num_layers: stacked GRU layers.
        input_feeding: feed ``h~_{t-1}`` to the first layer with ``E y_{t-1}``.
        dropout: between stacked layers and on ``h~_t`` before the vocabulary projection.

    Shapes: :meth:`step` takes ``E y_{t-1} [B, embed_dim]`` and returns ``h~_t`` (dropped out)
    ``[B, hidden_dim]`` and the weights ``a_t [B, S]``; :meth:`readout` maps ``[..., hidden_dim]``
    to logits ``[..., V]``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        attention: DecoderAttention,
        num_layers: int = 1,
        input_feeding: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attention = attention
        self.input_feeding = input_feeding
        first = embed_dim + (hidden_dim if input_feeding else 0)
        self.cells = nn.ModuleList(
            nn.GRUCell(first if layer == 0 else hidden_dim, hidden_dim)
            for layer in range(num_layers)
        )
        self.combine = nn.Linear(2 * hidden_dim, hidden_dim, bias=False)  # W_c over [c_t; h_t]
        self.output = nn.Linear(hidden_dim, vocab_size)  # W_s
        self.dropout = nn.Dropout(dropout)
        self.hidden_dim = hidden_dim

    def initial_state(self, encoder_final: Tensor) -> RecurrentState:
        """Each layer starts from the encoder's last state of the same layer ``[L, B, d]``;
        ``h~_0 = 0``."""
        hidden = list(encoder_final.unbind(0))
        feed = encoder_final.new_zeros(hidden[0].shape) if self.input_feeding else None
        return RecurrentState(hidden, feed)

    def step(
        self, embedded: Tensor, state: RecurrentState, memory: EncoderMemory
    ) -> tuple[Tensor, Tensor]:
        """One target position: updates ``state`` in place, returns ``(h~_t, weights)``."""
        x = embedded if state.feed is None else torch.cat([embedded, state.feed], -1)
        hidden = []
        for layer, cell in enumerate(self.cells):
            h = cell(x, state.hidden[layer])
            hidden.append(h)
            x = self.dropout(h)
        context, weights = self.attention(
            h[:, None], memory.key_features, memory.values, memory.mask, state.position
        )
        attentional = torch.tanh(self.combine(torch.cat([context[:, 0], h], -1)))  # h~_t
        state.hidden, state.position = hidden, state.position + 1
        if state.feed is not None:
            state.feed = attentional
        return self.dropout(attentional), weights[:, 0]

    def readout(self, features: Tensor) -> Tensor:
        """Logits ``W_s h~_t``, ``[..., V]``."""
        return self.output(features)
