"""Every cross-attention map of a teacher-forced pass, stacked by layer: the input of
:func:`attnkit.evaluate.decoder_step_rows` and :func:`attnkit.evaluate.choose_attention`
(Shift-Att, Chen et al. 2020).

Uses only the public :func:`attnkit.interpret.record` API: each watched module's most recent call
(``rec[name]``) must hold all the pass's decoder steps as its query rows, as a Transformer
decoder layer's cross-attention does (one call per forward). Decoders that attend one step per
call (the RNN decoders) keep their own ``Seq2SeqOutput.weights``; use those instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from attnkit.interpret.record import record


def record_cross_attention(
    model: nn.Module, forward: Callable[[], object], modules: Sequence[str]
) -> Tensor:
    """Run ``forward()`` (a teacher-forced pass of ``model``) and return the cross-attention of
    the ``modules``, bottom layer first.

    Args:
        model: the seq2seq model.
        forward: calls the model on a batch with ``target_in = BOS, y_0, …, y_{T-1}`` (and
            ``EOS`` targets), e.g. ``lambda: model(source, source_lengths, target_in)``.
        modules: names or ``fnmatch`` patterns of the cross-attention modules, as for
            :func:`attnkit.interpret.record` (``["transformer.decoder.layers.*.multihead_attn"]``
            for :class:`attnkit.models.TransformerSeq2Seq`).

    Returns:
        ``[B, layers, heads, steps, S]``, layers in the order of their first call (bottom to
        top); row ``t`` is the step that read ``y_{t-1}`` (``BOS`` at ``t = 0``).

    Example::

        >>> model = ak.layers.Transformer(16, 2, 1, 2, 32, batch_first=True)
        >>> src, tgt = torch.randn(2, 7, 16), torch.randn(2, 4, 16)
        >>> maps = record_cross_attention(model, lambda: model(src, tgt),
        ...                               ["decoder.layers.*.multihead_attn"])
        >>> maps.shape  # [B, layers, heads, steps, S]
        torch.Size([2, 2, 2, 4, 7])
    """
    if isinstance(modules, str) or not modules:
        raise ValueError(f"modules must be a non-empty list of names or patterns, got {modules!r}")
    # mypy takes the name for the submodule attnkit.interpret.record; the package exports the
    # function under it (the public API this module is limited to).
    with torch.no_grad(), record(model, modules=list(modules)) as recorder:  # type: ignore[operator]
        forward()
    names = recorder.keys()
    if not names:
        raise ValueError(f"no attention was recorded in the modules {list(modules)}")
    maps = [recorder[name] for name in names]
    shapes = {tuple(m.shape) for m in maps}
    if len(shapes) != 1:
        raise ValueError(
            "the recorded modules' weights differ in shape, so they are not the cross-attention "
            "of one decoder stack: "
            + ", ".join(f"{n} {tuple(m.shape)}" for n, m in zip(names, maps, strict=True))
        )
    return torch.stack(maps, dim=1)
