"""The parts of an attention block around the engine call: what the maps beyond the weights read
from the model.

An attention hook sees one call: the per-head values ``v`` (after the value projection, its bias
included) and the weights. The rest of the block lives in the modules around the call, found
here by the name the hook gives (the attention module, as in ``model.named_modules()``):

* the **output projection** ``W_O`` (survey eq. 40), ``nn.Linear(H·d_v, E)``: the attention
  module's own ``out_proj`` (``ak.MultiHeadAttention``, ``torch.nn.MultiheadAttention``, BART,
  CLIP), ``o_proj`` (Llama, Mistral, Qwen), ``out_lin`` (DistilBERT), ``c_proj`` (GPT-2's
  ``Conv1D``, weight stored transposed), ``dense`` (GPT-NeoX, Phi) or ``o`` (T5), in that order;
  else ``output.dense`` of its parent (BERT, RoBERTa, MiniLM: ``attention.self`` computes the
  heads, its sibling ``attention.output.dense`` projects them). Head ``h`` owns the input columns
  ``h·d_v … (h+1)·d_v`` (the heads are concatenated in order before ``W_O``, in every one of
  these). ``output_projections={name: module}`` names it for any other model.
* the **layer** (value zeroing recomputes it): the innermost module, among the attention module
  and its ancestors, that is an item of an ``nn.ModuleList`` or ``nn.Sequential`` (a block of a
  stack: ``layers.0``, ``encoder.layer.0``); the whole model if there is none.
* the **residual connection and layer norm** (ALTI): the self-attention of an attnkit (or torch)
  Transformer layer (``self_attn`` beside ``norm1``; post-norm ``LN(x + W_O c)`` or pre-norm
  ``x + W_O c``), or a BERT-style ``attention.self`` whose sibling ``attention.output`` computes
  ``LayerNorm(dense(c) + x)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

#: attributes of an attention module searched for its output projection, in this order
OUTPUT_PROJECTION_NAMES = ("out_proj", "o_proj", "out_lin", "c_proj", "dense", "o")


def parent_name(name: str) -> str | None:
    """The name of the module holding ``name`` (``None`` for the model itself, ``""``)."""
    if name == "":
        return None
    return name.rsplit(".", 1)[0] if "." in name else ""


def output_projection(
    model: nn.Module, name: str, given: Mapping[str, nn.Module] | None = None
) -> tuple[Tensor, Tensor | None]:
    """``(W_O [E, H·d_v], b_O [E] or None)`` of the attention module ``name`` (module docstring).

    Raises:
        ValueError: no output projection is found (one line naming what was searched).
    """
    if given is not None and name in given:
        projection: Any = given[name]
    else:
        module = model.get_submodule(name)
        projection = next(
            (
                getattr(module, attr)
                for attr in OUTPUT_PROJECTION_NAMES
                if isinstance(getattr(module, attr, None), nn.Module)
                and isinstance(getattr(getattr(module, attr), "weight", None), Tensor)
            ),
            None,
        )
        parent = parent_name(name)
        if projection is None and parent is not None:
            dense = getattr(getattr(model.get_submodule(parent), "output", None), "dense", None)
            if isinstance(getattr(dense, "weight", None), Tensor):
                projection = dense
        if projection is None:
            raise ValueError(
                f"found no output projection of the attention module {name!r} "
                f"({type(module).__name__}): looked for {', '.join(OUTPUT_PROJECTION_NAMES)} on "
                "it and output.dense on its parent; pass output_projections={name: module}"
            )
    weight = projection.weight
    if not isinstance(weight, Tensor) or weight.dim() != 2:
        raise ValueError(
            f"the output projection of {name!r} must hold a 2-D weight, got {weight!r}"
        )
    # transformers' Conv1D (GPT-2) stores the weight [in, out], the transpose of nn.Linear's
    if type(projection).__name__ == "Conv1D":
        weight = weight.t()
    bias = getattr(projection, "bias", None)
    return weight.detach(), None if bias is None else bias.detach()


def head_projections(weight: Tensor, heads: int, name: str) -> Tensor:
    """``W_O`` split by head: ``[H, d_v, E]`` from ``[E, H·d_v]`` (``f^h(v) = v @ W[h]``)."""
    size, inputs = weight.shape
    if inputs % heads:
        raise ValueError(
            f"the output projection of {name!r} takes {inputs} features, not a multiple of the "
            f"call's {heads} heads"
        )
    return weight.view(size, heads, inputs // heads).permute(1, 2, 0)


def layer_of(model: nn.Module, name: str) -> str:
    """The layer of the attention module ``name`` (module docstring): ``"layers.0"`` for
    ``"layers.0.self_attn"``; ``""`` (the model) when no ancestor is an item of a stack."""
    parts = name.split(".") if name else []
    for end in range(len(parts), 0, -1):
        holder = model.get_submodule(".".join(parts[: end - 1]))
        if isinstance(holder, nn.ModuleList | nn.Sequential):
            return ".".join(parts[:end])
    return ""


def batch_first(t: Tensor, is_batch_first: bool) -> Tensor:
    """``[B, L, E]`` from a module's layout: ``[L, B, E]`` unless batch-first; ``[L, E]``
    unbatched."""
    if t.dim() == 2:
        return t.unsqueeze(0)
    return t if is_batch_first else t.transpose(0, 1)


def is_batch_first(module: nn.Module) -> bool:
    """Whether ``module`` takes and returns ``[B, L, E]``: its ``batch_first`` (attnkit's layers
    and attention), that of its ``self_attn`` (torch's layers keep it there), else True (Hugging
    Face modules are batch-first)."""
    flag = getattr(module, "batch_first", None)
    if flag is None:
        flag = getattr(getattr(module, "self_attn", None), "batch_first", True)
    return bool(flag)


def first_tensor(output: Any) -> Tensor:
    """The tensor a module returns: itself, or the first element of a tuple or ``ModelOutput``."""
    if isinstance(output, Tensor):
        return output
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, tuple | list) and output and isinstance(output[0], Tensor):
        return output[0]
    raise ValueError(f"expected a module output holding a tensor, got {type(output).__name__}")


class ResidualBlock:
    """The residual connection and layer norm after one self-attention module (ALTI's block).

    ``residual`` is the block's input ``x`` (``[B, M, E]``), ``output`` what the block returns:
    ``LN(x + W_O c + b_O)`` (post-norm, ``norm`` the layer norm) or ``x + W_O c + b_O``
    (pre-norm, ``norm`` is ``None``). Both are captured by torch forward hooks inside
    :meth:`capture`, from the last call.

    Args:
        norm: the layer norm after the residual sum, or ``None`` (pre-norm).
        hooks: ``fn(block) -> [handles]``: registers the forward hooks that fill
            :attr:`captured`.
    """

    def __init__(
        self,
        norm: nn.LayerNorm | None,
        hooks: Callable[[ResidualBlock], list[Any]],
    ) -> None:
        self.norm = norm
        self._hooks = hooks
        self.captured: dict[str, Tensor] = {}

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Capture the block's residual and output while the block runs."""
        handles = self._hooks(self)
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def tensors(self, name: str) -> tuple[Tensor, Tensor]:
        """``(residual, output)``, each ``[B, M, E]``, of the last call."""
        if "residual" not in self.captured or "output" not in self.captured:
            raise ValueError(
                f"the residual block of {name!r} did not run with its attention call (a layer "
                "that calls its attention module some other way, e.g. with a KV cache)"
            )
        residual = self.captured["residual"]
        output = self.captured["output"]
        if "attention" in self.captured:  # pre-norm: the block's output is x + attention
            output = residual + self.captured["attention"]
        return residual, output


def residual_block(model: nn.Module, name: str) -> ResidualBlock | None:
    """The :class:`ResidualBlock` of the self-attention module ``name``, or ``None`` when it is
    not one of the two known forms (module docstring)."""
    parent = parent_name(name)
    if parent is None:
        return None
    module, holder = model.get_submodule(name), model.get_submodule(parent)
    if getattr(holder, "self_attn", None) is module and isinstance(
        getattr(holder, "norm1", None), nn.LayerNorm
    ):
        return _transformer_layer_block(module, holder)
    output = getattr(holder, "output", None)
    if (
        getattr(holder, "self", None) is module
        and isinstance(getattr(output, "dense", None), nn.Linear)
        and isinstance(getattr(output, "LayerNorm", None), nn.LayerNorm)
    ):
        return _bert_block(output)
    return None


def _transformer_layer_block(attention: nn.Module, layer: nn.Module) -> ResidualBlock:
    """attnkit's (and torch's) layers: ``norm1(x + SA(x))`` or ``x + SA(norm1(x))``."""
    norm: nn.LayerNorm = layer.norm1
    layer_first, attention_first = is_batch_first(layer), is_batch_first(attention)
    pre_norm = bool(getattr(layer, "norm_first", False))

    def hooks(block: ResidualBlock) -> list[Any]:
        def query(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else kwargs["query"]
            block.captured["residual"] = batch_first(x.detach(), attention_first)

        def norm_input(_module: nn.Module, args: tuple[Any, ...]) -> None:
            block.captured["residual"] = batch_first(args[0].detach(), layer_first)

        def norm_output(_module: nn.Module, _args: Any, out: Tensor) -> None:
            block.captured["output"] = batch_first(out.detach(), layer_first)

        def attended(_module: nn.Module, _args: Any, out: Any) -> None:
            block.captured["attention"] = batch_first(first_tensor(out).detach(), attention_first)
            # the block's output is formed from the residual when it is read
            block.captured["output"] = block.captured["attention"]

        if pre_norm:
            return [
                norm.register_forward_pre_hook(norm_input),
                attention.register_forward_hook(attended),
            ]
        return [
            attention.register_forward_pre_hook(query, with_kwargs=True),
            norm.register_forward_hook(norm_output),
        ]

    return ResidualBlock(None if pre_norm else norm, hooks)


def _bert_block(output: nn.Module) -> ResidualBlock:
    """BERT's ``attention.output``: ``LayerNorm(dropout(dense(c)) + input_tensor)``."""

    def hooks(block: ResidualBlock) -> list[Any]:
        def captured(
            _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor
        ) -> None:
            residual = args[1] if len(args) > 1 else kwargs["input_tensor"]
            block.captured["residual"] = residual.detach()
            block.captured["output"] = out.detach()

        return [output.register_forward_hook(captured, with_kwargs=True)]

    return ResidualBlock(output.LayerNorm, hooks)
