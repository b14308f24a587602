"""Transformer-XL (Dai et al. 2019) against references written from the paper's equations.

The references below use only the modules' parameters: the relative score is the four terms of
§3.3 for each (i, j) with ``R_{i-j}`` computed from the sinusoid formula at that distance (no
relative-shift trick, no table indexing), and the recurrent model is compared with one float64
pass over the whole sequence in which each position attends exactly the key span it has under
recurrence.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import attnkit as ak
from attnkit.layers.segment_recurrence import (
    RecurrentTransformerLayer,
    RelativeMultiHeadAttention,
    TransformerXL,
    update_memory,
)

E, H, V = 16, 2, 23
D = E // H


def sinusoid(distance: Tensor) -> Tensor:
    """``R_δ`` of Vaswani et al. §3.5 for every entry of an integer tensor: ``[..., E]``."""
    out = torch.empty(*distance.shape, E, dtype=torch.float64)
    for k in range(E // 2):
        angle = distance.double() / 10000 ** (2 * k / E)
        out[..., 2 * k], out[..., 2 * k + 1] = torch.sin(angle), torch.cos(angle)
    return out


def paper_scores(attn: RelativeMultiHeadAttention, x: Tensor, context: Tensor, delta: Tensor):
    """A_ij = (a) + (b) + (c) + (d) of §3.3, float64, per head.

    ``x [B, L, E]`` (queries' states), ``context [B, K, E]`` (keys' states), ``delta [L, K]``
    (distance i - j of each pair) → ``[B, H, L, K]``."""
    w_q, w_ke, _ = attn.self_attn.in_proj_weight.double().chunk(3)  # [E, E] each
    w_kr = attn.position_proj.weight.double()
    u, v = attn.content_bias.double(), attn.position_bias.double()
    x, context = x.double(), context.double()
    heads = slice(None)
    q = (x @ w_q.T).unflatten(-1, (H, D))  # W_q E_{x_i}: [B, L, H, D]
    k = (context @ w_ke.T).unflatten(-1, (H, D))  # W_{k,E} E_{x_j}: [B, K, H, D]
    r = (sinusoid(delta) @ w_kr.T).unflatten(-1, (H, D))  # W_{k,R} R_{i-j}: [L, K, H, D]
    a = torch.einsum("bihd,bjhd->bhij", q, k)
    b = torch.einsum("bihd,ijhd->bhij", q, r)
    c = torch.einsum("hd,bjhd->bhj", u[heads], k)[:, :, None, :]
    d = torch.einsum("hd,ijhd->hij", v[heads], r)[None]
    return a + b + c + d


def randomize(module: torch.nn.Module) -> None:
    """Non-trivial values everywhere (u, v start near zero; LayerNorm at identity)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.4)


@pytest.mark.parametrize("memory_length", [0, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_scores_and_weights_match_the_papers_four_terms(memory_length: int, causal: bool) -> None:
    torch.manual_seed(0)
    attn = RelativeMultiHeadAttention(E, H).double()
    randomize(attn)
    x = torch.randn(2, 5, E, dtype=torch.float64)
    memory = torch.randn(2, memory_length, E, dtype=torch.float64)
    keys = memory_length + 5
    delta = (memory_length + torch.arange(5))[:, None] - torch.arange(keys)[None, :]
    expected = paper_scores(attn, x, torch.cat((memory, x), 1), delta)

    scores = attn.relative_scores(x, memory)
    torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-12)  # every (i, j)

    _, weights = attn(x, memory, causal=causal, return_weights=True)
    allowed = delta >= 0 if causal else torch.ones_like(delta, dtype=torch.bool)
    reference = (expected / math.sqrt(D)).masked_fill(~allowed, float("-inf")).softmax(-1)
    torch.testing.assert_close(weights, reference, rtol=1e-12, atol=1e-12)


def layer_norm(x: Tensor, norm: torch.nn.LayerNorm) -> Tensor:
    return F.layer_norm(x, (E,), norm.weight.double(), norm.bias.double(), norm.eps)


def reference_lm(
    model: TransformerXL,
    tokens: Tensor,
    allowed: Tensor,
    norm_first: bool,
    constant_before: int = 0,
) -> tuple[Tensor, list[Tensor]]:
    """One float64 pass over the whole sequence ``tokens [B, T]``; position ``t`` attends keys
    ``s`` with ``allowed[t, s]``, at distance ``t - s``; every layer's inputs at positions before
    ``constant_before`` are constants (the stop-gradient). Returns logits and each layer's input."""
    t = tokens.shape[1]
    h = model.embedding.weight.double()[tokens]
    delta = torch.arange(t)[:, None] - torch.arange(t)[None, :]
    inputs = []
    for layer in model.layers:
        h = torch.cat((h[:, :constant_before].detach(), h[:, constant_before:]), 1)
        inputs.append(h)
        attn = layer.self_attn
        x = layer_norm(h, layer.norm1) if norm_first else h
        scores = paper_scores(attn, x, x, delta) / math.sqrt(D)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)  # [B, H, T, T]
        w_v = attn.self_attn.in_proj_weight.double().chunk(3)[2]
        values = (x @ w_v.T).unflatten(-1, (H, D)).transpose(1, 2)  # [B, H, T, D]
        a = (weights @ values).transpose(1, 2).flatten(
            2
        ) @ attn.self_attn.out_proj.weight.double().T

        def ff(o: Tensor, layer: RecurrentTransformerLayer = layer) -> Tensor:
            hidden = F.relu(o @ layer.linear1.weight.double().T + layer.linear1.bias.double())
            return hidden @ layer.linear2.weight.double().T + layer.linear2.bias.double()

        if norm_first:
            o = h + a
            h = o + ff(layer_norm(o, layer.norm2))
        else:
            o = layer_norm(h + a, layer.norm1)
            h = layer_norm(o + ff(o), layer.norm2)
    if norm_first:
        h = F.layer_norm(h, (E,), model.norm.weight.double(), model.norm.bias.double())
    logits = h @ model.head.weight.double().T + model.head.bias.double()
    return logits, inputs


