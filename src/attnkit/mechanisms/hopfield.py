"""Modern Hopfield networks (Ramsauer et al. 2021, "Hopfield Networks is All You Need"): attention
as one step of associative-memory retrieval.

A continuous modern Hopfield network stores ``N`` patterns, the columns of ``X [d, N]``. Its
energy ``E = -lse(β, X^T ξ) + ½ ξ^T ξ + const`` is lowered by the update rule

    ξ_new = X softmax(β X^T ξ)                                           (Ramsauer et al. §2)

which converges in one step to a stored pattern when the patterns are well separated (their
Theorem 4: the error is exponentially small in the separation), to an average of similar patterns
otherwise. With rows as vectors (``state [M, d]``, ``stored [N, d]``) that is exactly attention
with the dot-product score scaled by the inverse temperature ``β``, the state as queries and the
stored patterns as keys *and* values: ``softmax(β ξ X^T) X``.

The Hopfield layer (their §3) associates two sets through learned maps: state patterns ``R``
(queries) retrieve from stored patterns ``Y``:

    Z = softmax(β R W_Q W_K^T Y^T) Y W_K W_V                              (Hopfield layer)

i.e. ``Q = R W_Q``, ``K = Y W_K``, ``V = K W_V`` — the values are the retrieved *keys* mapped
once more, since what is retrieved is a stored pattern. Several update steps iterate the
retrieval in the key space (``Q ← softmax(β Q K^T) K``) before the final read. Every step is one
:func:`attnkit.attention` call, so ``attnkit.interpret.record`` sees the retrieval weights.

Shapes: B batch, M state patterns (queries), N stored patterns, d pattern size, H heads.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.mechanisms.sets import check_set
from attnkit.taxonomy import QueryType


def _check_beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
        raise ValueError(f"beta (the inverse temperature) must be a number > 0, got {beta!r}")
    return float(beta)


def hopfield_update(
    state: Tensor,
    stored: Tensor,
    beta: float,
    *,
    mask: Tensor | None = None,
    return_weights: bool = False,
) -> AttentionOutput:
    """One update of the modern Hopfield network, ``ξ_new = X softmax(β X^T ξ)`` for every state
    pattern at once (Ramsauer et al. §2).

    Reference (rows as vectors): ``torch.softmax(beta * state @ stored.mT, -1) @ stored``.

    Args:
        state: ``ξ``, ``[B, M, d]`` (or ``[B, H, M, d]``).
        stored: ``X``, the stored patterns ``[B, N, d]`` (or ``[B, H, N, d]``).
        beta: ``β > 0``, the inverse temperature: large ``β`` retrieves single patterns, small
            ``β`` averages (metastable states).
        mask: bool ``[B, N]``, True = a real stored pattern.
        return_weights: include the retrieval weights ``softmax(β X^T ξ)``.

    Returns:
        :class:`~attnkit.AttentionOutput` with ``context`` = ``ξ_new``, shaped like ``state``.

    Example::

        >>> patterns = torch.nn.functional.normalize(torch.randn(1, 10, 64), dim=-1)
        >>> noisy = patterns[:, 3:4] + 0.05 * torch.randn(1, 1, 64)
        >>> retrieved = hopfield_update(noisy, patterns, beta=32.0).context
        >>> torch.allclose(retrieved, patterns[:, 3:4], atol=1e-3)
        True
    """
    beta = _check_beta(beta)
    for name, t in (("state", state), ("stored", stored)):
        if not isinstance(t, Tensor) or t.dim() not in (3, 4):
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"hopfield_update expects {name} [B, (H,) L, d], got {shape}")
    if mask is not None:
        n = stored.shape[-2]
        if mask.dtype != torch.bool or tuple(mask.shape) != (stored.shape[0], n):
            raise ValueError(
                f"hopfield_update expects a bool mask [B, N] = {(stored.shape[0], n)}, got "
                f"{mask.dtype} {tuple(mask.shape)}"
            )
        # one row of admissible keys, broadcast over heads and queries
        mask = mask[:, None, :] if state.dim() == 3 else mask[:, None, None, :]
    return attention(
        state, stored, stored, score="dot", scale=beta, mask=mask, return_weights=return_weights
    )


class Hopfield(nn.Module):
    """The Hopfield layer (Ramsauer et al. §3): state patterns ``R`` retrieve from stored patterns
    ``Y`` by ``Z = softmax(β R W_Q W_K^T Y^T) Y W_K W_V``, then ``Z W_O``.

    Args:
        d_state: size of the state patterns ``R`` (the queries).
        d_stored: size of the stored patterns ``Y`` (default ``d_state``).
        d_association: ``d_k`` per head, the size of the space where patterns are compared
            (default ``d_state // num_heads``).
        num_heads: independent retrievals, concatenated before ``W_O``.
        beta: the inverse temperature (default ``1/sqrt(d_k)``, which makes one step the scaled
            dot-product attention of a Transformer).
        update_steps: retrieval steps; more than one iterates ``Q ← softmax(β Q K^T) K`` towards
            a fixed point before the final read.
        d_out: output size (default ``d_state``).
        query_type: where the state patterns come from, in the survey's words (§3.3.1), for the
            taxonomy: ``"Basic"`` (given by the caller, default) or ``"Self-Attentive"``
            (learned, as in :class:`HopfieldPooling`).

    Shapes: ``state [B, M, d_state]``, ``stored [B, N, d_stored]``, ``mask [B, N]`` (True = real
    stored pattern) → ``[B, M, d_out]``.

    Example::

        >>> layer = Hopfield(d_state=16, d_stored=8, num_heads=2)
        >>> layer(torch.randn(3, 4, 16), torch.randn(3, 20, 8)).shape
        torch.Size([3, 4, 16])
    """

    def __init__(
        self,
        d_state: int,
        d_stored: int | None = None,
        *,
        d_association: int | None = None,
        num_heads: int = 1,
        beta: float | None = None,
        update_steps: int = 1,
        d_out: int | None = None,
        query_type: str = "Basic",
    ) -> None:
        super().__init__()
        try:
            QueryType(query_type)
        except ValueError:
            valid = ", ".join(repr(t.value) for t in QueryType)
            raise ValueError(
                f"unknown query_type {query_type!r}; expected one of: {valid}"
            ) from None
        d_stored = d_state if d_stored is None else d_stored
        d_out = d_state if d_out is None else d_out
        for name, value in (("d_state", d_state), ("num_heads", num_heads)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_association is None:
            if d_state % num_heads:
                raise ValueError(
                    f"d_state ({d_state}) must be divisible by num_heads ({num_heads}) unless "
                    "d_association is given"
                )
            d_association = d_state // num_heads
        for name, value in (
            ("d_stored", d_stored),
            ("d_association", d_association),
            ("update_steps", update_steps),
            ("d_out", d_out),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.d_state, self.d_stored = d_state, d_stored
        self.num_heads, self.d_association, self.update_steps = (
            num_heads,
            d_association,
            update_steps,
        )
        self.beta = 1 / math.sqrt(d_association) if beta is None else _check_beta(beta)
        width = num_heads * d_association
        # no biases: the layer is the bare energy-based retrieval of the paper
        self.state_projection = nn.Linear(d_state, width, bias=False)  # W_Q
        self.stored_projection = nn.Linear(d_stored, width, bias=False)  # W_K
        self.value_projection = nn.Linear(d_association, d_association, bias=False)  # W_V
        self.out_projection = nn.Linear(width, d_out, bias=False)  # W_O
        self.taxonomy = {
            "scoring": "Multiplicative",  # a dot product times β
            "alignment": "Global",
            "query_type": query_type,
            "query_multiplicity": [
                *(["Multi-Head"] if num_heads > 1 else []),
                *(["Multi-Hop"] if update_steps > 1 else []),
            ]
            or "Singular",
        }

    def _heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.num_heads, self.d_association)).transpose(1, 2)  # [B,H,L,d_k]

    def forward(
        self,
        state: Tensor,
        stored: Tensor,
        mask: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Retrieve for every state pattern; with ``return_weights`` also the last step's
        retrieval weights ``[B, H, M, N]``.

        Args:
            state: the state patterns ``R [B, M, d_state]``.
            stored: the stored patterns ``Y [B, N, d_stored]``.
            mask: bool ``[B, N]``, True at real stored patterns (``None``: all).
            return_weights: also return the weights.

        Returns:
            ``Z W_O [B, M, d_out]``; with ``return_weights``, ``(Z W_O, weights [B, H, M, N])``.
        """
        name = type(self).__name__
        check_set(f"{name} (state)", state, self.d_state, None)
        check_set(f"{name} (stored)", stored, self.d_stored, mask)
        if state.shape[0] != stored.shape[0]:
            raise ValueError(
                f"{name} expects state and stored with one batch size, got {tuple(state.shape)} "
                f"and {tuple(stored.shape)}"
            )
        query = self._heads(self.state_projection(state))  # R W_Q: [B, H, M, d_k]
        keys = self._heads(self.stored_projection(stored))  # Y W_K: [B, H, N, d_k]
        values = self.value_projection(keys)  # Y W_K W_V: what is retrieved is a stored pattern
        for _ in range(self.update_steps - 1):  # iterate towards the fixed point (key space)
            query = hopfield_update(query, keys, self.beta, mask=mask).context
        keep = None if mask is None else mask[:, None, None, :]
        out = attention(
            query, keys, values, score="dot", scale=self.beta, mask=keep,
            return_weights=return_weights,
        )  # fmt: skip
        z = self.out_projection(out.context.transpose(1, 2).flatten(2))  # [B, M, H·d_k] W_O
        return (z, out.weights) if return_weights else z  # type: ignore[return-value]


class HopfieldPooling(nn.Module):
    """Hopfield pooling (Ramsauer et al. §3): learned state patterns (queries) retrieve from the
    input, pooling a set of ``N`` vectors into ``k``, order-independent.

    Args:
        d_stored: size of the input vectors (the stored patterns).
        num_queries: ``k``, learned state patterns.
        d_state: their size (default ``d_stored``); **options: those of :class:`Hopfield`.

    Shapes: ``stored [B, N, d_stored]``, ``mask [B, N]`` → ``[B, k, d_out]``.

    Example::

        >>> HopfieldPooling(8, num_queries=2)(torch.randn(3, 20, 8)).shape
        torch.Size([3, 2, 8])
    """

    def __init__(
        self, d_stored: int, num_queries: int = 1, d_state: int | None = None, **options: Any
    ) -> None:
        super().__init__()
        if not isinstance(num_queries, int) or num_queries <= 0:
            raise ValueError(f"num_queries must be a positive int, got {num_queries!r}")
        d_state = d_stored if d_state is None else d_state
        self.queries = nn.Parameter(torch.empty(num_queries, d_state))
        nn.init.normal_(self.queries, std=d_state**-0.5)
        # a learned query asks the same question of every input (survey eq. 34)
        self.hopfield = Hopfield(d_state, d_stored, query_type="Self-Attentive", **options)

    def forward(self, stored: Tensor, mask: Tensor | None = None) -> Tensor:
        """Pool the set ``stored`` into ``k`` vectors.

        Args:
            stored: ``[B, N, d_stored]``.
            mask: bool ``[B, N]``, True at real elements (``None``: all).

        Returns:
            ``[B, k, d_out]``.
        """
        if not isinstance(stored, Tensor) or stored.dim() != 3:
            given = tuple(stored.shape) if isinstance(stored, Tensor) else type(stored).__name__
            raise ValueError(f"HopfieldPooling expects stored [B, N, d], got {given}")
        state = self.queries.to(stored.dtype).expand(stored.shape[0], -1, -1)
        return self.hopfield(state, stored, mask)  # type: ignore[return-value]


class HopfieldLayer(nn.Module):
    """Hopfield lookup (Ramsauer et al. §3, "HopfieldLayer"): the input retrieves from ``N``
    *learned* stored patterns — a trainable associative memory (a key-value lookup table).

    Args:
        d_state: size of the input vectors (the state patterns).
        num_stored_patterns: ``N``.
        d_stored: their size (default ``d_state``); **options: those of :class:`Hopfield`.

    Shapes: ``state [B, M, d_state]`` → ``[B, M, d_out]``.

    Example::

        >>> HopfieldLayer(8, num_stored_patterns=32)(torch.randn(3, 5, 8)).shape
        torch.Size([3, 5, 8])
    """

    def __init__(
        self,
        d_state: int,
        num_stored_patterns: int,
        d_stored: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if not isinstance(num_stored_patterns, int) or num_stored_patterns <= 0:
            raise ValueError(
                f"num_stored_patterns must be a positive int, got {num_stored_patterns!r}"
            )
        d_stored = d_state if d_stored is None else d_stored
        self.stored_patterns = nn.Parameter(torch.empty(num_stored_patterns, d_stored))
        nn.init.normal_(self.stored_patterns, std=d_stored**-0.5)
        self.hopfield = Hopfield(d_state, d_stored, **options)

    def forward(self, state: Tensor) -> Tensor:
        """Look every state pattern up in the learned stored patterns.

        Args:
            state: ``[B, M, d_state]``.

        Returns:
            ``[B, M, d_out]``.
        """
        if not isinstance(state, Tensor) or state.dim() != 3:
            given = tuple(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise ValueError(f"HopfieldLayer expects state [B, M, d], got {given}")
        stored = self.stored_patterns.to(state.dtype).expand(state.shape[0], -1, -1)
        return self.hopfield(state, stored)  # type: ignore[return-value]
