"""ALTI: Aggregation of Layer-wise Token-to-token Interactions (Ferrando et al. 2022, "Measuring
the Mixing of Contextual Information in the Transformer", EMNLP, §3-4).

The attention block (multi-head attention, residual connection, layer norm) writes each output
as a sum of one vector per input token. Rows are vectors, ``f^h(x) = (x W_V^h + b_V^h) W_O^h``
as in :mod:`attnkit.interpret.value_norm`, and ``LN(s) = γ ⊙ (s - mean(s)) / σ(s) + β`` with
``σ(s) = sqrt(Var(s) + ε)``, linear in ``s`` once ``σ`` is fixed to the actual sum's:

    x̃_i = LN(Σ_j Σ_h α^h_ij f^h(x_j) + x_i + b_O) = Σ_j T_i(x_j) + L_i(b_O) + β
    T_i(x_j) = L_i(Σ_h α^h_ij f^h(x_j) + [i = j] x_i),   L_i(u) = γ ⊙ (u - mean(u)) / σ_i

(a pre-norm block, ``x + W_O c + b_O``, has no ``L_i``: ``T_i(x_j)`` is the sum inside it and
``x̃_i = Σ_j T_i(x_j) + b_O``). Token ``j``'s contribution to ``x̃_i`` is its proximity to it in
the Manhattan distance, normalised over ``j`` (the paper's eq. 9-10):

    c_ij = max(0, ‖x̃_i‖₁ - ‖x̃_i - T_i(x_j)‖₁) / Σ_k max(0, ‖x̃_i‖₁ - ‖x̃_i - T_i(x_k)‖₁)

Each row of ``C`` sums to 1 (the residual already lives in ``T_i(x_i)``), so the layers combine
by a plain product (rollout without an added identity): ``R^1 = C^1``, ``R^l = C^l R^{l-1}``.

The hook gives ``α`` and ``v^h_j`` of every call; the output projection, the residual ``x`` and
the layer norm come from the module's block (:mod:`attnkit.interpret.attention_block`), captured
by torch forward hooks in the same run. The decomposition is checked against the block's actual
output (``Σ_j T_i(x_j) + L_i(b_O) + β`` equals it up to rounding); a block of another form, or a
model in training mode, is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.hooks import ModuleSelection
from attnkit.interpret.attention_block import (
    ResidualBlock,
    head_projections,
    output_projection,
    residual_block,
)
from attnkit.interpret.observed_calls import WeightsAndValues


class ALTI(dict[str, Tensor]):
    """What :func:`alti` returns: ``{module name: C [B, M, N]}``, each layer's contributions in
    the order of the modules' first calls, and ``rollout``.

    Args:
        contributions: ``{module name: [B, M, N]}``, rows summing to 1.

    Attributes:
        rollout: ``{module name: [B, M, N]}``: ``R^l = C^l ⋯ C^1``, how much each output of
            that layer draws on each input token of the first; the last is the whole stack's.

    Example::

        >>> result = ALTI({"layer": torch.eye(3).expand(1, 3, 3)})
        >>> torch.equal(result.rollout["layer"], result["layer"])
        True
    """

    def __init__(self, contributions: Mapping[str, Tensor]) -> None:
        super().__init__(contributions)
        self.rollout: dict[str, Tensor] = {}
        rolled: Tensor | None = None
        for name, layer in contributions.items():
            if rolled is not None and rolled.shape != layer.shape:
                raise ValueError(
                    f"rollout needs square maps of one shape, got {tuple(rolled.shape)} before "
                    f"{name!r} {tuple(layer.shape)}"
                )
            rolled = layer if rolled is None else layer @ rolled
            self.rollout[name] = rolled


def alti(
    model: nn.Module,
    *inputs: Any,
    modules: ModuleSelection = None,
    output_projections: Mapping[str, nn.Module] | None = None,
    **kwargs: Any,
) -> ALTI:
    """ALTI token-to-token contributions of every self-attention block, and their rollout
    (Ferrando et al. 2022; module docstring), from one run of ``model(*inputs, **kwargs)``.

    Args:
        model: an attnkit (or torch) Transformer encoder/decoder stack or layer, or a BERT-style
            Hugging Face model loaded with ``attn_implementation="attnkit"``; in eval mode.
        inputs: the model's positional inputs.
        modules: which attention modules (names / ``fnmatch`` patterns / predicate); default
            all (each must be a self-attention block of a known form).
        output_projections: ``{attention module name: module}`` where the output projection is
            not found by name.
        kwargs: the model's keyword inputs (``attention_mask=...``).

    Returns:
        an :class:`ALTI`: ``result[name]`` the contributions ``C [B, M, M]`` (float64, rows sum
        to 1; a padding key contributes 0), ``result.rollout[name]`` their rollout up to that
        layer.

    Raises:
        ValueError: the model is in training mode; an attention module is not a self-attention
            block of a known form; or the decomposition does not reproduce the block's output.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
        >>> result = alti(layer, torch.randn(1, 5, 8))
        >>> result["self_attn"].shape  # [B, M, M]: what each output token draws on
        torch.Size([1, 5, 5])
        >>> bool(torch.allclose(result["self_attn"].sum(-1), torch.ones(1, 5, dtype=torch.float64)))
        True
    """
    if model.training:
        raise ValueError(
            "alti decomposes the model's deterministic function: put it in eval mode first "
            "(model.eval()), so that dropout does not change the block's output"
        )
    blocks = {}
    for name, _ in model.named_modules():
        block = residual_block(model, name)
        if block is not None:
            blocks[name] = block
    with torch.no_grad(), ExitStack() as stack:
        for block in blocks.values():
            stack.enter_context(block.capture())
        seen = stack.enter_context(WeightsAndValues(model, modules, "alti"))
        model(*inputs, **kwargs)
    contributions = {}
    for name, (weights, values) in seen.calls.items():
        if name not in blocks:
            raise ValueError(
                f"alti needs the residual block around attention module {name!r} "
                f"({type(model.get_submodule(name)).__name__}): the self_attn of an attnkit or "
                "torch Transformer layer (beside norm1), or a BERT-style attention.self (beside "
                "attention.output.dense and LayerNorm); select others with modules="
            )
        weight, bias = output_projection(model, name, output_projections)
        with torch.no_grad():
            contributions[name] = block_contributions(
                name, weights, values, weight, bias, blocks[name]
            )
    return ALTI(contributions)


def block_contributions(
    name: str,
    weights: Tensor,
    values: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    block: ResidualBlock,
) -> Tensor:
    """ALTI's ``C [B, M, M]`` of one block, float64 (module docstring): ``weights [B, H, M, M]``,
    ``values [B, H, M, d_v]``, ``W_O [E, H·d_v]`` and ``b_O``, the block's captured tensors."""
    batch, heads, queries, keys = weights.shape
    if queries != keys:
        raise ValueError(
            f"alti measures self-attention (queries = keys); {name!r} has {queries} queries and "
            f"{keys} keys"
        )
    residual, observed = block.tensors(name)  # [B, M, E] each
    # the model's own rounding bounds how closely the decomposition can match its output
    tolerance = (1e-8 if observed.dtype == torch.float64 else 1e-3) * max(
        1.0, float(observed.abs().max())
    )
    residual, observed = residual.double(), observed.double()
    if residual.shape[:2] != (batch, queries):
        raise ValueError(
            f"the residual of {name!r} is {tuple(residual.shape)}, expected [B, M, E] with "
            f"B = {batch}, M = {queries}"
        )
    per_head = head_projections(weight.double(), heads, name)  # [H, d_v, E]
    b_out = torch.zeros(weight.shape[0], dtype=torch.float64, device=weight.device)
    if bias is not None:
        b_out = bias.double()
    norm = block.norm
    eye = torch.eye(queries, dtype=torch.float64, device=weights.device)
    rows = []
    for b in range(batch):  # one example at a time: T is [M, M, E]
        transformed = torch.einsum("hnd,hde->hne", values[b].double(), per_head)  # f^h(x_j)
        parts = torch.einsum("hmn,hne->mne", weights[b].double(), transformed)
        parts = parts + eye[:, :, None] * residual[b][:, None, :]  # [i = j] x_i
        if norm is None:
            vectors, constant = parts, b_out.expand(queries, -1)
        else:
            total = parts.sum(1) + b_out  # the layer norm's input s_i
            sigma = (total.var(-1, unbiased=False) + norm.eps).sqrt()  # [M]
            gamma = torch.ones_like(b_out) if norm.weight is None else norm.weight.double()
            beta = torch.zeros_like(b_out) if norm.bias is None else norm.bias.double()

            def linear(u: Tensor, sigma: Tensor = sigma, gamma: Tensor = gamma) -> Tensor:
                return (u - u.mean(-1, keepdim=True)) * gamma / sigma  # L_i, σ_i broadcast

            vectors = linear(parts, sigma[:, None, None])
            constant = linear(b_out.expand(queries, -1), sigma[:, None]) + beta
        output = vectors.sum(1) + constant  # x̃_i
        _check(name, output, observed[b], tolerance)
        distance = (output[:, None, :] - vectors).abs().sum(-1)  # ‖x̃_i - T_i(x_j)‖₁ [M, M]
        proximity = (output.abs().sum(-1, keepdim=True) - distance).clamp_min(0.0)
        rows.append(proximity / proximity.sum(-1, keepdim=True).clamp_min(1e-300))
    return torch.stack(rows)


def _check(name: str, reconstructed: Tensor, observed: Tensor, tolerance: float) -> None:
    """The decomposition must give the block's own output (else the block is not the form read,
    or dropout ran): up to the rounding of the model's dtype."""
    error = float((reconstructed - observed).abs().max())
    if error > tolerance:
        raise ValueError(
            f"alti's decomposition of {name!r} misses the block's output by {error:.3g} (more "
            "than rounding): its block is not a residual connection and layer norm of the form "
            "read (see attnkit.interpret.attention_block)"
        )
