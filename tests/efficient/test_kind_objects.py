"""Configured kind objects in ``MultiHeadAttention(attention=...)`` and the layers built on it.

The references are written out here: the module's own projections applied by hand (eq. 38), the
kind called directly on the heads, then ``out_proj`` (eq. 40).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import attnkit as ak
from attnkit.core.kinds import EXACT, create_kind, kind_names
from attnkit.efficient import (
    BigBirdAttention,
    LinearAttention,
    LinformerAttention,
    LongformerAttention,
    LSHAttention,
    NystromAttention,
    PerformerAttention,
    SlidingWindowAttention,
    SynthesizerAttention,
)
from attnkit.layers import TransformerEncoderLayer
from attnkit.layers.attention import exact_kinds
from attnkit.layers.transformer import Transformer

E, H = 16, 2


def _by_hand(mha: ak.MultiHeadAttention, kind, x: torch.Tensor, pad=None) -> torch.Tensor:
    """eq. 38-40 written out for a packed, batch-first module: project, attend, combine."""
    w_q, w_k, w_v = mha.in_proj_weight.split(E)
    b_q, b_k, b_v = mha.in_proj_bias.split(E)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (H, E // H)).transpose(1, 2)

    q, k, v = (
        heads(F.linear(x, w_q, b_q)),
        heads(F.linear(x, w_k, b_k)),
        heads(F.linear(x, w_v, b_v)),
    )
    mask = None if pad is None else ~pad[:, None, None, :]
    context = kind(q, k, v, mask=mask).context
    return mha.out_proj(context.transpose(1, 2).flatten(2))


OBJECTS = {
    "sliding_window": lambda: SlidingWindowAttention(window=3),
    "longformer": lambda: LongformerAttention(window=3),
    "linear": lambda: LinearAttention(chunk=4),
    "nystrom": lambda: NystromAttention(landmarks=4),
    "bigbird": lambda: BigBirdAttention(block=4, random_blocks=1),
    "lsh": lambda: LSHAttention(bucket_size=4),
    "linformer": lambda: LinformerAttention(max_length=12, projected_length=4),
    "performer": lambda: PerformerAttention(num_features=8),
    "synthesizer_dense": lambda: SynthesizerAttention("dense", max_length=12),
    "synthesizer_random": lambda: SynthesizerAttention("random", max_length=12),
}


@pytest.mark.parametrize("name", list(OBJECTS))
def test_a_configured_kind_in_multi_head_attention_equals_the_kind_called_directly(name) -> None:
    torch.manual_seed(0)
    kind = OBJECTS[name]()
    mha = ak.MultiHeadAttention(E, H, batch_first=True, attention=kind)
    assert mha.attention == name and mha.attention_kind is kind
    x = torch.randn(2, 12, E)
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[1, 9:] = True  # torch's convention: True = padding
    out, weights = mha(x, x, x, key_padding_mask=pad, need_weights=False)
    assert weights is None
    torch.testing.assert_close(out, _by_hand(mha, kind, x, pad), rtol=0, atol=1e-6)


def test_a_configured_kind_in_an_encoder_layer_equals_the_kind_called_directly() -> None:
    torch.manual_seed(0)
    kind = SlidingWindowAttention(window=2)
    layer = TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True, attention=kind)
    layer.eval()
    assert layer.self_attn.attention_kind is kind
    x = torch.randn(2, 9, E)
    expected = x + _by_hand(layer.self_attn, kind, x)  # post-norm: LN(x + SA(x)), then FF
    expected = layer.norm1(expected)
    expected = layer.norm2(expected + layer.linear2(F.relu(layer.linear1(expected))))
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-6)
    # window 2 is not the named kind's window 256: over 9 tokens the two differ
    named = TransformerEncoderLayer(
        E, H, 32, dropout=0.0, batch_first=True, attention="sliding_window"
    )
    named.load_state_dict(layer.state_dict())
    named.eval()
    assert (named(x) - layer(x)).abs().max() > 1e-3


def test_linformer_max_length_is_settable_through_multi_head_attention() -> None:
    x = torch.randn(1, 4100, 8)
    default = ak.MultiHeadAttention(8, 2, batch_first=True, attention="linformer")
    with pytest.raises(ValueError, match="at most 4096 keys"):
        default(x, x, x, need_weights=False)
    kind = LinformerAttention(max_length=8192, projected_length=16)
    longer = ak.MultiHeadAttention(8, 2, batch_first=True, attention=kind)
    assert longer.state_dict()["_attend.key_projection"].shape == (16, 8192)
    out, _ = longer(x, x, x, need_weights=False)
    assert out.shape == (1, 4100, 8) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", kind_names())
def test_a_name_and_its_default_object_give_the_same_module(name) -> None:
    x = torch.randn(2, 10, E)
    torch.manual_seed(1)
    by_name = ak.MultiHeadAttention(E, H, batch_first=True, attention=name)
    torch.manual_seed(1)
    by_object = ak.MultiHeadAttention(E, H, batch_first=True, attention=create_kind(name))
    assert by_name.attention == by_object.attention == name
    assert by_name.state_dict().keys() == by_object.state_dict().keys()
    for key, value in by_name.state_dict().items():
        assert torch.equal(value, by_object.state_dict()[key]), key
    out_name, _ = by_name(x, x, x, need_weights=False)
    out_object, _ = by_object(x, x, x, need_weights=False)
    assert torch.equal(out_name, out_object)


#: the keys of the kinds' own state, as checkpoints written before the one registry hold them
KIND_KEYS = {
    "linformer": ["_attend.key_projection", "_attend.value_projection"],
    "performer": ["_attend.projection"],
    "synthesizer_dense": ["_attend.w1", "_attend.b1", "_attend.w2", "_attend.b2"],
    "synthesizer_random": ["_attend.r"],
}
MHA_KEYS = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]


@pytest.mark.parametrize("name", kind_names())
def test_state_dict_keys_of_named_kinds_are_unchanged(name) -> None:
    mha = ak.MultiHeadAttention(E, H, batch_first=True, attention=name)
    assert sorted(mha.state_dict()) == sorted(MHA_KEYS + KIND_KEYS.get(name, []))
    shapes = {k: tuple(v.shape) for k, v in mha.state_dict().items() if k.startswith("_attend.")}
    expected = {
        "linformer": {
            "_attend.key_projection": (256, 4096),
            "_attend.value_projection": (256, 4096),
        },
        "performer": {"_attend.projection": (256, E // H)},
        "synthesizer_random": {"_attend.r": (H, 4096, 4096)},
    }
    if name in expected:
        assert shapes == expected[name]
    again = ak.MultiHeadAttention(E, H, batch_first=True, attention=name)
    again.load_state_dict(mha.state_dict())  # a checkpoint loads into a new module


def test_a_bad_kind_is_a_value_error_listing_the_valid_names() -> None:
    for build in (
        lambda: ak.MultiHeadAttention(E, H, attention="flash"),
        lambda: TransformerEncoderLayer(E, H, attention="flash"),
        lambda: Transformer(E, H, 1, 1, 32, attention="flash"),
    ):
        with pytest.raises(ValueError, match="unknown attention kind 'flash'") as info:
            build()
        listed = str(info.value).partition("expected one of: ")[2].split(", ")
        assert sorted(listed) == sorted(kind_names())
    with pytest.raises(TypeError, match="attention must be a kind name"):
        ak.MultiHeadAttention(E, H, attention=3)


def test_a_kind_with_parameters_is_not_shared_by_accident() -> None:
    kind = LinformerAttention(max_length=12, projected_length=4)
    ak.MultiHeadAttention(E, H, attention=kind)
    with pytest.raises(ValueError, match="already used by another module"):
        ak.MultiHeadAttention(E, H, attention=kind)
    copied = ak.MultiHeadAttention(E, H, attention=copy.deepcopy(LinformerAttention(12, 4)))
    assert copied.attention == "linformer"
    # no state: one object may serve several modules
    window = SlidingWindowAttention(window=4)
    a = ak.MultiHeadAttention(E, H, attention=window)
    b = ak.MultiHeadAttention(E, H, attention=window)
    assert a.attention_kind is b.attention_kind is window
    assert ak.MultiHeadAttention(E, H).attention_kind is EXACT


def test_kinds_take_the_head_sizes_from_the_module() -> None:
    mha = ak.MultiHeadAttention(24, 3, head_dim_k=5, head_dim_v=7, attention=PerformerAttention())
    assert mha.state_dict()["_attend.projection"].shape == (256, 5)
    dense = ak.MultiHeadAttention(24, 3, head_dim_k=5, head_dim_v=7,
                                  attention=SynthesizerAttention("dense", 10))  # fmt: skip
    assert dense.state_dict()["_attend.w1"].shape == (3, 5, 5)
    with pytest.raises(ValueError, match=r"head_dim=4.*head_dim_k=8"):
        ak.MultiHeadAttention(E, H, attention=PerformerAttention(head_dim=4))
    with pytest.raises(ValueError, match="num_heads=4"):
        ak.MultiHeadAttention(E, H, attention=SynthesizerAttention("random", 10, num_heads=4))


def test_a_transformer_gives_every_layer_its_own_copy_of_a_kind_object() -> None:
    torch.manual_seed(0)
    kind = LinformerAttention(max_length=10, projected_length=4)
    model = Transformer(E, H, 2, 2, 32, dropout=0.0, batch_first=True, attention=kind,
                        decoder_attention="linear")  # fmt: skip
    kinds = [layer.self_attn.attention_kind for layer in model.encoder.layers]
    assert len({id(k) for k in kinds}) == 2 and all(k is not kind for k in kinds)
    assert all(layer.self_attn.attention == "linear" for layer in model.decoder.layers)
    params = {id(p) for p in model.parameters()}
    assert all(id(k.key_projection) in params for k in kinds)
    src, tgt = torch.randn(2, 10, E), torch.randn(2, 6, E)
    assert model(src, tgt).shape == (2, 6, E)


def test_exact_kinds_runs_a_configured_kind_as_exact_attention() -> None:
    torch.manual_seed(0)
    exact = ak.MultiHeadAttention(E, H, batch_first=True)
    fast = ak.MultiHeadAttention(E, H, batch_first=True, attention=SlidingWindowAttention(2))
    fast.load_state_dict(exact.state_dict())
    x = torch.randn(2, 9, E)
    assert not fast.forms_weights
    with exact_kinds(fast) as switched:
        assert switched == [""] and fast.forms_weights and fast.attention == "sliding_window"
        inside, _ = fast(x, x, x)
    expected, _ = exact(x, x, x)
    torch.testing.assert_close(inside, expected)
    assert not fast.forms_weights and fast.attention_kind.window == 2


def test_the_kind_name_is_read_only() -> None:
    mha = ak.MultiHeadAttention(E, H, attention="linear")
    assert str(mha.attention) == "linear" and "attention='linear'" in repr(mha)
    with pytest.raises(AttributeError):
        mha.attention = "exact"  # type: ignore[misc]
