"""Attention of a recurrent decoder over its encoder, one target step at a time (survey §2, eq. 2-4).

A decoder asks the same question ``T`` times per sentence, with a new query each time and the same
keys. :func:`attnkit.attention` would recompute the keys' part of the score (``U_a h_j`` of the
additive score) at every step, so this module splits the score as attnkit's scores do
(``Score.features`` then ``Score.pairwise``): :meth:`DecoderAttention.key_features` once per
sentence, :meth:`DecoderAttention.forward` per step. The result is that of

    ``attnkit.attention(query, keys, keys, score=score, align=align, mask=mask,
    return_weights=True)``

(tested), except that the target position ``t`` reaches the alignment (``ak.attention`` has no
``q_offset``), which the local-monotonic alignment needs (``p_t = t``, Luong et al. 2015).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.core.align import Align, LocalMonotonic, LocalPredictive, Softmax
from attnkit.core.engine import attention
from attnkit.core.hooks import observed
from attnkit.core.scores import Location, Score, build_score

SCORE_NAMES = ("additive", "concat", "dot", "general", "location")
ALIGN_NAMES = ("global", "local_monotonic", "local_predictive")


def build_decoder_score(name: str, d_query: int, d_key: int, max_source_length: int) -> Score:
    """The score ``name`` for queries of size ``d_query`` and keys of size ``d_key``.

    ``"concat"`` is Luong's name of Bahdanau's additive score, ``v_a^T tanh(W_a [h_t; h_s])``:
    ``W_a [h_t; h_s] = W_1 h_t + W_2 h_s``, so it is :class:`~attnkit.core.scores.Additive`.
    ``"location"`` scores ``max_source_length`` positions (``a_t = softmax(W_a h_t)``).
    """
    if name not in SCORE_NAMES:
        raise ValueError(f"unknown score {name!r}; expected one of: {', '.join(SCORE_NAMES)}")
    if name == "location":
        return Location(d_query, max_source_length)
    if name == "dot" and d_query != d_key:
        raise ValueError(
            f"score 'dot' needs decoder states and encoder states of the same size, got "
            f"d_query={d_query} and d_key={d_key}"
        )
    return build_score("additive" if name == "concat" else name, d_query, d_key)


def build_decoder_align(name: str, d_query: int, window: int) -> Align:
    """The alignment ``name``: ``"global"`` softmax (eq. 25), or Luong's local alignments with
    half-window ``D = window`` (eq. 27-29)."""
    if name not in ALIGN_NAMES:
        raise ValueError(f"unknown align {name!r}; expected one of: {', '.join(ALIGN_NAMES)}")
    if name == "global":
        return Softmax()
    if name == "local_monotonic":
        return LocalMonotonic(window)
    return LocalPredictive(d_query, window)


class DecoderAttention(nn.Module):
    """``c_t = sum_j a_tj h_j`` with ``a_t = align(score(q_t, h_j))`` for one decoder step.

    Args:
        score: an attnkit score for queries of size ``d_query``.
        align: an attnkit alignment (softmax, local-monotonic or local-predictive).
        d_query: size of the decoder's queries.

    Shapes: ``query [B, M, d_query]`` (``M`` consecutive target positions from ``position``),
    keys/values ``[B, S, d_k]`` → context ``[B, M, d_k]``, weights ``[B, M, S]``.
    """

    def __init__(self, score: Score, align: Align, d_query: int) -> None:
        super().__init__()
        self.score = score
        self.align = align
        self.d_query = d_query

    def key_features(self, keys: Tensor) -> Tensor:
        """The keys' part of the score, ``[B, S, ·]``, computed once per sentence."""
        self.score.check(self.d_query, keys.shape[-1], keys.shape[-2])
        no_query = keys.new_zeros(keys.shape[0], 0, self.d_query)
        return self.score.features(no_query, keys)[1]

    def forward(
        self, query: Tensor, key_features: Tensor, values: Tensor, mask: Tensor, position: int = 0
    ) -> tuple[Tensor, Tensor]:
        """``(context [B, M, d_k], weights [B, M, S])`` for queries at target positions
        ``position … position + M - 1``; ``mask [B, S]`` is True on real source positions."""
        if observed():  # attention hooks (record, ablate) watch: go through the engine they see
            return self._through_engine(query, values, mask, position)
        # Keys of zero length: only the query's transform is computed (the keys' is cached).
        query_features = self.score.features(query, values[:, :0])[0]
        e = self.score.pairwise(query_features, key_features)  # [B, M, S]
        factor = self.score.resolve_scale(None, values.shape[-1])
        if factor is not None:
            e = e * factor
        if type(self.align) is Softmax:
            # Global attention as torch's softmax over masked scores: every sentence has a word,
            # so no row is empty and this is the align's masked softmax in 2 ops instead of ~12,
            # which matters at T steps per sentence, forward and backward.
            weights = torch.softmax(e.masked_fill(~mask[:, None, :], float("-inf")), -1)
        else:
            weights = self.align.sample(e, mask[:, None, :], query=query, q_offset=position)[0]
        return weights @ values, weights

    def _through_engine(
        self, query: Tensor, values: Tensor, mask: Tensor, position: int
    ) -> tuple[Tensor, Tensor]:
        """The same attention through :func:`attnkit.attention` (keys = values: the encoder's
        states), so interpretation and ablation sessions see and may change it. Local-monotonic
        attention becomes softmax inside the window ``|j - t| <= D`` given as a mask, which is
        what it is (eq. 27), since ``attnkit.attention`` has no query offset."""
        allowed = mask[:, None, :].expand(-1, query.shape[1], -1)
        align: Align = self.align
        if isinstance(self.align, LocalMonotonic):
            t = torch.arange(position, position + query.shape[1], device=query.device)
            j = torch.arange(values.shape[1], device=query.device)
            allowed = allowed & ((j[None, :] - t[:, None]).abs() <= self.align.window)
            align = Softmax()
        out = attention(
            query, values, values, score=self.score, align=align, mask=allowed, return_weights=True
        )
        return out.context, out.weights
