"""Sliding window, Longformer and BigBird equal dense softmax attention with the equivalent mask
(float64 formula in efficient_formulas.py), max error <= 1e-5 in float32."""

from __future__ import annotations

import math

import efficient_formulas as ref
import pytest
import torch

import attnkit as ak
from attnkit.efficient import (
    bigbird_attention,
    bigbird_blocks,
    longformer_attention,
    sliding_window_attention,
)

TOL = 1e-5


def _inputs(b: int, h: int, m: int, n: int, d: int = 8, dv: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, m, d, generator=g),
        torch.randn(b, h, n, d, generator=g),
        torch.randn(b, h, n, dv, generator=g),
    )


def _exact(q, k, v, allowed):
    return ref.softmax_attention(
        q.double(), k.double(), v.double(), allowed, 1 / math.sqrt(q.shape[-1])
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("m", "n"), [(1, 1), (17, 17), (129, 129), (5, 40), (40, 5)])
def test_sliding_window_equals_dense_mask(m: int, n: int, causal: bool) -> None:
    q, k, v = _inputs(2, 3, m, n)
    lengths = torch.tensor([n, max(n - 3, 0)])
    pad = ak.masks.padding(lengths, n)
    for w in sorted({1, 2, max(n - 1, 1), n, n + 5}):
        out = sliding_window_attention(q, k, v, window=w, causal=causal, mask=pad).context
        expected = _exact(q, k, v, ref.window(m, n, w, causal) & pad)
        assert (out.double() - expected).abs().max().item() <= TOL, w


def test_sliding_window_causal_admits_exactly_w_keys_like_ak_masks() -> None:
    """Causal window w admits exactly w keys, the ones of ak.masks.sliding_window."""
    q, k, v = _inputs(1, 1, 33, 33)
    for w in (1, 2, 7):
        out = sliding_window_attention(q, k, v, window=w, causal=True).context
        dense = ak.attention(q, k, v, mask=ak.masks.sliding_window(33, 33, w)).context
        assert (out - dense).abs().max().item() <= TOL
        assert int(ref.window(33, 33, w, True).sum(-1).max()) == w


def test_sliding_window_full_per_query_mask_and_3d() -> None:
    q, k, v = _inputs(2, 1, 50, 50)
    mask = torch.rand(2, 50, 50, generator=torch.Generator().manual_seed(1)) < 0.7
    out = sliding_window_attention(q[:, 0], k[:, 0], v[:, 0], window=9, mask=mask).context
    assert out.shape == (2, 50, 5)
    expected = _exact(q, k, v, ref.window(50, 50, 9, False) & mask[:, None])[:, 0]
    assert (out.double() - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 17, 100])
def test_longformer_equals_dense_mask(n: int, causal: bool) -> None:
    q, k, v = _inputs(2, 3, n, n)
    gen = torch.Generator().manual_seed(2)
    is_global = torch.rand(2, n, generator=gen) < 0.1
    mask = torch.rand(2, 1, n, n, generator=gen) < 0.8
    for w in (1, 3, 16, n + 5):
        out = longformer_attention(
            q, k, v, window=w, causal=causal, mask=mask, global_tokens=is_global
        ).context
        # Longformer §3.1: window, plus symmetric global attention.
        allowed = (
            ref.window(n, n, w, causal) | is_global[:, None, None, :] | is_global[:, None, :, None]
        )
        if causal:
            allowed = allowed & ref.causal(n, n)
        expected = _exact(q, k, v, allowed & mask)
        assert (out.double() - expected).abs().max().item() <= TOL, w


def test_longformer_global_positions_and_default() -> None:
    q, k, v = _inputs(1, 2, 40, 40)
    by_index = longformer_attention(q, k, v, window=4, global_tokens=torch.tensor([0, 7]))
    flags = torch.zeros(40, dtype=torch.bool)
    flags[[0, 7]] = True
    by_flag = longformer_attention(q, k, v, window=4, global_tokens=flags)
    assert torch.equal(by_index.context, by_flag.context)
    default = longformer_attention(q, k, v, window=4).context  # first token global
    first = torch.zeros(40, dtype=torch.bool)
    first[0] = True
    allowed = ref.window(40, 40, 4, False) | first[None, :] | first[:, None]
    assert (default.double() - _exact(q, k, v, allowed)).abs().max().item() <= TOL


