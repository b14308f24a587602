"""Reference formulas of the general attention model, written from the survey and nothing else.

Every function here is the equation it names, computed on plain tensors in whatever dtype it is
given (float64 for the golden reference; float32/float16/bfloat16 for the "naive same-dtype"
yardstick of docs/reliability.md). Nothing here imports or calls attnkit: parameters are passed as plain
tensors, read by the tests from attnkit's modules (``nn.Linear`` weights are ``[out, in]``, so
``query_proj.weight`` is the survey's ``W [d_k, d_q]``).

Rows are vectors (``q [..., M, d_q]``, ``k [..., N, d_k]``, ``v [..., N, d_v]``), scores are
``e [..., M, N]`` (``[..., M, N, d_v]`` multi-dimensional), masks are bool with True = may attend.
A query row with no admissible key gets zero weights and a zero context.

Equations: survey eq. (1)-(5) (general attention model), Table 2 and (23) (scores), (24)-(29)
(alignments), (30)-(32) (multi-dimensional attention). Sparsemax: Martins & Astudillo (2016),
Algorithm 1. 1.5-entmax: Peters, Niculae & Martins (2019), the exact sort-based algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

Align = Callable[[Tensor, Tensor], Tensor]  # (e [..., M, N], allowed [..., M, N]) -> a
ScoreFn = Callable[[Tensor, Tensor], Tensor]  # (q, k) -> e


# --------------------------------------------------------------------------------------------
# Scores: Table 2, eq. (23), (31)
# --------------------------------------------------------------------------------------------


def additive(
    q: Tensor,
    k: Tensor,
    W1: Tensor,
    W2: Tensor,
    b: Tensor | None,
    w: Tensor,
    act: Callable[[Tensor], Tensor] = torch.tanh,
) -> Tensor:
    """``e_l = w^T act(W1 q + W2 k_l + b)`` (Table 2, bias inside the activation as in eq. 31).

    ``W1 [d_w, d_q]``, ``W2 [d_w, d_k]``, ``b [d_w]``; ``w [d_w]`` gives a scalar per key,
    ``W_d [d_w, d_v]`` the score vector of eq. (31) (``e [..., M, N, d_v]``).
    """
    hq = torch.einsum("hi,...mi->...mh", W1, q)  # W1 q     [..., M, d_w]
    hk = torch.einsum("hj,...nj->...nh", W2, k)  # W2 k_l   [..., N, d_w]
    hidden = hq.unsqueeze(-2) + hk.unsqueeze(-3)  # [..., M, N, d_w]
    if b is not None:
        hidden = hidden + b
    if w.dim() == 1:
        return torch.einsum("h,...mnh->...mn", w, act(hidden))
    return torch.einsum("hd,...mnh->...mnd", w, act(hidden))


def dot(q: Tensor, k: Tensor) -> Tensor:
    """``e_l = q^T k_l`` (Table 2, multiplicative)."""
    return torch.einsum("...mi,...ni->...mn", q, k)


def scaled_dot(q: Tensor, k: Tensor) -> Tensor:
    """``e_l = q^T k_l / sqrt(d_k)`` (Table 2, scaled multiplicative)."""
    return dot(q, k) / math.sqrt(k.shape[-1])


def general(q: Tensor, k: Tensor, W: Tensor) -> Tensor:
    """``e_l = k_l^T W q`` with ``W [d_k, d_q]`` (Table 2, general)."""
    return torch.einsum("...nj,ji,...mi->...mn", k, W, q)


def biased_general(q: Tensor, k: Tensor, W: Tensor, b: Tensor) -> Tensor:
    """``e_l = k_l^T (W q + b)`` with ``b [d_k]`` (Table 2, biased general)."""
    wq = torch.einsum("ji,...mi->...mj", W, q) + b  # [..., M, d_k]
    return torch.einsum("...nj,...mj->...mn", k, wq)


def activated_general(
    q: Tensor, k: Tensor, W: Tensor, b: Tensor, act: Callable[[Tensor], Tensor] = torch.tanh
) -> Tensor:
    """``e_l = act(k_l^T W q + b)`` with scalar ``b`` (Table 2, activated general)."""
    return act(general(q, k, W) + b)


def cosine(q: Tensor, k: Tensor, temperature: Tensor | float = 1.0) -> Tensor:
    """``e_l = cos(q, k_l) / temperature = q^T k_l / (||q|| ||k_l|| temperature)`` (similarity)."""
    norm_q = q.pow(2).sum(-1).sqrt()  # [..., M]
    norm_k = k.pow(2).sum(-1).sqrt()  # [..., N]
    return dot(q, k) / (norm_q.unsqueeze(-1) * norm_k.unsqueeze(-2)) / temperature


def euclidean(q: Tensor, k: Tensor) -> Tensor:
    """``e_l = -||q - k_l||_2`` (similarity), from the difference vectors themselves."""
    diff = q.unsqueeze(-2) - k.unsqueeze(-3)  # [..., M, N, d]
    return -diff.pow(2).sum(-1).sqrt()


def location(q: Tensor, W_a: Tensor, b_a: Tensor, n: int) -> Tensor:
    """Luong's location score ``e = W_a q + b``: row ``l`` of it is the score of key ``l``, for the
    first ``n`` of the ``max_length`` rows of ``W_a [max_length, d_q]``."""
    e = torch.einsum("li,...mi->...ml", W_a, q) + b_a
    return e[..., :n]


# --------------------------------------------------------------------------------------------
# Alignments: eq. (25)-(29), sparsemax, 1.5-entmax, top-k
# --------------------------------------------------------------------------------------------


def softmax(e: Tensor, allowed: Tensor) -> Tensor:
    """Eq. (25) over the admissible keys: ``a_l = exp(e_l) / sum_{j admissible} exp(e_j)``.

    The exponent is shifted by the row's largest admissible score (an identity of eq. 25 that
    keeps ``exp`` finite). Rows with no admissible key give 0.
    """
    allowed = allowed.expand_as(e)
    masked = torch.where(allowed, e, torch.full_like(e, -math.inf))
    peak = masked.amax(-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    p = torch.where(allowed, torch.exp(e - peak), torch.zeros_like(e))
    total = p.sum(-1, keepdim=True)
    return torch.where(total > 0, p / torch.where(total > 0, total, 1.0), torch.zeros_like(p))


def _rows(e: Tensor, allowed: Tensor, row_fn: Callable[[Tensor], Tensor]) -> Tensor:
    """Apply ``row_fn`` to the admissible scores of every row; other entries get 0."""
    allowed = allowed.expand_as(e)
    flat_e, flat_ok = e.reshape(-1, e.shape[-1]), allowed.reshape(-1, e.shape[-1])
    out = torch.zeros_like(flat_e)
    for r in range(flat_e.shape[0]):
        idx = flat_ok[r].nonzero().squeeze(-1)
        if idx.numel():
            out[r, idx] = row_fn(flat_e[r, idx])
    return out.reshape(e.shape)


def _sparsemax_row(z: Tensor) -> Tensor:
    """Martins & Astudillo (2016), Algorithm 1: ``p = [z - tau]_+`` with the sort-based tau."""
    zs = torch.sort(z, descending=True).values
    ks = torch.arange(1, z.numel() + 1, dtype=z.dtype, device=z.device)
    cumulative = torch.cumsum(zs, 0)
    support = 1 + ks * zs > cumulative  # a prefix of the sorted order
    k_star = int(support.sum())
    tau = (cumulative[k_star - 1] - 1) / k_star
    return torch.clamp(z - tau, min=0)


def sparsemax(e: Tensor, allowed: Tensor) -> Tensor:
    """Sparsemax: the Euclidean projection of the admissible scores onto the simplex."""
    return _rows(e, allowed, _sparsemax_row)


def _entmax15_row(z: Tensor) -> Tensor:
    """1.5-entmax: ``p_i = [z_i / 2 - tau]_+^2`` with ``sum p = 1``.

    For a support of the ``k`` largest ``x = z / 2``, ``sum_{i<=k} (x_i - tau)^2 = 1`` gives
    ``tau_k = mean_k - sqrt((1 - ss_k) / k)`` (``ss_k``: sum of squared deviations from the
    mean); the support is the largest ``k`` with ``x_(k) > tau_k``.
    """
    x = z / 2
    xs = torch.sort(x, descending=True).values
    ks = torch.arange(1, x.numel() + 1, dtype=x.dtype, device=x.device)
    mean = torch.cumsum(xs, 0) / ks
    mean_sq = torch.cumsum(xs * xs, 0) / ks
    ss = ks * (mean_sq - mean * mean)
    tau = mean - torch.sqrt(torch.clamp((1 - ss) / ks, min=0))
    k_star = int((tau <= xs).sum())
    return torch.clamp(x - tau[k_star - 1], min=0) ** 2


def entmax15(e: Tensor, allowed: Tensor) -> Tensor:
    """1.5-entmax (Peters, Niculae & Martins 2019) of the admissible scores."""
    return _rows(e, allowed, _entmax15_row)


def topk(e: Tensor, allowed: Tensor, k: int) -> Tensor:
    """Softmax (eq. 25) over the ``k`` highest-scoring admissible keys (all of them if fewer)."""

    def row(z: Tensor) -> Tensor:
        best = torch.sort(z, descending=True).indices[:k]
        keep = torch.zeros_like(z, dtype=torch.bool)
        keep[best] = True
        return softmax(z, keep)

    return _rows(e, allowed, row)


def window_mask(centre: Tensor, n: int, D: float) -> Tensor:
    """``|l - p| <= D`` for keys ``l = 0..n-1`` and centres ``p [..., M, 1]``: eq. (27)'s window."""
    positions = torch.arange(n, dtype=torch.float64, device=centre.device)
    return (positions - centre.to(torch.float64)).abs() <= D


