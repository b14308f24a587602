"""Position encodings against their papers' formulas, written out here in float64.

Sinusoidal (Vaswani et al. 2017, §3.5), RoPE (Su et al. 2021, eq. 34: complex rotation),
ALiBi (Press et al. 2022: slopes and linear biases), T5 relative buckets (Raffel et al. 2020;
the bucket function re-derived below from its definition), and which engine backend each runs on.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import attnkit as ak
from attnkit.layers import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    TransformerEncoderLayer,
    alibi_slopes,
    relative_position_bucket,
)

F64 = torch.float64


def grid(n: int, length: int, offset: int = 0) -> Tensor:
    return (offset + torch.arange(length)).expand(n, length)


def test_sinusoidal_is_the_papers_formula() -> None:
    d, length = 6, 9
    pe = SinusoidalPositionalEncoding(d, max_len=32)
    x = torch.zeros(1, length, d)
    got = pe(x)[0]
    for p in range(length):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert abs(got[p, 2 * i].item() - math.sin(angle)) < 1e-6
            assert abs(got[p, 2 * i + 1].item() - math.cos(angle)) < 1e-6
    torch.testing.assert_close(pe(x, grid(1, length, 5)), pe(torch.zeros(1, 14, d))[:, 5:])
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 32\)"):
        pe(x, grid(1, length, 30))


def test_learned_embedding_adds_its_table() -> None:
    torch.manual_seed(0)
    pe = LearnedPositionalEmbedding(4, max_len=10)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(pe(x, grid(2, 3, 2)), x + pe.embedding.weight[2:5])


def test_rotary_is_a_complex_rotation() -> None:
    torch.manual_seed(0)
    d = 8
    rope = RotaryEmbedding(d)
    x = torch.randn(2, 3, 5, d, dtype=F64)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 9, 11, 100, 4000]])
    got = rope(x, pos)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=F64) / d)
    z = torch.complex(x[..., 0::2], x[..., 1::2])  # pairs (x_2i, x_2i+1) as x_2i + i x_2i+1
    rotated = z * torch.polar(torch.ones_like(theta), pos[:, None, :, None].to(F64) * theta)
    expected = torch.stack((rotated.real, rotated.imag), -1).flatten(-2)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_rotary_scores_depend_on_relative_position_only() -> None:
    torch.manual_seed(1)
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16, dtype=F64), torch.randn(1, 1, 1, 16, dtype=F64)
    scores = [
        (rope(q, torch.tensor([[p + 3]])) * rope(k, torch.tensor([[p]]))).sum().item()
        for p in (0, 5, 123)
    ]
    assert max(scores) - min(scores) < 1e-10


def test_alibi_slopes_are_the_papers() -> None:
    assert alibi_slopes(8) == [2.0 ** -(h + 1) for h in range(8)]  # 1/2, 1/4, ..., 1/256
    assert alibi_slopes(4) == [2.0 ** -(2 * (h + 1)) for h in range(4)]
    # 6 heads: the 4-head slopes, then every other slope of the 8-head sequence
    assert alibi_slopes(6) == [*alibi_slopes(4), 2.0**-1, 2.0**-3]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_alibi_score_mod_adds_linear_biases(bidirectional: bool) -> None:
    torch.manual_seed(0)
    h, m, n = 4, 5, 7
    q, k, v = (torch.randn(2, h, length, 8, dtype=F64) for length in (m, n, n))
    alibi = ALiBi(h, bidirectional=bidirectional)
    qpos, kpos = grid(2, m, n - m), grid(2, n)  # queries are the last m positions
    out = ak.attention(q, k, v, causal=not bidirectional, score_mod=alibi.score_mod(qpos, kpos))
    slopes = torch.tensor([2.0 ** -(2 * (j + 1)) for j in range(h)], dtype=F64)
    distance = (qpos[0][:, None] - kpos[0][None, :]).to(F64)
    if bidirectional:
        distance = distance.abs()
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) - slopes[:, None, None] * distance
    if not bidirectional:
        scores = scores.masked_fill(kpos[0][None, :] > qpos[0][:, None], float("-inf"))
    torch.testing.assert_close(out.context, scores.softmax(-1) @ v, atol=1e-12, rtol=0)


def t5_bucket(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's bucket of one relative position (key - query), from its definition."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if rel > 0:
            bucket += num_buckets
        rel = abs(rel)
    else:
        rel = max(-rel, 0)
    exact = num_buckets // 2
    if rel < exact:
        return bucket + rel
    large = exact + int(
        math.log(rel / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    )
    return bucket + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_t5_buckets(bidirectional: bool) -> None:
    rel = torch.arange(-300, 301)
    got = relative_position_bucket(rel, bidirectional, 32, 128)
    expected = [t5_bucket(r, bidirectional, 32, 128) for r in rel.tolist()]
    assert got.tolist() == expected


def test_t5_bias_values_and_gradient_on_the_tiled_path() -> None:
    torch.manual_seed(0)
    h, m = 3, 6
    bias = RelativePositionBias(h, num_buckets=8, max_distance=16).double()
    q, k, v = (torch.randn(1, h, m, 4, dtype=F64) for _ in range(3))
    pos = grid(1, m)
    mod = bias.score_mod(pos, pos)
    assert "tiled" in ak.explain(q, k, v, score_mod=mod).splitlines()[1]
    ak.attention(q, k, v, score_mod=mod).context.square().sum().backward()
    table = bias.relative_attention_bias.weight
    assert table.grad is not None
    got = table.grad.clone()
    table.grad = None
    buckets = torch.tensor([[t5_bucket(j - i, True, 8, 16) for j in range(m)] for i in range(m)])
    scores = q @ k.transpose(-1, -2) / 2.0 + table[buckets].permute(2, 0, 1)
    (scores.softmax(-1) @ v).square().sum().backward()
    torch.testing.assert_close(got, table.grad, atol=1e-10, rtol=0)


def backends_of(layer: torch.nn.Module, x: Tensor) -> list[str]:
    """The backends the engine picks for ``layer``'s attention calls, seen by a hook."""
    names: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        names.append(run.chosen.name)
        return run(call)

    with ak.attention_hooks(spy):
        layer(x, is_causal=True)
    return names


def test_rope_runs_on_sdpa_and_alibi_on_tiled() -> None:
    x = torch.randn(2, 9, 32)
    rope_layer = TransformerEncoderLayer(32, 4, 64, batch_first=True, rotary=RotaryEmbedding(8))
    # in training, attention dropout goes past sdpa
    assert backends_of(rope_layer.eval(), x) == ["sdpa"]
    alibi_layer = TransformerEncoderLayer(32, 4, 64, batch_first=True, position_bias=ALiBi(4))
    assert backends_of(alibi_layer.eval(), x) == ["tiled"]
    # the same facts through ak.explain, for the calls these layers make
    q = torch.empty(2, 4, 9, 8, device="meta")
    assert "runs on: sdpa" in ak.explain(q, q, q, causal=True)
    mod = ALiBi(4).score_mod(grid(2, 9), grid(2, 9))
    assert "runs on: tiled" in ak.explain(q, q, q, causal=True, score_mod=mod)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match=r"x must be \[B, H, L, D=8\]"):
        RotaryEmbedding(8)(torch.randn(1, 2, 3, 6), grid(1, 3))
    with pytest.raises(ValueError, match="positions must be"):
        RotaryEmbedding(8)(torch.randn(2, 2, 3, 8), grid(2, 4))
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match="num_buckets"):
        RelativePositionBias(2, num_buckets=2)
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionalEncoding(5)
