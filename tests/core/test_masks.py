"""ak.masks against literal boolean matrices built by loops, and masks through ak.attention.

Every expected matrix here is written element by element from the documented rule, never with the
tensor expression the library uses, so a shared off-by-one cannot hide.
"""

from __future__ import annotations

import pytest
import torch
from attention_cases import admits, attend, backends_taking, with_backends
from torch.nn.attention.flex_attention import create_mask as flex_create_mask

import attnkit as ak

SIZES = [(1, 1), (2, 5), (5, 2), (4, 4), (3, 7), (7, 3), (1, 6), (6, 1), (0, 3), (3, 0)]


def literal(rows: list[list[bool]], n: int) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), n)


def expected_causal(m: int, n: int) -> torch.Tensor:
    """Bottom-right: query i stands at key position i' = i + N - M and sees keys j <= i'."""
    return literal([[j <= i + n - m for j in range(n)] for i in range(m)], n)


def expected_window(m: int, n: int, window: int) -> torch.Tensor:
    """Query i sees keys j with i' - window < j <= i' (exactly ``window`` keys where they exist)."""
    rows = []
    for i in range(m):
        position = i + n - m
        rows.append([position - window < j <= position for j in range(n)])
    return literal(rows, n)


def expand(mask: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    return mask.expand(shape)


# --- tensor masks ---------------------------------------------------------------------------------


def test_causal_documented_example() -> None:
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(ak.masks.causal(2, 5), expected)


@pytest.mark.parametrize(("m", "n"), SIZES)
def test_causal_matches_loops(m: int, n: int) -> None:
    mask = ak.masks.causal(m, n)
    assert mask.dtype == torch.bool
    assert mask.shape == (m, n)
    assert torch.equal(mask, expected_causal(m, n))


def test_causal_square_is_lower_triangular() -> None:
    assert torch.equal(ak.masks.causal(6, 6), torch.ones(6, 6, dtype=torch.bool).tril())


@pytest.mark.parametrize(("m", "n"), [(4, 4), (3, 7), (7, 3), (1, 5), (5, 1)])
@pytest.mark.parametrize("window", [1, 2, 3, 6, 12])
def test_sliding_window_matches_loops(m: int, n: int, window: int) -> None:
    mask = ak.masks.sliding_window(m, n, window)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected_window(m, n, window))


def test_sliding_window_wide_equals_causal() -> None:
    for m, n in [(4, 4), (3, 7), (7, 3)]:
        assert torch.equal(ak.masks.sliding_window(m, n, m + n + 1), ak.masks.causal(m, n))


def test_padding_matches_loops() -> None:
    lengths = [3, 0, 5, 1]
    n = 5
    mask = ak.masks.padding(lengths, n)
    assert mask.shape == (4, 1, 1, n)
    assert mask.dtype == torch.bool
    for b, length in enumerate(lengths):
        for j in range(n):
            assert bool(mask[b, 0, 0, j]) == (j < length), (b, j)


def test_padding_accepts_an_integer_tensor() -> None:
    lengths = torch.tensor([2, 4], dtype=torch.int32)
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool).view(2, 1, 1, 4)
    assert torch.equal(ak.masks.padding(lengths, 4), expected)


# --- mask_mods ------------------------------------------------------------------------------------


def test_create_mask_evaluates_every_index() -> None:
    batch, heads, m, n = 2, 3, 4, 5

    def mod(b, h, q_idx, kv_idx):
        return ((kv_idx + h) % (b + 2) == 0) | (q_idx == kv_idx)

    mask = ak.masks.create_mask(mod, batch, heads, m, n)
    assert mask.dtype == torch.bool
    full = expand(mask, (batch, heads, m, n))
    for b in range(batch):
        for h in range(heads):
            for i in range(m):
                for j in range(n):
                    assert bool(full[b, h, i, j]) == ((j + h) % (b + 2) == 0 or i == j)


def test_create_mask_keeps_ignored_dimensions_broadcastable() -> None:
    mask = ak.masks.create_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, 3, 4, 5, 5)
    assert torch.broadcast_shapes(mask.shape, (3, 4, 5, 5)) == (3, 4, 5, 5)
    assert torch.equal(expand(mask, (3, 4, 5, 5))[2, 3], expected_causal(5, 5))