def local_monotonic(e: Tensor, allowed: Tensor, D: int) -> Tensor:
    """Eq. (27) with ``p = i``, the query's own index: softmax inside ``[i - D, i + D]``."""
    m = e.shape[-2]
    centre = torch.arange(m, dtype=torch.float64, device=e.device).unsqueeze(-1)  # [M, 1]
    return softmax(e, allowed & window_mask(centre, e.shape[-1], D))


def predicted_position(q: Tensor, W_p: Tensor, w_p: Tensor, S: Tensor | float) -> Tensor:
    """Eq. (28): ``p = S sigmoid(w_p^T tanh(W_p q))``, ``[..., M, 1]``."""
    hidden = torch.tanh(torch.einsum("hi,...mi->...mh", W_p, q))
    return S * torch.sigmoid(torch.einsum("h,...mh->...m", w_p, hidden)).unsqueeze(-1)


def sequence_length(allowed: Tensor) -> Tensor:
    """``S`` of eq. (28) per row: the last admissible key + 1 (0 for a row with none)."""
    n = allowed.shape[-1]
    positions = torch.arange(1, n + 1, device=allowed.device)
    return (allowed * positions).amax(-1, keepdim=True)


def local_predictive(
    e: Tensor, allowed: Tensor, q: Tensor, W_p: Tensor, w_p: Tensor, D: int
) -> Tensor:
    """Eq. (28)-(29): softmax inside ``|l - p| <= D`` times ``exp(-(l - p)^2 / (2 sigma^2))``,
    ``sigma = D / 2``, with ``p`` predicted from the query and ``S`` the row's length."""
    allowed = allowed.expand_as(e)
    S = sequence_length(allowed).to(e.dtype)
    p = predicted_position(q, W_p, w_p, S)  # [..., M, 1]
    positions = torch.arange(e.shape[-1], dtype=e.dtype, device=e.device)
    sigma = D / 2
    gaussian = torch.exp(-((positions - p) ** 2) / (2 * sigma**2))
    return softmax(e, allowed & window_mask(p, e.shape[-1], D)) * gaussian


