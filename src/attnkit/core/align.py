"""Alignment functions: ``a_l = align(e_l; e)`` (survey eq. 3, §3.2.2).

An alignment maps the scores of each query, ``e [..., M, N]``, to attention weights over its ``N``
keys. ``mask`` (bool, broadcastable to ``e``, True = may attend) removes keys: they get exactly zero
weight and zero gradient, and a row with no admissible key gets all-zero weights — never NaN.

Deterministic alignments return the weights from ``forward``. Stochastic ones (``Hard``,
``Reinforced``) also have ``sample(...) -> (weights, log_prob)``: the log-probability of what was
sampled, for REINFORCE, with ``reinforce_loss(log_prob, reward)`` and a moving-average baseline.

Example::

    >>> import torch, attnkit as ak
    >>> e = torch.tensor([[1.0, 2.0, 3.0]])
    >>> ak.align.Softmax()(e, torch.tensor([[True, True, False]]))
    tensor([[0.2689, 0.7311, 0.0000]])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Literal

import entmax
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.registry import Registry
from attnkit.core.scores import Additive


def possibly(t: Tensor) -> bool:
    """``bool(t.any())``, but ``True`` for ``meta`` tensors, whose values are unknown, and under
    ``torch.compile``, which cannot branch on values: guards a rarely needed fix-up (non-finite
    scores) without reading values that do not exist (the fix-up is exact either way).

    Args:
        t: a bool tensor, any shape.

    Returns:
        Whether any element may be True.

    Example::

        >>> ak.align.possibly(torch.tensor([False, True])), ak.align.possibly(torch.zeros(2) > 0)
        (True, False)
    """
    return t.device.type == "meta" or torch.compiler.is_compiling() or bool(t.any())


def _shifted(e: Tensor, dim: int = -1) -> Tensor:
    """``e - max(e)`` along ``dim``, with the limits attnkit defines for non-finite scores:

    - a row with no admissible score (all ``-inf``) keeps ``-inf`` everywhere (it gets 0 weights);
    - a row with ``+inf`` scores: ``0`` at its ``+inf`` keys and ``-inf`` elsewhere, so softmax
      shares the weight equally among the ``+inf`` keys — the limit of softmax as those scores
      grow together — and its gradient with respect to the scores is 0 (no ``inf - inf``);
    - a row with a NaN score stays NaN (its max is NaN).
    """
    peak = e.detach().amax(dim, keepdim=True)
    top = torch.isposinf(peak)
    shifted = e - torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    if possibly(top):
        limit = torch.where(torch.isposinf(e), 0.0, float("-inf")).to(e.dtype)
        shifted = torch.where(top, limit, shifted)
    peak_is_nan = torch.isnan(peak)
    if possibly(peak_is_nan):
        shifted = torch.where(peak_is_nan, torch.full_like(shifted, float("nan")), shifted)
    return shifted


def masked_softmax(e: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` (eq. 25) restricted to ``mask``; rows with no admissible key give 0,
    rows with ``+inf`` scores share the weight equally among them, rows with a NaN score are NaN.

    Args:
        e: scores ``[..., M, N]`` (any shape).
        mask: bool, broadcastable to ``e``; True = may attend. ``None``: every key.
        dim: the dimension normalised (the keys').

    Returns:
        Weights, the shape of ``e``; 0 at masked keys.

    Example::

        >>> e = torch.tensor([[0.0, 0.0, 5.0], [1.0, 2.0, 3.0]])
        >>> ak.align.masked_softmax(e, torch.tensor([[True, True, False], [False] * 3]))
        tensor([[0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 0.0000]])
    """
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    # Softmax is shift-invariant, so the max can be a constant: this keeps all-masked rows finite.
    p = torch.exp(_shifted(e, dim))
    total = p.sum(dim, keepdim=True)
    return p / torch.where(total == 0, torch.ones_like(total), total)


