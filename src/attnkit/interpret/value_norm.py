"""Norm-based attention maps (Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing
Transformers with Vector Norms", EMNLP, §3, eq. 5-7).

A multi-head layer's output for query ``i`` is a sum of one vector per head and key (rows are
vectors; the output bias ``b_O`` is added once, outside the sum):

    y_i = Σ_h Σ_j α^h_ij f^h(x_j) + b_O,      f^h(x) = (x W_V^h + b_V^h) W_O^h

where ``W_O^h [d_v, E]`` is head ``h``'s slice of the output projection (the rows of ``W_Oᵀ``
that multiply the head's context). The weight ``α^h_ij`` is one factor of what token ``j`` adds
to ``y_i``; the other is the length of ``f^h(x_j)``, which varies a lot between tokens (frequent
tokens and ``[SEP]`` get large weights and short vectors). The norm-based map is the length of
the whole summand, ``‖α^h_ij f^h(x_j)‖ = α^h_ij ‖f^h(x_j)‖``.

The attention hook gives ``α`` and ``v^h_j = x_j W_V^h + b_V^h`` of every call; ``W_O`` comes
from the module (see :mod:`attnkit.interpret.attention_block` for where it is found).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.hooks import ModuleSelection
from attnkit.interpret.attention_block import head_projections, output_projection
from attnkit.interpret.observed_calls import WeightsAndValues

HEADS = ("each", "sum")


def value_norm(
    model: nn.Module,
    *inputs: Any,
    heads: str = "each",
    modules: ModuleSelection = None,
    output_projections: Mapping[str, nn.Module] | None = None,
    **kwargs: Any,
) -> dict[str, Tensor]:
    """The norm-based map ``‖α^h_ij f^h(x_j)‖`` of every attention module (Kobayashi et al.
    2020; module docstring), from one run of ``model(*inputs, **kwargs)``.

    Args:
        model: an attnkit model (``ak.MultiHeadAttention``, attnkit or torch Transformer
            layers, any module calling ``ak.attention`` with an output projection) or a Hugging
            Face model loaded with ``attn_implementation="attnkit"``; in eval mode.
        inputs: the model's positional inputs.
        heads: ``"each"``: one map per head, ``‖α^h_ij f^h(x_j)‖``; ``"sum"``: the layer's map
            over all heads, ``‖Σ_h α^h_ij f^h(x_j)‖`` (Kobayashi et al.'s eq. 7).
        modules: which attention modules (names / ``fnmatch`` patterns / predicate); default
            all.
        output_projections: ``{attention module name: module}`` for models whose output
            projection is not found by name (``nn.Linear(H·d_v, E)``).
        kwargs: the model's keyword inputs (``attention_mask=...``).

    Returns:
        ``{module name: [B, H, M, N]}`` (``[B, 1, M, N]`` with ``heads="sum"``), in the order
        of the modules' first calls; a module called several times gives its last call's map.

    Raises:
        ValueError: an attention module's output projection is not found (one line naming
            the module and where it was looked for).

    Example::

        >>> mha = ak.MultiHeadAttention(8, 2, batch_first=True).eval()
        >>> x = torch.randn(1, 4, 8)
        >>> maps = value_norm(mha, x, x, x)
        >>> maps[""].shape  # [B, H, M, N]; the model itself is named ""
        torch.Size([1, 2, 4, 4])
    """
    if heads not in HEADS:
        raise ValueError(f"heads must be one of {HEADS}, got {heads!r}")
    with torch.no_grad(), WeightsAndValues(model, modules, "value_norm") as seen:
        model(*inputs, **kwargs)
    maps = {}
    for name, (weights, values) in seen.calls.items():
        weight, _ = output_projection(model, name, output_projections)
        per_head = head_projections(weight, values.shape[1], name)  # [H, d_v, E]
        if per_head.shape[1] != values.shape[-1]:
            raise ValueError(
                f"the output projection of {name!r} takes {weight.shape[1]} features, but the "
                f"call's {values.shape[1]} heads hold {values.shape[-1]} values each"
            )
        dtype = torch.promote_types(values.dtype, weight.dtype)
        transformed = torch.einsum("bhnd,hde->bhne", values.to(dtype), per_head.to(dtype))
        if heads == "each":
            # ‖α f‖ = |α| ‖f‖: one norm per key, scaled by each query's weight
            maps[name] = weights.to(dtype).abs() * transformed.norm(dim=-1).unsqueeze(-2)
        else:
            summed = torch.einsum("bhmn,bhne->bmne", weights.to(dtype), transformed)
            maps[name] = summed.norm(dim=-1).unsqueeze(1)
    return maps
