"""A pretrained BERT-style encoder as attnkit's own layers: :func:`to_attnkit`.

BERT's layer (Devlin et al. 2019) is the post-norm Transformer encoder layer of Vaswani et al.:
``x = LN(x + Drop(W_O · MHA(x)))``, ``x = LN(x + Drop(W_2 · act(W_1 x)))``, which is
:class:`attnkit.layers.TransformerEncoderLayer` with ``norm_first=False``. The weights map one to
one (HF name → attnkit name, per layer)::

    attention.self.{query,key,value}   → self_attn.in_proj_weight / in_proj_bias (stacked q, k, v)
    attention.output.dense             → self_attn.out_proj
    attention.output.LayerNorm         → norm1
    intermediate.dense                 → linear1
    output.dense                       → linear2
    output.LayerNorm                   → norm2

So every attnkit feature (any score or alignment, efficient attention kinds, the engine's
backend choice, KV caches) applies to a pretrained model. The embeddings stay the HF model's:
``encoder(model.embeddings(input_ids), src_key_padding_mask=attention_mask == 0)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.layers.transformer import TransformerEncoder, TransformerEncoderLayer

#: transformers' ``hidden_act`` names and the same functions in torch
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "relu": F.relu,
    "gelu_new": functools.partial(F.gelu, approximate="tanh"),
    "gelu_pytorch_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
    "swish": F.silu,
}


def to_attnkit(model: nn.Module, **layer_options: Any) -> TransformerEncoder:
    """The encoder of a BERT-style Hugging Face model as an :class:`attnkit.layers.TransformerEncoder`
    with the same weights (batch-first, post-norm).

    Args:
        model: a ``BertModel`` (or a model holding one as ``.bert``, e.g.
            ``BertForSequenceClassification``; RoBERTa, MiniLM and other models with BERT's
            layer work alike).
        layer_options: keyword arguments of :class:`TransformerEncoderLayer` that change the
            attention (``score=``, ``align=``, ``attention=`` an efficient kind); with them the
            encoder is no longer the pretrained function.

    Returns:
        a ``TransformerEncoder`` in ``model``'s dtype and device, in eval mode if ``model`` is.
        Its output equals the HF encoder's ``last_hidden_state`` to float rounding.

    Example::

        >>> from transformers import BertConfig, BertModel
        >>> config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
        ...                     num_attention_heads=2, intermediate_size=32)
        >>> model = BertModel._from_config(config, attn_implementation="attnkit").eval()
        >>> input_ids = torch.randint(30, (2, 5))
        >>> encoder = to_attnkit(model)
        >>> hidden = encoder(model.embeddings(input_ids))
        >>> torch.allclose(hidden, model(input_ids).last_hidden_state, atol=1e-5)
        True
    """
    bert = getattr(model, "bert", model)
    config = getattr(bert, "config", None)
    layers = getattr(getattr(bert, "encoder", None), "layer", None)
    if config is None or layers is None or len(layers) == 0:
        raise TypeError(
            "expected a BERT-style transformers model (config and encoder.layer), got "
            f"{type(model).__name__}"
        )
    first = layers[0]
    if not all(hasattr(first, a) for a in ("attention", "intermediate", "output")) or not hasattr(
        first.attention, "self"
    ):
        raise TypeError(
            f"{type(first).__name__} is not BERT's layer (attention.self, intermediate, output)"
        )
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError("to_attnkit converts encoders; this BERT is configured as a decoder")
    act = config.hidden_act
    activation = ACTIVATIONS.get(act) if isinstance(act, str) else None
    if activation is None:
        raise ValueError(
            f"hidden_act {act!r} has no attnkit equivalent; known: {list(ACTIVATIONS)}"
        )
    position_type = getattr(config, "position_embedding_type", "absolute")
    if position_type not in (None, "absolute"):
        raise ValueError(
            f"position_embedding_type {position_type!r} changes the attention scores; only "
            "'absolute' (added to the embeddings) converts"
        )
    param = next(bert.parameters())
    layer = TransformerEncoderLayer(
        config.hidden_size,
        config.num_attention_heads,
        config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        activation=activation,
        layer_norm_eps=config.layer_norm_eps,
        batch_first=True,
        device=param.device,
        dtype=param.dtype,
        **layer_options,
    )
    encoder = TransformerEncoder(layer, len(layers))
    state = {}
    for i, hf_layer in enumerate(layers):
        state.update({f"layers.{i}.{k}": v for k, v in _layer_state(hf_layer).items()})
    missing, unexpected = encoder.load_state_dict(state, strict=False)
    if unexpected or any(_is_weight(k) for k in missing):
        raise ValueError(
            f"the converted weights do not fit the attnkit layers: missing {missing}, "
            f"unexpected {unexpected}"
        )
    for attnkit_layer in encoder.layers:
        attn: Any = attnkit_layer.self_attn
        if isinstance(getattr(attn, "dropout", None), float):
            attn.dropout = config.attention_probs_dropout_prob
    return encoder.train(bert.training)


def _is_weight(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("weight", "bias", "in_proj_weight", "in_proj_bias")


def _layer_state(layer: Any) -> dict[str, Tensor]:  # an HF BertLayer (duck-typed)
    attn = layer.attention
    q, k, v = attn.self.query, attn.self.key, attn.self.value
    with torch.no_grad():
        state = {
            "self_attn.in_proj_weight": torch.cat([q.weight, k.weight, v.weight]),
            "self_attn.in_proj_bias": torch.cat([q.bias, k.bias, v.bias]),
            "self_attn.out_proj.weight": attn.output.dense.weight,
            "self_attn.out_proj.bias": attn.output.dense.bias,
            "norm1.weight": attn.output.LayerNorm.weight,
            "norm1.bias": attn.output.LayerNorm.bias,
            "linear1.weight": layer.intermediate.dense.weight,
            "linear1.bias": layer.intermediate.dense.bias,
            "linear2.weight": layer.output.dense.weight,
            "linear2.bias": layer.output.dense.bias,
            "norm2.weight": layer.output.LayerNorm.weight,
            "norm2.bias": layer.output.LayerNorm.bias,
        }
    return {name: t.detach().clone() for name, t in state.items()}
