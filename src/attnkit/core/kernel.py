"""Kernel attention: softmax's ``exp(q·k)`` replaced by a kernel ``φ(q)·φ(k)``, so the sum over
keys factors out (Katharopoulos et al. 2020, "Transformers are RNNs", eq. 4-9):

    V'_i = φ(Q_i)^T Σ_j φ(K_j) V_j^T  /  φ(Q_i)^T Σ_j φ(K_j)                       (eq. 5)

O(N·m·d_v) time and memory instead of O(M·N). Causal (eq. 8-9): the sums run over ``j <= i``,
``S_i = Σ_{j<=i} φ(K_j) V_j^T`` and ``z_i = Σ_{j<=i} φ(K_j)``, computed as prefix sums over chunks
of ``C`` positions (the state after each earlier chunk, plus the masked ``C × C`` products inside
the chunk), so memory is O(N/C·m·d_v + N·C); :func:`kernel_attention_step` updates ``S`` and
``z`` one token at a time (eq. 18-20) and gives the same outputs.

The math shared by linear attention and Performer (``attnkit.efficient``) and by fast weights
(``attnkit.mechanisms.fast_weights``, whose sum rule is this recurrence), so it sits in the core
below both. Einsum letters: B batch, H heads, c chunk, t/s positions in a chunk, f features,
e value features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

#: linear attention's place in the taxonomy: a multiplicative (kernel) score, every key
TAXONOMY: dict[str, str | list[str]] = {"scoring": "Multiplicative", "alignment": "Global"}


def elu_feature_map(x: Tensor) -> Tensor:
    """``φ(x) = elu(x) + 1`` (Katharopoulos et al. §3.2.1): positive, so every weight is > 0."""
    return F.elu(x) + 1


def _ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator[..., None]``, zeros where the denominator is 0 (no key)."""
    den = denominator.unsqueeze(-1)
    return numerator / torch.where(den > 0, den, torch.ones_like(den))


def kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    key_mask: Tensor | None = None,
    chunk: int = 64,
) -> Tensor:
    """``Σ_j (φ_i·φ_j) v_j / Σ_j φ_i·φ_j`` over the admissible keys (eq. 5; causal eq. 9).

    Args:
        phi_q: ``[B, H, M, f]`` query features (non-negative).
        phi_k: ``[B, H, N, f]`` key features (non-negative).
        v: ``[B, H, N, d_v]``.
        causal: query ``i`` sees keys ``j <= i + N - M`` (bottom-right).
        key_mask: bool broadcastable to ``[B, H, 1, N]``, True = may attend.
        chunk: ``C``, positions per chunk of the causal prefix sums.

    Returns:
        ``[B, H, M, d_v]``; zeros for a query with no admissible key (or zero total weight).
    """
    b, h, m, _ = phi_q.shape
    n = phi_k.shape[-2]
    if key_mask is not None:  # `where`, not a product: masked keys get no gradient at all
        keep = key_mask.transpose(-1, -2)  # [B', H', N, 1]
        phi_k = torch.where(keep, phi_k, torch.zeros_like(phi_k))
    if not causal:
        # (Σ_j φ(K_j) [V_j; 1]^T)^T: the state and, in its last row, the normaliser Σ_j φ(K_j),
        # so each feature matrix enters one product and its gradient needs no element-wise
        # pass or sum over [N, f] (nor an outer product in the backward). Transposed, so that
        # φ(K)'s gradient comes out contiguous (else the features' backward copies it).
        ones = v.new_ones(()).expand(*v.shape[:-1], 1)
        state_t = torch.cat([v, ones], -1).transpose(-1, -2) @ phi_k  # [B, H, d_v + 1, f]
        both = phi_q @ state_t.transpose(-1, -2)  # [B, H, M, d_v + 1]
        return _ratio(both[..., :-1], both[..., -1])
    if m > n:  # the first M - N queries come before every key
        rest = kernel_attention(phi_q[:, :, m - n :], phi_k, v, causal=True, chunk=chunk)
        return torch.cat([rest.new_zeros(b, h, m - n, v.shape[-1]), rest], 2)
    # Keys before the first query's position are seen by every query: the initial state.
    prefix = n - m
    state0 = phi_k[:, :, :prefix].transpose(-1, -2) @ v[:, :, :prefix]  # [B, H, f, d_v]
    norm0 = phi_k[:, :, :prefix].sum(-2)  # [B, H, f]
    phi_k, v = phi_k[:, :, prefix:], v[:, :, prefix:]
    c = max(1, min(chunk, m))
    n_chunks = -(-m // c)
    pad = n_chunks * c - m
    qc = F.pad(phi_q, (0, 0, 0, pad)).unflatten(2, (n_chunks, c))  # [B, H, c, C, f]
    kc = F.pad(phi_k, (0, 0, 0, pad)).unflatten(2, (n_chunks, c))
    vc = F.pad(v, (0, 0, 0, pad)).unflatten(2, (n_chunks, c))
    # Exclusive prefix sums of the chunk states: chunk c sees chunks 0 … c-1 only (shifting
    # the inclusive sum, not subtracting, so no later key enters even by rounding).
    states = kc.transpose(-1, -2) @ vc  # [B, H, c, f, d_v]
    norms = kc.sum(-2)  # [B, H, c, f]
    before = F.pad(states.cumsum(2)[:, :, :-1], (0, 0, 0, 0, 1, 0)) + state0.unsqueeze(2)
    norm_before = F.pad(norms.cumsum(2)[:, :, :-1], (0, 0, 1, 0)) + norm0.unsqueeze(2)
    # Inside a chunk: the C × C kernel matrix, lower-triangular.
    tri = torch.ones(c, c, dtype=torch.bool, device=phi_q.device).tril()
    inner = qc @ kc.transpose(-1, -2)  # [B, H, c, C, C]
    inner = torch.where(tri, inner, torch.zeros_like(inner))
    num = qc @ before + inner @ vc
    den = (qc @ norm_before.unsqueeze(-1)).squeeze(-1) + inner.sum(-1)
    return _ratio(num, den).flatten(2, 3)[:, :, :m]


@dataclass(frozen=True)
class LinearAttentionState:
    """The recurrent state of causal linear attention (eq. 18-19) after some tokens:
    ``S = Σ_j φ(K_j) V_j^T [B, H, f, d_v]`` and ``z = Σ_j φ(K_j) [B, H, f]``.

    Attributes:
        s: ``S [B, H, f, d_v]``.
        z: ``z [B, H, f]``.

    Example::

        >>> from attnkit.efficient import linear_attention_step
        >>> q = k = torch.randn(2, 4, 8)
        >>> _, state = linear_attention_step(q, k, torch.randn(2, 4, 6))
        >>> state.s.shape, state.z.shape
        (torch.Size([2, 4, 8, 6]), torch.Size([2, 4, 8]))
    """

    s: Tensor
    z: Tensor


def kernel_attention_step(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, state: LinearAttentionState | None = None
) -> tuple[Tensor, LinearAttentionState]:
    """One decoding step of causal kernel attention (eq. 18-20): add the new key to the state,
    then read it with the new query. ``phi_q``, ``phi_k`` ``[B, H, f]``, ``v [B, H, d_v]`` →
    ``([B, H, d_v], new state)``."""
    update = phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # φ(K_i) V_i^T: [B, H, f, d_v]
    if state is None:
        state = LinearAttentionState(torch.zeros_like(update), torch.zeros_like(phi_k))
    s, z = state.s + update, state.z + phi_k
    num = (phi_q.unsqueeze(-2) @ s).squeeze(-2)
    den = (phi_q * z).sum(-1)
    return _ratio(num, den), LinearAttentionState(s, z)
