"""Ablation of attention (survey §4.1): replace a model's attention weights and measure the drop.

"The importance of the attention mechanism can be tested by replacing it with another mechanism
and observing whether the overall performance of the model decreases." Inside
``with ablate(model, mode):`` every (selected) attention computed through attnkit's engine uses
replaced weights ``a'`` and the context ``c = Σ_l a'_l v_l`` (eq. 4) they give:

* ``"uniform"``: ``1 / |admissible keys|`` on each admissible key (attention that knows nothing);
* ``"random"``: ``softmax`` of standard-normal scores over the admissible keys;
* ``"permuted"``: each query's weights shuffled among its admissible keys (Jain & Wallace 2019);
* ``"zero_head"``: the selected heads contribute nothing (``a' = 0``; Michel et al. 2019's mask).

Masks (padding, causal) are respected by every mode. Only the selected ``heads`` are replaced.
The ablation is an attention hook (:mod:`attnkit.core.hooks`): it holds in the context that
enters it, and ``torch.nn.MultiheadAttention`` modules inside the block return the output of the
equivalent ``ak.MultiHeadAttention`` (:mod:`attnkit.mechanisms.torch_modules`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.hooks import ModuleSelection, Run
from attnkit.mechanisms.torch_modules import ModelHook

MODES = ("uniform", "random", "permuted", "zero_head")

#: ``fn(weights, admissible) -> new weights`` with ``weights [B, H, M, N]`` and ``admissible``
#: bool broadcastable to it; a custom replacement for ``ablate(model, mode=fn)``.
Replacement = Callable[[Tensor, Tensor], Tensor]


def uniform_weights(weights: Tensor, admissible: Tensor) -> Tensor:
    """``1 / |admissible|`` on each admissible key; rows without one stay zero."""
    keep = admissible.expand_as(weights).to(weights.dtype)
    return keep / keep.sum(-1, keepdim=True).clamp_min(1.0)


def random_weights(weights: Tensor, admissible: Tensor, generator: torch.Generator) -> Tensor:
    """``softmax`` of standard-normal scores over the admissible keys."""
    scores = torch.randn(weights.shape, generator=generator, dtype=torch.float64)
    scores = scores.to(weights.device).masked_fill(~admissible, float("-inf"))
    out = scores.softmax(-1).nan_to_num(0.0)  # a row with no admissible key is all -inf
    return out.to(weights.dtype)


def permuted_weights(weights: Tensor, admissible: Tensor, generator: torch.Generator) -> Tensor:
    """Each row's weights permuted at random among its admissible keys."""
    admissible = admissible.expand_as(weights)
    # admissible positions first: in their order (source) and in a random order (destination)
    source = torch.argsort((~admissible).to(torch.int8), dim=-1, stable=True)
    noise = torch.rand(weights.shape, generator=generator).to(weights.device)
    destination = torch.argsort(noise.masked_fill(~admissible, 2.0), dim=-1)
    return torch.zeros_like(weights).scatter(-1, destination, weights.gather(-1, source))


