"""Latent attention (Jaegle et al. 2021, "Perceiver", §2): a small learned latent array reads a
long input by cross-attention, then thinks by self-attention among the latents.

Self-attention over ``N`` inputs costs ``O(N²)``. The Perceiver instead asks ``P << N`` learned
latent vectors to attend to the input (the *cross-attention*: queries from the latents, keys and
values from the input, ``O(P·N)``), then runs a Transformer on the latents alone (the *latent
self-attention*: ``O(P²)``, independent of ``N``). The pair can be repeated, each repeat reading
the input again with the refined latents (weights shared between repeats after the first, as in
the paper's ImageNet model). With ``layers`` latent layers per block the cost is
``O(N·P + layers·P²)``: compute and memory grow linearly with the input length (see
benchmarks/perceiver_memory.py).

Both attentions are :class:`attnkit.MultiHeadAttention`, pre-LayerNorm with residual
connections and a GELU MLP, as in the paper's Transformer-style blocks:

    z ← z + CrossAttend(LN(z), LN(x))      z ← z + MLP(LN(z))           (cross-attention block)
    z ← z + SelfAttend(LN(z))              z ← z + MLP(LN(z))           (latent Transformer layer)

The input has no order as far as attention is concerned: without position features the
latents are invariant to permutations of the input (the paper adds Fourier position features to
the input when order matters; they are the caller's concern here).

Shapes (the legend of :mod:`attnkit`): B batch, N inputs (the cross-attention's keys), C input
channels, P latents (its queries), D latent size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.scores import Score
from attnkit.mechanisms.multi_head import MultiHeadAttention
from attnkit.mechanisms.sets import check_set

#: the latents are learned queries (survey eq. 34) that also attend to each other: self-attentive
TAXONOMY = {"query_type": "Self-Attentive", "query_multiplicity": "Multi-Head"}


class LatentCrossAttention(nn.Module):
    """The Perceiver's cross-attention block: latents ``z`` attend to the input ``x``.

    ``z ← z + MultiHead(LN(z), LN(x), LN(x))``, then ``z ← z + MLP(LN(z))``. Only the attention
    touches the input, with ``P`` queries: ``O(P·N)`` time and memory.

    Args:
        d_latent: ``D``.
        d_input: ``C``, the input channels (projected to keys and values inside the attention).
        num_heads: heads of the cross-attention (the paper uses one).
        d_feedforward: hidden size of the MLP (default ``D``).
        dropout: on the attention weights and the residual branches, in training mode only.
        score, align: any attnkit score and alignment.

    Shapes: ``latents [B, P, D]``, ``inputs [B, N, C]``, ``mask [B, N]`` (True = real input)
    → ``[B, P, D]``.

    Example::

        >>> block = LatentCrossAttention(d_latent=16, d_input=3)
        >>> block(torch.randn(2, 4, 16), torch.randn(2, 50, 3)).shape
        torch.Size([2, 4, 16])
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        d_latent: int,
        d_input: int,
        num_heads: int = 1,
        d_feedforward: int | None = None,
        dropout: float = 0.0,
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
    ) -> None:
        super().__init__()
        d_feedforward = d_latent if d_feedforward is None else d_feedforward
        self.d_latent, self.d_input = d_latent, d_input
        self.norm_latents = nn.LayerNorm(d_latent)
        self.norm_inputs = nn.LayerNorm(d_input)
        self.attention = MultiHeadAttention(
            d_latent,
            num_heads,
            dropout=dropout,
            kdim=d_input,
            vdim=d_input,
            batch_first=True,
            score=score,
            align=align,
        )
        self.norm_feedforward = nn.LayerNorm(d_latent)
        self.feedforward = nn.Sequential(
            nn.Linear(d_latent, d_feedforward), nn.GELU(), nn.Linear(d_feedforward, d_latent)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, latents: Tensor, inputs: Tensor, mask: Tensor | None = None) -> Tensor:
        """The latents after reading the input.

        Args:
            latents: ``z [B, P, D]``.
            inputs: ``x [B, N, C]``.
            mask: bool ``[B, N]``, True at real inputs (``None``: all).

        Returns:
            The updated latents ``[B, P, D]``.
        """
        check_set(f"{type(self).__name__} (latents)", latents, self.d_latent, None)
        check_set(f"{type(self).__name__} (inputs)", inputs, self.d_input, mask)
        x = self.norm_inputs(inputs)
        padding = None if mask is None else ~mask  # torch's convention: True = ignore
        read, _ = self.attention(
            self.norm_latents(latents), x, x, key_padding_mask=padding, need_weights=False
        )
        latents = latents + self.dropout(read)
        return latents + self.dropout(self.feedforward(self.norm_feedforward(latents)))


