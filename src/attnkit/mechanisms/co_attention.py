"""Co-attention: attention over two feature sets at once (survey §3.1.1, eq. 6-16, Fig. 4-6).

Coarse-grained: one set is attended with a compact vector of the other as query —
:class:`AlternatingCoAttention` (Lu et al., eq. 6-9: set 1 without a query, set 2, set 1 again)
and :class:`InteractiveCoAttention` (Ma et al., eq. 10-11: each set with the other's mean key).
Fine-grained: every element of one set queries the other — :class:`ParallelCoAttention` (Lu et
al., eq. 12-16: an affinity matrix turned into scores for both sets). :class:`MultiGrainedCoAttention`
(Fan et al.) combines a coarse- and a fine-grained one: four context vectors.

Rows are vectors: the survey's ``K^(1) [d_k, n_f]`` is ``K1 [B, N1, d_k]`` here. Every attention
step runs on :func:`attnkit.attention`, with any score and alignment. Masks are bool ``[B, N]``,
True = a real (not padded) element: padded elements get exactly zero weight everywhere, and a set
with no real element gives a zero context.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.masks import masked_mean
from attnkit.core.scores import Activation, Additive, Score, build_score, resolve_activation
from attnkit.mechanisms.inputs import check_features, check_mask, projection

ScoreSpec = str | Score
AlignSpec = str | Align
Pair = tuple[Tensor, Tensor]  # (set 1, set 2)
Masks = tuple[Tensor | None, Tensor | None]


@dataclass(frozen=True, kw_only=True)
class CoAttentionOutput(AttentionOutput):
    """What a co-attention module returns.

    An :class:`~attnkit.AttentionOutput` (``context``, ``weights``, ``log_prob`` as there)
    with this mechanism's extra fields (keyword-only). ``weights`` is a dict, one
    entry per context, as ``contexts``.

    Attributes:
        context: the context vectors the output model gets, concatenated: ``[B, Σ d_v]``.
        contexts: each context vector ``[B, d_v]`` by the survey's superscript (``"1"``, ``"2"``).
        weights: the weights ``[B, N]`` behind each context (same keys) if asked, else None.
        affinity: ``A [B, N1, N2]`` of fine-grained co-attention (padded pairs 0), else None.
        log_prob: ``[B]`` summed log-probability of stochastic alignments' samples, else None.

    Example::

        >>> co = ak.mechanisms.ParallelCoAttention(d_feature1=16, d_feature2=8)
        >>> out = co(torch.randn(2, 49, 16), torch.randn(2, 7, 8))
        >>> out.context.shape, out.affinity.shape
        (torch.Size([2, 24]), torch.Size([2, 49, 7]))
    """

    contexts: dict[str, Tensor]
    weights: dict[str, Tensor] | None = None  # type: ignore[assignment]
    affinity: Tensor | None = None


def _per_set(spec: object, count: int, what: str) -> tuple:
    """One spec for every attention function, or a tuple/list with one each."""
    if isinstance(spec, (tuple, list)):
        if len(spec) != count:
            raise ValueError(f"{what} must be one spec or {count} specs, got {len(spec)}")
        return tuple(spec)
    return (spec,) * count


def _attend(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    score: ScoreSpec,
    align: AlignSpec,
    mask: Tensor | None,
    return_weights: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """One attention step (eq. 2-4) of one query ``[B, d_q]``: ``(context, weights, log_prob)``."""
    out = attention(
        query.unsqueeze(1),  # [B, 1, d_q]
        keys,
        values,
        score=score,
        align=align,
        mask=None if mask is None else mask.unsqueeze(1),  # [B, 1, N]
        return_weights=return_weights,
    )
    weights = None if out.weights is None else out.weights.squeeze(1)
    log_prob = None if out.log_prob is None else out.log_prob.squeeze(1)
    return out.context.squeeze(1), weights, log_prob


def _present(weights: dict[str, Tensor | None]) -> dict[str, Tensor] | None:
    """The weights that were computed: all when asked for, else None."""
    return {k: w for k, w in weights.items() if w is not None} or None


def _sum(log_probs: Sequence[Tensor | None]) -> Tensor | None:
    present = [lp for lp in log_probs if lp is not None]
    return None if not present else torch.stack(present).sum(0)


class _TwoSets(nn.Module, ABC):
    """Key/value projections (eq. 1) of two feature sets, input checks, and the shared ``forward``."""

    taxonomy: dict[str, str | list[str]]

    def __init__(
        self,
        d_feature1: int,
        d_feature2: int,
        d_key1: int | None,
        d_key2: int | None,
        d_value1: int | None,
        d_value2: int | None,
    ) -> None:
        super().__init__()
        self.d_feature1, self.d_feature2 = d_feature1, d_feature2
        self.d_key1, self.d_key2 = d_key1 or d_feature1, d_key2 or d_feature2
        self.d_value1, self.d_value2 = d_value1 or d_feature1, d_value2 or d_feature2
        self.key_proj1 = projection(d_feature1, d_key1)
        self.value_proj1 = projection(d_feature1, d_value1)
        self.key_proj2 = projection(d_feature2, d_key2)
        self.value_proj2 = projection(d_feature2, d_value2)

    def forward(
        self,
        features1: Tensor,
        features2: Tensor,
        mask1: Tensor | None = None,
        mask2: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> CoAttentionOutput:
        """Co-attend the two feature sets.

        Args:
            features1: ``[B, N1, d_f1]`` (e.g. image regions).
            features2: ``[B, N2, d_f2]`` (e.g. question words).
            mask1, mask2: bool ``[B, N1]``, ``[B, N2]``, True = real element.
            return_weights: also return the attention weights.

        Returns:
            :class:`CoAttentionOutput` (keys of ``contexts``/``weights``: see the class).
        """
        f1 = check_features("features1", features1, self.d_feature1)
        f2 = check_features("features2", features2, self.d_feature2)
        if f1.shape[0] != f2.shape[0]:
            raise ValueError(
                f"both feature sets need one batch size, got {tuple(f1.shape)} and {tuple(f2.shape)}"
            )
        m1, m2 = check_mask("mask1", mask1, f1), check_mask("mask2", mask2, f2)
        keys = (self.key_proj1(f1), self.key_proj2(f2))
        values = (self.value_proj1(f1), self.value_proj2(f2))
        return self._co_attend(keys, values, (m1, m2), return_weights)

    @abstractmethod
    def _co_attend(self, k: Pair, v: Pair, m: Masks, want_weights: bool) -> CoAttentionOutput:
        """The mechanism itself, given keys, values and masks."""


class _CoarseGrained(_TwoSets):
    """Two attention functions, one per set, each queried by a compact vector of the other set."""

    query_less = False  # set 1 is first attended without a query (alternating co-attention)

    def __init__(
        self,
        d_feature1: int,
        d_feature2: int,
        d_key1: int | None = None,
        d_key2: int | None = None,
        d_value1: int | None = None,
        d_value2: int | None = None,
        score: ScoreSpec | Sequence[ScoreSpec] = "additive",
        align: AlignSpec | Sequence[AlignSpec] = "softmax",
        d_hidden: int | None = None,
    ) -> None:
        super().__init__(d_feature1, d_feature2, d_key1, d_key2, d_value1, d_value2)
        score1, score2 = _per_set(score, 2, "score")
        align1, align2 = _per_set(align, 2, "align")
        d_query1, d_query2 = self._query_sizes()
        self.score1 = build_score(score1, d_query1, self.d_key1, d_hidden)
        self.score2 = build_score(score2, d_query2, self.d_key2, d_hidden)
        self.align1 = build_align(align1, d_query1, self.d_key1)
        self.align2 = build_align(align2, d_query2, self.d_key2)
        self.query0: nn.Parameter | None = None
        if self.query_less and not isinstance(self.score1, Additive):
            # a score with no additive W1 q term to drop learns its query (eq. 34)
            self.query0 = nn.Parameter(torch.randn(d_query1) / math.sqrt(d_query1))

    @abstractmethod
    def _query_sizes(self) -> tuple[int, int]:
        """Sizes of the queries of set 1 and of set 2."""


class AlternatingCoAttention(_CoarseGrained):
    """Alternating co-attention of Lu et al.: set 1 without a query, set 2, set 1 again (eq. 6-9).

    Module 1 attends ``K1`` with no query (eq. 7): ``c^(0) = Σ a^(0)_l v^(1)_l``. Module 2 attends
    ``K2`` with ``c^(0)`` as query (eq. 8) → ``c^(2)``; module 3 attends ``K1`` with ``c^(2)`` as
    query (eq. 9) → ``c^(1)``. The output is ``concat(c^(1), c^(2))``.

    Modules 1 and 3 share one score, as in Lu et al. ("the same function and weight matrices as
    seen in (7) ... with an added query"): with the additive score (eq. 6) module 1 feeds it a zero
    query, so the ``W1 q`` term is absent and the score is exactly eq. (7),
    ``e^(0)_l = w^T act(W2 k^(1)_l + b)``. A score that needs a query to say anything (dot,
    general, ...) gets a learned query vector ``q^(0)`` instead (self-attentive, eq. 34).

    Args:
        d_feature1, d_feature2: sizes of the feature vectors of the two sets.
        d_key1, d_key2, d_value1, d_value2: learned key/value projections (eq. 1); None keeps
            the features.
        score: a score name or object, or a pair ``(score of set 1, score of set 2)``: set 1's is
            built for queries ``c^(2)`` (size ``d_v2``) and keys ``d_k1``, set 2's for ``c^(0)``
            (``d_v1``) and ``d_k2``.
        align: an alignment name or object, or a pair (set 1, set 2).
        d_hidden: ``d_w`` of additive scores (default ``d_k`` of the attended set).

    Shapes: ``features1 [B, N1, d_f1]``, ``features2 [B, N2, d_f2]``, masks bool ``[B, N]``
    → ``context [B, d_v1 + d_v2]``; ``contexts`` and ``weights`` keyed ``"0"``, ``"2"``, ``"1"``.

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.co_attention import AlternatingCoAttention
        >>> co = AlternatingCoAttention(d_feature1=16, d_feature2=8)
        >>> image, question = torch.randn(2, 49, 16), torch.randn(2, 7, 8)
        >>> co(image, question).context.shape
        torch.Size([2, 24])
    """

    taxonomy = {
        "feature_multiplicity": "Alternating Co-attention",
        "query_type": ["Self-Attentive", "Specialized"],
    }
    query_less = True

    def _query_sizes(self) -> tuple[int, int]:
        return self.d_value2, self.d_value1  # set 1 is queried by c^(2) (and q^(0)), set 2 by c^(0)

    def _co_attend(self, k: Pair, v: Pair, m: Masks, want_weights: bool) -> CoAttentionOutput:
        (k1, k2), (v1, v2), (m1, m2) = k, v, m
        if self.query0 is None:  # additive: a zero query removes W1 q, leaving eq. (7)
            q0 = k1.new_zeros(k1.shape[0], self.d_value2)
        else:
            q0 = self.query0.to(k1.dtype).expand(k1.shape[0], -1)
        c0, a0, lp0 = _attend(q0, k1, v1, self.score1, self.align1, m1, want_weights)  # eq. 7
        c2, a2, lp2 = _attend(c0, k2, v2, self.score2, self.align2, m2, want_weights)  # eq. 8
        c1, a1, lp1 = _attend(c2, k1, v1, self.score1, self.align1, m1, want_weights)  # eq. 9
        return CoAttentionOutput(
            context=torch.cat([c1, c2], -1),
            contexts={"0": c0, "2": c2, "1": c1},
            weights=_present({"0": a0, "2": a2, "1": a1}),
            log_prob=_sum([lp0, lp2, lp1]),
        )


class InteractiveCoAttention(_CoarseGrained):
    """Interactive co-attention of Ma et al.: each set attended with the other's mean key (eq. 10-11).

    ``k̄^(1)``, ``k̄^(2)`` are the unweighted means of the real keys of each set (eq. 10);
    ``e^(1)_l = score(k̄^(2), k^(1)_l)`` and ``e^(2)_l = score(k̄^(1), k^(2)_l)`` (eq. 11), both
    computed at once. The output is ``concat(c^(1), c^(2))``.

    Args:
        d_feature1, d_feature2, d_key1, d_key2, d_value1, d_value2: as
            :class:`AlternatingCoAttention`.
        score: a score name or object (additive in Ma et al.), or a pair (set 1, set 2); set 1's
            takes queries of size ``d_k2`` and keys ``d_k1``, set 2's the reverse.
        align: an alignment name or object, or a pair.
        d_hidden: ``d_w`` of additive scores.

    Example::

        >>> co = InteractiveCoAttention(d_feature1=16, d_feature2=16, score="general")
        >>> out = co(torch.randn(2, 9, 16), torch.randn(2, 3, 16), return_weights=True)
        >>> out.context.shape, out.weights["2"].shape
        (torch.Size([2, 32]), torch.Size([2, 3]))
    """

    taxonomy = {"feature_multiplicity": "Interactive Co-attention", "query_type": "Specialized"}

    def _query_sizes(self) -> tuple[int, int]:
        return self.d_key2, self.d_key1  # each set is queried by the other's mean key

    def _co_attend(self, k: Pair, v: Pair, m: Masks, want_weights: bool) -> CoAttentionOutput:
        (k1, k2), (v1, v2), (m1, m2) = k, v, m
        mean1, mean2 = masked_mean(k1, m1), masked_mean(k2, m2)  # eq. (10)
        c1, a1, lp1 = _attend(mean2, k1, v1, self.score1, self.align1, m1, want_weights)
        c2, a2, lp2 = _attend(mean1, k2, v2, self.score2, self.align2, m2, want_weights)
        return CoAttentionOutput(
            context=torch.cat([c1, c2], -1),
            contexts={"1": c1, "2": c2},
            weights=_present({"1": a1, "2": a2}),
            log_prob=_sum([lp1, lp2]),
        )


class BilinearAffinity(Score):
    """Affinity of Lu et al.: ``A_ij = act(k^(1)_i^T W_A k^(2)_j)`` (eq. 12).

    A score of the two key sets against each other (query role: set 1, key role: set 2), so
    ``affinity(K1, K2) -> A [B, N1, N2]``. It declares no scoring of its own: in parallel
    co-attention the affinity feeds the attention scores (eq. 14-16), it is not one.

    Args:
        d_key1, d_key2: key sizes of the two sets; ``W_A [d_k1, d_k2]``.
        activation: ``act()`` (tanh in Lu et al.).

    Example::

        >>> affinity = BilinearAffinity(16, 8)
        >>> affinity(torch.randn(2, 49, 16), torch.randn(2, 7, 8)).shape  # A [B, N1, N2]
        torch.Size([2, 49, 7])
    """

    parametric = True

    def __init__(self, d_key1: int, d_key2: int, activation: Activation = "tanh") -> None:
        super().__init__()
        self.d_key1, self.d_key2 = d_key1, d_key2
        self.W_A = nn.Parameter(nn.init.xavier_uniform_(torch.empty(d_key1, d_key2)))
        self.act = resolve_activation(activation)

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        if (d_query, d_key) != (self.d_key1, self.d_key2):
            raise ValueError(
                f"bilinear affinity was built for keys of sizes ({self.d_key1}, {self.d_key2}), "
                f"got ({d_query}, {d_key})"
            )

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q @ self.W_A.to(q.dtype), k  # k^(1)T W_A, computed once per element of set 1

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        return self.act(qf @ kf.transpose(-2, -1))


class ConcatAffinity(Score):
    """Affinity of Seo et al.: ``A_ij = w_A^T concat(k^(1)_i, k^(2)_j, k^(1)_i ∘ k^(2)_j)`` (eq. 13).

    ``w_A = (w_1, w_2, w_3)`` splits in three, so ``A_ij = w_1·k^(1)_i + w_2·k^(2)_j +
    (w_3 ∘ k^(1)_i)·k^(2)_j``: a dot product of per-element features, never the ``[N1, N2, 3d_k]``
    concatenation. Both sets need keys of one size ``d_k``.

    Args:
        d_key: ``d_k``; ``w_A [3 d_k]``.

    Example::

        >>> ConcatAffinity(8)(torch.randn(2, 10, 8), torch.randn(2, 4, 8)).shape  # A [B, N1, N2]
        torch.Size([2, 10, 4])
    """

    parametric = True
    same_size = True
    pairwise_is_dot = True

    def __init__(self, d_key: int) -> None:
        super().__init__()
        self.d_key = d_key
        self.w_A = nn.Parameter(torch.randn(3 * d_key) / math.sqrt(3 * d_key))

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        if d_query != self.d_key or d_key != self.d_key:
            raise ValueError(
                f"concat affinity (eq. 13) was built for keys of size d_k={self.d_key} in both "
                f"sets, got {d_query} and {d_key}"
            )

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        w1, w2, w3 = self.w_A.to(q.dtype).split(self.d_key)
        ones_q, ones_k = q.new_ones(*q.shape[:-1], 1), k.new_ones(*k.shape[:-1], 1)
        qf = torch.cat([q * w3, (q @ w1).unsqueeze(-1), ones_q], -1)  # [.., N1, d_k + 2]
        kf = torch.cat([k, ones_k, (k @ w2).unsqueeze(-1)], -1)  # [.., N2, d_k + 2]
        return qf, kf


Aggregation = Literal["additive", "max"]


class ParallelCoAttention(_TwoSets):
    """Parallel co-attention of Lu et al.: both sets attended at once through an affinity matrix
    (eq. 12-16).

    The affinity ``A [N1, N2]`` relates every key of set 1 to every key of set 2: eq. (12)
    (``score="bilinear"``), eq. (13) (``"concat"``) or any score of Table 2,
    ``A_ij = score(k^(1)_i, k^(2)_j)`` (e.g. ``"scaled_dot"``, as in Li et al.). The attention
    scores of both sets come from it by

    - ``aggregation="additive"`` (eq. 14-15), with shared ``W1 [d_w, d_k1]``, ``W2 [d_w, d_k2]``:
      ``e^(1) = w1^T act(W2 K2 A^T + W1 K1)``, ``e^(2) = w2^T act(W1 K1 A + W2 K2)``;
    - ``aggregation="max"`` (eq. 16): ``e^(1)_i = max_j A_ij``, ``e^(2)_j = max_i A_ij``.

    Any alignment turns them into weights; ``c^(1)``, ``c^(2)`` are the weighted sums of the
    values. Padded elements take no part in ``A``: a padded pair counts 0 in the sums of eq.
    (14-15) and is skipped by the max of eq. (16) (the max over an empty set is taken as 0, like
    the empty sum).

    Args:
        d_feature1, d_feature2, d_key1, d_key2, d_value1, d_value2: as
            :class:`AlternatingCoAttention`; Lu et al. use the features as keys and values.
        score: the affinity: ``"bilinear"`` (eq. 12), ``"concat"`` (eq. 13), another score name
            or a ``Score`` object (queries ``K1``, keys ``K2``).
        aggregation: ``"additive"`` (eq. 14-15) or ``"max"`` (eq. 16).
        align: an alignment name or object, or a pair (set 1, set 2).
        d_hidden: ``d_w`` of eq. (14-15) (default ``d_k1``).
        activation: ``act()`` of eq. (14-15) (tanh in Lu et al.).

    Example::

        >>> co = ParallelCoAttention(d_feature1=16, d_feature2=8)
        >>> out = co(torch.randn(2, 49, 16), torch.randn(2, 7, 8))
        >>> out.context.shape, out.affinity.shape
        (torch.Size([2, 24]), torch.Size([2, 49, 7]))
    """

    def __init__(
        self,
        d_feature1: int,
        d_feature2: int,
        d_key1: int | None = None,
        d_key2: int | None = None,
        d_value1: int | None = None,
        d_value2: int | None = None,
        score: ScoreSpec = "bilinear",
        aggregation: Aggregation = "additive",
        align: AlignSpec | Sequence[AlignSpec] = "softmax",
        d_hidden: int | None = None,
        activation: Activation = "tanh",
    ) -> None:
        super().__init__(d_feature1, d_feature2, d_key1, d_key2, d_value1, d_value2)
        self.affinity = _build_affinity(score, self.d_key1, self.d_key2)
        if aggregation not in ("additive", "max"):
            raise ValueError(
                f"aggregation must be 'additive' (eq. 14-15) or 'max' (eq. 16), got {aggregation!r}"
            )
        self.aggregation = aggregation
        d_w = (d_hidden or self.d_key1) if aggregation == "additive" else 1
        align1, align2 = _per_set(align, 2, "align")
        # the attention steps' queries and keys: w and act(...) of eq. (14-15), or 1 and max A
        self.align1 = build_align(align1, d_w, d_w)
        self.align2 = build_align(align2, d_w, d_w)
        if aggregation == "additive":
            self.W1 = nn.Linear(self.d_key1, d_w, bias=False)
            self.W2 = nn.Linear(self.d_key2, d_w, bias=False)
            self.w1 = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))
            self.w2 = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))
            self.act = resolve_activation(activation)
        self.taxonomy = {
            "feature_multiplicity": "Parallel Co-attention",
            "query_type": "Specialized",
        }
        if aggregation == "additive":
            self.taxonomy["scoring"] = "Additive"  # eq. (14-15): "an altered additive score"
        elif "scoring" not in (getattr(self.affinity, "taxonomy", None) or {}):
            # eq. (16) takes "the maximum similarity value" of the affinity matrix
            self.taxonomy["scoring"] = "Similarity"

    def _co_attend(self, k: Pair, v: Pair, m: Masks, want_weights: bool) -> CoAttentionOutput:
        (k1, k2), (v1, v2), (m1, m2) = k, v, m
        self.affinity.check(k1.shape[-1], k2.shape[-1], k2.shape[1])
        affinity = self.affinity(k1, k2)  # [B, N1, N2], eq. (12) / (13)
        pair = _pair_mask(m1, m2, affinity)
        if pair is not None:
            affinity = torch.where(pair, affinity, torch.zeros_like(affinity))
        if self.aggregation == "additive":
            p1, p2 = self.W1(k1), self.W2(k2)  # W1 K1 [B, N1, d_w], W2 K2 [B, N2, d_w]
            keys1 = self.act(p1 + affinity @ p2)  # act(W2 K2 A^T + W1 K1), eq. (14)
            keys2 = self.act(p2 + affinity.transpose(1, 2) @ p1)  # act(W1 K1 A + W2 K2), eq. (15)
            # e = w^T act(...): the dot product of the learned w with each column
            query1 = self.w1.to(k1.dtype).expand(k1.shape[0], -1)
            query2 = self.w2.to(k1.dtype).expand(k1.shape[0], -1)
        else:
            keys1 = _masked_max(affinity, pair, 2).unsqueeze(-1)  # eq. (16), [B, N1, 1]
            keys2 = _masked_max(affinity, pair, 1).unsqueeze(-1)  # [B, N2, 1]
            query1 = query2 = k1.new_ones(k1.shape[0], 1)  # e_i = 1 · max_j A_ij
        c1, a1, lp1 = _attend(query1, keys1, v1, "dot", self.align1, m1, want_weights)
        c2, a2, lp2 = _attend(query2, keys2, v2, "dot", self.align2, m2, want_weights)
        return CoAttentionOutput(
            context=torch.cat([c1, c2], -1),
            contexts={"1": c1, "2": c2},
            weights=_present({"1": a1, "2": a2}),
            affinity=affinity,
            log_prob=_sum([lp1, lp2]),
        )


def _build_affinity(spec: ScoreSpec, d_key1: int, d_key2: int) -> Score:
    if spec == "bilinear":
        return BilinearAffinity(d_key1, d_key2)
    if spec == "concat":
        if d_key1 != d_key2:
            raise ValueError(
                "the concat affinity (eq. 13) needs keys of one size in both sets, got "
                f"d_k1={d_key1} and d_k2={d_key2}; set d_key1/d_key2 or use 'bilinear'"
            )
        return ConcatAffinity(d_key1)
    affinity = build_score(spec, d_key1, d_key2)
    if affinity.value_features is not None:
        raise ValueError("the affinity needs one score per pair, not a multi-dimensional score")
    return affinity


def _pair_mask(m1: Tensor | None, m2: Tensor | None, like: Tensor) -> Tensor | None:
    """``[B, N1, N2]``: both elements of the pair are real (None: no padding)."""
    if m1 is None and m2 is None:
        return None
    b, n1, n2 = like.shape
    rows = m1.unsqueeze(2) if m1 is not None else like.new_ones(b, n1, 1, dtype=torch.bool)
    cols = m2.unsqueeze(1) if m2 is not None else like.new_ones(b, 1, n2, dtype=torch.bool)
    return rows & cols


def _masked_max(affinity: Tensor, pair: Tensor | None, dim: int) -> Tensor:
    """Max over ``dim`` of the real pairs; 0 where there is none (or the dim is empty)."""
    if affinity.shape[dim] == 0:
        shape = list(affinity.shape)
        del shape[dim]
        return affinity.new_zeros(shape)
    if pair is None:
        return affinity.amax(dim)
    best = affinity.masked_fill(~pair, float("-inf")).amax(dim)
    return torch.where(torch.isfinite(best), best, torch.zeros_like(best))


class MultiGrainedCoAttention(nn.Module):
    """Multi-grained co-attention of Fan et al.: coarse- and fine-grained co-attention together.

    A coarse-grained co-attention (interactive, eq. 10-11, or alternating, eq. 6-9) and a
    fine-grained one (parallel, eq. 12-16; by default Fan et al.'s concat affinity, eq. 13, with
    max-pooled scores, eq. 16) each give one context vector per set; the output is the
    concatenation of the four, ``concat(c_coarse^(1), c_coarse^(2), c_fine^(1), c_fine^(2))``.

    Args:
        d_feature1, d_feature2, d_key1, d_key2, d_value1, d_value2: as
            :class:`AlternatingCoAttention` (each part has its own projections).
        score: the coarse-grained score (name, object or pair).
        affinity: the fine-grained affinity (``"concat"``, ``"bilinear"`` or any score).
        aggregation: the fine-grained scores, ``"max"`` (eq. 16) or ``"additive"`` (eq. 14-15).
        align: an alignment name or object, or a pair; used by both parts.
        d_hidden: ``d_w`` of additive scores.
        coarse: ``"interactive"`` or ``"alternating"``.

    Example::

        >>> co = MultiGrainedCoAttention(d_feature1=16, d_feature2=16)
        >>> out = co(torch.randn(2, 12, 16), torch.randn(2, 3, 16))
        >>> out.context.shape, sorted(out.contexts)
        (torch.Size([2, 64]), ['coarse1', 'coarse2', 'fine1', 'fine2'])
    """

    def __init__(
        self,
        d_feature1: int,
        d_feature2: int,
        d_key1: int | None = None,
        d_key2: int | None = None,
        d_value1: int | None = None,
        d_value2: int | None = None,
        score: ScoreSpec | Sequence[ScoreSpec] = "additive",
        affinity: ScoreSpec = "concat",
        aggregation: Aggregation = "max",
        align: AlignSpec | Sequence[AlignSpec] = "softmax",
        d_hidden: int | None = None,
        coarse: Literal["interactive", "alternating"] = "interactive",
    ) -> None:
        super().__init__()
        sizes = (d_feature1, d_feature2, d_key1, d_key2, d_value1, d_value2)
        coarse_types = {
            "interactive": InteractiveCoAttention,
            "alternating": AlternatingCoAttention,
        }
        if coarse not in coarse_types:
            raise ValueError(f"coarse must be 'interactive' or 'alternating', got {coarse!r}")
        self.coarse = coarse_types[coarse](*sizes, score=score, align=align, d_hidden=d_hidden)
        self.fine = ParallelCoAttention(
            *sizes, score=affinity, aggregation=aggregation, align=align, d_hidden=d_hidden
        )
        # The parts are components of one multi-grained mechanism, not co-attentions of their own.
        for part in (self.coarse, self.fine):
            part.taxonomy = {k: v for k, v in part.taxonomy.items() if k != "feature_multiplicity"}
        self.taxonomy = {"feature_multiplicity": "Multi-grained Co-attention"}

    def forward(
        self,
        features1: Tensor,
        features2: Tensor,
        mask1: Tensor | None = None,
        mask2: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> CoAttentionOutput:
        """Coarse- and fine-grained co-attention of the two sets.

        Args:
            features1: ``[B, N1, d_f1]`` (e.g. image regions).
            features2: ``[B, N2, d_f2]`` (e.g. question words).
            mask1, mask2: bool ``[B, N1]``, ``[B, N2]``, True = real element.
            return_weights: also return the attention weights.

        Returns:
            :class:`CoAttentionOutput`: ``context`` of the four vectors; contexts and weights
            keyed ``"coarse1"``, ``"coarse2"``, ``"fine1"``, ``"fine2"`` (and ``"coarse0"`` for an
            alternating coarse part); ``affinity`` of the fine part.
        """
        parts = {
            "coarse": self.coarse(
                features1, features2, mask1, mask2, return_weights=return_weights
            ),
            "fine": self.fine(features1, features2, mask1, mask2, return_weights=return_weights),
        }
        contexts = {p + k: c for p, out in parts.items() for k, c in out.contexts.items()}
        weights = {p + k: w for p, out in parts.items() for k, w in (out.weights or {}).items()}
        four = [contexts[k] for k in ("coarse1", "coarse2", "fine1", "fine2")]
        return CoAttentionOutput(
            context=torch.cat(four, -1),
            contexts=contexts,
            weights=weights if return_weights else None,
            affinity=parts["fine"].affinity,
            log_prob=_sum([out.log_prob for out in parts.values()]),
        )


__all__ = [
    "AlternatingCoAttention",
    "BilinearAffinity",
    "CoAttentionOutput",
    "ConcatAffinity",
    "InteractiveCoAttention",
    "MultiGrainedCoAttention",
    "ParallelCoAttention",
]
