"""attnkit_attention_forward called directly, against transformers' own eager functions for
the options only some models pass: scaling, soft-capping (Gemma 2), attention sinks (GPT-OSS)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2_eager
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss_eager

from attnkit.integrations.huggingface import attnkit_attention_forward


class Attention(nn.Module):
    """What the eager functions read off their module."""

    def __init__(self, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.is_causal = True
        self.sinks = nn.Parameter(torch.randn(heads))


def inputs(seed: int = 0, m: int = 5, n: int = 5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, m, 8, generator=g)
    k, v = torch.randn(2, 2, n, 8, generator=g), torch.randn(2, 2, n, 8, generator=g)
    mask = torch.ones(2, 1, m, n, dtype=torch.bool).tril(n - m)
    mask[1, ..., 3:] = False  # padding of the second example
    mask[1, ..., 0] = True  # every query keeps a key
    return q, k, v, mask


def float_mask(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_scaling_and_softcap_match_gemma2_eager(softcap) -> None:
    module = Attention(4, 2).eval()
    q, k, v, mask = inputs()
    expected, expected_w = gemma2_eager(
        module, q * 3, k, v, float_mask(mask), dropout=0.0, scaling=0.3, softcap=softcap
    )
    out, w = attnkit_attention_forward(
        module, q * 3, k, v, mask, scaling=0.3, softcap=softcap, output_attentions=True
    )
    assert (out - expected).abs().max() <= 1e-5
    assert (w - expected_w).abs().max() <= 1e-6
    # the float mask eager takes gives the same with attnkit
    out2, _ = attnkit_attention_forward(
        module, q * 3, k, v, float_mask(mask), scaling=0.3, softcap=softcap
    )
    assert (out2 - expected).abs().max() <= 1e-5


def test_softcap_refuses_a_float_mask_it_cannot_honour() -> None:
    q, k, v, mask = inputs()
    bias = torch.randn(mask.shape)
    with pytest.raises(ValueError, match="softcap"):
        attnkit_attention_forward(Attention(4, 2), q, k, v, bias, softcap=2.0)


def test_attention_sinks_match_gpt_oss_eager() -> None:
    module = Attention(4, 2).eval()
    q, k, v, mask = inputs(1)
    expected, expected_w = gpt_oss_eager(module, q, k, v, float_mask(mask), scaling=0.35)
    out, w = attnkit_attention_forward(
        module, q, k, v, mask, scaling=0.35, s_aux=module.sinks, output_attentions=True
    )
    assert (out - expected).abs().max() <= 1e-5
    assert (w - expected_w).abs().max() <= 1e-6
    assert w.sum(-1).max() < 1  # the sink keeps part of every row


def test_no_mask_means_causal_and_an_empty_static_cache_is_top_left() -> None:
    module = Attention(4, 2).eval()
    q, k, v, _ = inputs(2, m=3, n=6)  # 3 queries into a 6-slot cache holding them first
    out, w = attnkit_attention_forward(module, q, k, v, None, output_attentions=True)
    top_left = torch.ones(3, 6, dtype=torch.bool).tril()
    expected, expected_w = gemma2_eager(
        module, q, k, v, float_mask(top_left), dropout=0.0, scaling=8**-0.5
    )
    assert (out - expected).abs().max() <= 1e-5
    assert w.shape == (2, 4, 3, 6) and (w - expected_w).abs().max() <= 1e-6