def hard_eval(e: Tensor, allowed: Tensor) -> Tensor:
    """Hard alignment at inference (eq. 26 with ``m = argmax``): one-hot on the best admissible
    key."""

    def row(z: Tensor) -> Tensor:
        one_hot = torch.zeros_like(z)
        one_hot[z.argmax()] = 1
        return one_hot

    return _rows(e, allowed, row)


def reinforced_eval(e: Tensor, allowed: Tensor, policy_logits: Tensor) -> Tensor:
    """Reinforced alignment at inference: soft alignment over the keys the policy keeps
    (``sigmoid(logit) > 0.5``); all admissible keys when it keeps none of them."""
    allowed = allowed.expand_as(e)
    kept = allowed & (policy_logits > 0)
    kept = torch.where(kept.any(-1, keepdim=True), kept, allowed)
    return softmax(e, kept)


# --------------------------------------------------------------------------------------------
# The general attention module: eq. (1)-(5), (24), (30)-(32)
# --------------------------------------------------------------------------------------------


def keys_values(F: Tensor, W_K: Tensor | None, W_V: Tensor | None) -> tuple[Tensor, Tensor]:
    """Eq. (1): ``K = W_K F``, ``V = W_V F`` (rows: ``F W^T``); ``None`` is the identity."""
    K = F if W_K is None else torch.einsum("kf,...nf->...nk", W_K, F)
    V = F if W_V is None else torch.einsum("vf,...nf->...nv", W_V, F)
    return K, V


