"""Float64 references for the sequence-to-sequence model tests, written from the papers'
equations with plain tensor operations (no attnkit code)."""

from __future__ import annotations

import torch
from torch import Tensor


def gru_cell(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor):
    """The GRU of Cho et al. (2014) in torch's gate layout (r, z, n):
    ``r = σ(W_ir x + b_ir + W_hr h + b_hr)``, ``z = σ(W_iz x + b_iz + W_hz h + b_hz)``,
    ``n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``, ``h' = (1 - z) ⊙ n + z ⊙ h``."""
    gi = x @ w_ih.T + b_ih
    gh = h @ w_hh.T + b_hh
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def gru_layer(xs: Tensor, rnn: torch.nn.GRU, layer: int, reverse: bool = False) -> Tensor:
    """One direction of one layer of ``rnn`` over ``xs [L, d]`` by :func:`gru_cell`: ``[L, h]``."""
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    params = [
        getattr(rnn, f"{n}{suffix}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    h = xs.new_zeros(rnn.hidden_size)
    out = [None] * xs.shape[0]
    order = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for i in order:
        h = gru_cell(xs[i], h, *params)
        out[i] = h
    return torch.stack(out)


def softmax(e: Tensor, allowed: Tensor) -> Tensor:
    """``exp(e_j) / sum_{allowed} exp(e_k)`` on allowed entries, 0 elsewhere (eq. 25)."""
    e = torch.where(allowed, e, torch.full_like(e, -torch.inf))
    return torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
