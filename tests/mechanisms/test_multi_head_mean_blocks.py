"""``MultiHeadAttention`` asked for the weights averaged over heads without autograd (torch's
default ``need_weights=True`` at inference): when the per-head weights ``[B, H, M, N]`` exceed
two blocks (``WEIGHTS_BLOCK``) the heads are attended in blocks, so only one block exists at a
time. The outputs and the averaged weights must be torch's (its own module, same
``state_dict``) or the float64 formula's (grouped-query heads, which torch lacks), with masks,
extra keys and causal masking, in every layout; a hook still sees one call per forward.

Sizes: M = N = 1,024 queries and keys, 8 heads of 2 features (E = 16): 64 MiB of per-head
weights for 2 sequences, cheap matrix products."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

import attnkit as ak
from attnkit.mechanisms.multi_head import WEIGHTS_BLOCK, MultiHeadAttention

E, H, B, L = 16, 8, 2, 1024


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_sizes_here_are_attended_in_blocks():
    """The premise of this file: these weights are larger than two blocks."""
    assert B * H * L * L * 4 > 2 * WEIGHTS_BLOCK
    with torch.no_grad():
        assert MultiHeadAttention(E, H, batch_first=True)._mean_blocks(B, L, L) is not None


def pair(**options: object) -> tuple[nn.MultiheadAttention, MultiHeadAttention]:
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(E, H, **options).eval()  # type: ignore[arg-type]
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    ours = MultiHeadAttention(E, H, **options).eval()  # type: ignore[arg-type]
    ours.load_state_dict(reference.state_dict())
    return reference, ours


def inputs(batch_first: bool, batched: bool = True, seed: int = 1) -> Tensor:
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(seed))
    if not batched:
        return x[0]
    return x if batch_first else x.transpose(0, 1)


PADDING = torch.zeros(B, L, dtype=torch.bool)
PADDING[1, -100:] = True  # the second sequence is 924 tokens long

MASKS = {
    "none": {},
    "padding": {"key_padding_mask": PADDING},
    "causal": {"attn_mask": nn.Transformer.generate_square_subsequent_mask(L), "is_causal": True},
    "per head": {
        "attn_mask": torch.rand(B * H, L, L, generator=torch.Generator().manual_seed(2)) > 0.3
    },
}


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("batch_first", [True, False])
def test_averaged_weights_and_output_equal_torch(mask: str, batch_first: bool):
    reference, ours = pair(batch_first=batch_first)
    x = inputs(batch_first)
    with torch.no_grad():
        expected, expected_weights = reference(x, x, x, **MASKS[mask])
        got, weights = ours(x, x, x, **MASKS[mask])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extra", ["add_bias_kv", "add_zero_attn"])
def test_extra_keys_and_cross_attention_equal_torch(extra: str):
    reference, ours = pair(batch_first=True, **{extra: True})
    x, memory = inputs(True), inputs(True, seed=3)
    with torch.no_grad():
        expected, expected_weights = reference(x, memory, memory, key_padding_mask=PADDING)
        got, weights = ours(x, memory, memory, key_padding_mask=PADDING)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)


def test_unbatched_and_inference_mode_equal_torch():
    reference, ours = pair()
    x = inputs(False, batched=False)  # [L, E]: one sequence, 32 MiB of per-head weights
    with torch.inference_mode():
        expected, expected_weights = reference(x, x, x)
        got, weights = ours(x, x, x)
    assert weights.shape == (L, L)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)


def test_grouped_query_heads_equal_the_float64_formula():
    """4 key/value heads serve 8 query heads (eq. 38-40 with K^(j), V^(j) shared by a group)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(E, H, batch_first=True, num_kv_heads=4).eval()
    x = inputs(True)
    with torch.no_grad():
        out, weights = mha(x, x, x, key_padding_mask=PADDING)
    d = E // H
    w = {name: p.detach().double() for name, p in mha.named_parameters()}
    b_q, b_k, b_v = w["in_proj_bias"].split([E, 4 * d, 4 * d])
    x64 = x.double()
    q = (x64 @ w["q_proj_weight"].T + b_q).unflatten(-1, (H, d)).transpose(1, 2)
    k = (x64 @ w["k_proj_weight"].T + b_k).unflatten(-1, (4, d)).transpose(1, 2)
    v = (x64 @ w["v_proj_weight"].T + b_v).unflatten(-1, (4, d)).transpose(1, 2)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
        PADDING[:, None, None, :], float("-inf")
    )
    a = scores.softmax(-1)  # [B, H, L, L]
    context = (a @ v).transpose(1, 2).flatten(2)
    expected = context @ w["out_proj.weight"].T + w["out_proj.bias"]
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights.double(), a.mean(1), rtol=1e-4, atol=1e-6)


def test_a_hook_sees_one_call_with_every_head():
    """Watched by a hook, the module makes its one call of all heads (what recording reads)."""
    _, ours = pair(batch_first=True)
    x = inputs(True)
    shapes: list[tuple[int, ...]] = []

    def count(call, module, run):  # type: ignore[no-untyped-def]
        shapes.append(tuple(call.q.shape))
        return run(call)

    with torch.no_grad():
        plain, plain_weights = ours(x, x, x)
        with ak.attention_hooks(count, model=ours):
            watched, watched_weights = ours(x, x, x)
    assert shapes == [(B, H, L, E // H)]
    torch.testing.assert_close(watched, plain, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(watched_weights, plain_weights, rtol=0, atol=1e-7)
