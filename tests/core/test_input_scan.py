"""The engine's scan of its inputs for NaN, infinities and overflowing scores, on the operands
``MultiHeadAttention`` gives it: the head views of a packed projection (``[B, L, 3E]`` split
into ``[B, H, L, d]``, rows with gaps between them), transposed and expanded tensors.

The scan reads each tensor once (``max |x|``) and the overflow bound of the fused kernels
(``|scale · q·k| <= scale · D · max|q| · max|k|``) reuses what it read; a call changed by a hook
(``dataclasses.replace``) is read again. Each case is checked against a float64 formula.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import Tensor

import attnkit as ak
from attnkit.core.backend import overflow_reasons
from attnkit.core.call import max_abs, prepare

NAN, INF = float("nan"), float("inf")


def packed_heads(
    extra_columns: int = 0, batch: int = 2, length: int = 5, heads: int = 2, d: int = 4
) -> tuple[Tensor, list[Tensor]]:
    """A projection ``[B, L, 3·H·d + extra]`` and its q, k, v head views ``[B, H, L, d]``."""
    g = torch.Generator().manual_seed(0)
    e = heads * d
    packed = torch.randn(batch, length, 3 * e + extra_columns, generator=g)
    views = [
        packed[..., i * e : (i + 1) * e].unflatten(-1, (heads, d)).transpose(1, 2) for i in range(3)
    ]
    return packed, views


def expected_max_abs(t: Tensor) -> float:
    x = t.detach().double()
    if torch.isnan(x).any():
        return NAN
    return float(x.abs().max())


def layouts() -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(1)
    _, (q, _, _) = packed_heads()
    base = torch.randn(3, 4, 5, generator=g)
    return {
        "contiguous": base,
        "transposed": base.transpose(0, 2),  # dense in another order
        "head view": q,  # gaps between rows
        "sliced": base[:, 1:3, ::2],
        "expanded": torch.randn(1, 4, 1, generator=g).expand(3, 4, 5),
        "scalar": torch.tensor(-2.5),
        "half": base.half().transpose(1, 2),
    }


@pytest.mark.parametrize("layout", list(layouts()))
@pytest.mark.parametrize("special", [None, NAN, INF, -INF])
def test_max_abs_is_the_largest_magnitude_in_every_layout(layout: str, special: float | None):
    t = layouts()[layout]  # new tensors: set in place, the layout kept
    if special is not None:
        stored = t[..., :1, :, :1] if layout == "expanded" else t  # what an expanded t repeats
        stored[tuple(s - 1 for s in stored.shape)] = special
    got = float(max_abs(t))
    want = expected_max_abs(t)
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want


def test_max_abs_reads_only_the_view_not_the_rest_of_its_storage():
    """NaN in the columns of a projection that no head view covers is not in the views."""
    packed, views = packed_heads(extra_columns=3)
    packed[..., -3:] = NAN
    for view in views:
        assert math.isfinite(float(max_abs(view)))
    assert prepare(*views).finite


def chosen_backends(fn) -> tuple[object, list[str]]:  # type: ignore[no-untyped-def]
    ran: list[str] = []

    def spy(call, module, run):  # type: ignore[no-untyped-def]
        out = run(call)
        ran.append(run.chosen.name)
        return out

    with ak.attention_hooks(spy):
        result = fn()
    return result, ran


def test_nan_outside_the_head_views_keeps_the_fused_kernel():
    packed, (q, k, v) = packed_heads(extra_columns=3)
    clean = ak.attention(q, k, v).context
    packed[..., -3:] = NAN
    out, ran = chosen_backends(lambda: ak.attention(q, k, v).context)
    assert ran == ["sdpa"]
    torch.testing.assert_close(out, clean, rtol=0, atol=0)


MODES = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,  # views there keep no ``_base``
    "autograd": torch.enable_grad,
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("weights", [False, True])
def test_nan_in_a_value_head_view_gives_the_documented_result(weights: bool, mode: str):
    """NaN in ``v[b, h, j, f]`` of a packed projection: feature ``f`` of every row of that head
    is NaN (all keys admissible), every other entry is the float64 formula's."""
    packed, _ = packed_heads()
    packed = packed.clone()
    packed[1, 2, 2 * 8 + 3] = NAN  # v of head 0, key 2, feature 3
    with MODES[mode]():
        source = packed.requires_grad_() if mode == "autograd" else packed
        q, k, v = (
            source[..., i * 8 : (i + 1) * 8].unflatten(-1, (2, 4)).transpose(1, 2) for i in range(3)
        )
        out, ran = chosen_backends(lambda: ak.attention(q, k, v, return_weights=weights))
    assert torch.isnan(v[1, 0, 2, 3])
    assert ran and ran[0] not in ("sdpa", "dense")  # the fused paths define no NaN semantics
    q64, k64, v64 = (t.double() for t in (q, k, v))
    a = torch.softmax(q64 @ k64.transpose(-1, -2) / 2.0, -1)
    want = a @ torch.nan_to_num(v64, nan=0.0)
    nan = torch.zeros_like(want, dtype=torch.bool)
    nan[1, 0, :, 3] = True
    got = out.context.double()
    assert torch.equal(torch.isnan(got), nan)
    torch.testing.assert_close(got[~nan], want[~nan], rtol=1e-5, atol=1e-6)