class Ablation(ModelHook):
    """Context manager made by :func:`ablate`; the attention hook ``ablation(call, module, run)``.

    Args:
        model: as in :func:`ablate`.
        mode: as in :func:`ablate`.
        modules: as in :func:`ablate`.
        heads: as in :func:`ablate`.
        seed: as in :func:`ablate`.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
        >>> with Ablation(layer, "zero_head", heads=[0]):  # what ablate(...) returns
        ...     y = layer(torch.randn(2, 5, 16))
        >>> y.shape
        torch.Size([2, 5, 16])
    """

    replace_torch_outputs = True  # torch's fused MHA has no weights to replace
    what = "replaced"

    def __init__(
        self,
        model: nn.Module,
        mode: str | Replacement,
        modules: ModuleSelection = None,
        heads: Sequence[int] | None = None,
        seed: int = 0,
    ) -> None:
        if not callable(mode) and mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} or a callable, got {mode!r}")
        super().__init__(model, modules)
        self.mode = mode
        self.heads = None if heads is None else list(heads)
        self.generator = torch.Generator().manual_seed(seed)

    def replace(self, weights: Tensor, admissible: Tensor) -> Tensor:
        """The replacement of ``weights [B, H, M, N]`` for this session's mode."""
        if callable(self.mode):
            return self.mode(weights, admissible)
        if self.mode == "uniform":
            return uniform_weights(weights, admissible)
        if self.mode == "random":
            return random_weights(weights, admissible, self.generator)
        if self.mode == "permuted":
            return permuted_weights(weights, admissible, self.generator)
        return torch.zeros_like(weights)

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        """The hook: computes ``call`` with its weights replaced (module docstring).

        Args:
            call: the engine call, ``q [B, H, M, d_q]`` ...
            module: the name of the watched module it was made in (``None``: outside a model).
            run: computes the call (see :mod:`attnkit.core.hooks`).

        Returns:
            The output with the replaced weights and the context ``c = ã v`` they give.
        """
        name = "" if module is None else module
        out = run(dataclasses.replace(call, return_weights=True))
        weights = out.weights
        assert weights is not None
        multi = weights.dim() == 5
        if multi:
            # Multi-dimensional attention (eq. 30-32): one distribution over the keys per value
            # feature; replace each like a head's, with the feature axis folded in front of M.
            weights = weights.movedim(-1, 2)  # [B, H, d_v, M, N]
        admissible = call.full_mask()
        if admissible is None:
            admissible = torch.ones((), dtype=torch.bool, device=weights.device)
        if multi and admissible.dim() == 4:
            admissible = admissible.unsqueeze(2)  # [B, H, 1, M, N]
        admissible = admissible.expand(weights.shape)
        if call.bias is not None:  # keys removed by a float mask of -inf
            bias = call.bias.unsqueeze(2) if multi and call.bias.dim() == 4 else call.bias
            admissible = admissible & torch.isfinite(bias).expand(weights.shape)
        new = self.replace(weights, admissible)
        if self.heads is not None:
            n_heads = weights.shape[1]
            if any(not -n_heads <= h < n_heads for h in self.heads):
                raise ValueError(f"heads {self.heads} out of range for {n_heads} heads in {name!r}")
            chosen = torch.zeros(n_heads, dtype=torch.bool, device=weights.device)
            chosen[self.heads] = True
            shape = (1, -1, 1, 1, 1) if multi else (1, -1, 1, 1)
            new = torch.where(chosen.view(shape), new, weights)
        if multi:
            new = new.movedim(2, -1)  # back to [B, H, M, N, d_v]
            # eq. (30): c_i = Σ_l a_{l,i} v_{l,i}
            context = (new.to(call.v.dtype) * call.v.unsqueeze(-3)).sum(-2).to(out.context.dtype)
        else:
            context = (new.to(call.v.dtype) @ call.v).to(out.context.dtype)  # eq. (4)
        return dataclasses.replace(
            out, context=context, weights=new if call.return_weights else None, lse=None
        )


def ablate(
    model: nn.Module,
    mode: str | Replacement = "uniform",
    *,
    modules: ModuleSelection = None,
    heads: Sequence[int] | None = None,
    seed: int = 0,
) -> Ablation:
    """Replace the attention weights inside ``model`` while the block runs (survey §4.1).

    Args:
        model: any ``nn.Module``; its ``torch.nn.MultiheadAttention`` modules run through the
            equivalent ``ak.MultiHeadAttention`` inside the block.
        mode: ``"uniform"``, ``"random"``, ``"permuted"``, ``"zero_head"``, or
            ``fn(weights, admissible) -> weights``.
        modules: names / ``fnmatch`` patterns / predicate, as in ``interpret.record``.
        heads: replace only these heads (default all).
        seed: seeds ``"random"`` and ``"permuted"``.

    Returns:
        An :class:`Ablation`, the context manager: the weights are replaced inside its block.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
        >>> x = torch.randn(2, 5, 16)
        >>> with ablate(layer, "uniform"):
        ...     ablated = layer(x)
        >>> bool((ablated - layer(x)).abs().max() > 0)  # the attention mattered
        True
    """
    return Ablation(model, mode, modules, heads, seed)
