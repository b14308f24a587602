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
vector lanes). So the kernel only runs when the inputs are finite and no score can overflow
(``|s| <= scale · d · max|q'| · max|k'| + max|bias|``, checked on the inputs: O(input), never
on the ``[B, H, M, N]`` scores); otherwise the call is computed by the tiled algorithm, which
gives attnkit's documented semantics for NaN and infinities, the same as every other backend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.core.call import AttentionCall, AttentionOutput
from attnkit.core.reference import compute_dtype, score_features
from attnkit.core.tiled import tiled_attention


def scores_stay_finite(call: AttentionCall, q: Tensor, k: Tensor, scale: float) -> bool:
    """Whether every score of ``q`` and ``k`` (features) is surely finite: all inputs finite
    and the Cauchy-Schwarz-style bound on ``|scale · q'·k' + bias|`` below the dtype's max."""
    if not call.finite:
        return False
    if q.device.type == "meta" or not (q.numel() and k.numel()):
        return True
    tensors = [q, k] if call.bias is None or not call.bias.numel() else [q, k, call.bias]
    # max |x| from one min/max pass (aminmax reads the tensor once; vector_norm(inf) is ~20x
    # slower on the CPU); NaN and inf come out as NaN and inf, which fail the bound below
    parts = [torch.stack(torch.aminmax(t.detach())).abs().amax() for t in tensors]
    largest = torch.stack([t.to(torch.float64) for t in parts]).tolist()
    bound = abs(scale) * q.shape[-1] * largest[0] * largest[1] + sum(largest[2:])
    limit = torch.finfo(compute_dtype(call.v.dtype)).max / 4
    return bound < limit  # False for NaN and inf


def sdpa_attention(call: AttentionCall) -> AttentionOutput:
    """Run ``call`` through ``F.scaled_dot_product_attention`` (see the module docstring)."""
    q, k = score_features(call, call.q, call.k)  # e.g. W q of the general score, under autograd
    scale = call.score.resolve_scale(call.scale, call.k.shape[-1])
    scale = 1.0 if scale is None else scale  # SDPA's own default would be 1/sqrt(d)
    if not scores_stay_finite(call, q, k, scale):
        return tiled_attention(call)  # NaN/inf semantics the fused kernels do not define
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