def overflowing(q: Tensor, k: Tensor) -> None:
    """Make ``q · k`` overflow float32 for keys 0 and 1 of every row (finite inputs)."""
    q.abs_().mul_(1e20)
    k.abs_()
    k[..., :2, :] *= 1e20


def test_overflowing_scores_of_head_views_leave_the_fused_kernels():
    """Finite head views whose scores overflow: the bound read by the scan names the overflow
    and every row shares its weight between the two +inf keys (the limit)."""
    _, (q, k, v) = packed_heads()
    overflowing(q, k)
    call = prepare(q, k, v)
    assert call.finite
    assert overflow_reasons(call)
    out, ran = chosen_backends(lambda: ak.attention(q, k, v).context)
    assert ran and ran[0] not in ("sdpa", "dense")
    torch.testing.assert_close(out, v[:, :, :2].mean(-2, keepdim=True).expand_as(out))


def test_a_hook_that_changes_the_inputs_has_them_read_again():
    """A hook replaces the (finite, small) queries by ones whose scores overflow: the bound is
    computed for the new queries, not taken from the scan of the call as made."""
    _, (q, k, v) = packed_heads()
    big_q, big_k = q.clone(), k.clone()
    overflowing(big_q, big_k)

    def swap(call, module, run):  # type: ignore[no-untyped-def]
        return run(dataclasses.replace(call, q=big_q, k=big_k))

    assert not overflow_reasons(prepare(q, k, v))
    with ak.attention_hooks(swap):
        out = ak.attention(q, k, v).context
    torch.testing.assert_close(out, v[:, :, :2].mean(-2, keepdim=True).expand_as(out))


def test_overlapping_views_that_fill_their_storage_leave_nothing_unseen():
    """Views of one storage whose sizes add up to it although two overlap: the block no view
    covers is read with them (the scan reads the storage); a NaN there reaches no output,
    whichever backend the scan sends the call to."""
    g = torch.Generator().manual_seed(2)
    storage = torch.randn(6, 6, 4, generator=g)  # 6 blocks [6, 4]: 2 heads of q, k and v
    q, k, v = (storage[i : i + 2].unsqueeze(0) for i in (0, 1, 3))  # k overlaps q; 5 is free
    clean = ak.attention(q, k, v).context
    storage[5] = NAN  # in no view
    out = ak.attention(q, k, v).context
    q64, k64, v64 = (t.double() for t in (q, k, v))
    want = torch.softmax(q64 @ k64.transpose(-1, -2) / 2.0, -1) @ v64
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, clean, rtol=1e-5, atol=1e-6)