def test_create_mask_refuses_a_non_bool_mod() -> None:
    with pytest.raises(TypeError, match="bool"):
        ak.masks.create_mask(lambda b, h, q_idx, kv_idx: q_idx - kv_idx, 1, 1, 3, 3)


@pytest.mark.parametrize(("m", "n"), [(4, 4), (2, 5), (5, 2)])
@pytest.mark.parametrize("offset", [-2, 0, 1, 3])
def test_causal_mod_matches_loops(m: int, n: int, offset: int) -> None:
    mask = expand(ak.masks.create_mask(ak.masks.causal_mod(offset), 1, 1, m, n), (1, 1, m, n))
    expected = literal([[j <= i + offset for j in range(n)] for i in range(m)], n)
    assert torch.equal(mask[0, 0], expected)


def test_causal_mod_with_offset_n_minus_m_is_causal() -> None:
    mod = ak.masks.causal_mod(5 - 2)
    assert torch.equal(ak.masks.create_mask(mod, 1, 1, 2, 5)[0, 0], ak.masks.causal(2, 5))


@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.parametrize("offset", [0, 2])
def test_sliding_window_mod_matches_loops(window: int, offset: int) -> None:
    m, n = 4, 6
    mask = expand(
        ak.masks.create_mask(ak.masks.sliding_window_mod(window, offset), 1, 1, m, n),
        (1, 1, m, n),
    )
    expected = literal(
        [[i + offset - window < j <= i + offset for j in range(n)] for i in range(m)], n
    )
    assert torch.equal(mask[0, 0], expected)


def test_padding_mod_matches_loops() -> None:
    lengths = torch.tensor([2, 0, 4])
    batch, heads, m, n = 3, 2, 3, 4
    mask = expand(
        ak.masks.create_mask(ak.masks.padding_mod(lengths), batch, heads, m, n),
        (batch, heads, m, n),
    )
    for b in range(batch):
        for h in range(heads):
            for i in range(m):
                for j in range(n):
                    assert bool(mask[b, h, i, j]) == (j < int(lengths[b]))


def test_and_masks_and_or_masks_match_loops() -> None:
    lengths = torch.tensor([3, 5])
    batch, heads, m, n = 2, 1, 5, 5
    causal = ak.masks.causal_mod(0)
    pad = ak.masks.padding_mod(lengths)

    def diagonal(b, h, q_idx, kv_idx):
        return q_idx == kv_idx

    both = expand(
        ak.masks.create_mask(ak.masks.and_masks(causal, pad), batch, heads, m, n), (2, 1, 5, 5)
    )
    either = expand(
        ak.masks.create_mask(ak.masks.or_masks(pad, diagonal), batch, heads, m, n), (2, 1, 5, 5)
    )
    three = expand(
        ak.masks.create_mask(ak.masks.and_masks(causal, pad, diagonal), batch, heads, m, n),
        (2, 1, 5, 5),
    )
    one = expand(
        ak.masks.create_mask(ak.masks.or_masks(diagonal), batch, heads, m, n), (2, 1, 5, 5)
    )
    for b in range(batch):
        for i in range(m):
            for j in range(n):
                is_causal, is_pad, is_diag = j <= i, j < int(lengths[b]), i == j
                assert bool(both[b, 0, i, j]) == (is_causal and is_pad)
                assert bool(either[b, 0, i, j]) == (is_pad or is_diag)
                assert bool(three[b, 0, i, j]) == (is_causal and is_pad and is_diag)
                assert bool(one[b, 0, i, j]) == is_diag


@pytest.mark.parametrize("combine", [ak.masks.and_masks, ak.masks.or_masks])
def test_mask_combinators_need_a_mod(combine) -> None:
    with pytest.raises(ValueError, match="at least one"):
        combine()


def test_mods_agree_with_flex_attention_create_mask() -> None:
    """The same mod gives the same mask through attnkit and through FlexAttention's helper."""
    lengths = torch.tensor([3, 6])
    mods = [
        ak.masks.causal_mod(2),
        ak.masks.sliding_window_mod(3, 1),
        ak.masks.padding_mod(lengths),
        ak.masks.and_masks(ak.masks.causal_mod(0), ak.masks.padding_mod(lengths)),
        ak.masks.or_masks(ak.masks.sliding_window_mod(2), ak.masks.padding_mod(lengths)),
    ]
    for mod in mods:
        ours = expand(ak.masks.create_mask(mod, 2, 2, 4, 6), (2, 2, 4, 6))
        theirs = flex_create_mask(mod, 2, 2, 4, 6, device="cpu")
        assert torch.equal(ours, theirs)


