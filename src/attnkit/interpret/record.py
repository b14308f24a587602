"""Recording attention maps: ``with attnkit.interpret.record(model) as rec:``.

Captures, per module name and per head, the attention weights ``a`` (survey eq. 3) of every
attention computed inside ``model``: attnkit modules (``ak.MultiHeadAttention``,
``ak.GeneralAttention``, the mechanisms, and user modules that call ``ak.attention``) and
``torch.nn.MultiheadAttention`` (computed alongside by attnkit's engine, see
:mod:`attnkit.mechanisms.torch_modules`). The recorder is an attention hook
(:mod:`attnkit.core.hooks`), so recording is scoped to the context that enters it: another thread
running the same model records nothing. The model's outputs are unchanged, bit for bit: a call
whose backend can return weights is asked for them; a call on the fused SDPA kernel (which
cannot) is computed as before and its weights recomputed apart, without gradient. (torch's
``nn.TransformerEncoderLayer`` skips its fused eval kernel while any module inside it has hooks,
so its outputs agree up to rounding.)

Shapes: every record is ``[B, H, M, N]`` (queries M, keys N; ``H = 1`` for single-head calls;
``[B, H, M, N, d_v]`` for multi-dimensional attention), the weights before dropout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.hooks import ModuleSelection, Run
from attnkit.mechanisms.torch_modules import ModelHook, check_attention_implementation  # noqa: F401

Rows = slice | Sequence[int] | None


class AttentionRecorder(ModelHook):
    """Context manager holding the recorded weights; made by :func:`record`. It is the
    attention hook ``recorder(call, module, run)`` of :mod:`attnkit.core.hooks`.

    Attributes:
        weights: ``{module name: [one tensor per call, in call order]}``; names are those of
            ``model.named_modules()`` (``""`` is the model itself). A module called several times
            (decoding steps, hops) has one entry per call.

    Args:
        model: as in :func:`record`.
        modules: as in :func:`record`.
        heads: as in :func:`record`.
        rows: as in :func:`record`.
        grad: as in :func:`record`.
        device: as in :func:`record`.

    Example::

        >>> layer = ak.layers.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        >>> with AttentionRecorder(layer) as rec:  # what record(layer) returns
        ...     _ = layer(torch.randn(2, 5, 16))
        >>> list(rec.weights), rec["self_attn"].shape
        (['self_attn'], torch.Size([2, 2, 5, 5]))
    """

    def __init__(
        self,
        model: nn.Module,
        modules: ModuleSelection = None,
        heads: Sequence[int] | None = None,
        rows: Rows = None,
        grad: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(model, modules)
        if grad and (heads is not None or rows is not None or device is not None):
            raise ValueError(
                "record(grad=True) keeps whole weight tensors in the autograd graph; "
                f"heads/rows/device must be None, got heads={heads}, rows={rows}, device={device}"
            )
        self.heads = None if heads is None else list(heads)
        self.rows = rows
        self.grad = grad
        self.device = device
        self.weights: dict[str, list[Tensor]] = {}
        # with grad, torch's MHA returns the engine's output, so its weights are in the graph
        self.replace_torch_outputs = grad
        self.what = "recorded"

    # --- access -----------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Tensor:
        """The weights of the most recent call of module ``name`` (all calls: ``weights[name]``)."""
        if name not in self.weights:
            raise KeyError(f"no attention recorded for {name!r}; recorded: {list(self.weights)}")
        return self.weights[name][-1]

    def __contains__(self, name: object) -> bool:
        return name in self.weights

    def __iter__(self) -> Iterator[str]:
        return iter(self.weights)

    def __len__(self) -> int:
        return len(self.weights)

    def keys(self) -> list[str]:
        """Names of the modules that attended, in the order of their first call."""
        return list(self.weights)

    def maps(self) -> list[Tensor]:
        """The most recent weights of each module, in the order of their first call (for a
        stack of layers: bottom to top, what :func:`attention_rollout` takes)."""
        return [calls[-1] for calls in self.weights.values()]

    def clear(self) -> None:
        """Forget everything recorded so far (e.g. between batches)."""
        self.weights.clear()

    # --- capture ----------------------------------------------------------------------------

    def _store(self, name: str, w: Tensor) -> None:
        if not self.grad:
            w = w.detach()
            if self.heads is not None:
                w = w[:, self.heads]
            if self.rows is not None:
                w = w[:, :, self.rows] if isinstance(self.rows, slice) else w[:, :, list(self.rows)]
            if self.device is not None:
                w = w.to(self.device)
        self.weights.setdefault(name, []).append(w)

    def __call__(self, call: AttentionCall, module: str | None, run: Run) -> AttentionOutput:
        """The hook: computes ``call`` (made inside module ``module``), keeping its weights.

        Args:
            call: the engine call, ``q [B, H, M, d_q]`` ...
            module: the name of the watched module it was made in (``None``: outside a model).
            run: computes the call (see :mod:`attnkit.core.hooks`).

        Returns:
            The call's output, as without the recorder.
        """
        name = "" if module is None else module
        if self.grad:
            # the materialised formula computes the context from these very weights, so a
            # gradient of the output reaches them (c = a v, eq. 4)
            out = run(dataclasses.replace(call, return_weights=True), "reference")
            assert out.weights is not None
            if torch.is_grad_enabled() and not out.weights.requires_grad and call.dropout == 0:
                # nothing below requires grad (e.g. a parameter-free first layer): make the
                # weights a leaf and the context a function of it; no graph is cut
                weights = out.weights.detach().requires_grad_(True)
                v = call.v.to(weights.dtype)
                context = (
                    torch.einsum("bhmnd,bhnd->bhmd", weights, v)
                    if weights.dim() == 5
                    else weights @ v
                )
                out = dataclasses.replace(
                    out, context=context.to(out.context.dtype), weights=weights
                )
            assert out.weights is not None
            self._store(name, out.weights)
            return out if call.return_weights else dataclasses.replace(out, weights=None)
        if call.return_weights or run.chosen.weights:
            # same backend as without weights: same context, and one draw of any sampling
            out = run(dataclasses.replace(call, return_weights=True))
            assert out.weights is not None
            self._store(name, out.weights)
            return out if call.return_weights else dataclasses.replace(out, weights=None)
        out = run(call)  # the fused kernel, untouched
        # The weights again, before dropout (what is recorded) and without dropout, so the
        # recomputation draws nothing from torch's generator: the model's later draws stay its own.
        with torch.no_grad():
            again = run(dataclasses.replace(call, return_weights=True, summary=None, dropout=0.0))
        assert again.weights is not None
        self._store(name, again.weights)
        return out


def record(
    model: nn.Module,
    *,
    modules: ModuleSelection = None,
    heads: Sequence[int] | None = None,
    rows: Rows = None,
    grad: bool = False,
    device: torch.device | str | None = None,
) -> AttentionRecorder:
    """Record the attention weights computed inside ``model`` while the block runs.

    Args:
        model: any ``nn.Module``.
        modules: which modules to watch: names or ``fnmatch`` patterns of
            ``model.named_modules()`` (``"encoder.layers.*.self_attn"``) or a predicate
            ``fn(name, module)``; default all. A call is attributed to the innermost watched
            module running when it is made.
        heads: keep only these heads (bounded memory).
        rows: keep only these query rows (a slice or indices).
        grad: keep the weights in the autograd graph (computed by the materialised formula, so
            outputs may differ from the fused kernel's in the last bits), for gradients of an
            output with respect to them (:func:`gradient_weighted_attention`);
            ``torch.nn.MultiheadAttention`` modules then return the equivalent
            ``ak.MultiHeadAttention``'s output (same outputs up to rounding).
        device: move the kept weights there (e.g. ``"cpu"``).

    Returns:
        an :class:`AttentionRecorder`: ``rec[name]`` is ``[B, H, M, N]`` of the module's last call.

    Raises:
        ValueError: when the block ends with nothing recorded and ``model`` holds a Hugging Face
            model whose ``attn_implementation`` is not ``"attnkit"`` (its attention cannot be
            observed; the message says how to switch).

    Example::

        >>> mha = ak.MultiHeadAttention(16, 4, batch_first=True)
        >>> x = torch.randn(2, 5, 16)
        >>> with record(mha) as rec:
        ...     out, _ = mha(x, x, x, need_weights=False)
        >>> rec[""].shape  # the model itself is named ""
        torch.Size([2, 4, 5, 5])
    """
    return AttentionRecorder(model, modules, heads, rows, grad, device)