def context(a: Tensor, v: Tensor) -> Tensor:
    """Eq. (4)/(24): ``c = sum_l a_l v_l``; with weight vectors ``a_l [d_v]``, eq. (30)."""
    if a.dim() == v.dim() + 1:
        return torch.einsum("...mnd,...nd->...md", a, v)  # eq. (30): sum_l a_l ⊙ v_l
    return torch.einsum("...mn,...nd->...md", a, v)


def output_model(c: Tensor, W_c: Tensor, b_c: Tensor) -> Tensor:
    """Eq. (5): ``y = softmax(W_c c + b_c)``."""
    logits = torch.einsum("yv,...v->...y", W_c, c) + b_c
    return softmax(logits, torch.ones_like(logits, dtype=torch.bool))


def apply_score_mod(e: Tensor, score_mod: Callable[..., Tensor], multi: bool = False) -> Tensor:
    """``score_mod(e, b, h, q_idx, kv_idx)`` on every entry of ``e [B, H, M, N(, d_v)]``."""
    b, h, m, n = e.shape[:4]
    tail = (1,) if multi else ()
    grids = (
        torch.arange(b).view(b, 1, 1, 1, *tail),
        torch.arange(h).view(1, h, 1, 1, *tail),
        torch.arange(m).view(1, 1, m, 1, *tail),
        torch.arange(n).view(1, 1, 1, n, *tail),
    )
    return score_mod(e, *grids)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score: ScoreFn,
    align: Align,
    allowed: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    score_mod: Callable[..., Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """The general attention module, eq. (2)-(4), or eq. (30)-(32) for a vector-valued score.

    Args:
        q, k, v: ``[B, H, M, d_q]``, ``[B, H, N, d_k]``, ``[B, H, N, d_v]``.
        score: ``(q, k) -> e``; ``e [B, H, M, N]`` or ``[B, H, M, N, d_v]`` (eq. 31).
        align: ``(e, allowed) -> a`` on ``[B, H, M, N]``; for a vector score it is applied to
            each feature's column of scores separately (eq. 32).
        allowed: bool, broadcastable to ``[B, H, M, N]``; ``None``: every key.
        bias: float added to the scores (an additive mask), broadcastable to ``[B, H, M, N]``.
        score_mod: ``score_mod(e, b, h, q_idx, kv_idx)`` applied after ``bias``.

    Returns:
        ``(context [B, H, M, d_v], weights [B, H, M, N] or [B, H, M, N, d_v])``.
    """
    e = score(q, k)
    multi = e.dim() == q.dim() + 1
    if bias is not None:
        e = e + (bias.unsqueeze(-1) if multi else bias)
    if score_mod is not None:
        e = apply_score_mod(e, score_mod, multi)
    shape = (*q.shape[:-2], q.shape[-2], k.shape[-2])
    if allowed is None:
        allowed = torch.ones(shape, dtype=torch.bool, device=q.device)
    allowed = allowed.expand(shape)
    if multi:
        a = torch.stack([align(e[..., f], allowed) for f in range(e.shape[-1])], dim=-1)
    else:
        a = align(e, allowed)
    return context(a, v), a


# --------------------------------------------------------------------------------------------
# The formulas above with their parameters read from attnkit's modules (attribute reads only)
# --------------------------------------------------------------------------------------------


def _param(t: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    return None if t is None else t.detach().to(dtype)


def score_formula(
    name: str,
    module: object,
    dtype: torch.dtype,
    scale: float | None = None,
    act: Callable[[Tensor], Tensor] = torch.tanh,
) -> ScoreFn:
    """The Table 2 formula of the registered score ``name`` with ``module``'s parameters, in
    ``dtype``. ``scale`` replaces ``1/sqrt(d_k)`` of ``scaled_dot`` and multiplies every other
    score. Raises ``KeyError`` for a score this file has no formula for."""

    def p(t: Tensor | None) -> Tensor | None:
        return _param(t, dtype)

    m = module
    formulas: dict[str, Callable[[], ScoreFn]] = {
        "additive": lambda: (
            lambda q, k: additive(
                q,
                k,
                p(m.query_proj.weight),
                p(m.key_proj.weight),
                p(m.key_proj.bias),
                p(m.out.weight)[0] if m.value_features is None else p(m.out.weight).T,
                act,
            )
        ),
        "dot": lambda: dot,
        "scaled_dot": lambda: scaled_dot if scale is None else (lambda q, k: dot(q, k) * scale),
        "general": lambda: lambda q, k: general(q, k, p(m.query_proj.weight)),
        "biased_general": lambda: (
            lambda q, k: biased_general(q, k, p(m.query_proj.weight), p(m.query_proj.bias))
        ),
        "activated_general": lambda: (
            lambda q, k: activated_general(q, k, p(m.query_proj.weight), p(m.bias), act)
        ),
        "cosine": lambda: lambda q, k: cosine(q, k, p(m.log_temperature).exp()),
        "euclidean": lambda: euclidean,
        "location": lambda: lambda q, k: location(q, p(m.proj.weight), p(m.proj.bias), k.shape[-2]),
    }
    fn = formulas[name]()
    if scale is None or name == "scaled_dot":
        return fn
    return lambda q, k: fn(q, k) * scale


def align_formula(name: str, module: object, q: Tensor, k: Tensor, dtype: torch.dtype) -> Align:
    """The formula of the registered alignment ``name`` (deterministic ones; stochastic ones in
    eval mode) with ``module``'s parameters in ``dtype``, for queries ``q [B, H, M, d_q]`` and
    keys ``k [B, H, N, d_k]`` (used by local-predictive and reinforced alignment). Raises
    ``KeyError`` for an alignment this file has no formula for."""
    m = module
    q, k = q.to(dtype), k.to(dtype)
    formulas: dict[str, Callable[[], Align]] = {
        "softmax": lambda: softmax,
        "sparsemax": lambda: sparsemax,
        "entmax15": lambda: entmax15,
        "topk": lambda: lambda e, ok: topk(e, ok, m.k),
        "hard": lambda: hard_eval,
        "local_monotonic": lambda: lambda e, ok: local_monotonic(e, ok, m.window),
        "local_predictive": lambda: (
            lambda e, ok: local_predictive(
                e, ok, q, _param(m.W_p.weight, dtype), _param(m.w_p.weight, dtype)[0], m.window
            )
        ),
        "reinforced": lambda: (
            lambda e, ok: reinforced_eval(e, ok, score_formula("additive", m.policy, dtype)(q, k))
        ),
    }
    return formulas[name]()
