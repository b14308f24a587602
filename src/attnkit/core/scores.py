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
    """The activation ``act()`` of Table 2 from a name (``"tanh"``, ``"relu"``, …) or a callable."""
    if callable(spec):
        return spec
    if spec not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {spec!r}; expected one of: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[spec]


class Score(nn.Module):
    """Base class of score functions.

    Subclasses implement ``forward(q, k, scale=None) -> e``. Class attributes describe the
    function so the engine can validate calls and pick a fast path without special cases:

    - ``parametric``: has learned parameters, so it must be constructed with its sizes;
    - ``same_size``: needs ``d_q == d_k`` (dot products and similarities);
    - ``value_features``: ``None`` for one score per key, ``d_v`` for multi-dimensional scores.
    """

    parametric: bool = False
    same_size: bool = False
    value_features: int | None = None
    registry_name: str = ""
    #: how many numbers computing one score holds (the additive score's hidden layer: d_w); the
    #: blockwise backends size their blocks by it.
    elements_per_score: int = 1

    def dot_form(
        self, q: Tensor, k: Tensor, scale: float | None = None
    ) -> tuple[Tensor, Tensor, float] | None:
        """``(q', k', s)`` with ``score(q, k) = s · q'^T k'`` when the score is a scaled dot product
        of transformed queries and keys (so fused dot-product kernels can compute it), else None.
        """
        return None

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        """Raise ``ValueError`` when this score cannot take queries/keys of these sizes."""
        if self.same_size and d_query != d_key:
            raise ValueError(
                f"score {self.registry_name!r} needs queries and keys of the same size, "
                f"got d_q={d_query} and d_k={d_key}"
            )

    def forward_block(
        self, q: Tensor, k: Tensor, scale: float | None = None, kv_offset: int = 0
    ) -> Tensor:
        """Scores of ``q`` against the block of keys ``k`` that starts at key ``kv_offset``.

        The same as ``forward`` for every score that reads the keys themselves; blockwise
        backends call this so position-based scores (``Location``) know where the block is.
        """
        return self(q, k, scale)

    @staticmethod
    def _scaled(e: Tensor, scale: float | None) -> Tensor:
        return e if scale is None else e * scale


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
    block of it at a time.
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

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        hidden = self.query_proj(q).unsqueeze(-2) + self.key_proj(k).unsqueeze(
            -3
        )  # [.., M, N, d_w]
        e = self.out(self.act(hidden))  # [..., M, N, 1 or d_v]
        if self.value_features is None:
            e = e.squeeze(-1)
        return self._scaled(e, scale)


@SCORES.register("dot", "multiplicative")
class Dot(Score):
    """Multiplicative (dot-product) score of Luong et al.: ``q^T k_l`` (Table 2)."""

    same_size = True

    def dot_form(self, q, k, scale=None):
        return q, k, 1.0 if scale is None else scale

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        return self._scaled(q @ k.transpose(-2, -1), scale)


@SCORES.register("scaled_dot", "scaled_multiplicative")
class ScaledDot(Score):
    """Scaled multiplicative score of Vaswani et al.: ``q^T k_l / sqrt(d_k)`` (Table 2).

    ``scale`` replaces ``1/sqrt(d_k)`` when given, as in
    ``torch.nn.functional.scaled_dot_product_attention``.
    """

    same_size = True

    def dot_form(self, q, k, scale=None):
        return q, k, 1.0 / math.sqrt(k.shape[-1]) if scale is None else scale

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        q, k, factor = self.dot_form(q, k, scale)
        return (q @ k.transpose(-2, -1)) * factor


