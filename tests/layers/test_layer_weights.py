"""Attention weights of the Transformer layers through ``need_weights=True``.

A layer returns its output tensor, or with ``need_weights=True`` a ``LayerOutput`` of the same
output and the weights per head before dropout. Ground truth: torch's ``nn.MultiheadAttention``
(with the layer's ``state_dict``) called on the block's input, which torch's own layer computes;
for rotary positions and cached steps, a float64 softmax written here.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

import attnkit as ak
from attnkit.layers import (
    LayerOutput,
    RotaryEmbedding,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    cross_attend,
    self_attend,
)

E, H, FF = 8, 2, 12
B, M, N = 2, 5, 4
D = E // H


def x_of(*shape: int, seed: int = 1) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def copied(reference: nn.Module, ours: nn.Module) -> tuple[nn.Module, nn.Module]:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    result = ours.load_state_dict(reference.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    return reference.eval(), ours.eval()


def torch_weights(mha: nn.MultiheadAttention, x: Tensor, memory: Tensor, **masks) -> Tensor:
    return mha(x, memory, memory, need_weights=True, average_attn_weights=False, **masks)[1]


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_weights_are_torchs_self_attention(norm_first: bool) -> None:
    reference, ours = copied(
        nn.TransformerEncoderLayer(E, H, FF, batch_first=True, norm_first=norm_first),
        TransformerEncoderLayer(E, H, FF, batch_first=True, norm_first=norm_first),
    )
    src = x_of(B, M, E)
    padding = torch.tensor([[False] * M, [False] * 3 + [True] * 2])
    with torch.no_grad():
        got = ours(src, src_key_padding_mask=padding, need_weights=True)
        x = reference.norm1(src) if norm_first else src
        expected = torch_weights(reference.self_attn, x, x, key_padding_mask=padding)
        output = reference(src, src_key_padding_mask=padding)
    assert isinstance(got, LayerOutput)
    torch.testing.assert_close(got.weights, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.output, output, rtol=0, atol=1e-5)
    plain = ours(src, src_key_padding_mask=padding)
    assert isinstance(plain, Tensor)
    torch.testing.assert_close(got.output, plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_weights_are_torchs_cross_attention(norm_first: bool) -> None:
    """Sequence-first layout (torch's default): the weights are still ``[B, H, M, N]``."""
    reference, ours = copied(
        nn.TransformerDecoderLayer(E, H, FF, norm_first=norm_first),
        TransformerDecoderLayer(E, H, FF, norm_first=norm_first),
    )
    tgt, memory = x_of(M, B, E), x_of(N, B, E, seed=2)
    mask = nn.Transformer.generate_square_subsequent_mask(M)
    memory_padding = torch.tensor([[False] * N, [False] * 2 + [True] * 2])
    with torch.no_grad():
        got = ours(tgt, memory, mask, memory_key_padding_mask=memory_padding, need_weights=True)
        y = reference.norm1(tgt) if norm_first else tgt
        attended = y + reference._sa_block(y, mask, None, False)
        x = tgt + reference._sa_block(y, mask, None, False) if norm_first else attended
        x = x if norm_first else reference.norm1(x)
        x = reference.norm2(x) if norm_first else x
        expected = torch_weights(
            reference.multihead_attn, x, memory, key_padding_mask=memory_padding
        )
        output = reference(tgt, memory, mask, memory_key_padding_mask=memory_padding)
    assert got.weights.shape == (B, H, M, N)
    torch.testing.assert_close(got.weights, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.output, output, rtol=0, atol=1e-5)


def test_stacks_return_the_last_layers_weights() -> None:
    encoder = TransformerEncoder(TransformerEncoderLayer(E, H, FF, batch_first=True), 2).eval()
    decoder = TransformerDecoder(TransformerDecoderLayer(E, H, FF, batch_first=True), 2).eval()
    src, tgt = x_of(B, N, E), x_of(B, M, E, seed=3)
    with torch.no_grad():
        memory = encoder(src, need_weights=True)
        hidden = encoder.layers[0](src)
        last = encoder.layers[1](hidden, need_weights=True)
        torch.testing.assert_close(memory.weights, last.weights, rtol=0, atol=0)
        torch.testing.assert_close(memory.output, encoder(src), rtol=0, atol=1e-6)
        decoded = decoder(tgt, memory.output, need_weights=True)
        hidden = decoder.layers[0](tgt, memory.output)
        last = decoder.layers[1](hidden, memory.output, need_weights=True)
        torch.testing.assert_close(decoded.weights, last.weights, rtol=0, atol=0)


def softmax_weights(q: Tensor, k: Tensor, allowed: Tensor) -> Tensor:
    """``softmax(q k^T / sqrt(D))`` over the allowed keys, in float64."""
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1)


