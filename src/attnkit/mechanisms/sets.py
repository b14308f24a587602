"""Set Transformer blocks (Lee et al. 2019, "Set Transformer", §3): attention over sets.

A set has no order, so a model of sets must not depend on one: a block that maps a set to a set
must be *permutation equivariant* (permuting the input permutes the output the same way) and a
block that maps a set to one vector must be *permutation invariant*. Attention without positional
information is both by construction: every element is scored against every other by content only.
Lee et al. build everything from one block, the multihead attention block:

    MAB(X, Y) = LayerNorm(H + rFF(H)),   H = LayerNorm(X + Multihead(X, Y, Y))   (eq. 6-7)
    SAB(X)    = MAB(X, X)                                   equivariant, O(n²)   (eq. 8)
    ISAB_m(X) = MAB(X, H),  H = MAB(I, X)                   equivariant, O(n·m)  (eq. 9-10)
    PMA_k(Z)  = MAB(S, rFF(Z))                              invariant: k vectors (eq. 11)

``I [m, d]`` are learned *inducing points* and ``S [k, d]`` learned *seed vectors*: learned
queries (survey eq. 34). ``rFF`` is a row-wise feed-forward layer. Every ``Multihead`` is an
:class:`attnkit.MultiHeadAttention`, so any score and alignment works and
``attnkit.interpret.record`` sees every attention map.

Sets of different sizes are padded: ``mask [B, n]`` is True at real elements (attnkit's
convention). Padded elements are never attended to, so they cannot change a real element's
output; the outputs *at* padded positions are computed but meaningless.

Shapes: B batch, n set size, m inducing points, k seed vectors, d model size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.scores import Score
from attnkit.mechanisms.multi_head import MultiHeadAttention

#: every block: multi-head attention whose queries come from the set itself or from learned
#: vectors (inducing points, seeds: survey eq. 34), i.e. self-attentive queries (§3.3.1)
TAXONOMY = {"query_type": "Self-Attentive", "query_multiplicity": "Multi-Head"}


def check_set(name: str, x: Tensor, d: int, mask: Tensor | None) -> None:
    """Raise ``ValueError`` unless ``x [B, n, d]`` and ``mask`` is bool ``[B, n]`` (or None)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} expects a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d:
        raise ValueError(f"{name} expects a set [B, n, d={d}], got shape {tuple(x.shape)}")
    if mask is None:
        return
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        given = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{name} expects a bool mask (True = real element), got {given}")
    if tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"{name} expects mask [B, n] = {tuple(x.shape[:2])}, got {tuple(mask.shape)}"
        )


def _check_positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


