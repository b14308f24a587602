"""Sliding window, Longformer and BigBird equal dense softmax attention with the equivalent mask
(float64 formula in efficient_formulas.py), max error <= 1e-5 in float32."""

from __future__ import annotations

import math
from functools import partial

import efficient_formulas as ref
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import attnkit as ak
from attnkit.efficient import (
    bigbird_attention,
    bigbird_blocks,
    longformer_attention,
    lsh_attention,
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


class _LargestIntermediate(TorchDispatchMode):
    """Records the largest storage (in elements) of any tensor an aten op returns, forward and
    backward: what was allocated, so a broadcast view (``expand``, stride 0) of a small tensor
    counts as small and a materialised ``[L, L]`` matrix as ``L·L``."""

    def __init__(self) -> None:
        super().__init__()
        self.largest: tuple[int, str] = (0, "")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            stored = t.untyped_storage().nbytes() // t.element_size()
            if stored > self.largest[0]:
                self.largest = (stored, f"{func}: {tuple(t.shape)}")
        return out


_BANDED = {
    "sliding_window": partial(sliding_window_attention, window=16),
    "longformer": partial(longformer_attention, window=16, global_tokens=torch.tensor([0, 700])),
    "bigbird": partial(bigbird_attention, block=16),
    # not banded, but its chunks are: [S/c, c, 2c] scores per round (c = 16)
    "lsh": lambda q, k, v, **kw: lsh_attention(q, q, v, bucket_size=16, n_rounds=2, **kw),
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", list(_BANDED))
def test_no_intermediate_is_quadratic(name: str, causal: bool) -> None:
    """At L = 1024 with bands of about 16-100 keys, no tensor formed in the forward or backward
    pass (key padding mask included) has L·L/8 elements: a dense ``[L, L]`` score matrix or mask
    anywhere would be caught, whatever its dtype (deterministic, not a timing or memory probe)."""
    n = 1024
    q, k, v = (t.requires_grad_() for t in _inputs(1, 1, n, n, d=8, dv=8))
    keep = torch.ones(1, 1, 1, n, dtype=torch.bool)
    keep[..., -100:] = False
    probe = _LargestIntermediate()
    with probe:
        out = _BANDED[name](q, k, v, causal=causal, mask=keep).context
        out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert probe.largest[0] < n * n // 8, probe.largest


def test_the_probe_sees_a_dense_matrix() -> None:
    """The check above can fail: dense attention at the same length trips it."""
    q, k, v = _inputs(1, 1, 1024, 1024, d=8, dv=8)
    probe = _LargestIntermediate()
    with probe:
        ak.attention(q, k, v, mask=ak.masks.sliding_window(1024, 1024, 16))
    assert probe.largest[0] >= 1024 * 1024 // 8


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


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize(
    ("m", "n", "w", "back", "forward", "causal"),
    [
        (64, 64, 8, 1, 1, False),
        (64, 64, 8, 1, 0, True),
        (50, 50, 7, 2, 0, False),
        (50, 50, 7, 3, None, True),
        (40, 40, 16, 0, 2, False),
        (12, 45, 6, 1, 1, False),
        (45, 12, 4, 2, 0, True),
        (33, 33, 200, 1, 1, False),
    ],
)
def test_look_around_equals_dense_mask(
    m: int, n: int, w: int, back: int, forward: int | None, causal: bool, exact: bool
) -> None:
    """Blocks of w with look-back/look-forward counts (and the exact window) equal dense softmax
    attention with the same boolean mask in float64, with key padding, gradients included."""
    q, k, v = (t.double().requires_grad_() for t in _inputs(2, 3, m, n, seed=4))
    pad = ak.masks.padding(torch.tensor([n, max(n - 5, 1)]), n)
    options = {"look_backward": back, "look_forward": forward, "exact_windowsize": exact}
    out = sliding_window_attention(q, k, v, window=w, causal=causal, mask=pad, **options).context
    f = (0 if causal else 1) if forward is None else forward
    allowed = ref.look_around(m, n, w, back, f, exact, causal) & pad
    expected = _exact(q, k, v, allowed)
    assert (out - expected).abs().max().item() <= 1e-12
    probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    got = torch.autograd.grad((out * probe).sum(), (q, k, v))
    want = torch.autograd.grad((expected * probe).sum(), (q, k, v))
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max().item() <= 1e-12


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_look_around_matches_local_attention_package(causal: bool, exact: bool) -> None:
    """The ``local-attention`` package's ``LocalAttention(window_size=16, look_backward=2,
    look_forward=…)`` (no positional embedding) on the same q, k, v, float32."""
    package = pytest.importorskip(
        "local_attention", reason="optional: the peer package local-attention is not installed"
    )
    forward = 0 if causal else 1
    peer = package.LocalAttention(
        window_size=16, causal=causal, look_backward=2, look_forward=forward,
        exact_windowsize=exact,
    )  # fmt: skip
    q, k, v = _inputs(2, 3, 96, 96, d=8, dv=8, seed=2)
    out = sliding_window_attention(
        q, k, v, window=16, look_backward=2, look_forward=forward, exact_windowsize=exact,
        causal=causal,
    ).context  # fmt: skip
    assert (out - peer(q, k, v)).abs().max().item() <= 1e-5


def test_look_around_is_checked() -> None:
    q, k, v = _inputs(1, 1, 8, 8)
    with pytest.raises(ValueError, match="cannot look forward"):
        sliding_window_attention(q, k, v, window=4, look_forward=1, causal=True)
    with pytest.raises(ValueError, match="look_backward must be a non-negative int"):
        sliding_window_attention(q, k, v, window=4, look_backward=-1)