def heads(mha: ak.MultiHeadAttention, x: Tensor) -> tuple[Tensor, Tensor]:
    """Queries and keys per head ``[B, H, L, D]`` from the packed projection (eq. 38)."""
    q, k, _ = torch.nn.functional.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, -1)
    return (t.unflatten(-1, (H, D)).transpose(1, 2) for t in (q, k))


def test_rotary_self_attention_weights_follow_the_formula() -> None:
    """Rotary positions take the projection-level route; its weights are the softmax of the
    rotated queries and keys."""
    mha = ak.MultiHeadAttention(E, H, batch_first=True).eval()
    rope = RotaryEmbedding(D)
    x = x_of(B, M, E)
    with torch.no_grad():
        got = self_attend(mha, x, rotary=rope, is_causal=True, need_weights=True)
        q, k = heads(mha, x)
        positions = torch.arange(M).expand(B, M)
        causal = torch.ones(M, M, dtype=torch.bool).tril()
        expected = softmax_weights(rope(q, positions), rope(k, positions), causal)
        plain = self_attend(mha, x, rotary=rope, is_causal=True)
    torch.testing.assert_close(got.weights.double(), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.output, plain, rtol=0, atol=1e-6)


def test_cached_steps_return_the_weights_of_the_whole_target() -> None:
    """Weights of a cached decoding step: the cross-attention's over the memory equal the full
    target's rows, and the self-attention's cover the tokens cached so far."""
    layer = TransformerDecoderLayer(E, H, FF, batch_first=True).eval()
    tgt, memory = x_of(B, M, E), x_of(B, N, E, seed=2)
    [cache] = TransformerDecoder(layer, 1).new_caches(M + 2)
    with torch.no_grad():
        whole = layer(tgt, memory, tgt_is_causal=True, need_weights=True)
        steps = [layer(tgt[:, i : i + 1], memory, cache=cache, need_weights=True) for i in range(M)]
        for i, step in enumerate(steps):
            torch.testing.assert_close(
                step.weights[:, :, 0], whole.weights[:, :, i], atol=1e-6, rtol=0
            )
            torch.testing.assert_close(step.output[:, 0], whole.output[:, i], atol=1e-5, rtol=0)
        mha, kv = ak.MultiHeadAttention(E, H, batch_first=True).eval(), ak.layers.KVCache(M + 2)
        for i in range(M):
            step = self_attend(mha, tgt[:, i : i + 1], cache=kv, need_weights=True)
        q, k = heads(mha, tgt)
        expected = softmax_weights(q[:, :, -1:], k, torch.ones(1, M, dtype=torch.bool))
    assert step.weights.shape == (B, H, 1, M)  # the tokens cached so far
    torch.testing.assert_close(step.weights.double(), expected, rtol=0, atol=1e-6)


def test_cross_attend_weights_with_a_cache_equal_the_uncached_ones() -> None:
    mha = ak.MultiHeadAttention(E, H, batch_first=True).eval()
    x, memory = x_of(B, M, E), x_of(B, N, E, seed=2)
    padding = torch.tensor([[False] * N, [False] * 3 + [True]])
    with torch.no_grad():
        cached = cross_attend(
            mha, x, memory, key_padding_mask=padding, cache=ak.layers.CrossAttentionCache(),
            need_weights=True,
        )  # fmt: skip
        uncached = cross_attend(mha, x, memory, key_padding_mask=padding, need_weights=True)
    torch.testing.assert_close(cached.weights, uncached.weights, rtol=0, atol=1e-6)
    torch.testing.assert_close(cached.output, uncached.output, rtol=0, atol=1e-6)


def test_lengths_without_a_cache_are_refused() -> None:
    layer = TransformerEncoderLayer(E, H, FF, batch_first=True)
    with pytest.raises(ValueError, match="lengths= is for a cache"):
        layer(x_of(B, M, E), lengths=torch.tensor([M, 3]))


def test_an_override_with_torchs_signature_runs_with_positions() -> None:
    """``_sa_block`` is the one self-attention route: a subclass overriding it with torch's
    signature is called with rotary positions too, and its ``super()`` call applies them."""

    class Halved(TransformerEncoderLayer):
        def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
            return 0.5 * super()._sa_block(x, attn_mask, key_padding_mask, is_causal=is_causal)

    kwargs = {"dropout": 0.0, "batch_first": True, "rotary": RotaryEmbedding(D)}
    ours, plain = Halved(E, H, FF, **kwargs).eval(), TransformerEncoderLayer(E, H, FF, **kwargs)
    plain.load_state_dict(ours.state_dict())
    src = x_of(B, M, E)
    with torch.no_grad():
        attended = self_attend(plain.self_attn, src, rotary=plain.rotary)
        expected = plain.norm1(src + 0.5 * attended)
        expected = plain.norm2(expected + plain._ff_block(expected))
        torch.testing.assert_close(ours(src), expected, rtol=0, atol=1e-6)
