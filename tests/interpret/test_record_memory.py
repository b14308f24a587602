"""record(heads=, rows=) computes only what it keeps: its peak memory is the model's own plus the
kept weights (within 10%), counted by a tally of live tensor bytes; and what it keeps equals the
slice of the whole weights (float64), for every path the engine may take (fused SDPA, tiled with
a head- and position-dependent ``score_mod``, chunked with a positional alignment, sparsemax)."""

from __future__ import annotations

import math
import weakref

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import attnkit as ak
from attnkit.evaluate import ablate
from attnkit.interpret import record


class LiveBytes(TorchDispatchMode):
    """The bytes of tensor storage made by the ops run inside, alive at once: now and at most.

    Each op's outputs are counted once per storage (views share it) until the storage is freed.
    What an op allocates and frees inside itself (a fused kernel's scratch) is not seen, in the
    plain forward and under the recorder alike."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, Tensor):
                storage = tensor.untyped_storage()
                key = id(storage)
                if key not in self._sizes:
                    self._sizes[key] = storage.nbytes()
                    self.live += storage.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._free, key)
        return out

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key)


def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """ALiBi (Press et al. 2022): a distance penalty with a slope per head, 2^-(h+1)."""
    return score - torch.exp2(-(h + 1.0)) * (q_idx - kv_idx).abs()


def window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """Each query sees at most 48 positions back (head 0 only 24)."""
    return q_idx - kv_idx < torch.where(h == 0, 24, 48)


class SelfAttention(nn.Module):
    """Projections to ``H`` heads and one engine call with the given options."""

    def __init__(self, dim: int = 32, heads: int = 4, **options) -> None:
        super().__init__()
        self.heads, self.options = heads, options
        self.proj = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (
            t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in self.proj(x).chunk(3, -1)
        )
        context = ak.attention(q, k, v, **self.options).context
        return self.out(context.transpose(1, 2).flatten(2))


MODELS = {
    # the fused SDPA kernel: no weights formed by the forward
    "fused": lambda: ak.layers.TransformerEncoderLayer(32, 4, 64, batch_first=True),
    # tiled online softmax, which could return weights
    "tiled, causal ALiBi and a window": lambda: SelfAttention(
        causal=True, score_mod=alibi, mask_mod=window
    ),
    # the chunked materialised formula, whose alignment reads each row's position
    "chunked, local monotonic": lambda: SelfAttention(align="local_monotonic"),
}


def kept_bytes(recorder) -> int:
    return sum(w.numel() * w.element_size() for calls in recorder.weights.values() for w in calls)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize(
    ("heads", "rows"), [([0], slice(0, 4)), ([1], None), (None, [700, 3, 3, -1])]
)
def test_peak_is_the_plain_forward_plus_what_is_kept(kind, heads, rows):
    torch.manual_seed(0)
    model = MODELS[kind]().eval()
    x = torch.randn(1, 768, 32)
    with torch.no_grad():
        with LiveBytes() as plain:
            expected = model(x)
        with record(model, heads=heads, rows=rows) as rec, LiveBytes() as recorded:
            got = model(x)
    assert torch.equal(got, expected)
    (calls,) = rec.weights.values()
    kept = kept_bytes(rec)
    h = 4 if heads is None else len(heads)
    m = 768 if rows is None else len(range(768)[rows]) if isinstance(rows, slice) else len(rows)
    assert calls[0].shape == (1, h, m, 768) and kept == 4 * h * m * 768
    # the whole weights of one call would be 4 heads x 768 x 768 x 4 bytes = 9.4 MB
    assert recorded.peak <= 1.10 * (plain.peak + kept), (recorded.peak, plain.peak, kept)


def whole_and_kept(model: nn.Module, x: Tensor, heads, rows) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        with record(model) as whole:
            model(x)
        with record(model, heads=heads, rows=rows) as kept:
            model(x)
    ((full,),) = whole.weights.values()
    ((part,),) = kept.weights.values()
    return full, part


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize(
    ("heads", "rows"),
    [
        ([0], slice(0, 4)),
        ([3, 1], slice(40, 47)),
        ([2], slice(None, None, -9)),
        (None, [50, 3, 3, -1]),
    ],
)
def test_kept_weights_equal_the_slice_of_the_whole_weights_in_float64(kind, heads, rows):
    torch.manual_seed(1)
    model = MODELS[kind]().double().eval()
    x = torch.randn(2, 64, 32, dtype=torch.float64)
    full, part = whole_and_kept(model, x, heads, rows)
    expected = full if heads is None else full[:, heads]
    picked = list(range(64))[rows] if isinstance(rows, slice) else list(rows)  # any step
    expected = expected[:, :, picked]
    assert part.shape == expected.shape
    torch.testing.assert_close(part, expected, rtol=0, atol=1e-15)


def test_kept_weights_are_the_alibi_formula():
    """The tiled case against causal ALiBi softmax written out in float64 (a window mask too)."""
    torch.manual_seed(2)
    model = MODELS["tiled, causal ALiBi and a window"]().double().eval()
    x = torch.randn(1, 80, 32, dtype=torch.float64)
    with torch.no_grad(), record(model, heads=[2, 0], rows=slice(60, 64)) as rec:
        model(x)
    q, k, _ = (t.unflatten(-1, (4, -1)).transpose(1, 2) for t in model.proj(x).chunk(3, -1))
    i, j = torch.arange(80)[:, None], torch.arange(80)[None, :]
    for slot, head in enumerate([2, 0]):
        scores = q[0, head] @ k[0, head].T / math.sqrt(8) - 2.0 ** -(head + 1) * (i - j).abs()
        allowed = (j <= i) & (i - j < (24 if head == 0 else 48))
        weights = scores.masked_fill(~allowed, -math.inf).softmax(-1)
        torch.testing.assert_close(rec[""][0, slot], weights[60:64], rtol=0, atol=1e-15)


def test_inside_another_hook_scope_the_recorded_weights_are_the_ones_it_makes():
    """An ablation entered first changes the weights the model uses: the recorder, entered
    inside it, keeps those (not the weights the model would have without the ablation)."""
    torch.manual_seed(3)
    model = SelfAttention().eval()
    x = torch.randn(1, 16, 32)
    with torch.no_grad(), ablate(model, "uniform", heads=[1]):
        with record(model, heads=[1, 2], rows=slice(0, 3)) as rec:
            model(x)
        with record(model) as whole:
            model(x)
    assert torch.equal(rec[""][0, 0], torch.full((3, 16), 1 / 16))  # the ablated head
    torch.testing.assert_close(rec[""], whole[""][:, 1:3, 0:3], rtol=0, atol=0)


def test_multi_dimensional_weights_are_kept_per_feature():
    """Multi-dimensional attention (eq. 30-32): one weight per key and value feature."""
    torch.manual_seed(4)
    score = ak.scores.Additive(d_query=8, d_key=8, d_hidden=6, value_features=8)
    model = SelfAttention(score=score).double().eval()
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    full, part = whole_and_kept(model, x, [3], slice(2, 5))
    assert part.shape == (2, 1, 3, 12, 8)
    torch.testing.assert_close(part, full[:, 3:4, 2:5], rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"heads": "01"}, TypeError, r"record\(heads=...\) takes a sequence of ints, got '01'"),
        ({"rows": [0, 1.5]}, TypeError, r"record\(rows=...\) takes ints, got 1.5 in \[0, 1.5\]"),
        ({"heads": [4]}, IndexError, r"heads=...\): \[4\] out of range for the 4 heads .* ''"),
        ({"rows": [0, -17]}, IndexError, r"rows=...\): \[-17\] out of range for the 16 rows"),
    ],
)
def test_bad_heads_and_rows_name_what_was_expected(options, error, match):
    model = SelfAttention().eval()
    with pytest.raises(error, match=match), torch.no_grad(), record(model, **options):
        model(torch.randn(1, 16, 32))
