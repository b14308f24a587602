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

Memory: with ``heads=`` or ``rows=``, a call whose weights the model does not ask for is computed
as without the recorder, and only the kept heads' rows of weights are computed apart, by the
materialised formula one head and a few rows at a time (:func:`attnkit.core.reference.attend_rows`,
which keeps each row's position for causal masks, ``mask_mod``/``score_mod`` and positional
alignments). The peak is then the model's own plus what is kept plus one such block. Two cases
still form a call's whole weights: a stochastic alignment (hard, reinforced), whose one draw
must be the one recorded, and a recorder entered inside another hook scope, whose hooks must
see (and may change) the weights recorded.

Shapes: every record is ``[B, H, M, N]`` (queries M, keys N; ``H = 1`` for single-head calls;
``[B, H, M, N, d_v]`` for multi-dimensional attention), the weights before dropout.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.chunked import chunk_rows
from attnkit.core.hooks import ModuleSelection, Run, observed
from attnkit.core.reference import attend_rows, score_features
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
        self.heads = None if heads is None else _indices("heads", heads)
        if rows is not None and not isinstance(rows, slice):
            rows = _indices("rows", rows)
        self.rows = rows
        self.grad = grad
        self.device = device
        self.weights: dict[str, list[Tensor]] = {}
        # hooks entered before this recorder are reached by its ``run``; set on entering
        self._alone = False
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

    def __enter__(self) -> AttentionRecorder:
        # Hooks already active here are inner to this recorder: the weights it keeps must be
        # the ones they make, so it then asks its ``run`` for whole weights (see module doc).
        self._alone = not observed()
        super().__enter__()
        return self

    # --- capture ----------------------------------------------------------------------------

    def _kept_indices(self, name: str, heads: int, rows: int) -> tuple[list[int], list[int]]:
        """The kept heads and query rows of a ``[B, heads, rows, N]`` call, as non-negative
        indices in the order asked for."""
        kept_heads = list(range(heads)) if self.heads is None else self.heads
        if self.rows is None:
            kept_rows = list(range(rows))
        elif isinstance(self.rows, slice):
            kept_rows = list(range(*self.rows.indices(rows)))
        else:
            kept_rows = self.rows
        for what, kept, size in (("heads", kept_heads, heads), ("rows", kept_rows, rows)):
            wrong = [i for i in kept if not -size <= i < size]
            if wrong:
                raise IndexError(
                    f"record({what}=...): {wrong} out of range for the {size} {what} of the "
                    f"attention call in module {name!r}"
                )
        return [h % heads for h in kept_heads], [r % rows for r in kept_rows]

    def _select(self, name: str, w: Tensor) -> Tensor:
        """The kept heads and rows of whole weights ``[B, H, M, N(, d_v)]``, in a tensor of
        their own (a view would keep the whole weights alive)."""
        w = w.detach()
        if self.heads is not None or self.rows is not None:
            heads, rows = self._kept_indices(name, w.shape[1], w.shape[2])
            if rows != list(range(w.shape[2])):
                w = w.index_select(2, torch.tensor(rows, device=w.device))
            if heads != list(range(w.shape[1])):
                w = w.index_select(1, torch.tensor(heads, device=w.device))
        return w if self.device is None else w.to(self.device)

    def _store(self, name: str, w: Tensor) -> None:
        self.weights.setdefault(name, []).append(w if self.grad else self._select(name, w))

    def _kept_weights(self, name: str, call: AttentionCall) -> Tensor:
        """The kept heads' rows of the call's weights (before dropout), computed one head and a
        block of rows at a time: ``[B, H_kept, M_kept, N]`` (``[..., d_v]`` multi-dimensional),
        on ``device``."""
        b, h, m, n = call.shape
        heads, rows = self._kept_indices(name, h, m)
        features = call.score.value_features
        trailing = () if features is None else (features,)  # d_v weights per key
        device = call.q.device if self.device is None else torch.device(self.device)
        unique = sorted(set(rows))
        kept = torch.empty(
            (b, len(heads), len(unique), n, *trailing), dtype=call.q.dtype, device=device
        )
        for slot, head in enumerate(heads):
            one = _one_head(call, head)
            # A block's scores hold about 1/64 of what is kept (at least one row, at most the
            # chunked backend's block), so its few tensors stay a small part of the peak.
            block = max(1, min(len(heads) * len(unique) // 64, chunk_rows(one)))
            qk = score_features(one, one.q, one.k)  # once per head, not once per block
            first = 0
            while first < len(unique):
                start = unique[first]
                last = bisect.bisect_left(unique, start + block) - 1
                stop = unique[last] + 1
                out = attend_rows(one, start, stop - start, qk)
                assert out.weights is not None
                local = torch.tensor(unique[first : last + 1], device=out.weights.device) - start
                kept[:, slot, first : last + 1] = out.weights[:, 0].index_select(1, local)
                first = last + 1
        if rows != unique:  # the order asked for, repeats included
            position = {row: i for i, row in enumerate(unique)}
            order = torch.tensor([position[row] for row in rows], device=device)
            kept = kept.index_select(2, order)
        return kept

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
        if call.return_weights:  # the model forms them anyway
            out = run(call)
            assert out.weights is not None
            self._store(name, out.weights)
            return out
        bounded = self.heads is not None or self.rows is not None
        if bounded and self._alone and not call.align.stochastic:
            out = run(call)  # exactly as without the recorder
            # the kept part only, before dropout and without it, so no random draw is made
            with torch.no_grad():
                weights = self._kept_weights(name, call)
            self.weights.setdefault(name, []).append(weights)
            return out
        if run.chosen.weights:
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


def _indices(what: str, given: Any) -> list[int]:
    """``heads=`` / ``rows=`` as a list of ints, or one line saying what was expected."""
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise TypeError(f"record({what}=...) takes a sequence of ints, got {given!r}")
    for index in given:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"record({what}=...) takes ints, got {index!r} in {list(given)!r}")
    return list(given)


def _one_head(call: AttentionCall, head: int) -> AttentionCall:
    """Head ``head`` of ``call`` as a call of its own (views of its inputs and masks) that
    returns its weights before dropout; ``mask_mod`` / ``score_mod`` still see the head's index
    in the whole call."""

    def narrow(t: Tensor | None) -> Tensor | None:
        return t if t is None or t.shape[1] == 1 else t[:, head : head + 1]

    def shifted(mod: Callable[..., Tensor] | None, at: int) -> Callable[..., Tensor] | None:
        if mod is None:
            return None

        def on_head(*args: Any) -> Tensor:
            args = (*args[:at], args[at] + head, *args[at + 1 :])  # the head axis index
            return mod(*args)

        return on_head

    return dataclasses.replace(
        call,
        q=call.q[:, head : head + 1],
        k=call.k[:, head : head + 1],
        v=call.v[:, head : head + 1],
        mask=narrow(call.mask),
        bias=narrow(call.bias),
        mask_mod=shifted(call.mask_mod, 1),  # mask_mod(b, h, q_idx, kv_idx)
        score_mod=shifted(call.score_mod, 2),  # score_mod(score, b, h, q_idx, kv_idx)
        return_weights=True,
        return_lse=False,
        dropout=0.0,
        summary=None,
        weights_after_dropout=False,
    )


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
        heads: keep only these heads (bounded memory: only their weights are computed apart,
            see the module docstring).
        rows: keep only these query rows (a slice or indices; bounded the same way).
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
