"""Activation patching per head (and per position): which heads carry what distinguishes two
inputs? (Vig et al. 2020, "Investigating Gender Bias in Language Models Using Causal Mediation
Analysis"; Meng et al. 2022; Wang et al. 2023, the IOI circuit; TransformerLens' and nnsight's
``patching``.)

Run the model on a *clean* input and record, in every attention call, the queries ``q``, keys
``k``, values ``v`` and each head's context ``c = a v`` (``[B, H, M, d]`` or ``[B, H, N, d]``).
Then run it on a *corrupt* input once per head ``h`` (and position ``p``), with that head's
activation replaced by the clean run's in one module, everything else computed from the corrupt
input. The effect of the head is the change of a scalar ``metric`` of the output:

    effect(module, h[, p]) = metric(model(corrupt) with act_h[p] := act_h^clean[p]) - metric(model(corrupt))

``activation="context"`` patches the head's output (``z`` in TransformerLens); ``"q"``, ``"k"``
and ``"v"`` patch one input of the head and let the attention recompute its context. With
``where="positions"`` only one position is patched: a query position for ``q`` and
``context``, a key position for ``k`` and ``v``. Patching is an attention hook
(:mod:`attnkit.core.hooks`): the ``k``-th call of a module in the corrupt run takes the
``k``-th call's activations of the clean run, so clean and corrupt must make the same calls
with the same shapes (the same length; pad to it). Swap the inputs to measure the opposite
direction (noising instead of denoising).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.hooks import ModuleSelection, Run
from attnkit.evaluate.classifier_outputs import run_model
from attnkit.mechanisms.torch_modules import ModelHook

ACTIVATIONS = ("context", "q", "k", "v")
WHERE = ("heads", "positions")


class ActivationPatch(ModelHook):
    """The attention hook of :func:`patch`: records every call's ``q``, ``k``, ``v`` and context
    while ``recording``; else, in the calls of module ``target[0]``, replaces head
    ``target[1]`` (at position ``target[2]``, or all) of ``activation`` by the recorded one.

    Args:
        model: the model whose attention is patched.
        activation: ``"context"``, ``"q"``, ``"k"`` or ``"v"``.
        modules: which modules (names / ``fnmatch`` patterns / predicate); default all.
    """

    replace_torch_outputs = True  # torch's MHA returns the engine's (patched) output
    what = "patched"

    def __init__(self, model: nn.Module, activation: str, modules: ModuleSelection = None) -> None:
        super().__init__(model, modules)
        self.activation = activation
        self.recording = False
        self.recorded: dict[str, list[dict[str, Tensor]]] = {}
        self.target: tuple[str, int, int | None] | None = None
        self.counts: dict[str, int] = {}

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        """The hook: records the call, or computes it with one head's activation replaced.

        Args:
            call: the engine call, ``q [B, H, M, d_q]``, ``k``, ``v [B, H, N, ·]`` ...
            module: the name of the watched module it was made in (``None``: outside a model).
            run: computes the call (see :mod:`attnkit.core.hooks`).

        Returns:
            The call's output (patched in the target module).
        """
        name = "" if module is None else module
        if self.recording:
            out = run(call)
            # copies: a KV cache, say, writes its buffer again in the next call
            self.recorded.setdefault(name, []).append(
                {"q": call.q.clone(), "k": call.k.clone(), "v": call.v.clone(),
                 "context": out.context.clone()}
            )  # fmt: skip
            return out
        index = self.counts.get(name, 0)
        self.counts[name] = index + 1
        if self.target is None or self.target[0] != name:
            return run(call)
        calls = self.recorded.get(name, [])
        if index >= len(calls):
            raise ValueError(
                f"the corrupt run calls module {name!r} more often than the clean run "
                f"({len(calls)} calls): clean and corrupt must make the same calls"
            )
        source = calls[index][self.activation]
        _, head, position = self.target
        if self.activation == "context":
            out = run(call)
            return dataclasses.replace(
                out, context=self._replace(name, out.context, source, head, position)
            )
        given = getattr(call, self.activation)
        patched = self._replace(name, given, source, head, position)
        return run(dataclasses.replace(call, **{self.activation: patched}))

    def _replace(
        self, name: str, given: Tensor, source: Tensor, head: int, position: int | None
    ) -> Tensor:
        if given.shape != source.shape:
            raise ValueError(
                f"module {name!r}: the clean run's {self.activation} is {tuple(source.shape)}, the "
                f"corrupt run's {tuple(given.shape)}; clean and corrupt must have the same shapes"
            )
        chosen = torch.zeros(given.shape[1:3], dtype=torch.bool, device=given.device)  # [H, P]
        if position is None:
            chosen[head] = True
        else:
            chosen[head, position] = True
        return torch.where(chosen[None, :, :, None], source.to(given.dtype), given)


def patch(
    model: nn.Module,
    clean: Any,
    corrupt: Any,
    metric: Callable[[Any], Tensor | float],
    where: str = "heads",
    *,
    activation: str = "context",
    modules: ModuleSelection = None,
    progress: bool = False,
    **kwargs: Any,
) -> dict[str, Tensor]:
    """Activation patching: the change of ``metric`` when one head's activation of the
    ``corrupt`` run is taken from the ``clean`` run (module docstring).

    Args:
        model: an attnkit model or a Hugging Face model loaded with
            ``attn_implementation="attnkit"``, in eval mode.
        clean: the input whose activations are patched in: a tensor (``model(x)``), a tuple
            (``model(*x)``) or a mapping (``model(**x)``).
        corrupt: the input the patched runs compute, of the same form and shapes.
        metric: ``fn(model_output) -> scalar`` (a float or a one-element tensor), e.g. the
            logit difference of two answers.
        where: ``"heads"``: patch a whole head; ``"positions"``: one head at one position.
        activation: ``"context"`` (the head's output), ``"q"``, ``"k"`` or ``"v"``.
        modules: which attention modules (names / ``fnmatch`` patterns / predicate); default
            all.
        progress: show a progress bar (one step per patched run).
        kwargs: keyword inputs given to the model in every run.

    Returns:
        ``{module name: [H]}`` (``where="heads"``) or ``{module name: [H, P]}``
        (``"positions"``: ``P`` the queries for ``q`` / ``context``, the keys for ``k`` / ``v``),
        float64, ``metric(patched) - metric(corrupt)``, in the order of the modules' first
        calls. A module called several times is patched in every call at once.

    Raises:
        ValueError: an unknown ``where`` or ``activation``; the model in training mode; clean
            and corrupt runs that differ in their calls or shapes; a metric that is not a scalar.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
        >>> clean, corrupt = torch.randn(1, 4, 8), torch.randn(1, 4, 8)
        >>> effects = patch(layer, clean, corrupt, lambda y: y[0, -1].sum())
        >>> effects["self_attn"].shape  # one effect per head
        torch.Size([2])
    """
    if where not in WHERE:
        raise ValueError(f"where must be one of {WHERE}, got {where!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if model.training:
        raise ValueError(
            "patch compares runs of the model: put it in eval mode first (model.eval()), so that "
            "dropout does not change them"
        )
    hook = ActivationPatch(model, activation, modules)
    effects = {}
    with torch.no_grad(), hook:
        hook.recording = True
        run_model(model, clean, **kwargs)
        hook.recording = False
        baseline = _scalar(metric(run_model(model, corrupt, **kwargs)))
        for name, calls in hook.recorded.items():
            made = hook.counts.get(name, 0)
            if made != len(calls):
                raise ValueError(
                    f"module {name!r} attends {len(calls)} times on the clean input and {made} "
                    "times on the corrupt one: clean and corrupt must make the same calls"
                )
        runs = []
        for name, calls in hook.recorded.items():
            shape = calls[0][activation].shape  # [B, H, P, d]
            if where == "positions" and any(c[activation].shape != shape for c in calls):
                raise ValueError(
                    f"module {name!r} is called with different shapes; where='positions' needs "
                    "one length per module"
                )
            positions: list[int | None] = list(range(shape[2])) if where == "positions" else [None]
            runs.extend((name, h, p) for h in range(shape[1]) for p in positions)
            effects[name] = torch.zeros(
                (shape[1], shape[2]) if where == "positions" else (shape[1],), dtype=torch.float64
            )
        for name, head, position in tqdm(runs, desc="patching", disable=not progress):
            hook.target, hook.counts = (name, head, position), {}
            change = _scalar(metric(run_model(model, corrupt, **kwargs))) - baseline
            if position is None:
                effects[name][head] = change
            else:
                effects[name][head, position] = change
        hook.target = None
    return effects


def _scalar(value: Tensor | float) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"metric must return a scalar (a float or a one-element tensor), got a tensor "
                f"of shape {tuple(value.shape)}"
            )
        return float(value.double())
    if isinstance(value, int | float):
        return float(value)
    raise ValueError(f"metric must return a scalar, got {type(value).__name__}")