def masked_log_softmax(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """``log`` of :func:`masked_softmax` over the last dim; masked entries are ``-inf``.

    Args:
        e: scores ``[..., M, N]``.
        mask: bool, broadcastable to ``e``; True = may attend. ``None``: every key.

    Returns:
        Log-weights, the shape of ``e``.

    Example::

        >>> ak.align.masked_log_softmax(torch.zeros(1, 2), torch.tensor([[True, False]]))
        tensor([[0., -inf]])
    """
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    shifted = _shifted(e)
    return shifted - torch.logsumexp(shifted, -1, keepdim=True)


class Align(nn.Module, ABC):
    """Base class of alignment functions.

    Class attributes let the engine and the tests treat alignments uniformly:

    - ``normalized``: the weights of a row with an admissible key sum to 1;
    - ``stochastic``: ``sample()`` draws at random in training mode and returns a log-probability;
    - ``parametric``: has learned parameters, so it must be constructed with its sizes.

    A new alignment subclasses it and implements ``sample``.

    Example::

        >>> class Uniform(ak.align.Align):
        ...     def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        ...         return ak.align.masked_softmax(torch.zeros_like(e), mask), None
        >>> Uniform()(torch.randn(1, 4))
        tensor([[0.2500, 0.2500, 0.2500, 0.2500]])
    """

    normalized: bool = True
    stochastic: bool = False
    parametric: bool = False
    registry_name: str = ""
    taxonomy: dict[str, str] = {}  # its place in the survey's taxonomy (see attnkit.taxonomy)

    def forward(
        self,
        e: Tensor,
        mask: Tensor | None = None,
        *,
        query: Tensor | None = None,
        key: Tensor | None = None,
        q_offset: int = 0,
    ) -> Tensor:
        """Weights ``[..., M, N]`` from scores ``e [..., M, N]``.

        Args:
            e: scores.
            mask: bool, broadcastable to ``e``; True = may attend.
            query: ``[..., M, d_q]``, for alignments that look at the queries (local-predictive).
            key: ``[..., N, d_k]``, for alignments that look at the keys (reinforced).
            q_offset: position of the first row of ``e`` among all queries (blockwise callers).

        Returns:
            Weights ``a [..., M, N]`` of eq. (3): 0 at masked keys, all 0 in a row without an
            admissible key.
        """
        return self.sample(e, mask, query=query, key=key, q_offset=q_offset)[0]

    @abstractmethod
    def sample(
        self,
        e: Tensor,
        mask: Tensor | None = None,
        *,
        query: Tensor | None = None,
        key: Tensor | None = None,
        q_offset: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """``(weights, log_prob)``; ``log_prob [..., M]`` is None for deterministic alignments."""


ALIGNS: Registry[Align] = Registry("align", Align, "ak.align")


@ALIGNS.register("softmax", "soft", "global")
class Softmax(Align):
    """Soft / global alignment: ``a_l = exp(e_l) / sum_j exp(e_j)`` (eq. 25).

    Shapes: scores ``e [..., M, N]`` → weights ``[..., M, N]``.

    Example::

        >>> ak.align.Softmax()(torch.tensor([[0.0, 0.0]]))
        tensor([[0.5000, 0.5000]])
    """

    taxonomy = {"alignment": "Global"}

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        return masked_softmax(e, mask), None


def nan_rows(e: Tensor, mask: Tensor | None) -> Tensor:
    """``[..., M, 1]``: rows with a NaN among their admissible scores. Alignments that pick or
    threshold (and so could hide a NaN) give these rows NaN weights, as softmax does.

    Args:
        e: scores ``[..., M, N]``.
        mask: bool, broadcastable to ``e``; True = may attend; ``None``: every key.

    Returns:
        Bool ``[..., M, 1]``.

    Example::

        >>> ak.align.nan_rows(torch.tensor([[1.0, float("nan")], [1.0, 2.0]]), None).flatten()
        tensor([ True, False])
    """
    nan = torch.isnan(e.detach())
    if mask is not None:
        nan = nan & mask
    return nan.any(-1, keepdim=True)


def _with_nan_rows(a: Tensor, rows: Tensor) -> Tensor:
    return torch.where(rows, torch.full_like(a, float("nan")), a)


def _fill_masked(e: Tensor, mask: Tensor | None) -> Tensor:
    """Replace masked and ``-inf`` scores by a finite value below every sparse support.

    Sparsemax gives zero weight to scores below ``max - 1`` and 1.5-entmax to scores below
    ``max - 2`` (their thresholds), so any value under that is exactly like an absent key —
    and, unlike ``-inf``, cannot produce NaN in their sort-based thresholds (entmax#19). NaN and
    ``+inf`` scores are set to 0 here (their rows are replaced afterwards), since they crash the
    sort.
    """
    present = e > float("-inf")  # False for -inf and NaN: absent (NaN rows are replaced later)
    if mask is not None:
        present = present & mask
    e = torch.where(torch.isfinite(e), e, torch.zeros_like(e))
    peak = e.detach().masked_fill(~present, float("-inf")).amax(-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    return torch.where(present, e, peak - 2 * peak.abs() - 4)


def infinite_rows(e: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(rows [..., M, 1], share [..., M, N])``: the rows with a ``+inf`` admissible score, and
    the weights attnkit defines for them — equal shares of the ``+inf`` keys, 0 elsewhere (the
    limit of softmax, sparsemax and 1.5-entmax as those scores grow together).

    Args:
        e: scores ``[..., M, N]``.
        mask: bool, broadcastable to ``e``; True = may attend; ``None``: every key.

    Returns:
        ``(rows, share)``: bool ``[..., M, 1]`` and weights ``[..., M, N]``.

    Example::

        >>> inf = float("inf")
        >>> ak.align.infinite_rows(torch.tensor([[inf, 0.0, inf]]), None)
        (tensor([[True]]), tensor([[0.5000, 0.0000, 0.5000]]))
    """
    top = torch.isposinf(e.detach())
    if mask is not None:
        top = top & mask
    count = top.sum(-1, keepdim=True)
    share = top.to(e.dtype) / torch.where(count > 0, count, torch.ones_like(count)).to(e.dtype)
    return count > 0, share


class _Sparse(Align):
    """A sparse mapping of the ``entmax`` package, made safe for masks, NaN and infinities."""

    taxonomy = {"alignment": "Sparse"}
    mapping: Callable[..., Tensor]  # each subclass names its function of the entmax package

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        a = self.mapping(_fill_masked(e, mask), dim=-1)
        a = a if mask is None else a * mask
        a = a * (e > float("-inf"))  # an admissible -inf score is an absent key
        top, share = infinite_rows(e, mask)
        if possibly(top):
            a = torch.where(top, share, a)
        return _with_nan_rows(a, nan_rows(e, mask)), None


@ALIGNS.register("sparsemax")
class Sparsemax(_Sparse):
    """Sparsemax (Martins & Astudillo 2016): Euclidean projection of ``e`` onto the simplex.

    Shapes: scores ``e [..., M, N]`` → weights ``[..., M, N]``, exactly 0 below the threshold.

    Example::

        >>> ak.align.Sparsemax()(torch.tensor([[0.0, 0.5, 3.0]]))
        tensor([[0., 0., 1.]])
    """

    mapping = staticmethod(entmax.sparsemax)


@ALIGNS.register("entmax15")
class Entmax15(_Sparse):
    """1.5-entmax (Peters, Niculae & Martins 2019): sparse, between softmax and sparsemax.

    Shapes: scores ``e [..., M, N]`` → weights ``[..., M, N]``.

    Example::

        >>> ak.align.Entmax15()(torch.tensor([[0.0, 1.0, 5.0]]))
        tensor([[0., 0., 1.]])
    """

    mapping = staticmethod(entmax.entmax15)


@ALIGNS.register("topk")
class TopK(Align):
    """Softmax over the ``k`` highest-scoring admissible keys of each query (others get 0).

    Args:
        k: the number of keys each query keeps.

    Example::

        >>> ak.align.TopK(k=2)(torch.tensor([[0.0, 3.0, 1.0, 3.0]]))
        tensor([[0.0000, 0.5000, 0.0000, 0.5000]])
    """

    taxonomy = {"alignment": "Top-k"}

    def __init__(self, k: int = 8) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"topk needs a positive int k, got {k!r}")
        self.k = k

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        filled = e.detach() if mask is None else e.detach().masked_fill(~mask, float("-inf"))
        best = filled.topk(min(self.k, e.shape[-1]), dim=-1).indices
        keep = torch.zeros_like(e, dtype=torch.bool).scatter(-1, best, True)
        if mask is not None:
            keep = keep & mask
        return masked_softmax(e, keep), None


class _Reinforce(Align):
    """REINFORCE with a moving-average baseline, shared by the stochastic alignments."""

    stochastic = True

    def __init__(self, baseline_decay: float = 0.9) -> None:
        super().__init__()
        if not 0.0 <= baseline_decay < 1.0:
            raise ValueError(f"baseline_decay must lie in [0, 1), got {baseline_decay}")
        self.baseline_decay = baseline_decay
        self.register_buffer("baseline", torch.zeros(()))

    def reinforce_loss(self, log_prob: Tensor, reward: Tensor) -> Tensor:
        """REINFORCE surrogate ``-mean((reward - baseline) · log_prob)``; updates the baseline.

        Args:
            log_prob: ``[B, ...]`` from ``sample()`` (or ``AttentionOutput.log_prob``).
            reward: ``[B]`` or broadcastable to ``log_prob``; higher is better. Not differentiated.
        """
        reward = reward.detach().to(log_prob.dtype)
        if reward.dim() == 1 and log_prob.dim() > 1:
            reward = reward.view(-1, *([1] * (log_prob.dim() - 1)))
        advantage = reward - self.baseline.to(log_prob.dtype)
        loss = -(advantage * log_prob).mean()
        if self.training:
            d = self.baseline_decay
            self.baseline.mul_(d).add_((1 - d) * reward.mean().to(self.baseline.dtype))
        return loss


@ALIGNS.register("hard")
class Hard(_Reinforce):
    """Hard (stochastic) alignment of Xu et al.: one key per query (eq. 26, ``c = v_m``).

    In training mode ``m`` is drawn from the softmax of the scores; in eval mode it is the argmax.
    Gradients, by ``estimator``:

    - ``"reinforce"``: the one-hot weights carry no gradient; train the scores with
      ``reinforce_loss(log_prob, reward)`` where ``log_prob = log a_m``;
    - ``"straight_through"``: Gumbel-softmax with temperature ``temperature``: the forward pass is
      one-hot, the backward pass is that of the relaxed softmax (Jang et al. 2017).

    Args:
        estimator: ``"reinforce"`` or ``"straight_through"``.
        temperature: of the Gumbel-softmax relaxation (``"straight_through"``).
        baseline_decay: of the moving-average REINFORCE baseline, in ``[0, 1)``.

    Example::

        >>> hard = ak.align.Hard().eval()  # eval mode: the argmax
        >>> weights, log_prob = hard.sample(torch.tensor([[0.0, 2.0, 1.0]]))
        >>> weights, log_prob.shape
        (tensor([[0., 1., 0.]]), torch.Size([1]))
    """

    taxonomy = {"alignment": "Hard"}

    def __init__(
        self,
        estimator: Literal["reinforce", "straight_through"] = "reinforce",
        temperature: float = 1.0,
        baseline_decay: float = 0.9,
    ) -> None:
        super().__init__(baseline_decay)
        if estimator not in ("reinforce", "straight_through"):
            raise ValueError(
                f"hard alignment estimator must be 'reinforce' or 'straight_through', "
                f"got {estimator!r}"
            )
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.estimator = estimator
        self.temperature = temperature

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        nan = nan_rows(e, mask)
        log_p = masked_log_softmax(torch.where(nan, torch.zeros_like(e), e), mask)
        has_key = torch.isfinite(log_p).any(-1, keepdim=True)
        relaxed = None
        if not self.training:
            choice = log_p.argmax(-1, keepdim=True)
        elif self.estimator == "reinforce":
            probs = torch.where(has_key, log_p.detach().exp(), torch.ones_like(log_p))
            choice = torch.multinomial(probs.reshape(-1, e.shape[-1]), 1).view(*e.shape[:-1], 1)
        else:
            uniform = torch.rand_like(e).clamp(1e-20, 1.0)
            gumbel = -torch.log((-torch.log(uniform)).clamp_min(1e-20))
            relaxed = masked_softmax((e + gumbel) / self.temperature, mask)
            choice = relaxed.detach().argmax(-1, keepdim=True)
        one_hot = torch.zeros_like(log_p).scatter(-1, choice, 1.0) * has_key
        weights = one_hot if relaxed is None else one_hot - relaxed.detach() + relaxed
        log_prob = log_p.gather(-1, choice).squeeze(-1)
        log_prob = torch.where(has_key.squeeze(-1), log_prob, torch.zeros_like(log_prob))
        return _with_nan_rows(weights, nan), _with_nan_rows(log_prob, nan.squeeze(-1))


class _Local(Align):
    """Softmax inside the window ``[p - D, p + D]`` around a position ``p`` per query (eq. 27)."""

    taxonomy = {"alignment": "Local"}

    def __init__(self, window: int) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"local alignment needs a positive int window D, got {window!r}")
        self.window = window

    def _window(self, e: Tensor, mask: Tensor | None, p: Tensor) -> Tensor:
        positions = torch.arange(e.shape[-1], device=e.device, dtype=p.dtype)
        inside = (positions - p).abs() <= self.window
        return inside if mask is None else inside & mask


@ALIGNS.register("local_monotonic")
class LocalMonotonic(_Local):
    """Local-monotonic alignment of Luong et al.: ``p`` = the query's own position, eq. (27).

    Query ``i`` attends keys ``l`` with ``|l - i| <= D`` (``2D + 1`` keys where they exist).
    ``window`` defaults to ``D = 10``, the value of Luong et al. (2015).

    Args:
        window: ``D``.

    Example::

        >>> ak.align.LocalMonotonic(window=1)(torch.zeros(4, 4))[0]  # query 0: keys 0 and 1
        tensor([0.5000, 0.5000, 0.0000, 0.0000])
    """

    def __init__(self, window: int = 10) -> None:
        super().__init__(window)

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        p = torch.arange(q_offset, q_offset + e.shape[-2], device=e.device, dtype=torch.float64)
        return masked_softmax(e, self._window(e, mask, p.unsqueeze(-1))), None


@ALIGNS.register("local_predictive")
class LocalPredictive(_Local):
    """Local-predictive alignment of Luong et al. (eq. 28-29).

    ``p = S · sigmoid(w_p^T tanh(W_p q))`` is predicted from the query, with ``S`` the length of
    the row's input (the last admissible key + 1); the softmax inside ``[p - D, p + D]`` is
    multiplied by the Gaussian ``exp(-(l - p)^2 / (2 sigma^2))``, ``sigma = D / 2``, which makes the
    weights differentiable in ``p``. Like the paper, the weights are not renormalised afterwards.

    Args:
        d_query: size of the queries.
        window: ``D``.
        d_hidden: rows of ``W_p`` (``d_p``); defaults to ``d_query``.

    Example::

        >>> align = ak.align.LocalPredictive(d_query=8, window=2)
        >>> align(torch.randn(2, 3, 10), query=torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 10])
    """

    normalized = False
    parametric = True

    def __init__(self, d_query: int, window: int, d_hidden: int | None = None) -> None:
        super().__init__(window)
        self.d_query = d_query
        self.W_p = nn.Linear(d_query, d_hidden or d_query, bias=False)
        self.w_p = nn.Linear(d_hidden or d_query, 1, bias=False)

    def position(self, query: Tensor, lengths: Tensor) -> Tensor:
        """``p [..., M, 1]`` of eq. (28) for queries ``[..., M, d_q]`` and row lengths ``S``."""
        return lengths * torch.sigmoid(self.w_p(torch.tanh(self.W_p(query))))

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        if query is None or query.shape[-1] != self.d_query:
            given = None if query is None else tuple(query.shape)
            raise ValueError(
                f"local_predictive needs the queries [..., M, {self.d_query}], got {given}"
            )
        n = e.shape[-1]
        positions = torch.arange(n, device=e.device, dtype=e.dtype)
        if mask is None:
            lengths = torch.full((1,), float(n), device=e.device, dtype=e.dtype)
        else:
            lengths = ((positions + 1) * mask.expand_as(e)).amax(-1, keepdim=True)
        p = self.position(query, lengths)  # [..., M, 1]
        a = masked_softmax(e, self._window(e, mask, p.detach()))
        sigma = self.window / 2
        return a * torch.exp(-((positions - p) ** 2) / (2 * sigma**2)), None


@ALIGNS.register("reinforced")
class Reinforced(_Reinforce):
    """Reinforced alignment (Shen et al. 2018): a learned policy picks a subset of the keys, and
    soft alignment (eq. 25) runs inside it.

    The policy keeps key ``l`` for query ``q`` with probability
    ``pi_l = sigmoid(w^T tanh(W1 q + W2 k_l + b))`` — sampled in training mode, ``pi_l > 0.5`` in
    eval mode. It is trained by REINFORCE (``reinforce_loss``) from
    ``log_prob = sum_l log P(z_l)`` over the admissible keys. When the policy keeps no admissible
    key of a row, the row falls back to all its admissible keys (so a row is never emptied by the
    policy alone).

    Args:
        d_query, d_key: sizes of the queries and keys the policy reads.
        d_hidden: hidden size of the policy network (default ``d_query``).
        baseline_decay: of the moving-average REINFORCE baseline.

    Example::

        >>> align = ak.align.Reinforced(d_query=8, d_key=6)
        >>> q, k = torch.randn(2, 3, 8), torch.randn(2, 5, 6)
        >>> weights, log_prob = align.sample(torch.randn(2, 3, 5), query=q, key=k)
        >>> weights.shape, log_prob.shape
        (torch.Size([2, 3, 5]), torch.Size([2, 3]))
    """

    taxonomy = {"alignment": "Reinforced"}

    parametric = True

    def __init__(
        self, d_query: int, d_key: int, d_hidden: int | None = None, baseline_decay: float = 0.9
    ) -> None:
        super().__init__(baseline_decay)
        self.policy = Additive(d_query, d_key, d_hidden or d_query)

    def sample(self, e, mask=None, *, query=None, key=None, q_offset=0):
        if query is None or key is None:
            raise ValueError("reinforced alignment needs the queries and keys its policy reads")
        logits = self.policy(query, key)  # [..., M, N]
        if self.training:
            chosen = torch.bernoulli(torch.sigmoid(logits.detach())).bool()
        else:
            chosen = logits.detach() > 0
        admissible = torch.ones_like(chosen) if mask is None else mask.expand_as(chosen)
        kept = chosen & admissible
        kept = torch.where(kept.any(-1, keepdim=True), kept, admissible)
        log_p = torch.where(chosen, F.logsigmoid(logits), F.logsigmoid(-logits))
        # where, not a product: a NaN logit at a masked key (NaN in a masked key) stays out.
        log_prob = torch.where(admissible, log_p, torch.zeros_like(log_p)).sum(-1)
        return _with_nan_rows(masked_softmax(e, kept), nan_rows(e, mask)), log_prob


def resolve_align(spec: str | Align) -> Align:
    """An :class:`Align` from a registered name (see ``ALIGNS.names()``) or an ``Align`` object.

    Args:
        spec: a registered name (``"softmax"``, ``"sparsemax"``, ``"topk"``, ...) of an alignment
            without parameters, or an ``Align`` object, returned as it is.

    Returns:
        The :class:`Align` module.

    Example::

        >>> ak.align.resolve_align("sparsemax")
        Sparsemax()
    """
    return ALIGNS.resolve(spec)


def build_align(spec: str | Align, d_query: int, d_key: int) -> Align:
    """An :class:`Align` for queries/keys of these sizes; constructs ``"reinforced"`` from its
    name (``"local_predictive"`` needs its window: pass an object).

    Args:
        spec: a registered name or an ``Align`` object (returned as it is).
        d_query: ``d_q``, the size of the queries (for ``"reinforced"``'s policy).
        d_key: ``d_k``, the size of the keys (for ``"reinforced"``'s policy).

    Returns:
        A new :class:`Align` module (never one shared with another caller).

    Example::

        >>> type(ak.align.build_align("reinforced", d_query=8, d_key=6)).__name__
        'Reinforced'
    """
    if isinstance(spec, str) and ALIGNS.get(spec) is Reinforced:
        return Reinforced(d_query, d_key)
    if isinstance(spec, str):
        return ALIGNS.create(spec)  # a module's own object, never shared with other modules
    return resolve_align(spec)
