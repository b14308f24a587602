"""The efficient kinds are registered in the one kind registry and carry their taxonomy."""

from __future__ import annotations

import pytest
import torch

import attnkit as ak
import attnkit.efficient  # registers the efficient kinds
from attnkit.core.kinds import KINDS, create_kind, kind_names
from attnkit.taxonomy import parse_place

EFFICIENT = [name for name in kind_names() if name != "exact"]
#: the kinds with state of their own (parameters, or Performer's random features)
MODULE_KINDS = ["linformer", "performer", "synthesizer_dense", "synthesizer_random"]


def test_every_kind_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'linear' is already registered"):
        KINDS.register("linear")(lambda: None)  # a second registration is refused
    assert kind_names()[0] == "exact" and len(set(kind_names())) == len(kind_names())
    assert len(EFFICIENT) == 10
    for name in EFFICIENT:
        kind = create_kind(name)
        assert kind.name == name and not kind.forms_weights
        parse_place(kind.taxonomy)  # a valid declaration
        assert create_kind(name) is not kind  # a new object per module


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


@pytest.mark.parametrize("name", EFFICIENT)
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


@pytest.mark.parametrize("name", MODULE_KINDS)
def test_module_kinds_build_per_instance(name: str) -> None:
    module = create_kind(name).bind(4, 8, 8)
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

    torch.manual_seed(0)
    x = torch.randn(2, 10, 16)
    for kind in kind_names():
        mha = ak.MultiHeadAttention(16, 2, attention=kind, batch_first=True)
        out, _ = mha(x, x, x, need_weights=False)
        assert out.shape == (2, 10, 16) and torch.isfinite(out).all(), kind
        own = [k for k in mha.state_dict() if k.startswith("_attend.")]
        assert bool(own) == (kind in MODULE_KINDS), (kind, own)
        out.sum().backward()
        assert all(p.grad is not None for p in mha.parameters() if p.requires_grad), kind