@SCORES.register("general")
class General(Score):
    """General score of Luong et al.: ``k_l^T W q`` with ``W [d_k, d_q]`` (Table 2).

    Computed as the dot product of the transformed queries ``W q`` with the keys, so it costs one
    projection of the queries plus a dot-product score.
    """

    parametric = True
    bias = False

    def __init__(self, d_query: int, d_key: int) -> None:
        super().__init__()
        self.d_query, self.d_key = d_query, d_key
        self.query_proj = nn.Linear(d_query, d_key, bias=self.bias)

    def check(self, d_query: int, d_key: int, n_keys: int) -> None:
        _check_size(self.registry_name, "d_q", self.d_query, d_query)
        _check_size(self.registry_name, "d_k", self.d_key, d_key)

    def transform_query(self, q: Tensor) -> Tensor:
        """``W q`` (+ ``b``): the query as the key space sees it; the score is its dot with k."""
        return self.query_proj(q)

    def dot_form(self, q, k, scale=None):
        return self.transform_query(q), k, 1.0 if scale is None else scale

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        return self._scaled(self.transform_query(q) @ k.transpose(-2, -1), scale)


@SCORES.register("biased_general")
class BiasedGeneral(General):
    """Biased general score of Baziotis et al.: ``k_l^T (W q + b)`` with ``b [d_k]`` (Table 2)."""

    bias = True


@SCORES.register("activated_general")
class ActivatedGeneral(Score):
    """Activated general score of Ma et al.: ``act(k_l^T W q + b)`` with scalar ``b`` (Table 2)."""

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

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        e = self.act(self.query_proj(q) @ k.transpose(-2, -1) + self.bias)
        return self._scaled(e, scale)


@SCORES.register("cosine")
class Cosine(Score):
    """Cosine similarity score (Table 2, "similarity"): ``cos(q, k_l) / temperature``.

    Args:
        temperature: divides the cosine (which lies in [-1, 1]) so the softmax can be peaked.
        learnable: learn the temperature (as its logarithm, so it stays positive).
        eps: guards the norm of all-zero vectors, whose cosine is taken as 0.
    """

    same_size = True

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

    def normalise(self, x: Tensor) -> Tensor:
        """``x / ||x||``: cosine is the dot product of normalised queries and keys."""
        return F.normalize(x, dim=-1, eps=self.eps)

    def dot_form(self, q, k, scale=None):
        # The (possibly learned) temperature is folded into the queries, so the scale stays a float.
        q = self.normalise(q) / self.log_temperature.exp().to(q.dtype)
        return q, self.normalise(k), 1.0 if scale is None else scale

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        q, k, factor = self.dot_form(q, k, scale)
        return (q @ k.transpose(-2, -1)) * factor


@SCORES.register("euclidean")
class Euclidean(Score):
    """Negative Euclidean (L2) distance score (Table 2, "similarity"): ``-||q - k_l||_2``.

    Computed as ``-sqrt(|q|^2 + |k|^2 - 2 q^T k)`` so it is a matrix product (no ``[M, N, d]``
    difference tensor); the gradient at zero distance is taken as 0 instead of NaN.
    """

    same_size = True

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        squared = (
            q.pow(2).sum(-1, keepdim=True)
            + k.pow(2).sum(-1).unsqueeze(-2)
            - 2 * (q @ k.transpose(-2, -1))
        ).clamp_min(0)
        positive = squared > 0
        # sqrt has an infinite derivative at 0; route those entries through a constant instead.
        distance = torch.where(positive, squared, torch.ones_like(squared)).sqrt() * positive
        return self._scaled(-distance, scale)


@SCORES.register("location")
class Location(Score):
    """Location-based score of Luong et al.: ``e = W_a q`` — from the query alone (§3.2.1 of [4]).

    Keys are ignored except for their number ``N``: score ``l`` is row ``l`` of ``W_a q``.

    Args:
        d_query: size of the queries.
        max_length: the largest number of keys, the rows of ``W_a [max_length, d_q]``.
    """

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

    def forward(self, q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
        return self.forward_block(q, k, scale)

    def forward_block(
        self, q: Tensor, k: Tensor, scale: float | None = None, kv_offset: int = 0
    ) -> Tensor:
        e = self.proj(q)[..., kv_offset : kv_offset + k.shape[-2]]
        # Keys carry no information here, but the scores must broadcast over their leading dims.
        e = e.expand(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), *e.shape[-2:])
        return self._scaled(e, scale)


def resolve_score(spec: str | Score) -> Score:
    """A :class:`Score` from a registered name (see ``SCORES.names()``) or a ``Score`` object."""
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
    return resolve_score(spec)
