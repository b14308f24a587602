"""Hugging Face ``transformers`` on attnkit: ``attn_implementation="attnkit"``.

Importing this package registers ``"attnkit"`` with transformers (:func:`register`), so

    >>> import attnkit.integrations.huggingface  # registers "attnkit"
    >>> model = AutoModel.from_pretrained(path, attn_implementation="attnkit")

runs every attention of the model through :func:`attnkit.attention`: the same outputs as
``attn_implementation="eager"`` (to float rounding), attention weights from the fast path with
``output_attentions=True``, and every tool of :mod:`attnkit.interpret` and
:mod:`attnkit.evaluate` (record, rollout, flow, gradient-weighted maps, head importance,
ablation) on the model, with module names as ``model.named_modules()`` gives them.

* :func:`swap_attention`: run the model with another score, alignment or ``score_mod``;
* :func:`to_attnkit`: a BERT-style encoder rebuilt as :class:`attnkit.layers.TransformerEncoder`;
* :func:`explain_model`: the interactive attention viewer for a model and an input text;
* :func:`check_model`, :func:`routes_attention`: whether a model can run on attnkit at all (a
  model that computes its attention outside transformers' attention interface is refused).
"""

from attnkit.integrations.huggingface.attention import (
    ATTN_IMPLEMENTATION,
    AttentionSettings,
    attnkit_attention_forward,
    register,
    swap_attention,
)
from attnkit.integrations.huggingface.convert import to_attnkit
from attnkit.integrations.huggingface.explain import attention_maps, explain_model, load_model
from attnkit.integrations.huggingface.guard import check_model, routes_attention

register()

__all__ = [
    "ATTN_IMPLEMENTATION",
    "AttentionSettings",
    "attention_maps",
    "attnkit_attention_forward",
    "check_model",
    "explain_model",
    "load_model",
    "register",
    "routes_attention",
    "swap_attention",
    "to_attnkit",
]
