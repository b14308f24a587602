"""The ``sdpa`` backend: PyTorch's fused ``scaled_dot_product_attention`` for (scaled) dot + softmax.

Equivalent to the reference path for softmax alignment with every score that is a scaled dot
product of transformed queries and keys (``Score.pairwise_is_dot``: dot, scaled dot, general, biased
general, cosine — the features are computed first, under autograd, then the fused kernel). It neither
materialises the weights nor applies a ``score_mod``, so calls asking for those go elsewhere.
Dropout is the kernel's own (``dropout_p``, drawn from torch's generator, so reproducible under
``torch.manual_seed``), exactly what ``torch.nn.MultiheadAttention`` runs in training. Causal masks with ``M != N`` are passed as an explicit bottom-right boolean mask (SDPA's
own ``is_causal`` is top-left, pytorch/pytorch#108108); with ``M == N`` and no other mask the
kernel's ``is_causal`` fast path is used.

Non-finite numbers: the fused kernels define nothing for them (the CPU kernel returns a zero row
for some queries holding a NaN, and a NaN row for others, depending on where the NaN sits in its
vector lanes). So the backend declares ``nonfinite=False``: it declines calls whose inputs are not
finite or whose scores may overflow (``backend.overflow_reasons``: O(input), never the
``[B, H, M, N]`` scores), and the engine runs them on the next backend (``tiled``), which gives
attnkit's documented semantics for NaN and infinities.
"""

from __future__ import annotations

import torch.nn.functional as F

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.memory import feature_bytes, mask_bytes, mask_elements, sizes
from attnkit.core.reference import score_features


def sdpa_attention(call: AttentionCall) -> AttentionOutput:
    """Run ``call`` through ``F.scaled_dot_product_attention`` (see the module docstring)."""
    q, k = score_features(call, call.q, call.k)  # e.g. W q of the general score, under autograd
    scale = call.score.resolve_scale(call.scale, call.k.shape[-1])
    scale = 1.0 if scale is None else scale  # SDPA's own default would be 1/sqrt(d)
    _, _, m, n = call.shape
    # Square causal: the kernel's own flag (top-left = bottom-right when M == N) skips blocks.
    is_causal = call.only_causal and m == n
    attn_mask = None if is_causal else call.full_mask()
    if call.bias is not None:
        bias = call.bias.to(call.q.dtype)
        attn_mask = bias if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
    context = F.scaled_dot_product_attention(
        q.to(call.v.dtype),
        k.to(call.v.dtype),
        call.v,
        attn_mask=attn_mask,
        dropout_p=call.dropout,  # torch's own draws, as nn.MultiheadAttention makes them
        is_causal=is_causal,
        scale=scale,
    )
    return AttentionOutput(context=context)


def sdpa_memory(call: AttentionCall, backward: bool) -> int:
    """Predicted peak bytes of :func:`sdpa_attention` (see ``memory.py``). PyTorch's fused
    kernel (equal query and value feature sizes, no dropout) holds the context and the
    log-sum-exp ``[B, H, M]``, and its backward the gradients of ``q``, ``k``, ``v`` and of the
    context; otherwise PyTorch's materialised path holds 2 ``[B, H, M, N]`` tensors (3 in the
    backward; one more with dropout). A mask passed to the kernel is converted to floats."""
    z = sizes(call)
    _, _, m, n = call.shape
    extra = feature_bytes(call)
    if not (call.only_causal and m == n):  # else the kernel's own causal flag: no mask
        extra += mask_bytes(call) + mask_elements(call) * z.item
    io = (z.queries + z.keys + z.values + z.context) * z.item
    if z.dq == z.dv and call.dropout == 0:
        forward = z.context * z.item + z.rows * 4
        return extra + (forward + io if backward else forward)
    tensors = (3 if backward else 2) + (call.dropout > 0)
    return extra + tensors * z.scores * z.item + (io if backward else z.context * z.item)
