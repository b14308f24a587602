"""A small decoder-only (GPT-style) language model: embedding, causal Transformer layers, head.

Built from :class:`TransformerEncoderLayer` with causal self-attention (a decoder without
cross-attention), any position scheme, and KV caches for incremental decoding:

    h_0 = Embed(tokens) (+ PE(positions));  h_l = Layer_l(h_{l-1}, causal);  logits = W LN(h_L)

``forward(tokens)`` is the full causal forward; ``forward(tokens, caches=caches)`` consumes the
next tokens of each row, so ``model(prompt, caches=c)`` then ``model(next, caches=c)`` gives the
logits of the full forward over ``prompt + next``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnkit.core.masks import sliding_window
from attnkit.layers.alibi import ALiBi
from attnkit.layers.kv_cache import KVCache
from attnkit.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from attnkit.layers.relative_bias import RelativePositionBias
from attnkit.layers.rotary import RotaryEmbedding
from attnkit.layers.transformer import TransformerEncoder, TransformerEncoderLayer

POSITIONALS = ("sinusoidal", "learned", "rotary", "alibi", "t5", None)


class CausalLanguageModel(nn.Module):
    """Decoder-only Transformer LM (pre-norm, batch-first).

    Args:
        vocab_size: ``V``.
        d_model, nhead, num_layers, dim_feedforward, dropout: the layers' sizes.
        positional: ``"sinusoidal"``, ``"learned"`` (added to the embeddings), ``"rotary"``
            (RoPE on queries and keys), ``"alibi"``, ``"t5"`` (score biases) or ``None``.
        max_len: longest position (absolute encodings).
        num_kv_heads: grouped-query attention.
        window: sliding-window attention (each token sees itself and ``window - 1`` earlier
            ones), in the full forward and in the caches.

    Shapes: ``tokens [B, T]`` (long) → ``logits [B, T, V]``.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 2,
        dim_feedforward: int = 128,
        dropout: float = 0.0,
        *,
        positional: str | None = "rotary",
        max_len: int = 8192,
        num_kv_heads: int | None = None,
        window: int | None = None,
    ) -> None:
        super().__init__()
        if positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {POSITIONALS}, got {positional!r}")
        self.vocab_size, self.positional, self.window = vocab_size, positional, window
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.position: nn.Module | None = None
        if positional == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(d_model, max_len)
        rotary = RotaryEmbedding(d_model // nhead) if positional == "rotary" else None
        bias: nn.Module | None = None
        if positional == "alibi":
            bias = ALiBi(nhead)
        elif positional == "t5":
            bias = RelativePositionBias(nhead, bidirectional=False)
        layer = TransformerEncoderLayer(
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
            num_kv_heads=num_kv_heads,
            rotary=rotary,
            position_bias=bias,  # type: ignore[arg-type]
        )
        self.layers = TransformerEncoder(layer, num_layers, nn.LayerNorm(d_model))
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def new_caches(self, capacity: int) -> list[KVCache]:
        """One empty KV cache per layer holding up to ``capacity`` tokens (with a window, the
        cache evicts, so ``capacity >= window - 1 + longest chunk`` suffices)."""
        return self.layers.new_caches(capacity, window=self.window)

    def forward(
        self,
        tokens: Tensor,
        caches: Sequence[KVCache] | None = None,
        lengths: Tensor | None = None,
    ) -> Tensor:
        """Logits of the next token at every position.

        Args:
            tokens: ``[B, T]``; with ``caches``, the next ``T`` tokens of each row.
            caches: from :meth:`new_caches`, updated in place.
            lengths: ``[B]`` real tokens per row of right-padded ``tokens`` (with ``caches``);
                each row then continues from its own length.
        """
        if tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int):
            raise ValueError(
                f"tokens must be an integer tensor [B, T], got {tokens.dtype} {tuple(tokens.shape)}"
            )
        n, t = tokens.shape
        x = self.embedding(tokens)
        if self.position is not None:
            positions = None if caches is None else caches[0].query_positions(t, n, tokens.device)
            x = self.position(x, positions)
        if caches is not None:
            h = self.layers(x, caches=caches, lengths=lengths)
        elif self.window is not None:
            mask = ~sliding_window(t, t, self.window, tokens.device)  # torch's: True = NOT allowed
            h = self.layers(x, mask)
        else:
            if lengths is not None:
                raise ValueError("lengths= is for cached decoding; pad and slice without a cache")
            h = self.layers(x, is_causal=True)
        return self.head(h)
