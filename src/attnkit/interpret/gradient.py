"""Gradient-weighted attention: attention times the gradient of a chosen output.

Attention says where a layer looks, not whether that helps a given prediction. Weighting each
weight by the gradient of one output (a class score) with respect to it,

    G_l = A_l ⊙ ∂y_c / ∂A_l,

makes the map class-discriminative: for class ``c`` it is positive where attending raised
``y_c`` and negative where it lowered it (the signed, class-specific maps of CDAM, Brocki & Chung
2023; Chefer et al. 2021 keep the positive part, ``positive=True``, and average the heads).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnkit.core.hooks import ModuleSelection
from attnkit.interpret.record import record

Target = int | Callable[[Tensor], Tensor]


def select_output(output: Tensor, target: Target) -> Tensor:
    """The scalar ``y`` whose gradient weights the attention: ``output[..., target]`` summed over
    the batch for a class index, or ``target(output)`` (which must be a scalar)."""
    if callable(target):
        y = target(output)
    elif isinstance(target, int):
        if not -output.shape[-1] <= target < output.shape[-1]:
            raise ValueError(
                f"target class {target} is out of range for outputs {tuple(output.shape)}"
            )
        y = output[..., target].sum()
    else:
        raise TypeError(f"target must be a class index or a callable, got {type(target).__name__}")
    if not isinstance(y, Tensor) or y.numel() != 1:
        raise ValueError(f"the target output must be a scalar, got {getattr(y, 'shape', y)}")
    return y.reshape(())


def gradient_weighted_attention(
    model: nn.Module,
    forward: Callable[[], Tensor],
    target: Target,
    *,
    modules: ModuleSelection = None,
    positive: bool = False,
) -> dict[str, Tensor]:
    """``A ⊙ ∂y/∂A`` for the attention of every (selected) module of ``model``.

    Args:
        model: the model whose attention is weighted (its parameters' ``.grad`` are untouched).
        forward: runs the model and returns its output, e.g. ``lambda: model(x)``.
        target: class index ``c`` (``y = Σ_batch output[..., c]``) or ``fn(output) -> scalar``.
        modules: as in :func:`attnkit.interpret.record`.
        positive: keep only the positive part (Chefer et al. 2021).

    Returns:
        ``{module name: [B, H, M, N]}`` for the module's last call.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
        >>> x = torch.randn(2, 5, 16)
        >>> maps = gradient_weighted_attention(layer, lambda: layer(x), lambda out: out.sum())
        >>> maps["self_attn"].shape
        torch.Size([2, 2, 5, 5])
    """
    with torch.enable_grad(), record(model, modules=modules, grad=True) as rec:
        output = forward()
    if not isinstance(output, Tensor):
        raise TypeError(f"forward() must return a Tensor, got {type(output).__name__}")
    y = select_output(output, target)
    names = [n for n in rec.keys() if rec[n].requires_grad]
    if not names:
        raise ValueError(
            "no recorded attention depends on the inputs' graph: is the forward run under "
            "torch.no_grad(), or does the model call no attention?"
        )
    grads = torch.autograd.grad(y, [rec[n] for n in names], allow_unused=True)
    maps = {}
    for name, grad in zip(names, grads, strict=True):
        weights = rec[name].detach()
        weighted = weights * grad if grad is not None else torch.zeros_like(weights)
        maps[name] = weighted.clamp_min(0) if positive else weighted
    return maps
