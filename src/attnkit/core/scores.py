"""Score functions: ``e_l = score(q, k_l)`` (survey eq. 2 and 23, Table 2, §3.2.1).

Rows are vectors: a score maps queries ``q [..., M, d_q]`` and keys ``k [..., N, d_k]`` to scores
``e [..., M, N]`` for all query/key pairs at once (the survey's "matrix form using K"). A
multi-dimensional score (eq. 31) returns one score per value feature, ``e [..., M, N, d_v]``.

The leading dimensions (batch, heads) broadcast; parametric scores share their weights over them.

Example::

    >>> import torch, attnkit as ak
    >>> q, k = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    >>> ak.scores.ScaledDot()(q, k).shape
    torch.Size([2, 5, 7])
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.core.registry import Registry

Activation = str | Callable[[Tensor], Tensor]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "silu": F.silu,
    "elu": F.elu,
    "leaky_relu": F.leaky_relu,
    "identity": lambda x: x,
}


def resolve_activation(spec: Activation) -> Callable[[Tensor], Tensor]:
    """The activation ``act()`` of Table 2 from a name (``"tanh"``, ``"relu"``, …) or a callable.

    Args:
        spec: a name (``"tanh"``, ``"relu"``, ``"sigmoid"``, ``"gelu"``, ``"silu"``, ``"elu"``,
            ``"leaky_relu"``, ``"identity"``) or a callable, returned as it is.

    Returns:
        The elementwise function ``act(x)``, same shape in and out.

    Example::

        >>> ak.scores.resolve_activation("relu")(torch.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """
    if callable(spec):
        return spec
    if spec not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {spec!r}; expected one of: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[spec]


class Score(nn.Module):
    """Base class of score functions.

    A score is computed in two steps, so blockwise backends never repeat per-vector work:

    - ``features(q, k) -> (q', k')``: transforms of each query and each key alone (``W_1 q`` and
      ``W_2 k + b`` of the additive score, ``W q`` of the general score, normalisation for the
      cosine), computed once per call;
    - ``pairwise(q', k', kv_offset) -> e``: the part that needs both, on any block of them.

    ``forward(q, k, scale)`` is ``pairwise(*features(q, k)) · scale``. Class attributes describe
    the function so the engine validates calls and picks a fast path without special cases:

    - ``parametric``: has learned parameters, so it must be constructed with its sizes;
    - ``same_size``: needs ``d_q == d_k`` (dot products and similarities);
    - ``pairwise_is_dot``: ``pairwise`` is ``q'^T k'``, so fused dot-product kernels compute it;
    - ``value_features``: ``None`` for one score per key, ``d_v`` for multi-dimensional scores;
    - ``elements_per_score``: numbers held per score in ``pairwise`` (``d_w`` for the additive
      score); blockwise backends size their blocks by it;
    - ``taxonomy``: its place in the survey's taxonomy (see ``attnkit.taxonomy``).

    A new score subclasses it and overrides ``features`` and/or ``pairwise``.

    Example::

        >>> class Negated(ak.scores.Score):
        ...     def pairwise(self, qf, kf, kv_offset=0):
        ...         return -(qf @ kf.transpose(-2, -1))
        >>> Negated()(torch.randn(2, 5, 8), torch.randn(2, 7, 8)).shape
        torch.Size([2, 5, 7])
    """

    parametric: bool = False
    same_size: bool = False
    pairwise_is_dot: bool = False
    value_features: int | None = None
    elements_per_score: int = 1
    registry_name: str = ""
    taxonomy: dict[str, str] = {}

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        """Raise ``ValueError`` when this score cannot take queries/keys of these sizes."""
        if self.same_size and d_query != d_key:
            raise ValueError(
                f"score {self.registry_name!r} needs queries and keys of the same size, "
                f"got d_q={d_query} and d_k={d_key}"
            )

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Per-vector transforms ``(q' [..., M, ·], k' [..., N, ·])``; identity by default."""
        return q, k

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        """Unscaled scores ``[..., m, n]`` of a block of query and key features; ``kv_offset`` is
        the position of the block's first key (for scores of positions). Dot product by default.
        """
        return qf @ kf.transpose(-2, -1)

    def default_scale(self, d_key: int) -> float | None:
        """The factor applied when ``scale=None`` (``1/sqrt(d_k)`` for the scaled dot product)."""
        return None

    def resolve_scale(self, scale: float | None, d_key: int) -> float | None:
        """``scale`` if given, else the score's default."""
        return self.default_scale(d_key) if scale is None else scale

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        """Scores ``e [..., M, N]`` (``[..., M, N, d_v]`` multi-dimensional) of eq. (2).

        Args:
            q: queries ``[..., M, d_q]``.
            k: keys ``[..., N, d_k]``; leading dimensions broadcast with ``q``'s.
            scale: multiplies the scores; ``None``: the score's default (``1/sqrt(d_k)`` for
                :class:`ScaledDot`, none for the others).

        Returns:
            ``e = pairwise(*features(q, k)) · scale``, ``[..., M, N]`` (``[..., M, N, d_v]``
            for a multi-dimensional score, eq. 31).
        """
        e = self.pairwise(*self.features(q, k))
        factor = self.resolve_scale(scale, k.shape[-1])
        return e if factor is None else e * factor


SCORES: Registry[Score] = Registry("score", Score, "ak.scores")


def _check_size(name: str, what: str, expected: int, given: int) -> None:
    if expected != given:
        raise ValueError(f"score {name!r} was built for {what}={expected}, got {what}={given}")


@SCORES.register("additive", "concat")
class Additive(Score):
    """Additive (concatenate) score of Bahdanau et al.: ``w^T act(W1 q + W2 k_l + b)`` (Table 2).

    With ``value_features=d_v`` the vector ``w`` becomes the matrix ``W_d [d_w, d_v]`` and the
    score is a vector per key: the multi-dimensional score of eq. (31).

    Args:
        d_query: size of the queries, ``d_q``.
        d_key: size of the keys, ``d_k``.
        d_hidden: size of the hidden layer, ``d_w``.
        activation: ``act()``; a name or a callable (default ``"tanh"``).
        bias: learn the bias ``b [d_w]`` inside the activation.
        value_features: ``None`` for scalar scores; ``d_v`` for eq. (31).

    Shapes: ``q [..., M, d_q]``, ``k [..., N, d_k]`` → ``e [..., M, N]`` (or ``[..., M, N, d_v]``).
    Memory: the materialised form holds ``[..., M, N, d_w]``; the engine's tiled path holds one
    block of it at a time, and computes ``W1 q`` and ``W2 k + b`` once.

    Example::

        >>> score = ak.scores.Additive(d_query=16, d_key=12, d_hidden=8)
        >>> score(torch.randn(2, 5, 16), torch.randn(2, 7, 12)).shape
        torch.Size([2, 5, 7])
        >>> ak.scores.Additive(16, 12, 8, value_features=4)(
        ...     torch.randn(2, 5, 16), torch.randn(2, 7, 12)).shape  # eq. (31)
        torch.Size([2, 5, 7, 4])
    """

    parametric = True

    def __init__(
        self,
        d_query: int,
        d_key: int,
        d_hidden: int,
        activation: Activation = "tanh",
        bias: bool = True,
        value_features: int | None = None,
    ) -> None:
        super().__init__()
        self.d_query, self.d_key, self.d_hidden = d_query, d_key, d_hidden
        self.query_proj = nn.Linear(d_query, d_hidden, bias=False)  # W1
        self.key_proj = nn.Linear(d_key, d_hidden, bias=bias)  # W2 and b
        self.out = nn.Linear(d_hidden, value_features or 1, bias=False)  # w (or W_d of eq. 31)
        self.act = resolve_activation(activation)
        self.value_features = value_features
        self.elements_per_score = d_hidden

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        _check_size("additive", "d_q", self.d_query, d_query)
        _check_size("additive", "d_k", self.d_key, d_key)

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return self.query_proj(q), self.key_proj(k)  # W1 q [..., M, d_w], W2 k + b [..., N, d_w]

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        hidden = self.act(qf.unsqueeze(-2) + kf.unsqueeze(-3))  # [..., m, n, d_w]
        e = hidden @ self.out.weight.T.to(hidden.dtype)  # [..., m, n, 1 or d_v]
        return e.squeeze(-1) if self.value_features is None else e

    @property
    def taxonomy(self) -> dict[str, str]:  # type: ignore[override]
        if self.value_features is None:
            return {"scoring": "Additive"}
        return {"scoring": "Additive", "dimensionality": "Multi-Dimensional"}


@SCORES.register("dot", "multiplicative")
class Dot(Score):
    """Multiplicative (dot-product) score of Luong et al.: ``q^T k_l`` (Table 2).

    No parameters; ``d_q == d_k``. Shapes: ``q [..., M, d]``, ``k [..., N, d]`` → ``[..., M, N]``.

    Example::

        >>> q, k = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 4.0], [1.0, 0.0]])
        >>> ak.scores.Dot()(q, k)
        tensor([[11.,  1.]])
    """

    taxonomy = {"scoring": "Multiplicative"}

    same_size = True
    pairwise_is_dot = True


@SCORES.register("scaled_dot", "scaled_multiplicative")
class ScaledDot(Score):
    """Scaled multiplicative score of Vaswani et al.: ``q^T k_l / sqrt(d_k)`` (Table 2).

    ``scale`` replaces ``1/sqrt(d_k)`` when given, as in
    ``torch.nn.functional.scaled_dot_product_attention``. No parameters; ``d_q == d_k``.

    Example::

        >>> q, k = torch.tensor([[1.0, 1.0, 1.0, 1.0]]), torch.ones(3, 4)
        >>> ak.scores.ScaledDot()(q, k)  # 4 / sqrt(4)
        tensor([[2., 2., 2.]])
    """

    taxonomy = {"scoring": "Scaled-Multiplicative"}

    same_size = True
    pairwise_is_dot = True

    def default_scale(self, d_key: int) -> float | None:
        return 1.0 / math.sqrt(d_key)


@SCORES.register("general")
class General(Score):
    """General score of Luong et al.: ``k_l^T W q`` with ``W [d_k, d_q]`` (Table 2).

    The dot product of the transformed queries ``W q`` with the keys: one projection of the
    queries, then a dot-product score (so it runs on fused dot-product kernels).

    Args:
        d_query: size of the queries, ``d_q``.
        d_key: size of the keys, ``d_k``.

    Example::

        >>> ak.scores.General(16, 12)(torch.randn(2, 5, 16), torch.randn(2, 7, 12)).shape
        torch.Size([2, 5, 7])
    """

    taxonomy = {"scoring": "General"}

    parametric = True
    pairwise_is_dot = True
    bias = False

    def __init__(self, d_query: int, d_key: int) -> None:
        super().__init__()
        self.d_query, self.d_key = d_query, d_key
        self.query_proj = nn.Linear(d_query, d_key, bias=self.bias)

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        _check_size(self.registry_name, "d_q", self.d_query, d_query)
        _check_size(self.registry_name, "d_k", self.d_key, d_key)

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return self.query_proj(q), k  # W q (+ b): the query as the key space sees it


@SCORES.register("biased_general")
class BiasedGeneral(General):
    """Biased general score of Baziotis et al.: ``k_l^T (W q + b)`` with ``b [d_k]`` (Table 2).

    Args:
        d_query: size of the queries, ``d_q``.
        d_key: size of the keys, ``d_k``.

    Example::

        >>> ak.scores.BiasedGeneral(16, 12)(torch.randn(2, 5, 16), torch.randn(2, 7, 12)).shape
        torch.Size([2, 5, 7])
    """

    taxonomy = {"scoring": "Biased General"}

    bias = True


@SCORES.register("activated_general")
class ActivatedGeneral(Score):
    """Activated general score of Ma et al.: ``act(k_l^T W q + b)`` with scalar ``b`` (Table 2).

    Args:
        d_query: size of the queries, ``d_q``.
        d_key: size of the keys, ``d_k``.
        activation: ``act()``; a name or a callable (default ``"tanh"``).

    Example::

        >>> e = ak.scores.ActivatedGeneral(16, 12)(torch.randn(2, 5, 16), torch.randn(2, 7, 12))
        >>> e.shape, bool(e.abs().max() <= 1)  # tanh
        (torch.Size([2, 5, 7]), True)
    """

    taxonomy = {"scoring": "Activated General"}

    parametric = True

    def __init__(self, d_query: int, d_key: int, activation: Activation = "tanh") -> None:
        super().__init__()
        self.d_query, self.d_key = d_query, d_key
        self.query_proj = nn.Linear(d_query, d_key, bias=False)
        self.bias = nn.Parameter(torch.zeros(()))
        self.act = resolve_activation(activation)

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        _check_size("activated_general", "d_q", self.d_query, d_query)
        _check_size("activated_general", "d_k", self.d_key, d_key)

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return self.query_proj(q), k

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        return self.act(qf @ kf.transpose(-2, -1) + self.bias.to(qf.dtype))


@SCORES.register("cosine")
class Cosine(Score):
    """Cosine similarity score (Table 2, "similarity"): ``cos(q, k_l) / temperature``.

    Args:
        temperature: divides the cosine (which lies in [-1, 1]) so the softmax can be peaked.
        learnable: learn the temperature (as its logarithm, so it stays positive).
        eps: guards the norm of all-zero vectors, whose cosine is taken as 0.

    Example::

        >>> q, k = torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]])
        >>> ak.scores.Cosine()(q, k)
        tensor([[ 1.,  0., -1.]])
    """

    taxonomy = {"scoring": "Similarity"}

    same_size = True
    pairwise_is_dot = True

    def __init__(self, temperature: float = 1.0, learnable: bool = False, eps: float = 1e-8):
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"cosine temperature must be > 0, got {temperature}")
        log_t = torch.tensor(math.log(temperature))
        if learnable:
            self.log_temperature = nn.Parameter(log_t)
        else:
            self.register_buffer("log_temperature", log_t)
        self.eps = eps

    def features(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        # Normalised vectors, the (possibly learned) temperature folded into the queries.
        q = F.normalize(q, dim=-1, eps=self.eps) / self.log_temperature.exp().to(q.dtype)
        return q, F.normalize(k, dim=-1, eps=self.eps)


@SCORES.register("euclidean")
class Euclidean(Score):
    """Negative Euclidean (L2) distance score (Table 2, "similarity"): ``-||q - k_l||_2``.

    Computed from the differences themselves (``torch.cdist`` without its matrix-product shortcut,
    and without a ``[M, N, d]`` tensor): the shortcut ``sqrt(|q|^2 + |k|^2 - 2 q^T k)`` is ~3x
    faster but loses the small distances to cancellation — exactly the largest scores, such as a
    query's distance to itself in self-attention. The gradient at zero distance is 0.

    Example::

        >>> q, k = torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 4.0], [0.0, 0.0]])
        >>> ak.scores.Euclidean()(q, k)
        tensor([[-5., -0.]])
    """

    taxonomy = {"scoring": "Similarity"}

    same_size = True

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        return -torch.cdist(qf, kf, compute_mode="donot_use_mm_for_euclid_dist")


@SCORES.register("location")
class Location(Score):
    """Location-based score of Luong et al.: ``e = W_a q`` — from the query alone (§3.2.1 of [4]).

    Keys are ignored except for their number ``N``: score ``l`` is row ``l`` of ``W_a q``.

    Args:
        d_query: size of the queries.
        max_length: the largest number of keys, the rows of ``W_a [max_length, d_q]``.

    Example::

        >>> score = ak.scores.Location(d_query=16, max_length=10)
        >>> score(torch.randn(2, 5, 16), torch.randn(2, 7, 16)).shape  # keys: only N = 7 counts
        torch.Size([2, 5, 7])
    """

    taxonomy = {"scoring": "Location"}

    parametric = True

    def __init__(self, d_query: int, max_length: int) -> None:
        super().__init__()
        self.d_query, self.max_length = d_query, max_length
        self.proj = nn.Linear(d_query, max_length)

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        _check_size("location", "d_q", self.d_query, d_query)
        if n_keys > self.max_length:
            raise ValueError(
                f"score 'location' was built for at most max_length={self.max_length} keys, "
                f"got {n_keys}"
            )

    def pairwise(self, qf: Tensor, kf: Tensor, kv_offset: int = 0) -> Tensor:
        # Only the rows of W_a for this block of keys: W_a q for all max_length positions at once
        # would be an [M, max_length] tensor, as large as the scores themselves.
        rows = slice(kv_offset, kv_offset + kf.shape[-2])
        e = qf @ self.proj.weight[rows].T.to(qf.dtype) + self.proj.bias[rows].to(qf.dtype)
        # Keys carry no information here, but the scores must broadcast over their leading dims.
        return e.expand(*torch.broadcast_shapes(qf.shape[:-2], kf.shape[:-2]), *e.shape[-2:])


def resolve_score(spec: str | Score) -> Score:
    """A :class:`Score` from a registered name (see ``SCORES.names()``) or a ``Score`` object.

    Args:
        spec: a registered name (``"scaled_dot"``, ``"cosine"``, ...) of a score without
            parameters, or a ``Score`` object, returned as it is.

    Returns:
        The :class:`Score` module.

    Example::

        >>> ak.scores.resolve_score("scaled_dot")
        ScaledDot()
    """
    return SCORES.resolve(spec)


def build_score(
    spec: str | Score,
    d_query: int,
    d_key: int,
    d_hidden: int | None = None,
    value_features: int | None = None,
) -> Score:
    """A :class:`Score` for queries of size ``d_query`` and keys of size ``d_key``.

    Unlike :func:`resolve_score`, names of parametric scores are constructed here, because the
    sizes are known (modules such as ``GeneralAttention`` use this). ``d_hidden`` is the additive
    score's ``d_w`` (default ``d_key``); ``value_features`` makes the additive score
    multi-dimensional (eq. 31). ``"location"`` needs ``max_length``: pass an object.

    Args:
        spec: a registered name or a ``Score`` object (returned as it is).
        d_query: ``d_q``, the size of the queries.
        d_key: ``d_k``, the size of the keys.
        d_hidden: the additive score's hidden size ``d_w``; ``None``: ``d_key``.
        value_features: ``d_v`` for the multi-dimensional additive score of eq. (31).

    Returns:
        A new :class:`Score` module (never one shared with another caller).

    Example::

        >>> ak.scores.build_score("general", d_query=16, d_key=12)
        General(
          (query_proj): Linear(in_features=16, out_features=12, bias=False)
        )
    """
    if isinstance(spec, Score):
        return spec
    cls = SCORES.get(spec) if isinstance(spec, str) else None
    if value_features is not None and cls is not Additive:
        raise ValueError(
            f"multi-dimensional attention (eq. 31) needs the 'additive' score, got {spec!r}"
        )
    if cls is Additive:
        return Additive(d_query, d_key, d_hidden or d_key, value_features=value_features)
    if cls in (General, BiasedGeneral, ActivatedGeneral):
        return cls(d_query, d_key)
    if isinstance(spec, str):
        return SCORES.create(spec)  # a module's own object, never shared with other modules
    return resolve_score(spec)
