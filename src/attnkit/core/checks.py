"""Checks of what user callbacks return to the engine: a ``score_mod``'s scores and a hook's
output.

Both are called deep inside a backend, so a wrong result would otherwise surface as an error
about something else (``'NoneType' object has no attribute 'max'``, a broadcast error of the
weighted sum, ``... has no attribute 'context'``). These checks name the callback, what was
expected and what it returned, in one line.

Example::

    >>> score = torch.zeros(1, 2, 3, 4)
    >>> checked_scores(score + 1, score).shape
    torch.Size([1, 2, 3, 4])
    >>> checked_scores(None, score)
    Traceback (most recent call last):
    TypeError: score_mod(score, b, h, q_idx, kv_idx) must return a tensor of the score's shape [B, H, M, N] = [1, 2, 3, 4] (or one that broadcasts to it), got None
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnkit.core.call import AttentionOutput
from attnkit.core.masks import index_grids

_SCORE_MOD = "score_mod(score, b, h, q_idx, kv_idx)"


def _given(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"


def checked_scores(result: Any, score: Tensor, call_shape: tuple[int, ...] | None = None) -> Tensor:
    """What a ``score_mod`` returned for ``score``, refused unless it is a tensor that
    broadcasts to ``score``'s shape, and expanded to it.

    FlexAttention applies a mod to each score alone, so a mod that ignores ``score`` and returns
    a function of the broadcastable indices (``bias[h]``, shape ``[1, H, 1, 1]``) means that
    value at every score: the broadcast is its meaning, and any other shape is a mistake.

    Args:
        result: what the mod returned.
        score: the scores it was given, ``[B, H, M, N]`` (``[B, H, M, N, d_v]`` for
            multi-dimensional scores), or a block of them.
        call_shape: the call's ``(B, H, M, N)``, named in the error when ``score`` is a block.

    Returns:
        ``result`` with ``score``'s shape.

    Raises:
        TypeError: ``result`` is not a tensor, or its shape does not broadcast to ``score``'s.
    """
    if isinstance(result, Tensor):
        if result.shape == score.shape:
            return result
        try:
            if torch.broadcast_shapes(result.shape, score.shape) == score.shape:
                return result.expand(score.shape).contiguous()  # backends may write into it
        except RuntimeError:  # not broadcastable
            pass
    shape = list(score.shape if call_shape is None else call_shape)
    block = "" if shape == list(score.shape) else f", given a block of {list(score.shape)}"
    raise TypeError(
        f"{_SCORE_MOD} must return a tensor of the score's shape [B, H, M, N] = {shape} (or "
        f"one that broadcasts to it{block}), got {_given(result)}"
    )


def check_score_mod(score_mod: Any, like: Tensor, call_shape: tuple[int, ...]) -> None:
    """Run ``score_mod`` once on one score of ``like``'s dtype and device (index 0 everywhere)
    and refuse a wrong result (:func:`checked_scores`), for the kernels that call the mod where
    no Python check can run: compiled FlexAttention traces a mod returning ``None`` into a result
    without an error. A mod that raises here is left to raise in the call itself."""
    score = torch.zeros((1, 1, 1, 1), dtype=like.dtype, device=like.device)
    try:
        with torch.no_grad():
            result = score_mod(score, *index_grids(1, 1, 1, 1, like.device))
    except Exception:
        return
    checked_scores(result, score, call_shape)


def checked_output(result: Any, hook: object) -> AttentionOutput:
    """What an attention hook returned, refused unless it is an :class:`AttentionOutput`
    (what its ``run(call)`` returns).

    Raises:
        TypeError: naming the hook and what it returned.
    """
    if isinstance(result, AttentionOutput):
        return result
    name = getattr(hook, "__qualname__", None) or type(hook).__name__
    raise TypeError(
        f"the attention hook {name} must return an AttentionOutput (what its run(call) "
        f"returns), got {_given(result)}"
    )