class RowwiseFeedForward(nn.Module):
    """``rFF``: the same two-layer perceptron applied to every element of a set independently
    (so it commutes with any permutation). ``[B, n, d_in] → [B, n, d_out]``."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class MultiheadAttentionBlock(nn.Module):
    """Multihead attention block ``MAB(X, Y)`` (Lee et al. eq. 6-7): ``X`` attends to ``Y``.

    ``H = LayerNorm(X + Multihead(X, Y, Y))``, ``MAB(X, Y) = LayerNorm(H + rFF(H))``. Each output
    row depends on its own row of ``X`` and on ``Y`` as a set, so the block is equivariant in
    ``X`` and invariant in ``Y``.

    Args:
        d_model: ``d``, the size of the output and of the residual stream.
        num_heads: heads of the multihead attention (``d`` divisible by it).
        d_query: size of ``X`` (default ``d``); when it differs, ``X`` is first mapped to ``d``
            by a learned linear map, so the residual adds like sizes (as the authors' code does).
        d_key: size of ``Y`` (default ``d``), projected to keys and values inside the attention.
        d_feedforward: hidden size of ``rFF`` (default ``d``).
        layer_norm: apply the two LayerNorms of eq. (6-7) (the authors' code makes them optional).
        dropout: on the attention weights, in training mode only.
        score, align: any attnkit score (per head) and alignment.
        query_type: the survey's query type for the taxonomy (§3.3.1).

    Shapes: ``x [B, n_x, d_query]``, ``y [B, n_y, d_key]``, ``mask [B, n_y]`` (True = real
    element of ``y``) → ``[B, n_x, d]``.

    Example::

        >>> mab = MultiheadAttentionBlock(16, 4, d_key=8)
        >>> mab(torch.randn(2, 5, 16), torch.randn(2, 7, 8)).shape
        torch.Size([2, 5, 16])
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        d_query: int | None = None,
        d_key: int | None = None,
        d_feedforward: int | None = None,
        layer_norm: bool = True,
        dropout: float = 0.0,
        score: str | Score | Sequence[str | Score] = "scaled_dot",
        align: str | Align = "softmax",
        query_type: str = "Self-Attentive",
    ) -> None:
        super().__init__()
        d_query = d_model if d_query is None else d_query
        d_key = d_model if d_key is None else d_key
        d_feedforward = d_model if d_feedforward is None else d_feedforward
        _check_positive(d_model=d_model, d_query=d_query, d_key=d_key, d_feedforward=d_feedforward)
        self.d_model, self.d_query, self.d_key = d_model, d_query, d_key
        self.taxonomy = {"query_type": query_type, "query_multiplicity": "Multi-Head"}
        self.query_projection = nn.Identity() if d_query == d_model else nn.Linear(d_query, d_model)
        self.attention = MultiHeadAttention(
            d_model,
            num_heads,
            dropout=dropout,
            kdim=d_key,
            vdim=d_key,
            batch_first=True,
            score=score,
            align=align,
            query_type=query_type,
        )
        self.feedforward = RowwiseFeedForward(d_model, d_feedforward, d_model)
        self.norm_attention = nn.LayerNorm(d_model) if layer_norm else nn.Identity()
        self.norm_feedforward = nn.LayerNorm(d_model) if layer_norm else nn.Identity()

    def forward(self, x: Tensor, y: Tensor, mask: Tensor | None = None) -> Tensor:
        """``MAB(x, y)`` (eq. 6-7).

        Args:
            x: the attending set ``[B, n_x, d_query]``.
            y: the attended set ``[B, n_y, d_key]``.
            mask: bool ``[B, n_y]``, True at the real elements of ``y`` (``None``: all).

        Returns:
            ``[B, n_x, d]``.
        """
        name = type(self).__name__
        check_set(f"{name} (x)", x, self.d_query, None)
        check_set(f"{name} (y)", y, self.d_key, mask)
        if x.shape[0] != y.shape[0]:
            raise ValueError(
                f"{name} expects x and y with one batch size, got {tuple(x.shape)} and "
                f"{tuple(y.shape)}"
            )
        x = self.query_projection(x)
        padding = None if mask is None else ~mask  # torch's convention: True = ignore
        attended, _ = self.attention(x, y, y, key_padding_mask=padding, need_weights=False)
        h = self.norm_attention(x + attended)  # eq. (7)
        return self.norm_feedforward(h + self.feedforward(h))  # eq. (6)


class SetAttentionBlock(nn.Module):
    """Set attention block ``SAB(X) = MAB(X, X)`` (Lee et al. eq. 8): self-attention among the
    elements of a set; permutation equivariant, ``O(n²)`` in the set size.

    Args:
        d_model: output size ``d``.
        num_heads: attention heads.
        d_input: size of the input elements (default ``d``).
        **options: ``d_feedforward``, ``layer_norm``, ``dropout``, ``score``, ``align`` of
            :class:`MultiheadAttentionBlock`.

    Shapes: ``x [B, n, d_input]``, ``mask [B, n]`` → ``[B, n, d]``.

    Example::

        >>> SetAttentionBlock(16, 4, d_input=3)(torch.randn(2, 10, 3)).shape
        torch.Size([2, 10, 16])
    """

    taxonomy = TAXONOMY

    def __init__(
        self, d_model: int, num_heads: int, d_input: int | None = None, **options: Any
    ) -> None:
        super().__init__()
        self.block = MultiheadAttentionBlock(
            d_model, num_heads, d_query=d_input, d_key=d_input, **options
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``SAB(x) = MAB(x, x)`` (eq. 8).

        Args:
            x: the set ``[B, n, d_input]``.
            mask: bool ``[B, n]``, True at real elements (``None``: all).

        Returns:
            ``[B, n, d]``.
        """
        return self.block(x, x, mask)


class InducedSetAttentionBlock(nn.Module):
    """Induced set attention block ``ISAB_m(X) = MAB(X, MAB(I, X))`` (Lee et al. eq. 9-10).

    ``m`` learned inducing points ``I`` first attend to the set (``H = MAB(I, X)``, ``m``
    summaries of it), then every element attends to the summaries: still permutation
    equivariant, but ``O(n·m)`` instead of ``O(n²)`` — a low-rank route through ``m`` points.

    Args:
        d_model: output size ``d``.
        num_heads: attention heads.
        num_inducing_points: ``m``.
        d_input: size of the input elements (default ``d``).
        **options: ``d_feedforward``, ``layer_norm``, ``dropout``, ``score``, ``align`` of
            :class:`MultiheadAttentionBlock`.

    Shapes: ``x [B, n, d_input]``, ``mask [B, n]`` → ``[B, n, d]``.

    Example::

        >>> InducedSetAttentionBlock(16, 4, num_inducing_points=6)(torch.randn(2, 100, 16)).shape
        torch.Size([2, 100, 16])
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_inducing_points: int,
        d_input: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        _check_positive(num_inducing_points=num_inducing_points)
        self.inducing_points = nn.Parameter(torch.empty(num_inducing_points, d_model))
        nn.init.xavier_uniform_(self.inducing_points)
        # The inducing points are learned queries (survey eq. 34); the elements query H.
        self.summarise = MultiheadAttentionBlock(d_model, num_heads, d_key=d_input, **options)
        self.broadcast = MultiheadAttentionBlock(d_model, num_heads, d_query=d_input, **options)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ISAB_m(x) = MAB(x, MAB(I, x))`` (eq. 9-10).

        Args:
            x: the set ``[B, n, d_input]``.
            mask: bool ``[B, n]``, True at real elements (``None``: all).

        Returns:
            ``[B, n, d]``.
        """
        inducing = self.inducing_points.to(x.dtype).expand(x.shape[0], -1, -1)  # [B, m, d]
        summaries = self.summarise(inducing, x, mask)  # H = MAB(I, X): [B, m, d], eq. (10)
        return self.broadcast(x, summaries)  # MAB(X, H), eq. (9): H has no padding


class PoolingByMultiheadAttention(nn.Module):
    """Pooling by multihead attention ``PMA_k(Z) = MAB(S, rFF(Z))`` (Lee et al. eq. 11).

    ``k`` learned seed vectors ``S`` attend to the (transformed) set, giving ``k`` vectors that do
    not depend on the order of the set's elements (permutation invariant): attention as a learned,
    content-dependent pooling, in place of a mean or max.

    Args:
        d_model: size ``d`` of the set elements and of the output.
        num_heads: attention heads.
        num_seeds: ``k``, the number of output vectors.
        **options: ``d_feedforward``, ``layer_norm``, ``dropout``, ``score``, ``align`` of
            :class:`MultiheadAttentionBlock`.

    Shapes: ``z [B, n, d]``, ``mask [B, n]`` → ``[B, k, d]``.

    Example::

        >>> PoolingByMultiheadAttention(16, 4, num_seeds=1)(torch.randn(2, 10, 16)).shape
        torch.Size([2, 1, 16])
    """

    taxonomy = TAXONOMY

    def __init__(self, d_model: int, num_heads: int, num_seeds: int = 1, **options: Any) -> None:
        super().__init__()
        _check_positive(d_model=d_model, num_seeds=num_seeds)
        self.d_model = d_model
        self.seeds = nn.Parameter(torch.empty(num_seeds, d_model))
        nn.init.xavier_uniform_(self.seeds)
        d_feedforward = options.get("d_feedforward") or d_model
        self.feedforward = RowwiseFeedForward(d_model, d_feedforward, d_model)
        self.block = MultiheadAttentionBlock(d_model, num_heads, **options)

    def forward(self, z: Tensor, mask: Tensor | None = None) -> Tensor:
        """``PMA_k(z) = MAB(S, rFF(z))`` (eq. 11).

        Args:
            z: the set ``[B, n, d]``.
            mask: bool ``[B, n]``, True at real elements (``None``: all).

        Returns:
            ``k`` pooled vectors ``[B, k, d]``.
        """
        check_set(type(self).__name__, z, self.d_model, mask)
        seeds = self.seeds.to(z.dtype).expand(z.shape[0], -1, -1)  # [B, k, d]
        return self.block(seeds, self.feedforward(z), mask)


#: the paper's names
MAB = MultiheadAttentionBlock
SAB = SetAttentionBlock
ISAB = InducedSetAttentionBlock
PMA = PoolingByMultiheadAttention
