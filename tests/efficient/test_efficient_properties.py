"""Properties every efficient kind must have: causal kinds do not leak the future (perturbing it
leaves past outputs bitwise equal and their gradient exactly zero), and a query with no
admissible key gets zeros, never NaN."""

from __future__ import annotations

from functools import partial

import pytest
import torch

import attnkit as ak
from attnkit.efficient import (
    SynthesizerAttention,
    bigbird_attention,
    linear_attention,
    linformer_attention,
    longformer_attention,
    lsh_attention,
    nystrom_attention,
    orthogonal_gaussian,
    performer_attention,
    sliding_window_attention,
)

L, CUT = 40, 23  # positions >= CUT are "the future"

torch.manual_seed(0)
_SYNTH_DENSE = SynthesizerAttention("dense", 64, 2, 8)
_SYNTH_RANDOM = SynthesizerAttention("random", 64, 2)
_OMEGA = orthogonal_gaussian(32, 8, generator=torch.Generator().manual_seed(0))


def _lsh(q, k, v, **kw):
    return lsh_attention(q, q, v, **kw)


CAUSAL_KINDS = {
    "sliding_window": partial(sliding_window_attention, window=5),
    "longformer": partial(longformer_attention, window=5, global_tokens=torch.tensor([0, 30])),
    "bigbird": partial(bigbird_attention, block=4, random_blocks=2),
    "linear": partial(linear_attention, chunk=8),
    "performer": partial(performer_attention, projection=_OMEGA, chunk=8),
    "lsh_one_bucket": partial(_lsh, bucket_size=64),
    "lsh_buckets": partial(_lsh, bucket_size=8, n_rounds=2),
    "synthesizer_dense": _SYNTH_DENSE,
    "synthesizer_random": _SYNTH_RANDOM,
}

ALL_KINDS = {
    **CAUSAL_KINDS,
    "nystrom": partial(nystrom_attention, landmarks=8),
    "linformer": partial(linformer_attention, key_projection=torch.randn(16, 64)),
}


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, L, 8, generator=g) for _ in range(3)]


def _grads(*inputs: torch.Tensor) -> list[torch.Tensor]:
    """Gradients; an input a kind does not read (LSH's keys, a random synthesizer's queries)
    has none, which is zero."""
    return [torch.zeros_like(t) if t.grad is None else t.grad for t in inputs]


@pytest.mark.parametrize("name", list(CAUSAL_KINDS))
def test_causal_does_not_leak_the_future(name: str) -> None:
    fn = CAUSAL_KINDS[name]
    q, k, v = (t.requires_grad_() for t in _inputs())
    out = fn(q, k, v, causal=True).context
    out[:, :, :CUT].sum().backward()
    for grad in _grads(q, k, v):
        assert torch.equal(grad[:, :, CUT:], torch.zeros_like(grad[:, :, CUT:]))
    changed = [t.detach().clone() for t in (q, k, v)]
    for t in changed:
        t[:, :, CUT:] = 10 * torch.randn_like(t[:, :, CUT:])
    again = fn(*changed, causal=True).context
    assert torch.equal(again[:, :, :CUT], out[:, :, :CUT].detach())


@pytest.mark.parametrize("name", list(ALL_KINDS))
def test_no_admissible_key_gives_zeros_not_nan(name: str) -> None:
    fn = ALL_KINDS[name]
    q, k, v = (t.requires_grad_() for t in _inputs())
    mask = ak.masks.padding(torch.tensor([L - 7, 0]), L)  # batch 1: every key removed
    out = fn(q, k, v, mask=mask).context
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.isfinite(out).all()
    out.sum().backward()
    for grad in _grads(q, k, v):
        assert torch.isfinite(grad).all()


@pytest.mark.parametrize("name", list(ALL_KINDS))
@pytest.mark.parametrize("junk", [float("nan"), float("inf")])
def test_non_finite_padding_keys_reach_no_output_and_no_gradient(name: str, junk: float) -> None:
    fn = ALL_KINDS[name]
    q, k, v = _inputs()
    k[:, :, L - 7 :] = junk  # the padding of both sequences holds garbage
    v[:, :, L - 7 :] = junk
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    mask = ak.masks.padding(torch.tensor([L - 7, L - 7]), L)
    out = fn(q, k, v, mask=mask).context
    assert torch.isfinite(out).all()
    out.sum().backward()
    for grad in _grads(q, k, v):
        assert torch.isfinite(grad[:, :, : L - 7]).all()


@pytest.mark.parametrize("name", ["nystrom", "linformer", "performer", "linear", "lsh_buckets"])
def test_nan_in_an_attended_value_reaches_the_output(name: str) -> None:
    """Without a mask every key is attended, so nothing may hide a NaN there: it shows."""
    fn = ALL_KINDS[name]
    q, k, v = _inputs()
    v[0, 0, 5, 0] = float("nan")
    out = fn(q, k, v).context
    assert torch.isnan(out[0, 0]).any()
    assert torch.isfinite(out[1]).all()  # the other sequence does not read it
