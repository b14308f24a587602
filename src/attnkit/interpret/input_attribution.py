"""Gradient attributions of a prediction to the input tokens, computed by captum (an optional
dependency: ``pip install 'attnkit[captum]'``).

* input×gradient (Shrikumar et al. 2016; Kindermans et al. 2016): ``e_n ⊙ ∂y_c/∂e_n``;
* Integrated Gradients (Sundararajan et al. 2017, eq. 1):
  ``(e_n - e'_n) ⊙ ∫_0^1 ∂y_c/∂e_n (e' + t (e - e')) dt``, whose sum over all features is
  ``y_c(e) - y_c(e')`` (completeness), ``e'`` a baseline input.

Here ``e`` is the output of the embedding layer for token-id inputs (captum's
``LayerGradientXActivation`` and ``LayerIntegratedGradients`` on that layer), or the model's
first input itself when it is a float tensor (``InputXGradient``, ``IntegratedGradients``), and
``y_c`` the class score (logit) of the target class. The model runs as it is (no attention hook
is needed: these maps read gradients, not the attention), so a Hugging Face model works with
any ``attn_implementation``. Attributions are summed over the feature axis into one score per
token, as is usual for text (``reduce=None`` keeps the features).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.evaluate.classifier_outputs import ScoresFrom, class_scores

REDUCTIONS = ("sum", "norm", None)


def input_x_gradient(
    model: nn.Module,
    *inputs: Any,
    target: int | Tensor | None = None,
    layer: str | None = None,
    output: ScoresFrom | None = None,
    reduce: str | None = "sum",
    **kwargs: Any,
) -> dict[str, Tensor]:
    """Input×gradient ``e_n ⊙ ∂y_c/∂e_n`` of every token (module docstring), by captum.

    Args:
        model: a classifier in eval mode.
        inputs: the model's positional inputs; the first is attributed: token ids ``[B, N]``
            (attributed at the output of ``layer``) or floats ``[B, N, D]`` (itself).
        target: the class ``c`` (an int or ``[B]``); default the class the model predicts.
        layer: the name of the embedding module for token-id inputs; default the model's
            ``get_input_embeddings()`` (Hugging Face), else its first ``nn.Embedding``.
        output: ``fn(model_output) -> [B, C]`` logits (default: the output, its ``.logits``,
            or its first element).
        reduce: ``"sum"`` over the features (default), ``"norm"`` (their L2 norm), or ``None``.
        kwargs: the model's keyword inputs (``attention_mask=...``).

    Returns:
        ``{name: [B, N]}`` (``[B, N, D]`` with ``reduce=None``), keyed by the embedding
        module's name, or ``""`` (the model's own input) for float inputs.

    Raises:
        ImportError: captum is not installed.

    Example::

        >>> model = torch.nn.Sequential(
        ...     torch.nn.Embedding(10, 4), torch.nn.Flatten(), torch.nn.Linear(12, 2)).eval()
        >>> input_x_gradient(model, torch.tensor([[1, 2, 3]]))["0"].shape  # "0": the embedding
        torch.Size([1, 3])
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    attr = _captum()
    name, module, forward, first, extra = _prepare(model, inputs, layer, output, kwargs)
    classes = _target(forward, first, extra, target)
    if module is None:
        result = attr.InputXGradient(forward).attribute(
            first, target=classes, additional_forward_args=extra
        )
    else:
        result = attr.LayerGradientXActivation(forward, module).attribute(
            first, target=classes, additional_forward_args=extra
        )
    return {name: _reduce(result, reduce)}


