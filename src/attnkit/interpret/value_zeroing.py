"""Value zeroing (Mohebbi et al. 2023, "Quantifying Context Mixing in Transformers", EACL, §3).

How much does token ``i``'s output representation of a layer depend on token ``j``? Zero the
value vector of ``j`` in every head of the layer's attention (its key stays, so the weights do
not change), recompute the layer from its original input, and measure how far ``i``'s output
moved:

    C_ij = 1 - cos(x̃_i^{¬j}, x̃_i)

with ``x̃_i`` the layer's output and ``x̃_i^{¬j}`` the output with ``v_j = 0`` (cosine distance,
the paper's choice). Unlike the attention weight, ``C_ij`` sees everything after the attention:
the output projection, the residual connection, the layer norms and the feed-forward block.
The paper normalises each row to sum to 1 and multiplies the layers bottom-up (rollout without
residual): ``attention_rollout([c.unsqueeze(1) for c in maps.values()], residual=0.0)`` computes
exactly that.

The zeroing is an attention hook (:mod:`attnkit.core.hooks`): the layer is called again on the
input it received in the original run (captured by a torch forward pre-hook), once per key ``j``,
with ``v[:, :, j] = 0`` in its attention module's call. The reference ``x̃`` is computed by the
same path with nothing zeroed, so ``C_ij`` is exactly 0 where ``j`` cannot reach ``i`` (a causal
mask, padding).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.hooks import ModuleSelection, Run
from attnkit.interpret.attention_block import (
    batch_first,
    first_tensor,
    is_batch_first,
    layer_of,
)
from attnkit.mechanisms.torch_modules import ModelHook


class ValueZeroing(ModelHook):
    """The attention hook of :func:`value_zeroing`: in calls of module ``target``, the values
    of key ``row`` (all heads) are zero; every call's shape ``(B, H, M, N)`` is noted.

    Args:
        model: the model whose attention is changed.
        modules: which modules (names / ``fnmatch`` patterns / predicate); default all.
    """

    replace_torch_outputs = True  # torch's MHA returns the engine's (zeroed) output
    what = "zeroed"

    def __init__(self, model: nn.Module, modules: ModuleSelection = None) -> None:
        super().__init__(model, modules)
        self.target: str | None = None
        self.row: int | None = None
        self.shapes: dict[str, tuple[int, int, int, int]] = {}

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        """The hook: computes ``call``, with ``v[:, :, row] = 0`` in module ``target``.

        Args:
            call: the engine call, ``q [B, H, M, d_q]``, ``v [B, H, N, d_v]`` ...
            module: the name of the watched module it was made in (``None``: outside a model).
            run: computes the call (see :mod:`attnkit.core.hooks`).

        Returns:
            The output of the (changed) call.
        """
        name = "" if module is None else module
        self.shapes[name] = call.shape
        if name != self.target:
            return run(call)
        values = call.v.clone()  # a new tensor in the reference run too: one path for both
        if self.row is not None:
            values[:, :, self.row] = 0
        return run(dataclasses.replace(call, v=values))


def value_zeroing(
    model: nn.Module,
    *inputs: Any,
    modules: ModuleSelection = None,
    layers: Mapping[str, str] | None = None,
    progress: bool = False,
    **kwargs: Any,
) -> dict[str, Tensor]:
    """Value zeroing ``C_ij = 1 - cos(x̃_i^{¬j}, x̃_i)`` for every attention module's layer
    (Mohebbi et al. 2023; module docstring).

    Args:
        model: an attnkit model or a Hugging Face model loaded with
            ``attn_implementation="attnkit"``, in eval mode.
        inputs: the model's positional inputs.
        modules: which attention modules (names / ``fnmatch`` patterns / predicate); default
            all.
        layers: ``{attention module name: layer name}`` where the layer is not the innermost
            stack item holding the module (see :mod:`attnkit.interpret.attention_block`); its
            output must be ``[B, M, E]`` (or torch's ``[M, B, E]`` with ``batch_first=False``).
        progress: show a progress bar (one step per recomputed layer call).
        kwargs: the model's keyword inputs (``attention_mask=...``).

    Returns:
        ``{attention module name: [B, M, N]}`` float64: row ``i`` holds, for each key ``j``,
        the cosine distance the layer's output ``i`` moves when ``v_j`` is zeroed; in the order
        of the modules' first calls. ``M`` is the layer's output length.

    Raises:
        ValueError: the model is in training mode, or a layer's output is not ``[B, M, E]``.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
        >>> scores = value_zeroing(layer, torch.randn(1, 5, 8))
        >>> scores["self_attn"].shape  # the layer is the model itself here
        torch.Size([1, 5, 5])
    """
    if model.training:
        raise ValueError(
            "value_zeroing compares runs of the model: put it in eval mode first (model.eval()), "
            "so that dropout does not change them"
        )
    overrides = dict(layers or {})
    for layer_name in overrides.values():
        _submodule(model, layer_name)
    stack = {name for name, _ in model.named_modules() if layer_of(model, name) == name}
    watched = stack | {""} | set(overrides.values())
    captured: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    handles = [
        model.get_submodule(name).register_forward_pre_hook(_keep(captured, name), with_kwargs=True)
        for name in watched
    ]
    zeroing = ValueZeroing(model, modules)
    try:
        with torch.no_grad(), zeroing:
            model(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    shapes = dict(zeroing.shapes)
    bar = tqdm(total=sum(n + 1 for _, _, _, n in shapes.values()), desc="value zeroing",
               disable=not progress)  # fmt: skip
    scores = {}
    with torch.no_grad(), zeroing, bar:
        for name, (batch, _, _, keys) in shapes.items():
            layer_name = overrides.get(name, layer_of(model, name))
            zeroing.target = name
            run = _LayerRun(model.get_submodule(layer_name), *captured[layer_name], zeroing)
            reference = run.output(None, name, layer_name, batch)
            distances = []
            for j in range(keys):
                distances.append(
                    _cosine_distance(run.output(j, name, layer_name, batch), reference)
                )
                bar.update(1)
            bar.update(1)
            scores[name] = torch.stack(distances, -1)  # [B, M, N]
            zeroing.target = None
    return scores


class _LayerRun:
    """One layer called again on the input it received, with key ``row`` zeroed."""

    def __init__(
        self,
        layer: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        zeroing: ValueZeroing,
    ) -> None:
        self.layer, self.args, self.kwargs, self.zeroing = layer, args, kwargs, zeroing

    def output(self, row: int | None, name: str, layer_name: str, batch: int) -> Tensor:
        """The layer's output ``[B, M, E]`` (float64) with ``v_row`` zeroed (``None``: none)."""
        self.zeroing.row = row
        out = first_tensor(self.layer(*self.args, **self.kwargs))
        out = batch_first(out, is_batch_first(self.layer))
        if out.dim() != 3 or out.shape[0] != batch:
            raise ValueError(
                f"value zeroing reads the output of layer {layer_name!r} (of attention module "
                f"{name!r}) as [B = {batch}, M, E], got {tuple(out.shape)}; pass "
                "layers={attention module: layer} to choose another layer"
            )
        return out.double()


def _cosine_distance(changed: Tensor, reference: Tensor) -> Tensor:
    """``1 - cos`` over the features, exactly 0 for an output the zeroing did not change (the
    cosine of a vector with itself is 1 only up to rounding)."""
    distance = 1.0 - F.cosine_similarity(changed, reference, dim=-1)
    return distance.masked_fill((changed == reference).all(-1), 0.0).clamp(0.0, 2.0)


def _keep(captured: dict[str, Any], name: str) -> Any:
    def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        captured[name] = (args, kwargs)  # a layer called several times: its last call

    return hook


def _submodule(model: nn.Module, name: str) -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise ValueError(f"layers= names {name!r}, which is no module of the model") from None
