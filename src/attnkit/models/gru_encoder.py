"""The recurrent encoder of the RNN sequence-to-sequence models: embeddings and a (bi)GRU."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class GRUEncoder(nn.Module):
    """Source ids → encoder states ``h_j``, over the real words of each sentence only.

    Bahdanau et al. (2015, §3.2): a bidirectional GRU, ``h_j = [->h_j; <-h_j]``, so each
    annotation summarises the words before and after ``j``. Luong et al. (2015, §2): a stack of
    unidirectional layers whose last states start the decoder.

    Args:
        vocab_size: source vocabulary size.
        embed_dim: word embedding size.
        hidden_dim: GRU state size per direction.
        num_layers: stacked layers.
        bidirectional: run a backward GRU too (states are concatenated).
        dropout: on the embeddings and between stacked layers.
        pad_id: the padding id (its embedding stays zero).

    Shapes: ``source [B, S]`` long, ``lengths [B]`` → ``states [B, S, k·hidden_dim]`` (zero on
    padding; ``k = 2`` when bidirectional) and ``final [num_layers·k, B, hidden_dim]`` (each
    direction's state after its last real word, as ``nn.GRU``'s ``h_n``).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(
            embed_dim,
            hidden_dim,
            num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.hidden_dim = hidden_dim
        self.output_dim = hidden_dim * (2 if bidirectional else 1)

    def forward(self, source: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        embedded = self.dropout(self.embedding(source))  # [B, S, E]
        # Packing makes the backward GRU start at each sentence's last real word, not at padding.
        packed = pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        states, final = self.rnn(packed)
        states = pad_packed_sequence(states, batch_first=True, total_length=source.shape[1])[0]
        return states, final
