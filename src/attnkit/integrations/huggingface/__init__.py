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
* :func:`view_model`: the interactive attention viewer for a model and an input text
  (``explain_model``, its old name, still works and warns);
* :func:`check_model`, :func:`routes_attention`: whether a model can run on attnkit at all (a
  model that computes its attention outside transformers' attention interface is refused).
"""

from attnkit.core.deprecation import renamed_attributes
from attnkit.integrations.huggingface.attention import (
    ATTN_IMPLEMENTATION,
    AttentionSettings,
    attnkit_attention_forward,
    register,
    swap_attention,
)
from attnkit.integrations.huggingface.convert import to_attnkit
from attnkit.integrations.huggingface.guard import check_model, routes_attention
from attnkit.integrations.huggingface.view import attention_maps, load_model, view_model

register()

__all__ = [
    "ATTN_IMPLEMENTATION",
    "AttentionSettings",
    "attention_maps",
    "attnkit_attention_forward",
    "check_model",
    "load_model",
    "register",
    "routes_attention",
    "swap_attention",
    "to_attnkit",
    "view_model",
]

__getattr__ = renamed_attributes(
    __name__,
    {"explain_model": ("attnkit.integrations.huggingface.view_model", lambda: view_model)},
)
