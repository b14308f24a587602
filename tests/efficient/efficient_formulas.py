"""Reference formulas for the efficient attention tests, from the papers and nothing else.

Nothing here imports attnkit. Rows are vectors (``q [..., M, d]``, ``k [..., N, d]``,
``v [..., N, d_v]``); masks are bool with True = may attend; a query with no admissible key gets a
zero context. The tests run these in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def softmax_attention(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, scale: float
) -> Tensor:
    """``softmax(scale·q k^T) v`` over the admissible keys (Vaswani et al. 2017, eq. 1)."""
    e = (q @ k.transpose(-1, -2)) * scale
    if allowed is not None:
        e = e.masked_fill(~allowed, float("-inf"))
    a = torch.softmax(e, -1)
    a = torch.nan_to_num(a, nan=0.0)  # rows with no admissible key: softmax of all -inf
    return a @ v


def causal(m: int, n: int) -> Tensor:
    """Bottom-right causal: query ``i`` sees key ``j`` when ``j <= i + n - m``."""
    i = torch.arange(m)[:, None] + n - m
    return torch.arange(n)[None, :] <= i


def window(m: int, n: int, w: int, is_causal: bool) -> Tensor:
    """Causal: ``p - w < j <= p``; else ``p - w < j < p + w`` (``p = i + n - m``)."""
    p = torch.arange(m)[:, None] + n - m
    j = torch.arange(n)[None, :]
    if is_causal:
        return (j > p - w) & (j <= p)
    return (j > p - w) & (j < p + w)


def linear_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None) -> Tensor:
    """Katharopoulos et al. 2020 eq. 4 with ``sim(q, k) = φ(q)·φ(k)``, ``φ = elu + 1``."""
    a = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-1, -2)
    if allowed is not None:
        a = torch.where(allowed, a, torch.zeros_like(a))
    den = a.sum(-1, keepdim=True)
    return torch.where(den > 0, (a @ v) / torch.where(den > 0, den, 1), 0)


def favor_attention(
    q: Tensor, k: Tensor, v: Tensor, omega: Tensor, allowed: Tensor | None, scale: float
) -> Tensor:
    """FAVOR+ (Choromanski et al. 2021, Lemma 1 and eq. 7), written out: with ``x = scale^(1/2) q``
    and ``y = scale^(1/2) k``, ``φ(x) = exp(ω x - |x|²/2) / sqrt(m)`` and
    ``out_i = Σ_j φ(x_i)·φ(y_j) v_j / Σ_j φ(x_i)·φ(y_j)`` over the admissible keys ``j``."""

    def phi(x: Tensor) -> Tensor:
        return torch.exp(x @ omega.T - (x * x).sum(-1, keepdim=True) / 2) / omega.shape[0] ** 0.5

    a = phi(q * scale**0.5) @ phi(k * scale**0.5).transpose(-1, -2)  # [..., M, N] kernel
    if allowed is not None:
        a = torch.where(allowed, a, torch.zeros_like(a))
    den = a.sum(-1, keepdim=True)
    return torch.where(den > 0, (a @ v) / torch.where(den > 0, den, 1), 0)


def value_conv_residual(v: Tensor, weight: Tensor, keep: Tensor | None) -> Tensor:
    """The Nyströmformer value residual (the ``nystrom-attention`` package's ``res_conv``), one
    tap at a time: ``r_i = Σ_t w[h, t] · v_{i + t - K//2}`` over positions inside the sequence,
    with masked-out values read as zeros. ``v [B, H, N, d_v]``, ``weight [H, 1, K, 1]``,
    ``keep`` bool ``[B, N]`` or None."""
    if keep is not None:
        v = v * keep[:, None, :, None].to(v.dtype)
    n, size = v.shape[-2], weight.shape[-2]
    out = torch.zeros_like(v)
    for t in range(size):
        shift = t - size // 2  # r_i reads v_{i + shift}
        w = weight[:, 0, t, 0].to(v.dtype)[None, :, None, None]
        lo, hi = max(0, -shift), min(n, n - shift)
        out[:, :, lo:hi] += w * v[:, :, lo + shift : hi + shift]
    return out


def look_around(m: int, n: int, w: int, back: int, forward: int, exact: bool, is_causal: bool):
    """local-attention's blocks (``local-attention`` package, ``look_backward``/``look_forward``):
    with ``p = i + n - m``, key ``j`` when ``floor(j/w) - floor(p/w)`` is in ``-back … forward``;
    ``exact``: ``p - w·back <= j <= p + w·forward`` instead; causal: also ``j <= p``."""
    p = torch.arange(m)[:, None] + n - m
    j = torch.arange(n)[None, :]
    if exact:
        allowed = (j >= p - w * back) & (j <= p + w * forward)
    else:
        apart = j.div(w, rounding_mode="floor") - p.div(w, rounding_mode="floor")
        allowed = (apart >= -back) & (apart <= forward)
    return allowed & (j <= p) if is_causal else allowed


def generalized_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    omega: Tensor,
    kernel_fn,
    epsilon: float,
    allowed: Tensor | None,
    scale: float,
) -> Tensor:
    """Performer's generalized attention (Choromanski et al. 2021 §2.2), materialised:
    ``φ(x) = f(ω x) + ε`` of ``x = scale^(1/2) q`` (and of the keys), ``A = φ(Q) φ(K)^T`` over the
    admissible keys, ``out = A V / A 1``."""

    def phi(x: Tensor) -> Tensor:
        return kernel_fn(x @ omega.T) + epsilon

    a = phi(q * scale**0.5) @ phi(k * scale**0.5).transpose(-1, -2)
    if allowed is not None:
        a = torch.where(allowed, a, torch.zeros_like(a))
    den = a.sum(-1, keepdim=True)
    return torch.where(den > 0, (a @ v) / torch.where(den > 0, den, 1), 0)