class LatentSelfAttention(nn.Module):
    """The Perceiver's latent Transformer layer: the latents attend to each other.

    ``z ← z + MultiHead(LN(z), LN(z), LN(z))``, then ``z ← z + MLP(LN(z))`` (pre-LayerNorm, GELU),
    ``O(P²)`` in the number of latents, independent of the input length. Its parameter names
    are those of a pre-norm ``attnkit.layers.TransformerEncoderLayer`` (``self_attn``,
    ``linear1``, ``linear2``, ``norm1``, ``norm2``), which computes the same; it is built here
    from the mechanisms' own pieces because mechanisms sit below layers in attnkit's layer order.

    Args:
        d_latent: ``D``.
        num_heads: heads of the self-attention.
        d_feedforward: the MLP's width.
        dropout: on attention weights and residual branches (training mode only).
        score, align: any attnkit score and alignment.

    Shapes: ``latents [B, P, D]`` → ``[B, P, D]``.

    Example::

        >>> LatentSelfAttention(16, num_heads=4, d_feedforward=32)(torch.randn(2, 4, 16)).shape
        torch.Size([2, 4, 16])
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        d_latent: int,
        num_heads: int,
        d_feedforward: int,
        dropout: float = 0.0,
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_latent, num_heads, dropout=dropout, batch_first=True, score=score, align=align
        )
        self.norm1 = nn.LayerNorm(d_latent)
        self.norm2 = nn.LayerNorm(d_latent)
        self.linear1 = nn.Linear(d_latent, d_feedforward)
        self.linear2 = nn.Linear(d_feedforward, d_latent)
        self.dropout = nn.Dropout(dropout)

    def forward(self, latents: Tensor) -> Tensor:
        """The latents after one self-attention layer.

        Args:
            latents: ``z [B, P, D]``.

        Returns:
            ``[B, P, D]``.
        """
        z = self.norm1(latents)
        latents = latents + self.dropout(self.self_attn(z, z, z, need_weights=False)[0])
        hidden = self.dropout(F.gelu(self.linear1(self.norm2(latents))))
        return latents + self.dropout(self.linear2(hidden))


class _PerceiverBlock(nn.Module):
    """One cross-attention followed by ``num_latent_layers`` latent self-attention layers."""

    def __init__(
        self,
        d_latent: int,
        d_input: int,
        num_cross_heads: int,
        num_heads: int,
        num_latent_layers: int,
        d_feedforward: int,
        dropout: float,
        score: str | Score | Sequence[str | Score],
        align: str | Align,
    ) -> None:
        super().__init__()
        self.cross = LatentCrossAttention(
            d_latent, d_input, num_cross_heads, d_feedforward, dropout, score, align
        )
        self.latent_layers = nn.ModuleList(
            LatentSelfAttention(d_latent, num_heads, d_feedforward, dropout, score, align)
            for _ in range(num_latent_layers)
        )

    def forward(self, latents: Tensor, inputs: Tensor, mask: Tensor | None) -> Tensor:
        latents = self.cross(latents, inputs, mask)
        for layer in self.latent_layers:
            latents = layer(latents)  # the latents have no padding: every one is real
        return latents


class PerceiverEncoder(nn.Module):
    """Perceiver encoder (Jaegle et al. 2021): a learned latent array cross-attends to a long
    input, then self-attends; memory and time linear in the input length.

    Args:
        d_input: ``C``, channels of the input elements.
        d_latent: ``D``, size of each latent vector.
        num_latents: ``P``, the size of the latent array (the bottleneck).
        num_heads: heads of the latent self-attention (``D`` divisible by it).
        num_cross_heads: heads of the cross-attention (the paper: 1).
        num_latent_layers: latent Transformer layers after each cross-attention.
        num_blocks: how many times the input is read (cross-attention + latent layers).
        share_weights: blocks after the first share one set of weights (the paper's choice, so
            more reads do not add parameters); False gives each block its own.
        d_feedforward: hidden size of the MLPs (default ``D``).
        dropout: on attention weights and residual branches, in training mode only.
        score, align: any attnkit score and alignment, for every attention.

    Shapes: ``inputs [B, N, C]``, ``mask [B, N]`` (True = real input element) → latents
    ``[B, P, D]`` (pool them, e.g. average, for a classifier).

    Example::

        >>> perceiver = PerceiverEncoder(d_input=3, d_latent=32, num_latents=16, num_heads=4)
        >>> perceiver(torch.randn(2, 10_000, 3)).shape
        torch.Size([2, 16, 32])
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        d_input: int,
        d_latent: int,
        num_latents: int,
        *,
        num_heads: int = 4,
        num_cross_heads: int = 1,
        num_latent_layers: int = 2,
        num_blocks: int = 1,
        share_weights: bool = True,
        d_feedforward: int | None = None,
        dropout: float = 0.0,
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
    ) -> None:
        super().__init__()
        sizes = {
            "d_input": d_input,
            "d_latent": d_latent,
            "num_latents": num_latents,
            "num_blocks": num_blocks,
        }
        for name, value in sizes.items():
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(num_latent_layers, int) or num_latent_layers < 0:
            raise ValueError(f"num_latent_layers must be an int >= 0, got {num_latent_layers!r}")
        self.d_input, self.num_blocks = d_input, num_blocks
        self.latents = nn.Parameter(torch.empty(num_latents, d_latent))
        nn.init.trunc_normal_(self.latents, std=0.02, a=-2.0, b=2.0)  # the paper's init
        d_feedforward = d_latent if d_feedforward is None else d_feedforward
        distinct = min(num_blocks, 2) if share_weights else num_blocks
        self.blocks = nn.ModuleList(
            _PerceiverBlock(
                d_latent,
                d_input,
                num_cross_heads,
                num_heads,
                num_latent_layers,
                d_feedforward,
                dropout,
                score,
                align,
            )
            for _ in range(distinct)
        )

    def forward(self, inputs: Tensor, mask: Tensor | None = None) -> Tensor:
        """Read ``inputs [B, N, C]`` (``mask [B, N]``: True = real) into the latents ``[B, P, D]``.

        Args:
            inputs: ``x [B, N, C]``.
            mask: bool ``[B, N]``, True at real inputs (``None``: all).

        Returns:
            The final latents ``[B, P, D]``.
        """
        check_set(type(self).__name__, inputs, self.d_input, mask)
        latents = self.latents.to(inputs.dtype).expand(inputs.shape[0], -1, -1)
        for i in range(self.num_blocks):
            block = self.blocks[min(i, len(self.blocks) - 1)]  # shared after the first
            latents = block(latents, inputs, mask)
        return latents