# --- masks through ak.attention -------------------------------------------------------------------


def _qkv(b=2, h=2, m=5, n=6, d=4, dv=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, m, d, generator=g, dtype=dtype),
        torch.randn(b, h, n, d, generator=g, dtype=dtype),
        torch.randn(b, h, n, dv, generator=g, dtype=dtype),
    )


def _lower(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@pytest.mark.parametrize("backend", backends_taking(dtype=torch.float64, mask_mod=_lower))
def test_flex_style_mask_mod_works_unchanged(backend: str) -> None:
    q, k, v = _qkv()
    lengths = torch.tensor([4, 6])

    def causal(b, h, q_idx, kv_idx):  # as written for torch.nn.attention.flex_attention
        return q_idx >= kv_idx

    def document(b, h, q_idx, kv_idx):
        return (kv_idx < lengths[b]) & (q_idx >= kv_idx)

    for mod in (causal, document):
        expected_mask = flex_create_mask(mod, 2, 2, 5, 6, device="cpu")
        with_mod = attend(backend, q, k, v, mask_mod=mod)
        with_tensor = attend(backend, q, k, v, mask=expected_mask)
        torch.testing.assert_close(with_mod.context, with_tensor.context, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "backend", backends_taking(dtype=torch.float64, causal=True, mask_mod=_lower)
)
def test_mask_mod_is_combined_with_mask_and_causal(backend: str) -> None:
    q, k, v = _qkv(m=4, n=6)
    pad = ak.masks.padding([5, 3], 6)
    window = ak.masks.sliding_window_mod(3, offset=2)
    out = attend(backend, q, k, v, mask=pad, causal=True, mask_mod=window)
    combined = pad & ak.masks.causal(4, 6) & ak.masks.sliding_window(4, 6, 3)
    expected = attend(backend, q, k, v, mask=combined)
    torch.testing.assert_close(out.context, expected.context, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("align", "backend"),
    with_backends(
        ["softmax", "sparsemax", "entmax15", "topk", "hard"],
        lambda align, backend: admits(
            backend, dtype=torch.float64, align=align, mask=torch.zeros(1, 6)
        ),
    ),
)
def test_bool_mask_equals_float_mask(backend: str, align: str) -> None:
    q, k, v = _qkv()
    g = torch.Generator().manual_seed(1)
    allowed = torch.rand(2, 1, 5, 6, generator=g) < 0.6
    allowed[:, :, :, 0] = True  # every row keeps a key
    as_float = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    kwargs = {"align": ak.align.ALIGNS.get(align)().eval()}
    with_bool = attend(backend, q, k, v, mask=allowed, **kwargs)
    with_float = attend(backend, q, k, v, mask=as_float, **kwargs)
    torch.testing.assert_close(with_bool.context, with_float.context, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", backends_taking(dtype=torch.float64, mask=torch.zeros(1, 6)))
def test_float_mask_is_added_to_the_scores(backend: str) -> None:
    q, k, v = _qkv(dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    bias = torch.randn(2, 2, 5, 6, generator=g, dtype=torch.float64)
    out = attend(backend, q, k, v, mask=bias)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0 + bias, dim=-1)  # d = 4: 1/sqrt(d) = 1/2
    torch.testing.assert_close(out.context, weights @ v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "backend", backends_taking(dtype=torch.float64, mask=torch.ones(1, 6, dtype=torch.bool))
)
def test_padding_mask_works_for_3d_and_4d_inputs(backend: str) -> None:
    q, k, v = _qkv(b=2, h=1, m=3, n=5)
    pad = ak.masks.padding([2, 5], 5)
    four = attend(backend, q, k, v, mask=pad)
    three = attend(backend, q[:, 0], k[:, 0], v[:, 0], mask=pad)
    torch.testing.assert_close(three.context, four.context[:, 0], rtol=0, atol=1e-12)
    # batch element 0 sees only its first 2 keys: changing the others changes nothing there
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 2:] += 1.0
    v2[0, :, 2:] += 1.0
    changed = attend(backend, q, k2, v2, mask=pad)
    torch.testing.assert_close(changed.context[0], four.context[0], rtol=0, atol=1e-12)
