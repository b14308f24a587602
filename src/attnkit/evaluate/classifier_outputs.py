"""How the evaluation tools call a classifier and read its class scores.

A model is called on its inputs as they are given: a tensor ``x`` as ``model(x)``, a tuple as
``model(*inputs)``, a mapping (Hugging Face's tokenizer output) as ``model(**inputs)``. Its class
scores ``[B, C]`` (logits, before the softmax) are read from what it returns by ``output`` when
given, else from a tensor itself, a ``.logits`` attribute (Hugging Face's
``SequenceClassifierOutput``), or the first element of a tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

#: ``output(model_output) -> [B, C]`` class scores (logits)
ScoresFrom = Callable[[Any], Tensor]


def run_model(model: nn.Module, inputs: Any, **kwargs: Any) -> Any:
    """``model(inputs)``, ``model(*inputs)`` or ``model(**inputs)`` (module docstring)."""
    if isinstance(inputs, Mapping):
        return model(**inputs, **kwargs)
    if isinstance(inputs, tuple | list):
        return model(*inputs, **kwargs)
    return model(inputs, **kwargs)


def class_scores(output: Any, scores_from: ScoresFrom | None = None) -> Tensor:
    """The class scores ``[B, C]`` of a model's output (module docstring).

    Raises:
        ValueError: the scores are not a 2-D tensor ``[B, C]`` (one line naming what was found).
    """
    if scores_from is not None:
        scores = scores_from(output)
    elif isinstance(output, Tensor):
        scores = output
    elif isinstance(getattr(output, "logits", None), Tensor):
        scores = output.logits
    elif isinstance(output, tuple | list) and output and isinstance(output[0], Tensor):
        scores = output[0]
    else:
        raise ValueError(
            f"cannot read class scores [B, C] from a model output of type {type(output).__name__}: "
            "pass output=fn(model_output) -> [B, C] logits"
        )
    if not isinstance(scores, Tensor) or scores.dim() != 2:
        shape = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise ValueError(f"class scores must be a [B, C] tensor of logits, got {shape}")
    return scores
