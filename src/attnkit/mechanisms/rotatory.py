"""Rotatory attention: left context, target, right context (survey §3.1.1, eq. 17-20).

Zheng & Xia's LCR-Rot for aspect-based sentiment analysis: a target phrase and the text to its left
and right are three feature sets. The pooled target (eq. 17) attends the left and the right
context (eq. 18); those two context representations attend the target (eq. 19); the four vectors
are concatenated (eq. 20). Wallaart & Frasincar's LCR-Rot-hop repeats the rotation, each hop's
contexts attended with the previous hop's target representations (:class:`MultiHopRotatoryAttention`).

Rows are vectors (``F^l [B, N_l, d_l]``). Every attention step runs on :func:`attnkit.attention`,
with any score and alignment (the activated general score of Table 2 with tanh and the softmax by
default, as in both papers). Masks are bool ``[B, N]``, True = a real (not padded) word: padded
words get exactly zero weight, and an empty set (a target at the start of a sentence has no left
context) gives a zero representation, never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.masks import masked_mean
from attnkit.core.scores import Score, build_score
from attnkit.mechanisms.inputs import check_features, check_mask, projection

ScoreSpec = str | Score
AlignSpec = str | Align

#: the four attention functions, in the order of eq. (20)
PARTS = ("l", "r", "lt", "rt")


@dataclass(frozen=True, kw_only=True)
class RotatoryOutput(AttentionOutput):
    """What rotatory attention returns.

    An :class:`~attnkit.AttentionOutput` (``context``, ``weights``, ``log_prob`` as there)
    with this mechanism's extra fields (keyword-only). ``weights`` is a dict, one
    entry per representation, as ``contexts``.

    Attributes:
        context: ``r = concat(r^l, r^r, r^lt, r^rt)`` (eq. 20), ``[B, d_vl + d_vr + 2 d_vt]``.
        contexts: each representation ``[B, d_v]`` by the survey's superscript: ``"l"``, ``"r"``,
            ``"lt"``, ``"rt"``, and ``"t"`` (eq. 17) when the target was pooled.
        weights: the attention weights ``[B, N]`` behind ``"l"``, ``"r"``, ``"lt"``, ``"rt"``;
            only when ``return_weights=True``.
        log_prob: ``[B]``: summed log-probability of what stochastic alignments sampled, else None.
        hops: for the multi-hop form, every hop's own :class:`RotatoryOutput` (the last one is
            this output's content); empty for one rotation.

    Example::

        >>> rot = ak.mechanisms.RotatoryAttention(d_left=16, d_target=16)
        >>> out = rot(torch.randn(2, 9, 16), torch.randn(2, 2, 16), torch.randn(2, 5, 16))
        >>> out.context.shape
        torch.Size([2, 64])
    """

    contexts: dict[str, Tensor]
    weights: dict[str, Tensor] | None = None  # type: ignore[assignment]
    hops: tuple[RotatoryOutput, ...] = ()


def _per_part(spec: object, what: str) -> tuple:
    """One spec for the four attention functions, or four (in the order l, r, lt, rt)."""
    if isinstance(spec, (tuple, list)):
        if len(spec) != len(PARTS):
            raise ValueError(
                f"{what} must be one spec or four (left, right, left-target, right-target), "
                f"got {len(spec)}"
            )
        return tuple(spec)
    return (spec,) * len(PARTS)


class RotatoryAttention(nn.Module):
    """Rotatory attention (LCR-Rot) of Zheng & Xia: target → contexts → target (eq. 17-20).

    1. ``r^t`` = the mean of the target's feature vectors (eq. 17);
    2. ``r^l``: attention over the left context with ``r^t`` as query,
       ``e^l_i = score(r^t, k^l_i)`` (eq. 18); ``r^r`` likewise over the right context;
    3. ``r^lt``: attention over the target with ``r^l`` as query, ``e^lt_i = score(r^l, k^t_i)``
       (eq. 19); ``r^rt`` likewise with ``r^r``;
    4. ``r = concat(r^l, r^r, r^lt, r^rt)`` (eq. 20).

    Each of the four attention functions has its own score and alignment (and parameters).

    Args:
        d_left, d_target: feature sizes of the left context and the target.
        d_right: feature size of the right context (default ``d_left``).
        d_key, d_value: learned key/value projections (eq. 1) of each set to these sizes; None
            keeps the features (as in Zheng & Xia).
        d_query: size of the queries of the context attention (step 2): ``d_target`` for the
            pooled target (default); the value size of the target when a previous hop's target
            representations are the queries.
        score: a score name or object, or four (left, right, left-target, right-target).
            Default: the activated general score with tanh (Table 3).
        align: an alignment name or object, or four.

    Shapes: ``left [B, N_l, d_l]``, ``target [B, N_t, d_t]``, ``right [B, N_r, d_r]``, masks
    bool ``[B, N]`` → ``context [B, d_vl + d_vr + 2 d_vt]``.

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.rotatory import RotatoryAttention
        >>> rot = RotatoryAttention(d_left=16, d_target=16)
        >>> left, target, right = torch.randn(2, 9, 16), torch.randn(2, 2, 16), torch.randn(2, 5, 16)
        >>> rot(left, target, right).context.shape
        torch.Size([2, 64])
    """

    def __init__(
        self,
        d_left: int,
        d_target: int,
        d_right: int | None = None,
        d_key: int | None = None,
        d_value: int | None = None,
        d_query: int | None = None,
        score: ScoreSpec | Sequence[ScoreSpec] = "activated_general",
        align: AlignSpec | Sequence[AlignSpec] = "softmax",
    ) -> None:
        super().__init__()
        d_right = d_right or d_left
        self.d_feature = {"l": d_left, "t": d_target, "r": d_right}
        self.d_key = {s: d_key or d for s, d in self.d_feature.items()}
        self.d_value = {s: d_value or d for s, d in self.d_feature.items()}
        self.d_query = d_query or d_target
        self.key_proj = nn.ModuleDict({s: projection(d, d_key) for s, d in self.d_feature.items()})
        self.value_proj = nn.ModuleDict(
            {s: projection(d, d_value) for s, d in self.d_feature.items()}
        )
        # (query size, key size) of each attention function
        sizes = {
            "l": (self.d_query, self.d_key["l"]),
            "r": (self.d_query, self.d_key["r"]),
            "lt": (self.d_value["l"], self.d_key["t"]),
            "rt": (self.d_value["r"], self.d_key["t"]),
        }
        scores, aligns = _per_part(score, "score"), _per_part(align, "align")
        self.scores = nn.ModuleDict(
            {p: build_score(s, *sizes[p]) for p, s in zip(PARTS, scores, strict=True)}
        )
        self.aligns = nn.ModuleDict(
            {p: build_align(a, *sizes[p]) for p, a in zip(PARTS, aligns, strict=True)}
        )
        self.taxonomy = {"feature_multiplicity": "Rotatory", "query_type": "Specialized"}

    @property
    def d_output(self) -> int:
        """Size of ``r`` (eq. 20)."""
        return self.d_value["l"] + self.d_value["r"] + 2 * self.d_value["t"]

    def forward(
        self,
        left: Tensor,
        target: Tensor,
        right: Tensor,
        left_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        right_mask: Tensor | None = None,
        *,
        queries: tuple[Tensor, Tensor] | None = None,
        return_weights: bool = False,
    ) -> RotatoryOutput:
        """One rotation (eq. 17-20).

        Args:
            left: left context ``[B, N_l, d_l]``.
            target: target phrase ``[B, N_t, d_t]``.
            right: right context ``[B, N_r, d_r]``.
            left_mask, target_mask, right_mask: bool ``[B, N]``, True = a real word.
            queries: ``(query of the left context, query of the right context)``, each
                ``[B, d_query]``, replacing the pooled target ``r^t`` of eq. (17) (LCR-Rot-hop
                passes the previous hop's ``r^lt``, ``r^rt``).
            return_weights: also return the four attention weight vectors.

        Returns:
            :class:`RotatoryOutput`.
        """
        sets = {"l": left, "t": target, "r": right}
        names = {"l": "left", "t": "target", "r": "right"}
        for s, x in sets.items():
            check_features(names[s], x, self.d_feature[s])
        if not left.shape[0] == target.shape[0] == right.shape[0]:
            raise ValueError(
                "left, target and right need one batch size, got "
                f"{tuple(left.shape)}, {tuple(target.shape)}, {tuple(right.shape)}"
            )
        masks = {
            s: check_mask(f"{names[s]}_mask", m, sets[s])
            for s, m in (("l", left_mask), ("t", target_mask), ("r", right_mask))
        }
        keys = {s: self.key_proj[s](x) for s, x in sets.items()}
        values = {s: self.value_proj[s](x) for s, x in sets.items()}
        contexts: dict[str, Tensor] = {}
        if queries is None:
            contexts["t"] = masked_mean(target, masks["t"])  # eq. (17)
            query_l = query_r = contexts["t"]
        else:
            query_l, query_r = self._check_queries(queries, target)
        weights: dict[str, Tensor] = {}
        log_probs: list[Tensor] = []

        def attend(part: str, query: Tensor, s: str) -> Tensor:
            mask = masks[s]
            out = attention(
                query.unsqueeze(1),  # [B, 1, d_q]
                keys[s],
                values[s],
                score=cast(Score, self.scores[part]),
                align=cast(Align, self.aligns[part]),
                mask=None if mask is None else mask.unsqueeze(1),  # [B, 1, N]
                return_weights=return_weights,
            )
            if out.weights is not None:
                weights[part] = out.weights.squeeze(1)
            if out.log_prob is not None:
                log_probs.append(out.log_prob.squeeze(1))
            return out.context.squeeze(1)

        contexts["l"] = attend("l", query_l, "l")  # eq. (18)
        contexts["r"] = attend("r", query_r, "r")
        contexts["lt"] = attend("lt", contexts["l"], "t")  # eq. (19)
        contexts["rt"] = attend("rt", contexts["r"], "t")
        return RotatoryOutput(
            context=torch.cat([contexts[p] for p in PARTS], -1),  # eq. (20)
            contexts=contexts,
            weights=weights if return_weights else None,
            log_prob=torch.stack(log_probs).sum(0) if log_probs else None,
        )

    def _check_queries(self, queries: object, target: Tensor) -> tuple[Tensor, Tensor]:
        expected = (target.shape[0], self.d_query)
        if (
            not isinstance(queries, (tuple, list))
            or len(queries) != 2
            or not all(isinstance(q, Tensor) and tuple(q.shape) == expected for q in queries)
        ):
            given = [
                tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__
                for q in (queries if isinstance(queries, (tuple, list)) else [queries])
            ]
            raise ValueError(f"queries must be two tensors of shape {expected}, got {given}")
        return queries[0], queries[1]


class MultiHopRotatoryAttention(nn.Module):
    """LCR-Rot-hop of Wallaart & Frasincar: the rotation of eq. (17-20) repeated ``hops`` times.

    Hop 1 is :class:`RotatoryAttention`. At every later hop the left context is attended with the
    previous hop's left-aware target representation ``r^lt`` as query, the right context with
    ``r^rt``, and the target again with the new ``r^l``, ``r^r`` (the survey's multi-hop
    attention, eq. 41, with the context vector as the next query). The output is ``r`` of the
    last hop.

    Args:
        d_left, d_target, d_right, d_key, d_value, score, align: as :class:`RotatoryAttention`.
        hops: number of rotations (3 in Wallaart & Frasincar).
        share_weights: one set of attention functions for every hop (needs the target's value
            size to equal ``d_target``, the size of the pooled query of hop 1); by default each
            hop has its own, as in Wallaart & Frasincar's implementation.

    Example::

        >>> from attnkit.mechanisms.rotatory import MultiHopRotatoryAttention
        >>> rot = MultiHopRotatoryAttention(d_left=16, d_target=16, hops=3)
        >>> out = rot(torch.randn(2, 9, 16), torch.randn(2, 2, 16), torch.randn(2, 5, 16))
        >>> out.context.shape, len(out.hops)
        (torch.Size([2, 64]), 3)
    """

    def __init__(
        self,
        d_left: int,
        d_target: int,
        d_right: int | None = None,
        d_key: int | None = None,
        d_value: int | None = None,
        hops: int = 3,
        share_weights: bool = False,
        score: ScoreSpec | Sequence[ScoreSpec] = "activated_general",
        align: AlignSpec | Sequence[AlignSpec] = "softmax",
    ) -> None:
        super().__init__()
        if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
            raise ValueError(f"hops must be a positive int, got {hops!r}")
        self.hops = hops
        self.share_weights = share_weights
        d_value_target = d_value or d_target

        def rotation(d_query: int) -> RotatoryAttention:
            return RotatoryAttention(
                d_left, d_target, d_right, d_key, d_value, d_query, score=score, align=align
            )

        if share_weights:
            if d_value_target != d_target:
                raise ValueError(
                    "share_weights=True needs the target's value size to equal d_target (hop 1's "
                    f"query is the pooled target), got d_value={d_value_target}, d_target={d_target}"
                )
            self.rotations = nn.ModuleList([rotation(d_target)])
        else:
            self.rotations = nn.ModuleList(
                [rotation(d_target)] + [rotation(d_value_target) for _ in range(hops - 1)]
            )
        self.taxonomy = {
            "feature_multiplicity": "Rotatory",
            "query_type": "Specialized",
            "query_multiplicity": "Multi-Hop",
        }

    def forward(
        self,
        left: Tensor,
        target: Tensor,
        right: Tensor,
        left_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        right_mask: Tensor | None = None,
        *,
        return_weights: bool = False,
    ) -> RotatoryOutput:
        """``hops`` rotations, each after the first queried by the previous ``(r^lt, r^rt)``.

        Args:
            left: left context ``[B, N_l, d_l]``.
            target: target phrase ``[B, N_t, d_t]``.
            right: right context ``[B, N_r, d_r]``.
            left_mask, target_mask, right_mask: bool ``[B, N]``, True = a real word.
            return_weights: also return every hop's four attention weight vectors.

        Returns:
            :class:`RotatoryOutput` of the last hop, with every hop's output in ``hops`` and the
            log-probabilities of all hops summed.
        """
        outputs: list[RotatoryOutput] = []
        queries = None
        for hop in range(self.hops):
            rotation = self.rotations[0 if self.share_weights else hop]
            out = rotation(
                left,
                target,
                right,
                left_mask,
                target_mask,
                right_mask,
                queries=queries,
                return_weights=return_weights,
            )
            outputs.append(out)
            queries = (out.contexts["lt"], out.contexts["rt"])
        log_probs = [o.log_prob for o in outputs if o.log_prob is not None]
        last = outputs[-1]
        return RotatoryOutput(
            context=last.context,
            contexts=last.contexts,
            weights=last.weights,
            log_prob=torch.stack(log_probs).sum(0) if log_probs else None,
            hops=tuple(outputs),
        )


__all__ = ["MultiHopRotatoryAttention", "RotatoryAttention", "RotatoryOutput"]
