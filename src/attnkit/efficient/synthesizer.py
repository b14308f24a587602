"""Synthesizer attention (Tay et al. 2021, "Synthesizer: Rethinking Self-Attention for Transformer
Models", §3): attention weights *synthesized* without query-key dot products.

- Dense (§3.1, eq. 1-2): each position's row of scores from its own vector by a two-layer MLP,
  ``B_i = W_2 σ_R(W_1 X_i + b_1) + b_2 ∈ R^l``; ``Y = softmax(B) G(X)``. In the survey's terms
  this is a location-based score: computed from the query alone.
- Random (§3.2, eq. 3): one learned matrix ``R ∈ R^{l×l}`` per head, independent of the input
  (``trainable=False`` keeps it fixed: the paper's "Fixed Random").
- Factorized (§3.3): dense: ``A = F_A(X_i) ∈ R^a``, ``B = F_B(X_i) ∈ R^b`` with ``a·b = l``, scores
  ``H_A(A) * H_B(B)`` where ``H_A`` repeats ``A`` ``b`` times and ``H_B`` tiles ``B`` ``a``
  times, so ``C_i[p·b + r] = A_p B_r`` (the flattened outer product); here ``F_A`` and ``F_B``
  are the two output groups of one two-layer MLP (they share its hidden layer); random:
  ``R = R_1 R_2^T`` with ``R_1, R_2 ∈ R^{l×k}`` (low rank ``k``).

``l`` is a fixed maximum length; a sequence of ``N <= l`` keys uses the first ``N`` score columns
(and, for random, the first ``M`` rows), a longer one is refused. Scores are ``[B, H, M, N]``, so
this kind is not sub-quadratic; it is here because it replaces the dot product, not to save
memory. Masks (any shape) and bottom-right causal masking apply to the synthesized scores.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionOutput
from attnkit.core.kinds import KINDS
from attnkit.core.masks import causal as causal_mask
from attnkit.efficient._inputs import (
    EfficientCall,
    EfficientKind,
    check_positive_int,
    masked_softmax,
)

TAXONOMY: dict[str, str | list[str]] = {"scoring": "Location", "alignment": "Global"}
VARIANTS = ("dense", "random")


class SynthesizerAttention(EfficientKind):
    """Dense or random Synthesizer attention, optionally factorized, for ``num_heads`` heads;
    the attention kinds ``"synthesizer_dense"`` and ``"synthesizer_random"``.

    Args:
        kind: ``"dense"`` (scores from each query by an MLP) or ``"random"`` (learned matrix).
        max_length: ``l``, the longest key sequence accepted (and, random, query sequence);
            default 4096 (the registered kinds' default).
        num_heads: ``H`` (dense: the MLP is per head; random: one matrix per head); ``None``:
            given by the :class:`~attnkit.MultiHeadAttention` that runs it (:meth:`bind`),
            which then draws the parameters.
        head_dim: ``d``, the query size per head (dense only; ``None``: from :meth:`bind`).
        hidden: MLP width ``d_h`` (dense; default ``d``).
        factorized: dense: ``a`` (a divisor of ``l``; ``b = l / a``); random: rank ``k``.
            ``None``: not factorized.
        trainable: random only: learn ``R`` (False: the paper's fixed random synthesizer).

    Called as an attention kind (:class:`~attnkit.efficient._inputs.KindOptions`; any bool
    mask): ``k`` is not used (the scores do not depend on the keys), ``q [B, H, M, d]``,
    ``v [B, H_kv, N, d_v]``; returns ``context`` and, when asked, ``weights [B, H, M, N]``.

    Example::

        >>> kind = SynthesizerAttention("random", max_length=16)
        >>> mha = ak.MultiHeadAttention(32, 4, batch_first=True, attention=kind)
        >>> x = torch.randn(2, 10, 32)
        >>> mha(x, x, x)[0].shape
        torch.Size([2, 10, 32])
    """

    taxonomy = TAXONOMY

    def __init__(
        self,
        kind: str,
        max_length: int = 4096,
        num_heads: int | None = None,
        head_dim: int | None = None,
        *,
        hidden: int | None = None,
        factorized: int | None = None,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        if kind not in VARIANTS:
            raise ValueError(f"kind must be one of {VARIANTS}, got {kind!r}")
        self.kind = kind
        self.max_length = check_positive_int("max_length", max_length)
        self.factorized = (
            None if factorized is None else check_positive_int("factorized", factorized)
        )
        if kind == "dense" and factorized is not None and max_length % factorized:
            raise ValueError(
                f"factorized dense synthesizer needs a = factorized dividing max_length "
                f"({max_length}), got {factorized}"
            )
        self.hidden, self.trainable = hidden, trainable
        self.num_heads: int | None = None
        self.head_dim: int | None = head_dim
        if num_heads is not None:
            self._build(num_heads, head_dim)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"synthesizer_{self.kind}"

    def _build(self, num_heads: int, head_dim: int | None) -> None:
        """Draw the parameters for ``num_heads`` heads of query size ``head_dim``."""
        h = self.num_heads = check_positive_int("num_heads", num_heads)
        lmax, factorized = self.max_length, self.factorized
        if self.kind == "dense":
            if head_dim is None:
                raise ValueError("a dense synthesizer needs head_dim (the query size per head)")
            d = self.head_dim = check_positive_int("head_dim", head_dim)
            width = self.hidden or d
            out = lmax if factorized is None else factorized + lmax // factorized
            self.w1 = nn.Parameter(torch.randn(h, d, width) / math.sqrt(d))
            self.b1 = nn.Parameter(torch.zeros(h, width))
            self.w2 = nn.Parameter(torch.randn(h, width, out) / math.sqrt(width))
            self.b2 = nn.Parameter(torch.zeros(h, out))
        elif factorized is None:
            self.r = nn.Parameter(torch.randn(h, lmax, lmax) / math.sqrt(lmax), self.trainable)
        else:
            k = factorized
            self.r1 = nn.Parameter(torch.randn(h, lmax, k) / k**0.25, self.trainable)
            self.r2 = nn.Parameter(torch.randn(h, lmax, k) / k**0.25, self.trainable)

    def bind(self, num_heads: int, head_dim_k: int, head_dim_v: int) -> SynthesizerAttention:
        """Draw the parameters for the module's heads if they were not given (else check)."""
        super().bind(num_heads, head_dim_k, head_dim_v)
        if self.num_heads is None and self.head_dim in (None, head_dim_k):
            self._build(num_heads, head_dim_k)
        elif self.num_heads != num_heads or self.head_dim not in (None, head_dim_k):
            raise ValueError(
                f"this synthesizer was built for num_heads={self.num_heads}, "
                f"head_dim={self.head_dim}, but the module has num_heads={num_heads}, "
                f"head_dim_k={head_dim_k}; leave them out to take the module's"
            )
        return self

    def scores(self, q: Tensor, m: int, n: int) -> Tensor:
        """The synthesized scores ``[B, H, M, N]`` (random: ``[1, H, M, N]``)."""
        if self.kind == "dense":
            hidden = torch.relu(torch.einsum("bhmd,hde->bhme", q, self.w1) + self.b1[:, None])
            out = torch.einsum("bhme,heo->bhmo", hidden, self.w2) + self.b2[:, None]
            if self.factorized is not None:
                a = self.factorized
                part_a, part_b = out.split([a, self.max_length // a], -1)
                # H_A repeats each of A's entries b times; H_B tiles B a times (§3.3).
                out = part_a.repeat_interleave(self.max_length // a, -1) * part_b.repeat(1, 1, 1, a)
            return out[..., :n]
        if self.factorized is None:
            r = self.r[:, :m, :n]
        else:
            r = self.r1[:, :m] @ self.r2[:, :n].transpose(-1, -2)
        return r.unsqueeze(0)

    def attend(self, call: EfficientCall) -> AttentionOutput:
        """``softmax(B) V`` with synthesized scores ``B`` (eq. 2)."""
        b, h, m, n = call.shape
        if self.num_heads is None:
            raise ValueError(
                "this synthesizer has no parameters yet: give num_heads (and head_dim), or run "
                "it in a MultiHeadAttention (which gives its head sizes)"
            )
        if h != self.num_heads:
            raise ValueError(f"synthesizer was built for {self.num_heads} heads, got q with {h}")
        longest = max(n, m) if self.kind == "random" else n
        if longest > self.max_length:
            raise ValueError(
                f"synthesizer was built for at most {self.max_length} positions, got M={m}, N={n}"
            )
        allowed = call.mask
        if call.causal:
            tri = causal_mask(m, n, call.q.device)
            allowed = tri if allowed is None else allowed & tri
        weights = masked_softmax(self.scores(call.q, m, n), allowed)
        context = weights @ call.v
        return call.output(context, weights.expand(b, h, m, n))  # random: one matrix per batch

    def extra_repr(self) -> str:
        return (
            f"kind={self.kind!r}, max_length={self.max_length}, num_heads={self.num_heads}, "
            f"factorized={self.factorized}"
        )


# the two variants of Tay et al. (2021) under their own names, with default hyperparameters
KINDS.register("synthesizer_dense")(partial(SynthesizerAttention, "dense"))
KINDS.register("synthesizer_random")(partial(SynthesizerAttention, "random"))
