"""attnkit as a Hugging Face ``transformers`` attention implementation: ``"attnkit"``.

transformers looks a model's attention function up by ``config._attn_implementation`` in its
``AttentionInterface`` and builds the masks with the function registered under the same name in
``AttentionMaskInterface``. :func:`register` puts :func:`attnkit_attention_forward` in the first
and transformers' own ``sdpa_mask`` in the second: boolean masks, ``True`` = may attend, which is
attnkit's convention, and ``None`` when the only constraint is causality, which the engine then
applies as a flag (so SDPA's fused kernel still runs). Registering the attention function alone
is not enough: an implementation without a mask function receives no mask at all, so padding is
silently ignored.

Only models that look their attention function up there can run on attnkit: :mod:`.guard`
refuses every other one in one line, when it is built (or, when its source cannot tell, at the end
of its first forward that never reached :func:`attnkit_attention_forward`).

Every call then goes through :func:`attnkit.attention`, inside the forward of the model's
attention module (``BertSelfAttention``, ``LlamaAttention``, ...), so attention hooks
(:mod:`attnkit.core.hooks`) attribute it to that module's name in ``model.named_modules()``.

What transformers passes, and what happens to it:

* ``query [B, H, M, D]``, ``key``/``value [B, H_kv, N, D]`` (grouped-query heads are repeated by
  the engine, as ``repeat_kv`` does); the output is ``[B, M, H, D]``.
* ``attention_mask``: bool (from the registered mask function) or float (added to the scores,
  as eager does); ``None`` with ``is_causal`` (the module's flag) means causal attention, as in
  transformers' SDPA integration (top-left for an empty static cache, the only case with more
  keys than queries).
* ``scaling`` (``None``: ``1/sqrt(D)``), ``dropout`` (on the weights, drawn from torch's RNG),
  ``position_bias`` (T5's relative bias, added to the scores; gradients reach it),
  ``softcap`` (``softcap · tanh(score / softcap)``, Gemma 2), ``sliding_window`` (already in the
  mask transformers builds; applied here when it is not), ``s_aux`` (GPT-OSS attention sinks:
  one extra logit per head in the softmax denominator, exactly, from the log-sum-exp).
* ``output_attentions``: the weights are returned from the engine's weights-on-demand path
  (the ``dense`` backend: scores by one GEMM into the weights' buffer, softmax, one GEMM; the
  tiled backend for scores that are not a dot product or carry a ``score_mod``), not from a
  slower fallback. A query with no
  admissible key (e.g. a left-padding position) gets zero weights and a zero context, where eager
  spreads it uniformly over the masked keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core.align import Align
from attnkit.core.engine import attention
from attnkit.core.hooks import ModuleSelection, select_modules
from attnkit.core.masks import ScoreMod
from attnkit.core.masks import sliding_window as sliding_window_mask
from attnkit.core.scores import Score
from attnkit.integrations.huggingface import guard

#: the name to pass as ``attn_implementation``
ATTN_IMPLEMENTATION = "attnkit"


@dataclass(frozen=True)
class AttentionSettings:
    """What :func:`swap_attention` changes in a model's attention (``None`` keeps HF's).

    Attributes:
        score: a score name or ``ak.scores.Score`` (``"cosine"``, ``ak.scores.Euclidean()``);
            with a score other than HF's, the model's ``scaling`` is not applied (the score's own
            scale, or ``scale``, is).
        align: an alignment name or ``ak.align.Align`` (``"entmax15"``, ``"sparsemax"``).
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` (FlexAttention's), e.g.
            :class:`attnkit.layers.ALiBi`; applied after any soft-capping.
        scale: multiplies the scores of a swapped ``score`` (``None``: the score's default).

    Example::

        >>> AttentionSettings(align="sparsemax")
        AttentionSettings(score=None, align='sparsemax', score_mod=None, scale=None)
    """

    score: str | Score | None = None
    align: str | Align | None = None
    score_mod: ScoreMod | None = None
    scale: float | None = None


# id(module) -> its settings; replaced, never mutated, so an outer scope's table is kept
_SETTINGS: ContextVar[dict[int, AttentionSettings] | None] = ContextVar(
    "attnkit_hf_attention_settings", default=None
)


@contextmanager
def swap_attention(
    model: nn.Module,
    *,
    score: str | Score | None = None,
    align: str | Align | None = None,
    score_mod: ScoreMod | None = None,
    scale: float | None = None,
    modules: ModuleSelection = None,
) -> Iterator[AttentionSettings]:
    """Run a Hugging Face model (``attn_implementation="attnkit"``) with another score,
    alignment or ``score_mod`` while the block runs.

    This changes the model: it no longer computes the function it was trained (or pretrained)
    as; use it for experiments (how much does a BERT lose with 1.5-entmax, with ALiBi on top of
    its learned positions?) or to fine-tune the changed model. Scoped like the attention hooks:
    it holds in the context that enters it (another thread runs the model unchanged) and ends
    with the block.

    Args:
        model: a model loaded with ``attn_implementation="attnkit"``.
        score, align, score_mod, scale: see :class:`AttentionSettings`.
        modules: which attention modules (names / ``fnmatch`` patterns of
            ``model.named_modules()``, or a predicate); default all.

    Yields:
        the :class:`AttentionSettings` in force.

    Example::

        >>> from transformers import BertConfig, BertModel
        >>> config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
        ...                     num_attention_heads=2, intermediate_size=32)
        >>> model = BertModel._from_config(config, attn_implementation="attnkit").eval()
        >>> input_ids = torch.randint(30, (2, 5))
        >>> with swap_attention(model, align="entmax15") as settings:
        ...     sparse = model(input_ids).last_hidden_state
        >>> sparse.shape, settings.align
        (torch.Size([2, 5, 16]), 'entmax15')
    """
    if score is None and align is None and score_mod is None:
        raise ValueError("swap_attention needs a score, an align or a score_mod to change")
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be callable, got {type(score_mod).__name__}")
    if scale is not None and score is None:
        raise ValueError("scale applies to a swapped score: pass score= too")
    guard.check_model(model)
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if implementation is not None and implementation != ATTN_IMPLEMENTATION:
        raise ValueError(
            f"the model runs attn_implementation={implementation!r}; load it with "
            f'attn_implementation="{ATTN_IMPLEMENTATION}" (after importing '
            "attnkit.integrations.huggingface) to swap its attention"
        )
    settings = AttentionSettings(score, align, score_mod, scale)
    chosen = select_modules(model, modules)
    table = dict(_SETTINGS.get() or {})
    table.update({id(m): settings for m in chosen})
    token = _SETTINGS.set(table)
    try:
        yield settings
    finally:
        _SETTINGS.reset(token)


def attnkit_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' attention-function signature, computed by :func:`attnkit.attention`.

    Args:
        module: the HF attention module (its ``is_causal`` flag is read when no mask is given).
        query: ``[B, H, M, D]``.
        key, value: ``[B, H_kv, N, D]`` / ``[B, H_kv, N, D_v]``, ``H_kv`` dividing ``H``.
        attention_mask: bool ``[B, 1, M, N]`` (True = may attend), float (added) or ``None``.
        scaling: multiplies ``q · k`` (``None``: ``1/sqrt(D)``).
        dropout: dropout probability on the weights (transformers passes 0 in eval).
        kwargs: ``is_causal``, ``position_bias``, ``softcap``, ``sliding_window``, ``s_aux``,
            ``output_attentions`` (module docstring); others (``position_ids``, ``use_cache``,
            ...) concern the model, not the attention.

    Returns:
        ``(output [B, M, H, D_v], weights [B, H, M, N] or None)``: the weights when the caller
        asked for attentions (``output_attentions``).

    Example::

        >>> import types
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
        >>> out, weights = attnkit_attention_forward(
        ...     types.SimpleNamespace(is_causal=False), q, k, v, None, output_attentions=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 4, 8]), torch.Size([2, 4, 5, 7]))
    """
    guard.note_call()
    q_len, kv_len = query.shape[2], key.shape[2]
    mask = attention_mask
    if mask is not None and mask.dim() == 4 and mask.shape[-1] > kv_len:
        mask = mask[..., :kv_len]  # a static cache's mask covers its whole capacity
    position_bias: Tensor | None = kwargs.get("position_bias")
    softcap: float | None = kwargs.get("softcap")
    window: int | None = kwargs.get("sliding_window")
    sinks: Tensor | None = kwargs.get("s_aux")

    causal = False
    cropped = kv_len
    if mask is None:
        is_causal = kwargs.get("is_causal")
        if is_causal is None:
            is_causal = getattr(module, "is_causal", True)
        causal = q_len > 1 and bool(is_causal)
        if causal and kv_len > q_len:
            # transformers skips the mask only for an empty static cache here: its is_causal is
            # top-left, i.e. the first q_len keys, causally; the rest are empty slots
            cropped = q_len
            key, value = key[:, :, :q_len], value[:, :, :q_len]
            if position_bias is not None:
                position_bias = position_bias[..., :q_len]
        if window is not None and key.shape[2] > window:
            if not causal:
                raise ValueError(
                    f"sliding_window={window} over {key.shape[2]} keys without a mask: expected "
                    "the mask transformers builds for it (register() registers the mask function)"
                )
            mask, causal = sliding_window_mask(q_len, key.shape[2], window, query.device), False

    if position_bias is not None:
        if mask is None:
            mask = position_bias  # added to the scores; causality stays a flag
        elif mask.dtype == torch.bool:
            mask = position_bias.masked_fill(~mask, float("-inf"))
        else:
            mask = position_bias + mask

    settings = (_SETTINGS.get() or {}).get(id(module))
    score: str | Score = "scaled_dot"
    align: str | Align = "softmax"
    scale = scaling
    score_mod: ScoreMod | None = None
    if settings is not None:
        if settings.score is not None:
            score, scale = settings.score, settings.scale
        if settings.align is not None:
            align = settings.align
        score_mod = settings.score_mod
    if softcap is not None:
        mask = _softcap_mask(mask, softcap)
        score_mod = _softcapped(float(softcap), score_mod)

    want_weights = _weights_requested(kwargs)
    out = attention(
        query,
        key,
        value,
        score=score,
        align=align,
        mask=mask,
        causal=causal,
        score_mod=score_mod,
        scale=scale,
        dropout=float(dropout),
        return_weights=want_weights,
        return_lse=sinks is not None,
    )
    context, weights = out.context, out.weights
    if sinks is not None:
        # softmax over the keys and one sink logit s_h: every weight shrinks by
        # exp(lse) / (exp(lse) + exp(s_h)) = sigmoid(lse - s_h); a row with no key gets 0
        assert out.lse is not None
        keep = torch.sigmoid(out.lse.float() - sinks.float().view(1, -1, 1))
        context = (context.float() * keep.unsqueeze(-1)).to(context.dtype)
        if weights is not None:
            weights = (weights.float() * keep.unsqueeze(-1)).to(weights.dtype)
    if weights is not None and cropped < kv_len:
        weights = torch.nn.functional.pad(weights, (0, kv_len - cropped))
    return context.transpose(1, 2).contiguous(), weights


def _softcapped(softcap: float, inner: ScoreMod | None) -> ScoreMod:
    if softcap <= 0 or not math.isfinite(softcap):
        raise ValueError(f"softcap must be a positive number, got {softcap}")

    def mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        capped = softcap * torch.tanh(score / softcap)  # Gemma 2: before the mask
        return capped if inner is None else inner(capped, b, h, q_idx, kv_idx)

    return mod


def _softcap_mask(mask: Tensor | None, softcap: float) -> Tensor | None:
    """The mask as a bool one: eager soft-caps the scores and then adds the mask, attnkit adds a
    float mask before its ``score_mod``, so only masks that keep or remove a key agree."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    removed = mask <= torch.finfo(mask.dtype).min / 2
    if not bool(((mask == 0) | removed).all()):
        raise ValueError(
            f"softcap={softcap} with a float attention mask that adds values other than 0 and "
            "-inf: eager adds it after soft-capping, attnkit before; pass a bool mask"
        )
    return ~removed


def _weights_requested(kwargs: dict[str, Any]) -> bool:
    """Whether the caller wants this call's weights: ``output_attentions`` in the call, or
    transformers' output collector asking for attentions (some models, e.g. GPT-2, do not pass
    ``output_attentions`` down to the attention function)."""
    if kwargs.get("output_attentions"):
        return True
    collector = _active_collector()
    return collector is not None and any(str(k).endswith("attentions") for k in collector)


def _active_collector() -> dict[str, Any] | None:
    try:  # transformers >= 5: outputs are captured by hooks, the request sits in a ContextVar
        from transformers.utils.output_capturing import _active_collector as active
    except ImportError:  # pragma: no cover - older transformers pass output_attentions down
        return None
    collected: dict[str, Any] | None = active.get()
    return collected


def register() -> None:
    """Register ``"attnkit"`` with transformers' ``AttentionInterface`` and
    ``AttentionMaskInterface``, and install the guard that refuses models which would never call
    it (:func:`attnkit.integrations.huggingface.guard.install`); idempotent; importing
    :mod:`attnkit.integrations.huggingface` calls it.

    Example::

        >>> import transformers
        >>> register()  # idempotent
        >>> "attnkit" in transformers.AttentionInterface._global_mapping
        True

    Raises:
        ImportError: transformers is not installed (``pip install "attnkit[hf]"``).
    """
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as error:  # pragma: no cover - the package needs transformers
        raise ImportError(
            "attnkit.integrations.huggingface needs transformers: pip install 'attnkit[hf]'"
        ) from error
    AttentionInterface.register(ATTN_IMPLEMENTATION, attnkit_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
    guard.install()  # a model that would never call the function above is refused