def recurrence_span(segments: int, length: int, mem_len: int) -> Tensor:
    """``allowed [T, T]``: position ``t`` of the segment starting at ``c`` sees keys
    ``max(0, c - mem_len) <= s <= t``: the memory, then itself causally."""
    t = torch.arange(segments * length)
    start = (t // length) * length
    s = t[None, :]
    return (s <= t[:, None]) & (s >= (start - mem_len).clamp_min(0)[:, None])


def run_segments(model: TransformerXL, tokens: Tensor, length: int):
    memory, outputs = None, []
    for c in range(0, tokens.shape[1], length):
        logits, memory = model(tokens[:, c : c + length], memory)
        outputs.append(logits)
    return torch.cat(outputs, 1), memory


def xl(mem_len: int, norm_first: bool = False, num_layers: int = 2) -> TransformerXL:
    torch.manual_seed(0)
    model = TransformerXL(V, E, H, num_layers, mem_len, dim_feedforward=24, norm_first=norm_first)
    randomize(model)
    return model.double().eval()


@pytest.mark.parametrize(
    ("mem_len", "norm_first"), [(4, False), (3, False), (6, False), (0, False), (6, True)]
)
def test_recurrence_equals_one_pass_with_the_same_key_span(mem_len: int, norm_first: bool) -> None:
    model = xl(mem_len, norm_first)
    tokens = torch.randint(V, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        recurrent, memory = run_segments(model, tokens, 4)
        reference, inputs = reference_lm(model, tokens, recurrence_span(3, 4, mem_len), norm_first)
    torch.testing.assert_close(recurrent, reference, rtol=1e-10, atol=1e-10)
    # (e) the memory is the most recent mem_len inputs of each layer
    assert memory is not None
    for layer_memory, layer_inputs in zip(memory, inputs, strict=True):
        assert layer_memory.shape == (2, mem_len, E)
        torch.testing.assert_close(
            layer_memory, layer_inputs[:, 12 - mem_len :], rtol=0, atol=1e-10
        )


def test_two_segments_equal_causal_attention_over_their_concatenation() -> None:
    # With the whole first segment in memory, the second segment sees exactly what a causal pass
    # over [segment 1; segment 2] sees.
    model = xl(mem_len=5)
    tokens = torch.randint(V, (3, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        recurrent, _ = run_segments(model, tokens, 5)
        causal = torch.ones(10, 10, dtype=torch.bool).tril()
        reference, _ = reference_lm(model, tokens, causal, norm_first=False)
    torch.testing.assert_close(recurrent[:, 5:], reference[:, 5:], rtol=1e-10, atol=1e-10)


def test_gradients_match_the_reference() -> None:
    model = xl(mem_len=4)
    tokens = torch.randint(V, (2, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, memory = model(tokens[:, :4])
    logits, _ = model(tokens[:, 4:], memory)
    logits.square().sum().backward()
    ours = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    span = recurrence_span(2, 4, 4)
    reference, _ = reference_lm(model, tokens, span, norm_first=False, constant_before=4)
    reference[:, 4:].square().sum().backward()
    for name, p in model.named_parameters():
        expected = p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(ours[name], expected, rtol=1e-8, atol=1e-10, msg=name)


def test_no_future_leakage() -> None:
    model = xl(mem_len=4)
    tokens = torch.randint(V, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, memory = model(tokens[:, :4])
        before, _ = model(tokens[:, 4:], memory)
        changed = tokens.clone()
        changed[:, 7:] = (changed[:, 7:] + 1) % V
        after, _ = model(changed[:, 4:], memory)
    torch.testing.assert_close(after[:, :3], before[:, :3], rtol=0, atol=0)
    assert (after[:, 3:] - before[:, 3:]).abs().amax() > 1e-3  # the changed positions do move


def test_memory_is_detached() -> None:
    model = xl(mem_len=4).float()
    first = torch.tensor([[1, 2, 3, 1]])
    second = torch.tensor([[4, 5, 6, 7]])
    _, memory = model(first)
    assert all(not m.requires_grad for m in memory)
    logits, _ = model(second, memory)
    logits.sum().backward()
    grad = model.embedding.weight.grad
    assert grad is not None
    assert not grad[[1, 2, 3]].any()  # segment 1 gets no gradient from segment 2's loss
    assert grad[[4, 5, 6, 7]].abs().sum(-1).gt(0).all()
    # the layer cuts the graph itself, even for a memory that requires grad (pre-norm reads it)
    for norm_first in (False, True):
        layer = RecurrentTransformerLayer(E, H, 24, 0.0, norm_first=norm_first)
        mem = torch.randn(2, 3, E, requires_grad=True)
        layer(torch.randn(2, 4, E), mem).sum().backward()
        assert mem.grad is None


def test_mem_len_keeps_the_most_recent_states() -> None:
    hidden = [torch.randn(2, 3, E) for _ in range(3)]
    memory = None
    for h in hidden:
        memory = update_memory(memory, h, mem_len=5)
    assert memory is not None
    torch.testing.assert_close(memory, torch.cat(hidden, 1)[:, -5:], rtol=0, atol=0)
    assert update_memory(None, hidden[0], 10).shape == (2, 3, E)
    assert update_memory(None, hidden[0], 0).shape == (2, 0, E)
    # the model's layer-0 memory is the embeddings of the last mem_len tokens
    model = xl(mem_len=5).float()
    tokens = torch.randint(V, (2, 9))
    with torch.no_grad():
        _, memory_list = run_segments(model, tokens, 3)
    torch.testing.assert_close(memory_list[0], model.embedding.weight[tokens[:, -5:]])


def test_taxonomy() -> None:
    row = ak.taxonomy.describe(TransformerXL(V, E, H, 1, 4)).names()
    assert row["query_type"] == frozenset({"Self-Attentive"})
    assert row["query_multiplicity"] == frozenset({"Multi-Head", "Multi-Hop"})
    assert row["scoring"] == frozenset({"Scaled-Multiplicative"})


def test_bad_inputs() -> None:
    model = TransformerXL(V, E, H, 2, mem_len=4)
    tokens = torch.randint(V, (2, 3))
    good = torch.zeros(2, 4, E)
    with pytest.raises(ValueError, match=r"one tensor per layer \(2\), got 1"):
        model(tokens, [good])
    with pytest.raises(ValueError, match=r"memory\[1\] must be \[B=2, R, E=16\]"):
        model(tokens, [good, torch.zeros(2, 4, E + 2)])
    with pytest.raises(ValueError, match="same R"):
        model(tokens, [good, torch.zeros(2, 3, E)])
    with pytest.raises(ValueError, match="B=2"):
        model(tokens, [torch.zeros(3, 4, E)] * 2)
    with pytest.raises(ValueError, match="B=2"):
        model(tokens, [torch.zeros(4, E)] * 2)
    with pytest.raises(TypeError, match="list of 2 tensors"):
        model(tokens, good)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"integer tensor \[B, L\]"):
        model(tokens.float())
    with pytest.raises(ValueError, match="mem_len must be >= 0, got -1"):
        TransformerXL(V, E, H, 2, mem_len=-1)
    layer = RecurrentTransformerLayer(E, H, 24)
    with pytest.raises(ValueError, match=r"memory must be \[B=2, R, E=16\].*got \(2, 4, 8\)"):
        layer(torch.zeros(2, 3, E), torch.zeros(2, 4, 8))
    with pytest.raises(TypeError, match="memory must be a tensor"):
        layer(torch.zeros(2, 3, E), [good])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="even"):
        RelativeMultiHeadAttention(15, 3)