def integrated_gradients(
    model: nn.Module,
    *inputs: Any,
    target: int | Tensor | None = None,
    layer: str | None = None,
    baseline: int | float | Tensor | None = None,
    steps: int = 50,
    method: str = "gausslegendre",
    internal_batch_size: int | None = None,
    output: ScoresFrom | None = None,
    reduce: str | None = "sum",
    **kwargs: Any,
) -> dict[str, Tensor]:
    """Integrated Gradients of every token (Sundararajan et al. 2017; module docstring), by
    captum.

    Args:
        model: a classifier in eval mode.
        inputs: the model's positional inputs; the first is attributed: token ids ``[B, N]``
            (attributed at the output of ``layer``) or floats ``[B, N, D]`` (itself).
        target: the class ``c`` (an int or ``[B]``); default the class the model predicts.
        layer: the name of the embedding module for token-id inputs (default as in
            :func:`input_x_gradient`).
        baseline: the baseline input ``e'``: for token ids a token id (e.g. the pad or mask
            id, at every position) or an id tensor shaped like the input (e.g. keeping
            ``[CLS]`` and ``[SEP]``); for float inputs a number or a tensor. ``None``: zero (id 0).
        steps: the number of points of the integral's quadrature.
        method: captum's quadrature (``"gausslegendre"``, ``"riemann_trapezoid"``, ...).
        internal_batch_size: evaluate the ``B·steps`` points in batches of this size.
        output: ``fn(model_output) -> [B, C]`` logits.
        reduce: ``"sum"`` over the features (default), ``"norm"``, or ``None``.
        kwargs: the model's keyword inputs (``attention_mask=...``).

    Returns:
        ``{name: [B, N]}`` (``[B, N, D]`` with ``reduce=None``), keyed as in
        :func:`input_x_gradient`; with ``"sum"`` each row adds up to ``y_c(e) - y_c(e')`` up to
        the quadrature's error.

    Raises:
        ImportError: captum is not installed.

    Example::

        >>> model = torch.nn.Sequential(
        ...     torch.nn.Embedding(10, 4), torch.nn.Flatten(), torch.nn.Linear(12, 2)).eval()
        >>> maps = integrated_gradients(model, torch.tensor([[1, 2, 3]]), baseline=0, steps=8)
        >>> maps["0"].shape
        torch.Size([1, 3])
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    attr = _captum()
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    name, module, forward, first, extra = _prepare(model, inputs, layer, output, kwargs)
    classes = _target(forward, first, extra, target)
    baselines = baseline
    if isinstance(baseline, int) and module is not None:
        baselines = torch.full_like(first, baseline)
    options: dict[str, Any] = {
        "baselines": baselines, "target": classes, "additional_forward_args": extra,
        "n_steps": steps, "method": method, "internal_batch_size": internal_batch_size,
    }  # fmt: skip
    if module is None:
        result = attr.IntegratedGradients(forward).attribute(first, **options)
    else:
        result = attr.LayerIntegratedGradients(forward, module).attribute(first, **options)
    return {name: _reduce(result, reduce)}


def _captum() -> Any:
    try:
        import captum.attr
    except ImportError as error:
        raise ImportError(
            "gradient attributions need captum: pip install 'attnkit[captum]'"
        ) from error
    return captum.attr


def _prepare(
    model: nn.Module,
    inputs: tuple[Any, ...],
    layer: str | None,
    output: ScoresFrom | None,
    kwargs: dict[str, Any],
) -> tuple[str, nn.Module | None, Callable[..., Tensor], Tensor, tuple[Any, ...]]:
    """``(key, embedding module or None, forward(first, *extra) -> [B, C], first, extra)``.

    Every input but the first, and the tensor keyword inputs, reach ``forward`` through captum's
    ``additional_forward_args``, which captum repeats along the batch for the integral's points.
    """
    if model.training:
        raise ValueError(
            "gradient attributions read the model's deterministic function: put it in eval mode "
            "first (model.eval()), so that dropout does not change the gradients"
        )
    if not inputs or not isinstance(inputs[0], Tensor):
        raise ValueError("the first input must be a tensor (token ids [B, N] or floats [B, N, D])")
    first, rest = inputs[0], inputs[1:]
    tensor_names = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
    fixed = {k: v for k, v in kwargs.items() if k not in tensor_names}
    extra = (*rest, *(kwargs[k] for k in tensor_names))

    def forward(x: Tensor, *args: Any) -> Tensor:
        named = dict(zip(tensor_names, args[len(rest) :], strict=True))
        return class_scores(model(x, *args[: len(rest)], **named, **fixed), output)

    if first.is_floating_point() and layer is None:
        # a leaf of its own that asks for gradients (captum would switch them on in place)
        return "", None, forward, first.detach().requires_grad_(True), extra
    name, module = _embedding(model, layer)
    return name, module, forward, first, extra


def _embedding(model: nn.Module, layer: str | None) -> tuple[str, nn.Module]:
    named = dict(model.named_modules())
    if layer is not None:
        if layer not in named:
            raise ValueError(f"layer={layer!r} is no module of the model")
        return layer, named[layer]
    getter = getattr(model, "get_input_embeddings", None)
    embedding = getter() if callable(getter) else None
    if embedding is None:
        embedding = next((m for m in named.values() if isinstance(m, nn.Embedding)), None)
    name = next((n for n, m in named.items() if m is embedding), None)
    if embedding is None or name is None:
        raise ValueError(
            "token-id inputs are attributed at an embedding layer, and the model has no "
            "nn.Embedding: pass layer='name of the module whose output to attribute'"
        )
    return name, embedding


def _target(
    forward: Callable[..., Tensor], first: Tensor, extra: tuple[Any, ...], target: Any
) -> Tensor | int:
    if target is not None:
        return target if isinstance(target, int) else torch.as_tensor(target)
    with torch.no_grad():
        return forward(first, *extra).argmax(-1)


def _reduce(attributions: Tensor, reduce: str | None) -> Tensor:
    attributions = attributions.detach()
    if reduce is None or attributions.dim() < 3:
        return attributions
    return attributions.sum(-1) if reduce == "sum" else attributions.norm(dim=-1)
