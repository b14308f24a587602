"""Observing the weights and values of every attention call in a model: the attention hook behind
:func:`attnkit.interpret.value_norm` and :func:`attnkit.interpret.alti`.

Each call is computed with its weights asked (on the backend that can return them; the model's
outputs are those of that path), and the module's last call is kept: its weights
``a [B, H, M, N]`` and per-head values ``v [B, H, N, d_v]`` (after the value projection, bias
included; grouped key/value heads repeated to ``H``, as the engine sees them).
"""

from __future__ import annotations

import dataclasses

from torch import Tensor, nn

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.hooks import ModuleSelection, Run
from attnkit.mechanisms.torch_modules import ModelHook


class WeightsAndValues(ModelHook):
    """``with WeightsAndValues(model) as seen:``; then ``seen.calls[name] = (weights, v)`` of
    module ``name``'s last call, in the order of the modules' first calls.

    Args:
        model: the model whose attention is observed.
        modules: which modules (names / ``fnmatch`` patterns / predicate); default all.
        what: the tool's name, for the message when a multi-dimensional call has no
            ``[B, H, M, N]`` weights.
    """

    what = "observed"

    def __init__(self, model: nn.Module, modules: ModuleSelection = None, what: str = "") -> None:
        super().__init__(model, modules)
        self.tool = what
        self.calls: dict[str, tuple[Tensor, Tensor]] = {}

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        """The hook: computes ``call`` with its weights, keeping them and ``call.v``.

        Args:
            call: the engine call, ``q [B, H, M, d_q]`` ...
            module: the name of the watched module it was made in (``None``: outside a model).
            run: computes the call (see :mod:`attnkit.core.hooks`).

        Returns:
            The call's output (its weights only if the call asked for them).
        """
        name = "" if module is None else module
        out = run(dataclasses.replace(call, return_weights=True))
        weights = out.weights
        assert weights is not None
        if weights.dim() != 4:
            raise ValueError(
                f"{self.tool} needs one weight per query and key [B, H, M, N]; module {name!r} "
                f"computes multi-dimensional attention, weights {tuple(weights.shape)}"
            )
        # assigning an existing key keeps its place: the order of first calls, the last tensors
        self.calls[name] = (weights.detach(), call.v.detach())
        return out if call.return_weights else dataclasses.replace(out, weights=None)
