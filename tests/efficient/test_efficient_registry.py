"""The efficient kinds are registered with MultiHeadAttention and carry their taxonomy."""

from __future__ import annotations

import pytest
import torch

import attnkit as ak
from attnkit.efficient import EFFICIENT_KINDS, MODULE_KINDS, register_efficient_kinds
from attnkit.mechanisms.multi_head import ATTENTION_KINDS
from attnkit.taxonomy import parse_place


def test_every_kind_is_registered_once() -> None:
    assert register_efficient_kinds() == []  # idempotent: the import registered them
    for name, fn in EFFICIENT_KINDS.items():
        assert ATTENTION_KINDS[name] is fn
        parse_place(fn.taxonomy)  # a valid declaration


@pytest.mark.parametrize("name", ["sliding_window", "longformer", "bigbird"])
def test_restricted_kinds_are_exact_on_short_inputs(name: str) -> None:
    """Shorter than the default window/block, the pattern admits every key: MHA equals exact."""
    torch.manual_seed(0)
    exact = ak.MultiHeadAttention(32, 4, batch_first=True)
    fast = ak.MultiHeadAttention(32, 4, batch_first=True, attention=name)
    fast.load_state_dict(exact.state_dict())
    x = torch.randn(2, 20, 32)
    expected, _ = exact(x, x, x, need_weights=False)
    out, weights = fast(x, x, x)
    assert weights is None
    assert (out - expected).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", [*EFFICIENT_KINDS, *MODULE_KINDS])
def test_every_kind_runs_in_multi_head_attention(name: str) -> None:
    torch.manual_seed(0)
    mha = ak.MultiHeadAttention(32, 4, batch_first=True, attention=name)
    x = torch.randn(2, 70, 32, requires_grad=True)
    pad = torch.zeros(2, 70, dtype=torch.bool)
    pad[1, 50:] = True  # torch's convention: True = padding
    out, _ = mha(x, x, x, key_padding_mask=pad)
    again, _ = mha(x, x, x, key_padding_mask=pad)
    assert out.shape == (2, 70, 32) and torch.equal(out, again)  # deterministic
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", list(MODULE_KINDS))
def test_module_kinds_build_per_instance(name: str) -> None:
    module = MODULE_KINDS[name](4, 8, 8)
    assert module.state_dict()  # its parameters or random features are saved with the model
    q = torch.randn(2, 4, 30, 8)
    assert module(q, q, q).context.shape == (2, 4, 30, 8)
    parse_place(module.taxonomy)


def test_unsupported_options_are_refused() -> None:
    mha = ak.MultiHeadAttention(32, 4, batch_first=True, attention="linear", score="additive")
    x = torch.randn(1, 5, 32)
    with pytest.raises(ValueError, match="score"):
        mha(x, x, x)


def test_every_kind_runs_inside_multi_head_attention() -> None:
    """Each registered kind (functions and modules with parameters) is usable as
    ``MultiHeadAttention(attention=NAME)``; a kind's parameters are saved with the module's."""
    import torch

    import attnkit as ak
    from attnkit.mechanisms.multi_head import ATTENTION_FACTORIES, ATTENTION_KINDS

    torch.manual_seed(0)
    x = torch.randn(2, 10, 16)
    for kind in [*ATTENTION_KINDS, *ATTENTION_FACTORIES]:
        mha = ak.MultiHeadAttention(16, 2, attention=kind, batch_first=True)
        out, _ = mha(x, x, x, need_weights=False)
        assert out.shape == (2, 10, 16) and torch.isfinite(out).all(), kind
        own = [k for k in mha.state_dict() if k.startswith("_attend.")]
        assert bool(own) == (kind in ATTENTION_FACTORIES), (kind, own)
        out.sum().backward()
        assert all(p.grad is not None for p in mha.parameters() if p.requires_grad), kind
