"""``MultiHeadAttention`` as a drop-in for ``torch.nn.MultiheadAttention`` beyond eval outputs:
``merge_masks``, weights after dropout in training mode, ``torch.compile(fullgraph=True)`` and
nested tensors. Ground truth: torch's own module with the same ``state_dict``."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from attnkit.mechanisms.multi_head import MultiHeadAttention

E, H, N, L = 8, 2, 2, 5


def pair(dropout: float = 0.0, seed: int = 0) -> tuple[nn.MultiheadAttention, MultiHeadAttention]:
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(E, H, dropout=dropout, batch_first=True)
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    ours = MultiHeadAttention(E, H, dropout=dropout, batch_first=True)
    ours.load_state_dict(reference.state_dict())
    return reference, ours


# --------------------------------------------------------------------------------------------
# merge_masks
# --------------------------------------------------------------------------------------------

MASKS = {
    "none": None,
    "bool": lambda: torch.rand(L, L) > 0.6,
    "float": lambda: torch.randn(L, L),
    "bool_per_head": lambda: torch.rand(N * H, L, L) > 0.6,
    "float_per_head": lambda: torch.randn(N * H, L, L),
}
PADDING = {
    "none": None,
    "bool": lambda: torch.tensor([[False] * L, [False] * 3 + [True] * 2]),
    "float": lambda: torch.tensor([[0.0] * L, [0.0] * 3 + [float("-inf")] * 2]),
}


@pytest.mark.parametrize("padding", PADDING, ids=str)
@pytest.mark.parametrize("attn", MASKS, ids=str)
def test_merge_masks_equals_torch(attn, padding):
    reference, ours = pair()
    torch.manual_seed(1)
    attn_mask = None if MASKS[attn] is None else MASKS[attn]()
    kpm = None if PADDING[padding] is None else PADDING[padding]()
    query = torch.randn(N, L, E)
    expected, expected_type = reference.merge_masks(attn_mask, kpm, query)
    merged, mask_type = ours.merge_masks(attn_mask, kpm, query)
    assert mask_type == expected_type
    if expected is None:
        assert merged is None
    else:
        assert merged.dtype == expected.dtype and merged.shape == expected.shape
        torch.testing.assert_close(merged, expected, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# Weights after dropout (training mode)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_training_weights_are_after_dropout_as_torch(average, masked):
    """Same seed, same dropped weights: torch applies F.dropout to the [N·H, L, S] weights and
    returns them; so does attnkit, so outputs, weights and gradients are equal."""
    reference, ours = pair(dropout=0.4)
    reference.train(), ours.train()
    x = torch.randn(N, L, E, requires_grad=True)
    kpm = PADDING["bool"]() if masked else None
    outs = []
    for module in (reference, ours):
        torch.manual_seed(7)
        out, weights = module(x, x, x, key_padding_mask=kpm, average_attn_weights=average)
        (grad,) = torch.autograd.grad(out.sum() + (weights * torch.arange(L)).sum(), x)
        outs.append((out, weights, grad))
    (o_ref, w_ref, g_ref), (o, w, g) = outs
    assert (w == 0).any() and not torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))
    torch.testing.assert_close(w, w_ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(o, o_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_training_without_weights_draws_torch_dropout(masked):
    """need_weights=False in training (what torch's layers ask): SDPA's own dropout, so under the
    same seed output and gradients equal torch's (dropout keeps the fused path)."""
    reference, ours = pair(dropout=0.3)
    reference.train(), ours.train()
    x = torch.randn(N, L, E, requires_grad=True)
    kpm = PADDING["bool"]() if masked else None
    outs = []
    for module in (reference, ours):
        torch.manual_seed(11)
        out, weights = module(x, x, x, key_padding_mask=kpm, need_weights=False)
        assert weights is None
        (grad,) = torch.autograd.grad(out.square().sum(), x)
        outs.append((out, grad))
    (o_ref, g_ref), (o, g) = outs
    torch.testing.assert_close(o, o_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-5)


def test_dropped_weights_are_the_ones_that_multiplied_the_values():
    """The context is the returned per-head weights times the values; the kept weights are the
    eval-mode weights rescaled by 1 / (1 - p)."""
    _, ours = pair(dropout=0.5)
    ours.train()
    x = torch.randn(N, L, E)
    torch.manual_seed(3)
    out, weights = ours(x, x, x, average_attn_weights=False)
    _, _, v = ours._project(x, x, x)
    v = v.unflatten(-1, (H, E // H)).transpose(1, 2)
    context = (weights @ v).transpose(1, 2).flatten(2)
    torch.testing.assert_close(out, ours.out_proj(context), rtol=0, atol=1e-5)
    ours.eval()
    _, undropped = ours(x, x, x, average_attn_weights=False)
    kept = weights != 0
    assert 0.3 < kept.float().mean() < 0.7
    torch.testing.assert_close(weights[kept], undropped[kept] / 0.5, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------
# torch.compile(fullgraph=True)
# --------------------------------------------------------------------------------------------

COMPILE_CASES = {
    "none": {},
    "causal": {"is_causal": True},
    "attn_bool": {"attn_mask": "bool"},
    "attn_float": {"attn_mask": "float"},
    "padding_bool": {"key_padding_mask": "bool"},
    "padding_float": {"key_padding_mask": "float"},
    "both_bool": {"attn_mask": "bool", "key_padding_mask": "bool"},
    "both_float_causal": {"attn_mask": "float", "key_padding_mask": "float", "is_causal": True},
}


def compile_inputs(case: dict) -> dict:
    torch.manual_seed(5)
    kwargs: dict = {}
    if "attn_mask" in case:
        kwargs["attn_mask"] = MASKS[case["attn_mask"]]()
        if case.get("is_causal"):  # torch: is_causal is a hint that attn_mask is causal
            kwargs["attn_mask"] = torch.triu(torch.full((L, L), float("-inf")), 1)
    if "key_padding_mask" in case:
        kwargs["key_padding_mask"] = PADDING[case["key_padding_mask"]]()
    if case.get("is_causal"):
        kwargs["is_causal"] = True
    return kwargs


@pytest.mark.parametrize(
    "case,need_weights",
    list(itertools.product(COMPILE_CASES, [False, True])),
    ids=[
        f"{c}-{'weights' if w else 'no_weights'}"
        for c, w in itertools.product(COMPILE_CASES, [0, 1])
    ],
)
def test_compile_fullgraph_equals_eager(case, need_weights):
    """No graph break (fullgraph) and no data-dependent branch in the traced path; dynamo traces
    with the eager backend (the tracing is what can fail; inductor only costs time here)."""
    torch._dynamo.reset()
    _, ours = pair()
    ours.eval()
    x = torch.randn(N, L, E)
    kwargs = compile_inputs(COMPILE_CASES[case])
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    out, weights = compiled(x, x, x, need_weights=need_weights, **kwargs)
    expected, expected_weights = ours(x, x, x, need_weights=need_weights, **kwargs)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-5)
    else:
        assert weights is None


# --------------------------------------------------------------------------------------------
# Nested tensors
# --------------------------------------------------------------------------------------------

LENGTHS = [5, 3, 1]


def nested(layout: torch.layout, lengths=LENGTHS, seed: int = 9) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nested.nested_tensor(
        [torch.randn(n, E, generator=g) for n in lengths], layout=layout
    )


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=str)
@pytest.mark.parametrize("need_weights", [False, True])
def test_nested_self_attention_equals_torch_fast_path(layout, need_weights):
    """torch accepts a strided nested batch in its eval fast path; attnkit gives the same output
    for it and for the jagged layout of the same sequences (torch refuses jagged)."""
    reference, ours = pair()
    reference.eval(), ours.eval()
    x_torch = nested(torch.strided)
    with torch.no_grad():
        expected, expected_weights = reference(x_torch, x_torch, x_torch, need_weights=need_weights)
        x = nested(layout)
        out, weights = ours(x, x, x, need_weights=need_weights)
    assert out.is_nested and out.layout == layout
    for got, want in zip(out.unbind(), expected.unbind(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=str)
def test_nested_cross_attention_and_gradients_match_padded(layout):
    """Beyond torch's fast path: cross-attention of nested batches, with gradients, equals each
    sequence attended on its own (no batch) in float64."""
    _, ours = pair()
    ours = ours.double()
    q_parts = [torch.randn(n, E, dtype=torch.float64) for n in (4, 2)]
    k_parts = [torch.randn(n, E, dtype=torch.float64) for n in (3, 6)]
    q = torch.nested.as_nested_tensor(q_parts, layout=layout).requires_grad_(True)
    k = torch.nested.as_nested_tensor(k_parts, layout=layout)
    out, _ = ours(q, k, k, need_weights=False)
    for i, got in enumerate(out.unbind()):
        want, _ = ours(q_parts[i], k_parts[i], k_parts[i], need_weights=False)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_nested_bad_input():
    _, ours = pair()
    x = nested(torch.jagged)
    with pytest.raises(ValueError, match="no key_padding_mask or attn_mask"):
        ours(x, x, x, attn_mask=torch.zeros(L, L, dtype=torch.bool))
    with pytest.raises(TypeError, match="all be nested"):
        ours(x, torch.randn(3, L, E), torch.randn(3, L, E))
    seq_first = MultiHeadAttention(E, H)
    with pytest.raises(ValueError, match="batch_first=True"):
        seq_first(x, x, x)
