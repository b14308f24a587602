"""Multi-representational attention (survey §3.1.3, eq. 21-22; Kiela et al.'s dynamic
meta-embeddings): attention over several embeddings of the same token.

    x^(e_1) ─► x^(t_1) = W_e1 x^(e_1) + b_e1 ─┐
       ⋮                                        ├─► a = align(score(u, K)) ─► x^(e) = Σ_i a_i x^(t_i)
    x^(e_E) ─► x^(t_E) = W_eE x^(e_E) + b_eE ─┘

The ``E`` size-normalised embeddings of a token (eq. 21) are its feature vectors; the
meta-embedding is their attention-weighted average (eq. 22). The query is constant ("which
representations are the most important?"), so it is a learned vector ``u``: a self-attentive
mechanism. In the contextual variant (Kiela et al.'s CDME) the keys are the states of an encoder
(a BiLSTM) run along each embedding's token sequence, while the values stay ``x^(t_i)``.

Rows are vectors: eq. (21) ``x^(t_i) = W_ei x^(e_i) + b_ei`` is ``x^(e_i) W_ei^T + b_ei`` here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.scores import Score, build_score


class MultiRepresentationalAttention(nn.Module):
    """Multi-representational attention: a meta-embedding from ``E`` embeddings (eq. 21-22).

    For each token, eq. (21) ``x^(t_i) = x^(e_i) W_ei^T + b_ei`` maps embedding ``i`` to size
    ``d_t``; the weights ``a = align(score(u, [k_1, …, k_E]))`` with the learned query ``u`` and
    keys ``k_i = x^(t_i)`` (or the contextual encoder's states) give eq. (22)
    ``x^(e) = Σ_i a_i x^(t_i)``.

    Kiela et al.'s DME weights ``softmax_i(a · x^(t_i) + b)`` are exactly ``score="dot"`` (the
    learned query is ``a``; ``b`` cancels in the softmax). The survey's Table 3 files the model
    under the additive score, the default here: ``w^T tanh(W_1 u + W_2 x^(t_i) + b)``.

    Args:
        embedding_sizes: ``(d_e1, …, d_eE)``, the sizes of the ``E`` embeddings.
        d_meta: ``d_t``, the size of the transformed embeddings and of the meta-embedding.
        score: a score name or object; parametric names are built for a query and keys of size
            ``d_key`` (``d_t``, or ``d_context`` with a context encoder).
        align: an alignment name or object.
        d_hidden: ``d_w`` of the additive score (default ``d_key``).
        context_encoder: the contextual variant: ``encoder(x [B, L, d_t], mask [B, L]) ->
            [B, L, d_context]``, run along the token sequence of each embedding separately (the
            same encoder for all ``E``), e.g.
            ``RecurrentEncoder(nn.LSTM(d_t, m, batch_first=True, bidirectional=True))`` from
            :mod:`attnkit.mechanisms.hierarchical`. ``None``: keys are the ``x^(t_i)``.
        d_context: size of the context encoder's states (default ``d_t``).
        dropout: dropout on the attention weights, in training mode only.

    Example::

        >>> import torch
        >>> from attnkit.mechanisms.multi_representational import MultiRepresentationalAttention
        >>> dme = MultiRepresentationalAttention([300, 100, 50], d_meta=64)
        >>> glove, fasttext, chars = torch.randn(2, 7, 300), torch.randn(2, 7, 100), torch.randn(2, 7, 50)
        >>> out = dme([glove, fasttext, chars], return_weights=True)
        >>> out.context.shape, out.weights.shape                # meta-embeddings, a_i per token
        (torch.Size([2, 7, 64]), torch.Size([2, 7, 3]))
    """

    taxonomy = {
        "feature_representations": "Multi-Representational",
        "query_type": "Self-Attentive",
    }

    def __init__(
        self,
        embedding_sizes: Sequence[int],
        d_meta: int,
        *,
        score: str | Score = "additive",
        align: str | Align = "softmax",
        d_hidden: int | None = None,
        context_encoder: nn.Module | None = None,
        d_context: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        sizes = tuple(embedding_sizes)
        if not sizes or not all(isinstance(d, int) and d > 0 for d in sizes):
            raise ValueError(f"embedding_sizes must be one or more positive ints, got {sizes!r}")
        self.embedding_sizes, self.d_meta = sizes, d_meta
        self.projections = nn.ModuleList(nn.Linear(d, d_meta) for d in sizes)  # W_ei, b_ei (21)
        self.context_encoder = context_encoder
        self.d_key = (d_context or d_meta) if context_encoder is not None else d_meta
        # Unit-variance scores at initialisation for dot-product scores over unit-variance keys.
        self.query = nn.Parameter(torch.randn(self.d_key) / math.sqrt(self.d_key))  # u
        self.score = build_score(score, self.d_key, self.d_key, d_hidden)
        self.align = build_align(align, self.d_key, self.d_key)
        self.dropout = dropout

    def transform(self, embeddings: Sequence[Tensor]) -> Tensor:
        """Eq. (21) for every embedding: ``x^(t)`` ``[..., E, d_t]`` from ``E`` tensors ``[..., d_ei]``."""
        self._check(embeddings)
        return torch.stack(
            [proj(x) for proj, x in zip(self.projections, embeddings, strict=True)], dim=-2
        )

    def forward(
        self,
        embeddings: Sequence[Tensor],
        mask: Tensor | None = None,
        representation_mask: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> AttentionOutput:
        """Meta-embeddings of the tokens.

        Args:
            embeddings: ``E`` tensors ``x^(e_i)``, each ``[B, L, d_ei]`` (a sequence of ``L``
                tokens) or ``[B, d_ei]`` (one token); the contextual variant needs ``[B, L, d_ei]``.
            mask: bool token padding ``[B, L]`` (``[B]`` for one token), True = a real token; a
                padded token gets zero weights and a zero meta-embedding.
            representation_mask: bool, broadcastable to ``[B, L, E]`` (``[B, E]`` for one token),
                True = embedding ``i`` exists for the token (e.g. False where a token is out of one
                embedding's vocabulary); missing embeddings get exactly zero weight.
            return_weights: include the weights ``a`` ``[B, L, E]`` (``[B, E]``).

        Returns:
            ``AttentionOutput`` with ``context`` = ``x^(e)`` ``[B, L, d_t]`` (``[B, d_t]``) and
            ``weights`` when asked.
        """
        values = self.transform(embeddings)  # [*lead, E, d_t]
        lead, n_rep = values.shape[:-2], values.shape[-2]
        allowed = self._allowed(mask, representation_mask, lead, n_rep, values.device)
        keys = values
        if self.context_encoder is not None:
            keys = self._encode(self.context_encoder, values, mask)
        tokens = math.prod(lead)
        out = attention(
            self.query.to(values.dtype).expand(tokens, 1, self.d_key),
            keys.reshape(tokens, n_rep, keys.shape[-1]),
            values.reshape(tokens, n_rep, self.d_meta),
            score=self.score,
            align=self.align,
            mask=None if allowed is None else allowed.reshape(tokens, 1, n_rep),
            dropout=self.dropout if self.training else 0.0,
            return_weights=return_weights,
        )
        weights = None
        if out.weights is not None:
            weights = out.weights.reshape(*lead, n_rep, *out.weights.shape[3:])
        return AttentionOutput(context=out.context.reshape(*lead, self.d_meta), weights=weights)

    def _encode(self, encoder: nn.Module, values: Tensor, mask: Tensor | None) -> Tensor:
        """Contextual keys: the encoder along each embedding's token sequence ``[B, L, E, d_c]``."""
        if values.dim() != 4:
            raise ValueError(
                "the contextual variant needs token sequences [B, L, d_ei], got embeddings with "
                f"leading shape {tuple(values.shape[:-2])}"
            )
        b, length, n_rep, d = values.shape
        tokens = mask if mask is not None else values.new_ones(b, length, dtype=torch.bool)
        sequences = values.permute(0, 2, 1, 3).reshape(b * n_rep, length, d)  # [B·E, L, d_t]
        encoded = encoder(sequences, tokens.repeat_interleave(n_rep, dim=0))
        if not isinstance(encoded, Tensor) or tuple(encoded.shape) != (
            b * n_rep,
            length,
            self.d_key,
        ):
            given = tuple(encoded.shape) if isinstance(encoded, Tensor) else type(encoded).__name__
            raise ValueError(
                f"context_encoder must return {(b * n_rep, length, self.d_key)} "
                f"([B·E, L, d_context]), got {given}"
            )
        return encoded.reshape(b, n_rep, length, self.d_key).transpose(1, 2)

    def _check(self, embeddings: Sequence[Tensor]) -> None:
        if isinstance(embeddings, Tensor) or not isinstance(embeddings, Sequence):
            raise TypeError(
                f"embeddings must be a sequence of {len(self.embedding_sizes)} tensors, got "
                f"{type(embeddings).__name__}"
            )
        shapes = [tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__ for x in embeddings]
        expected = [f"[..., {d}]" for d in self.embedding_sizes]
        ok = len(embeddings) == len(self.embedding_sizes) and all(
            isinstance(x, Tensor) and x.dim() in (2, 3) and x.shape[-1] == d
            for x, d in zip(embeddings, self.embedding_sizes, strict=False)
        )
        if ok:
            ok = len({x.shape[:-1] for x in embeddings}) == 1
        if not ok:
            raise ValueError(
                f"expected {len(expected)} embeddings {', '.join(expected)} with the same leading "
                f"shape [B, L] or [B], got {shapes}"
            )

    @staticmethod
    def _allowed(
        mask: Tensor | None,
        representation_mask: Tensor | None,
        lead: torch.Size,
        n_rep: int,
        device: torch.device,
    ) -> Tensor | None:
        """Bool ``[*lead, E]`` (True = may attend) from the token and representation masks."""
        allowed = None
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                given = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
                raise TypeError(f"mask must be a bool tensor {tuple(lead)}, got {given}")
            if mask.shape != lead:
                raise ValueError(
                    f"mask must have the tokens' shape {tuple(lead)}, got {tuple(mask.shape)}"
                )
            allowed = mask.unsqueeze(-1).expand(*lead, n_rep)
        if representation_mask is not None:
            target = (*lead, n_rep)
            if (
                not isinstance(representation_mask, Tensor)
                or representation_mask.dtype != torch.bool
            ):
                raise TypeError(
                    f"representation_mask must be a bool tensor broadcastable to {target}"
                )
            try:
                rep = representation_mask.expand(target)
            except RuntimeError:
                raise ValueError(
                    f"representation_mask of shape {tuple(representation_mask.shape)} does not "
                    f"broadcast to [*tokens, E] = {target}"
                ) from None
            allowed = rep if allowed is None else allowed & rep
        if allowed is not None and allowed.device != device:
            raise ValueError(
                f"masks must be on the embeddings' device ({device}), got {allowed.device}"
            )
        return allowed

    def extra_repr(self) -> str:
        return f"embedding_sizes={self.embedding_sizes}, d_meta={self.d_meta}"
