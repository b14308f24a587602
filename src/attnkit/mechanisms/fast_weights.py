"""Fast weights (Schlag, Irie & Schmidhuber 2021, "Linear Transformers Are Secretly Fast Weight
Programmers"): causal linear attention is a network that writes its own weight matrix.

A *slow* network maps each input ``x_t`` to a key, a value and a query; a *fast* weight matrix
``W`` is programmed by outer products and read by the query (their §2-3):

    W_t = W_{t-1} + v_t φ(k_t)^T          (sum update rule: write value v_t under key φ(k_t))
    y_t = W_t φ(q_t)                      (read with the query)

Unrolled, ``y_t = Σ_{j<=t} v_j φ(k_j)^T φ(q_t)``: the numerator of causal linear attention
(Katharopoulos et al. eq. 9, :mod:`attnkit.efficient.linear`), whose state ``S_t`` is ``W_t^T``.
Dividing by ``z_t^T φ(q_t)`` with ``z_t = Σ_{j<=t} φ(k_j)`` gives linear attention exactly, so
:class:`FastWeightProgrammer` with the sum rule runs the parallel chunked kernel of
``attnkit.efficient.linear`` and :func:`sum_update_step` is its recurrent reading.

The sum rule only adds: a key written twice holds the sum of both values, and with more writes
than dimensions of ``φ`` the memory fills with interference. Schlag et al.'s *delta rule* (their
§4.2) overwrites instead — it first reads the value currently stored under the key and replaces
it by a mix of old and new with a learned, input-dependent rate ``β_t ∈ (0, 1)``:

    v̄_t = W_{t-1} φ(k_t),   W_t = W_{t-1} + β_t (v_t − v̄_t) φ(k_t)^T,   y_t = W_t φ(q_t)

with ``φ`` normalised to sum to one (their sum normalisation, which replaces ``z_t``).

Shapes: B batch, H heads, T time steps, f features of φ, d_v value size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from attnkit.core.kernel import TAXONOMY as LINEAR_TAXONOMY
from attnkit.core.kernel import elu_feature_map, kernel_attention

FeatureMap = Callable[[Tensor], Tensor]
UpdateRule = Literal["sum", "delta"]


@dataclass(frozen=True)
class FastWeightState:
    """The fast weights after some steps: ``weights`` ``W [B, H, d_v, f]`` and, for the
    normalised sum rule, ``normaliser`` ``z = Σ_j φ(k_j) [B, H, f]``.

    Attributes:
        weights: the fast weight matrix ``W [B, H, d_v, f]``.
        normaliser: ``z = Σ_j φ(k_j)`` ``[B, H, f]``.

    Example::

        >>> q = k = v = torch.randn(2, 4, 8)  # [B, H, d]
        >>> _, state = sum_update_step(q, k, v)
        >>> state.weights.shape, state.normaliser.shape
        (torch.Size([2, 4, 8, 8]), torch.Size([2, 4, 8]))
    """

    weights: Tensor
    normaliser: Tensor


def _empty_state(phi_k: Tensor, v: Tensor) -> FastWeightState:
    weights = phi_k.new_zeros(*v.shape, phi_k.shape[-1])  # [B, H, d_v, f]
    return FastWeightState(weights, torch.zeros_like(phi_k))


def sum_update_step(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: FastWeightState | None = None,
    *,
    feature_map: FeatureMap = elu_feature_map,
    normalise: bool = True,
) -> tuple[Tensor, FastWeightState]:
    """One step of the sum update rule: ``W_t = W_{t-1} + v_t φ(k_t)^T``, ``y_t = W_t φ(q_t)``,
    divided by ``z_t^T φ(q_t)`` when ``normalise`` (then equal to causal linear attention).

    Args:
        q, k: ``[B, H, d]``.
        v: ``[B, H, d_v]``.
        state: the previous fast weights (None: zeros).
        feature_map: ``φ`` (default ``elu + 1``, linear attention's).
        normalise: divide by ``z_t^T φ(q_t)`` (Katharopoulos et al.); False gives the bare read.

    Returns:
        ``(y_t [B, H, d_v], new state)``.

    Example::

        >>> state = None
        >>> for t in range(3):  # causal linear attention, one token at a time
        ...     y, state = sum_update_step(torch.randn(2, 4, 8), torch.randn(2, 4, 8),
        ...                                torch.randn(2, 4, 6), state)
        >>> y.shape
        torch.Size([2, 4, 6])
    """
    phi_q, phi_k = feature_map(q), feature_map(k)
    state = _empty_state(phi_k, v) if state is None else state
    weights = state.weights + v.unsqueeze(-1) * phi_k.unsqueeze(-2)  # + v_t φ(k_t)^T
    normaliser = state.normaliser + phi_k
    y = (weights @ phi_q.unsqueeze(-1)).squeeze(-1)  # W_t φ(q_t)
    if normalise:
        den = (normaliser * phi_q).sum(-1, keepdim=True)
        y = y / torch.where(den > 0, den, torch.ones_like(den))  # no key yet: y stays 0
    return y, FastWeightState(weights, normaliser)


def _sum_normalised(phi: Tensor) -> Tensor:
    return phi / phi.sum(-1, keepdim=True)


def delta_update_step(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rate: Tensor,
    state: FastWeightState | None = None,
    *,
    feature_map: FeatureMap = elu_feature_map,
) -> tuple[Tensor, FastWeightState]:
    """One step of the delta update rule (Schlag et al. §4.2): ``v̄ = W φ(k)``,
    ``W ← W + β (v − v̄) φ(k)^T``, ``y = W φ(q)``, with ``φ`` sum-normalised.

    Args:
        q, k: ``[B, H, d]``.
        v: ``[B, H, d_v]``.
        rate: ``β_t`` ``[B, H]`` in ``(0, 1)``.
        state: the previous fast weights (None: zeros).
        feature_map: ``φ`` before normalising (must be positive).

    Returns:
        ``(y_t [B, H, d_v], new state)``.

    Example::

        >>> q, k, v = torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 6)
        >>> y, state = delta_update_step(q, k, v, rate=torch.full((2, 4), 0.5))
        >>> y.shape, state.weights.shape
        (torch.Size([2, 4, 6]), torch.Size([2, 4, 6, 8]))
    """
    phi_q, phi_k = _sum_normalised(feature_map(q)), _sum_normalised(feature_map(k))
    state = _empty_state(phi_k, v) if state is None else state
    current = (state.weights @ phi_k.unsqueeze(-1)).squeeze(-1)  # v̄_t: what the key holds now
    write = rate.unsqueeze(-1) * (v - current)  # replace, not add
    weights = state.weights + write.unsqueeze(-1) * phi_k.unsqueeze(-2)
    y = (weights @ phi_q.unsqueeze(-1)).squeeze(-1)
    return y, FastWeightState(weights, state.normaliser + phi_k)


class FastWeightProgrammer(nn.Module):
    """A fast weight programmer (Schlag et al. 2021): a slow network writes keys and values into a
    fast weight matrix that its queries read — causal linear attention as an outer-product memory.

    Args:
        d_model: size of the inputs and outputs.
        num_heads: independent fast weight matrices.
        d_key: per-head size of keys and queries (default ``d_model // num_heads``); the values
            have the same size.
        update_rule: ``"sum"`` (``W += v φ(k)^T``, normalised: causal linear attention, computed
            by :func:`attnkit.core.kernel.kernel_attention`) or ``"delta"`` (overwrite with
            a learned rate ``β_t = sigmoid(w_β^T x_t)``, computed step by step).

    Shapes: ``x [B, T, d_model]`` → ``[B, T, d_model]``; output ``t`` sees inputs ``<= t``.

    Example::

        >>> fwp = FastWeightProgrammer(16, num_heads=2, update_rule="delta")
        >>> fwp(torch.randn(3, 10, 16)).shape
        torch.Size([3, 10, 16])
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        d_key: int | None = None,
        update_rule: UpdateRule = "sum",
    ) -> None:
        super().__init__()
        if (
            not isinstance(d_model, int)
            or not isinstance(num_heads, int)
            or min(d_model, num_heads) <= 0
        ):
            raise ValueError(
                f"d_model and num_heads must be positive ints, got {d_model!r}, {num_heads!r}"
            )
        if d_key is None:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model ({d_model}) must be divisible by num_heads ({num_heads}) unless "
                    "d_key is given"
                )
            d_key = d_model // num_heads
        if update_rule not in ("sum", "delta"):
            raise ValueError(f"update_rule must be 'sum' or 'delta', got {update_rule!r}")
        self.d_model, self.num_heads, self.d_key = d_model, num_heads, d_key
        self.update_rule = update_rule
        self.projection = nn.Linear(d_model, 3 * num_heads * d_key, bias=False)  # slow: q, k, v
        self.rate = nn.Linear(d_model, num_heads) if update_rule == "delta" else None
        self.out_projection = nn.Linear(num_heads * d_key, d_model, bias=False)
        self.taxonomy = {
            **LINEAR_TAXONOMY,
            "query_type": "Self-Attentive",
            "query_multiplicity": "Multi-Head" if num_heads > 1 else "Singular",
        }

    def _slow(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys, values ``[B, H, T, d_k]`` (``[B, H, d_k]`` for one step)."""
        parts = self.projection(x).unflatten(-1, (3, self.num_heads, self.d_key))
        q, k, v = parts.unbind(-3)
        if x.dim() == 3:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return q, k, v

    def step(
        self, x: Tensor, state: FastWeightState | None = None
    ) -> tuple[Tensor, FastWeightState]:
        """One time step: ``x [B, d_model]`` → ``(y [B, d_model], new state)``."""
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[-1] != self.d_model:
            given = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"FastWeightProgrammer.step expects x [B, {self.d_model}], got {given}"
            )
        q, k, v = self._slow(x)
        if self.rate is None:
            y, state = sum_update_step(q, k, v, state)
        else:
            y, state = delta_update_step(q, k, v, torch.sigmoid(self.rate(x)), state)
        return self.out_projection(y.flatten(1)), state

    def forward(self, x: Tensor) -> Tensor:
        """Program and read the fast weights over a whole sequence, causally.

        Args:
            x: ``[B, T, d_model]``.

        Returns:
            ``[B, T, d_model]``; output ``t`` depends on inputs ``<= t``.
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            given = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"FastWeightProgrammer expects x [B, T, {self.d_model}], got {given}")
        if self.rate is None:  # the sum rule is causal linear attention: the parallel form
            q, k, v = self._slow(x)
            y = kernel_attention(elu_feature_map(q), elu_feature_map(k), v, causal=True)
            return self.out_projection(y.transpose(1, 2).flatten(2))
        state, outputs = None, []
        for t in range(x.shape[1]):  # the delta rule reads before it writes: step by step
            y, state = self.step(x[:, t], state)
            outputs.append(y)
        return torch.stack(outputs, 1)