def _bigbird_dense(table: torch.Tensor, n: int, block: int, global_blocks: int, causal: bool):
    """The dense mask of a BigBird block pattern (Zaheer et al. §2): block i sees the blocks in
    its row of the table; global blocks see everything."""
    nb = table.shape[0]
    blocks = torch.zeros(nb, nb, dtype=torch.bool)
    for i in range(nb):
        for j in table[i].tolist():
            if j >= 0:
                blocks[i, j] = True
    blocks[:global_blocks] = True
    dense = blocks.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :n]
    return dense & ref.causal(n, n) if causal else dense


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    ("n", "block", "g", "r"), [(1, 4, 1, 2), (37, 4, 1, 2), (64, 8, 0, 1), (100, 16, 2, 0)]
)
def test_bigbird_equals_dense_mask(n: int, block: int, g: int, r: int, causal: bool) -> None:
    q, k, v = _inputs(2, 3, n, n)
    mask = torch.rand(2, 1, n, n, generator=torch.Generator().manual_seed(3)) < 0.9
    out = bigbird_attention(
        q, k, v, block=block, global_blocks=g, random_blocks=r, causal=causal, seed=3, mask=mask
    ).context
    table = bigbird_blocks(
        math.ceil(n / block), global_blocks=g, random_blocks=r, causal=causal, seed=3
    )
    expected = _exact(q, k, v, _bigbird_dense(table, n, block, g, causal) & mask)
    assert (out.double() - expected).abs().max().item() <= TOL


def test_bigbird_pattern_has_window_global_and_random_blocks() -> None:
    table = bigbird_blocks(16, window_blocks=3, global_blocks=1, random_blocks=2, seed=0)
    for i in range(1, 16):
        row = set(table[i].tolist()) - {-1}
        window = {j for j in (i - 1, i, i + 1) if 0 <= j < 16}
        assert window | {0} <= row
        assert len(row) == len(window | {0}) + 2  # two random blocks, all distinct
    assert (table[0] == -1).all()  # the global block's row is dense, computed apart
    causal = bigbird_blocks(16, causal=True, seed=0)
    assert all(j <= i for i in range(16) for j in causal[i].tolist())


def test_banded_memory_is_not_quadratic() -> None:
    """The largest intermediate of a long sliding window is O(n·w), not n²: run n = 2^15 with a
    small window in a few hundred MB (a dense n² mask alone would be 1 GiB of bool)."""
    n = 1 << 15
    q = torch.randn(1, 1, n, 4)
    out = sliding_window_attention(q, q, q, window=4, causal=True).context
    assert out.shape == (1, 1, n, 4) and torch.isfinite(out).all()


@pytest.mark.parametrize(
    ("fn", "kwargs", "error"),
    [
        (sliding_window_attention, {"window": 0}, "window"),
        (longformer_attention, {"window": 2, "global_tokens": torch.tensor([99])}, "global"),
        (bigbird_attention, {"window_blocks": 2}, "window_blocks"),
        (sliding_window_attention, {"window": 2, "score": "additive"}, "score"),
        (sliding_window_attention, {"window": 2, "dropout": 0.1}, "dropout"),
    ],
)
def test_bad_arguments(fn, kwargs: dict, error: str) -> None:
    q, k, v = _inputs(1, 1, 8, 8)
    with pytest.raises((ValueError, TypeError), match=error):
        fn(q, k, v, **kwargs)


def test_longformer_and_bigbird_refuse_cross_attention() -> None:
    q, k, v = _inputs(1, 1, 4, 8)
    with pytest.raises(ValueError, match="M=4, N=8"):
        longformer_attention(q, k, v, window=2)
    with pytest.raises(ValueError, match="M=4, N=8"):
        bigbird_attention(q, k, v)


def test_grouped_key_value_heads_equal_repeated_heads() -> None:
    q, k, v = _inputs(2, 4, 30, 30)
    k1, v1 = k[:, :2], v[:, :2]  # 2 key/value heads, each serving 2 query heads
    grouped = sliding_window_attention(q, k1, v1, window=5).context
    repeated = sliding_window_attention(
        q, k1.repeat_interleave(2, 1), v1.repeat_interleave(2, 1), window=5
    ).context
    assert torch.equal(grouped, repeated)
