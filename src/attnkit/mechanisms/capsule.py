"""Capsule-based attention (survey §3.3.2, eq. 43-45, Fig. 11), after Wang et al.'s RNN-Capsule [89].

One capsule per class ``c = 1 … d_y``. Each capsule asks its own learned (self-attentive) question
of the same feature vectors — "which feature vectors identify this class?" — and has three modules:

    e_{c,l} = q_c^T k_l                       attention module, eq. (43) (any score)
    c_c     = Σ_l align(e_c)_l v_l            its context vector (eq. 3-4)
    p_c     = sigmoid(w_c^T c_c + b_c)        probability module, eq. (44)
    r_c     = p_c c_c                         reconstruction module, eq. (45)

The per-class weights are attention maps: which inputs matter for which class.

Training (:func:`capsule_loss`): the survey says the probabilities are fit to the true class, and
that a joint loss makes the correct capsule's ``r_c`` close to the mean feature vector ``f`` and the
others far from it, measured by the dot product ``f^T r_c``; it does not give the formula. attnkit
uses the one in [89]'s public code (``thuwyq/WWW18-rnn-capsule``): a multi-class hinge loss on the
probabilities plus one on the similarities ``f^T r_c``.

Rows are vectors; the attention runs through :func:`attnkit.attention` (one call for all classes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.align import Align, build_align
from attnkit.core.call import AttentionOutput
from attnkit.core.engine import attention
from attnkit.core.masks import masked_mean
from attnkit.core.scores import Score, build_score


@dataclass(frozen=True, kw_only=True)
class CapsuleOutput(AttentionOutput):
    """What :class:`CapsuleAttention` returns (``C`` classes, ``N`` feature vectors).

    An :class:`~attnkit.AttentionOutput` (``context``, ``weights``, ``log_prob`` as there)
    with this mechanism's extra fields (keyword-only).

    Attributes:
        context: the capsules' context vectors ``c_c``, ``[B, C, d_v]``.
        probabilities: ``p_c`` of eq. (44), ``[B, C]`` (each in (0, 1), not normalised over
            classes; the prediction is their argmax).
        reconstructions: ``r_c = p_c c_c`` of eq. (45), ``[B, C, d_v]``.
        feature_mean: ``f``, the unweighted mean of the real feature vectors, ``[B, d_f]``.
        weights: the per-class attention maps ``[B, C, N]`` when asked, else ``None``.
        log_prob: ``[B, C]`` log-probability of what a stochastic alignment sampled, else ``None``.

    Example::

        >>> out = ak.mechanisms.CapsuleAttention(d_feature=16, num_classes=3)(torch.randn(4, 9, 16))
        >>> out.probabilities.shape, out.reconstructions.shape, out.feature_mean.shape
        (torch.Size([4, 3]), torch.Size([4, 3, 16]), torch.Size([4, 16]))
    """

    probabilities: Tensor
    reconstructions: Tensor
    feature_mean: Tensor


class CapsuleAttention(nn.Module):
    """Capsule-based attention: a learned query, a probability and a reconstruction per class
    (eq. 43-45).

    Args:
        d_feature: ``d_f``, the size of the feature vectors.
        num_classes: ``d_y``, the number of capsules.
        d_query: ``d_q`` of the learned queries ``q_c`` (default ``d_k``, as eq. 43's dot product
            needs).
        d_key: ``d_k``: a learned ``W_K [d_k, d_f]``; ``None`` keeps the features as keys
            (as [89]).
        d_value: ``d_v``: a learned ``W_V [d_v, d_f]``; ``None`` keeps the features as values
            (as [89]). :func:`capsule_loss` compares ``r_c`` with ``f``, so it needs ``d_v = d_f``.
        score: a score name or ``ak.scores.Score`` (default ``"dot"``: eq. 43).
        align: an alignment name or ``ak.align.Align``.
        d_hidden: ``d_w`` of the additive score (default ``d_k``).
        dropout: dropout on the attention weights, in training mode only.

    Parameters: ``query [C, d_q]`` (the ``q_c``), ``probability_weight [C, d_v]`` (the ``w_c``)
    and ``probability_bias [C]`` (the ``b_c``), each initialised uniformly in ``±1/sqrt(size)``
    as [89] does.

    Example::

        >>> import torch, attnkit as ak
        >>> from attnkit.mechanisms.capsule import CapsuleAttention, capsule_loss
        >>> capsules = CapsuleAttention(d_feature=16, num_classes=3)
        >>> out = capsules(torch.randn(4, 9, 16), return_weights=True)
        >>> out.probabilities.shape, out.weights.shape       # p [B, C], maps [B, C, N]
        (torch.Size([4, 3]), torch.Size([4, 3, 9]))
        >>> loss = capsule_loss(out, torch.tensor([0, 2, 1, 1]))
    """

    taxonomy = {"query_multiplicity": "Capsule-Based", "query_type": "Self-Attentive"}

    def __init__(
        self,
        d_feature: int,
        num_classes: int,
        d_query: int | None = None,
        d_key: int | None = None,
        d_value: int | None = None,
        score: str | Score = "dot",
        align: str | Align = "softmax",
        d_hidden: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.d_feature, self.num_classes = d_feature, num_classes
        self.d_key, self.d_value = d_key or d_feature, d_value or d_feature
        self.d_query = d_query or self.d_key
        self.key_proj = nn.Linear(d_feature, d_key, bias=False) if d_key else nn.Identity()
        self.value_proj = nn.Linear(d_feature, d_value, bias=False) if d_value else nn.Identity()
        self.score = build_score(score, self.d_query, self.d_key, d_hidden)
        self.score.check(self.d_query, self.d_key, 0)
        self.align = build_align(align, self.d_query, self.d_key)
        self.dropout = dropout
        q_bound, p_bound = 1.0 / math.sqrt(self.d_query), 1.0 / math.sqrt(self.d_value)
        self.query = nn.Parameter(
            torch.empty(num_classes, self.d_query).uniform_(-q_bound, q_bound)
        )
        self.probability_weight = nn.Parameter(
            torch.empty(num_classes, self.d_value).uniform_(-p_bound, p_bound)
        )
        self.probability_bias = nn.Parameter(torch.empty(num_classes).uniform_(-p_bound, p_bound))

    def forward(
        self, features: Tensor, mask: Tensor | None = None, *, return_weights: bool = False
    ) -> CapsuleOutput:
        """Run every capsule on ``features``.

        Args:
            features: ``[B, N, d_f]``.
            mask: bool ``[B, N]``, True = a real feature vector. Padded vectors get zero weight in
                every capsule and are left out of ``f``; a set with no real vector gives zero
                contexts and ``f = 0`` (``p_c = sigmoid(b_c)``).
            return_weights: include the per-class attention maps ``[B, C, N]``.

        Returns:
            :class:`CapsuleOutput`.
        """
        if features.dim() != 3 or features.shape[-1] != self.d_feature:
            raise ValueError(
                f"CapsuleAttention expects features [B, N, d_f={self.d_feature}], "
                f"got {tuple(features.shape)}"
            )
        if mask is not None:
            if mask.dtype != torch.bool:
                raise ValueError(f"mask must be bool (True = real element), got {mask.dtype}")
            if tuple(mask.shape) != tuple(features.shape[:2]):
                raise ValueError(
                    f"mask must be [B, N] = {tuple(features.shape[:2])}, got {tuple(mask.shape)}"
                )
        batch = features.shape[0]
        queries = self.query.to(features.dtype).expand(batch, -1, -1)  # q_c: [B, C, d_q]
        out = attention(  # eq. (43) and (3)-(4), all capsules in one call
            queries,
            self.key_proj(features),
            self.value_proj(features),
            score=self.score,
            align=self.align,
            mask=None if mask is None else mask.unsqueeze(1),  # [B, 1, N]
            dropout=self.dropout if self.training else 0.0,
            return_weights=return_weights,
        )
        context = out.context  # c_c: [B, C, d_v]
        logits = (context * self.probability_weight.to(context.dtype)).sum(-1)
        probabilities = torch.sigmoid(logits + self.probability_bias.to(context.dtype))  # (44)
        reconstructions = probabilities.unsqueeze(-1) * context  # eq. (45)
        return CapsuleOutput(
            context=context,
            probabilities=probabilities,
            reconstructions=reconstructions,
            feature_mean=masked_mean(features, mask),
            weights=out.weights,
            log_prob=out.log_prob,
        )


def capsule_loss(
    out: CapsuleOutput,
    target: Tensor,
    reconstruction_weight: float = 1.0,
    margin: float = 1.0,
) -> Tensor:
    """The joint loss of capsule-based attention [89]: probability loss + reconstruction loss.

    With ``y`` the true class of an example, ``C`` classes and ``s_c = f^T r_c`` (the dot product of
    the mean feature vector with capsule ``c``'s reconstruction, eq. 45)::

        J = 1/C Σ_{c ≠ y} max(0, margin - p_y + p_c)         the probabilities (eq. 44)
        U = 1/C Σ_{c ≠ y} max(0, margin - s_y + s_c)         the reconstructions
        loss = mean over the batch of  J + reconstruction_weight · U

    ``J`` pushes the true capsule's probability above every other; ``U`` makes the true capsule's
    reconstruction the most similar to ``f`` and the others dissimilar. Both are PyTorch's
    ``multi_margin_loss``, as in [89]'s code; the survey states the aims but not the formula.

    Args:
        out: a :class:`CapsuleOutput` with ``d_v = d_f``.
        target: class indices ``[B]`` (integers in ``[0, C)``).
        reconstruction_weight: the weight ``λ`` of ``U`` (1 in [89]'s code).
        margin: the hinge margin (1 in [89]).

    Returns:
        The scalar loss.

    Example::

        >>> capsules = ak.mechanisms.CapsuleAttention(d_feature=16, num_classes=3)
        >>> out = capsules(torch.randn(4, 9, 16))
        >>> loss = capsule_loss(out, torch.tensor([0, 2, 1, 1]))
        >>> loss.shape, bool(loss >= 0)
        (torch.Size([]), True)
    """
    batch, num_classes = out.probabilities.shape
    if out.reconstructions.shape[-1] != out.feature_mean.shape[-1]:
        raise ValueError(
            "capsule_loss compares r_c with the mean feature vector f, so it needs d_v = d_f, "
            f"got r {tuple(out.reconstructions.shape)} and f {tuple(out.feature_mean.shape)}"
        )
    if target.dtype == torch.bool or target.is_floating_point() or target.is_complex():
        raise TypeError(f"target must hold integer class indices, got {target.dtype}")
    if tuple(target.shape) != (batch,):
        raise ValueError(f"target must be [B] = ({batch},), got {tuple(target.shape)}")
    if batch and (target.min() < 0 or target.max() >= num_classes):
        raise ValueError(f"target classes must lie in [0, {num_classes}), got {target.tolist()}")
    if batch == 0:
        return out.probabilities.sum()  # an empty batch: zero loss, not the NaN of a mean of none
    target = target.long()
    similarity = (out.reconstructions * out.feature_mean.unsqueeze(1)).sum(-1)  # f^T r_c [B, C]
    probability_loss = F.multi_margin_loss(out.probabilities, target, margin=margin)
    reconstruction_loss = F.multi_margin_loss(similarity, target, margin=margin)
    return probability_loss + reconstruction_weight * reconstruction_loss
