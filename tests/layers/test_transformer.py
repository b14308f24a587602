"""Transformer layers and stacks against torch's own modules (state_dict copied in, eval mode).

Ground truth is ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` /
``TransformerEncoder`` / ``Transformer``; for what torch cannot do (other scores, grouped-query
heads) the layer's formula is written out below around the attention module.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attnkit as ak
from attnkit.layers import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch: nested tensors, masks

E, H, FF = 16, 4, 24
N, L, S = 2, 5, 7
TOL = 1e-5


def perturb(module: nn.Module, seed: int) -> None:
    """Random values for every parameter (torch initialises biases and norms trivially)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))


def copied(reference: nn.Module, ours: nn.Module) -> tuple[nn.Module, nn.Module]:
    perturb(reference, 0)
    missing = ours.load_state_dict(reference.state_dict())
    assert not missing.missing_keys and not missing.unexpected_keys
    return reference.eval(), ours.eval()


def x_of(*shape: int, seed: int = 1) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def layout(t: Tensor, batch_first: bool) -> Tensor:
    """``[N, L, E]`` → the layer's layout."""
    return t if batch_first else t.transpose(0, 1)


def causal_bool(n: int) -> Tensor:
    return torch.triu(torch.ones(n, n, dtype=torch.bool), 1)  # torch: True = NOT allowed


def padding(lengths: list[int], n: int) -> Tensor:
    return torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]  # True = padding


CONFIGS = [
    {"norm_first": False, "activation": "relu", "batch_first": False},
    {"norm_first": True, "activation": "gelu", "batch_first": True},
    {"norm_first": True, "activation": F.gelu, "batch_first": False, "bias": False},
    {"norm_first": False, "activation": "relu", "batch_first": True, "layer_norm_eps": 1e-3},
]
MASKS = ["none", "causal_bool", "causal_float", "padding", "both"]


def encoder_masks(kind: str) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    if kind in ("causal_bool", "both"):
        out["src_mask"] = causal_bool(L)
    if kind == "causal_float":
        out["src_mask"] = nn.Transformer.generate_square_subsequent_mask(L)
    if kind in ("padding", "both"):
        out["src_key_padding_mask"] = padding([L, 3], L)
    return out


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("masks", MASKS)
def test_encoder_layer_reproduces_torch(config: dict, masks: str) -> None:
    reference, ours = copied(
        nn.TransformerEncoderLayer(E, H, FF, dropout=0.1, **config),
        TransformerEncoderLayer(E, H, FF, dropout=0.1, **config),
    )
    src = layout(x_of(N, L, E), config["batch_first"])
    kwargs = encoder_masks(masks)
    with torch.no_grad():
        expected, got = reference(src, **kwargs), ours(src, **kwargs)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=TOL, rtol=0)


def decoder_masks(kind: str) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    if kind in ("causal_bool", "both"):
        out["tgt_mask"] = causal_bool(L)
        out["memory_mask"] = torch.zeros(L, S, dtype=torch.bool).index_fill(
            1, torch.tensor([2]), True
        )
    if kind == "causal_float":
        out["tgt_mask"] = nn.Transformer.generate_square_subsequent_mask(L)
    if kind in ("padding", "both"):
        out["tgt_key_padding_mask"] = padding([L, 4], L)
        out["memory_key_padding_mask"] = padding([S, 4], S)
    return out


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("masks", MASKS)
def test_decoder_layer_reproduces_torch(config: dict, masks: str) -> None:
    reference, ours = copied(
        nn.TransformerDecoderLayer(E, H, FF, **config),
        TransformerDecoderLayer(E, H, FF, **config),
    )
    bf = config["batch_first"]
    tgt, memory = layout(x_of(N, L, E), bf), layout(x_of(N, S, E, seed=2), bf)
    kwargs = decoder_masks(masks)
    with torch.no_grad():
        expected, got = reference(tgt, memory, **kwargs), ours(tgt, memory, **kwargs)
    torch.testing.assert_close(got, expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_and_decoder_stacks_reproduce_torch(norm_first: bool) -> None:
    kw = {"batch_first": True, "norm_first": norm_first}
    ref_enc, our_enc = copied(
        nn.TransformerEncoder(
            nn.TransformerEncoderLayer(E, H, FF, **kw),
            3,
            nn.LayerNorm(E),
            enable_nested_tensor=False,
        ),
        TransformerEncoder(TransformerEncoderLayer(E, H, FF, **kw), 3, nn.LayerNorm(E)),
    )
    src = x_of(N, S, E)
    pad = padding([S, 4], S)
    with torch.no_grad():
        torch.testing.assert_close(
            our_enc(src, src_key_padding_mask=pad),
            ref_enc(src, src_key_padding_mask=pad),
            atol=TOL,
            rtol=0,
        )
    ref_dec, our_dec = copied(
        nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF, **kw), 2, nn.LayerNorm(E)),
        TransformerDecoder(TransformerDecoderLayer(E, H, FF, **kw), 2, nn.LayerNorm(E)),
    )
    tgt = x_of(N, L, E, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(
            our_dec(tgt, src, tgt_mask=causal_bool(L), memory_key_padding_mask=pad),
            ref_dec(tgt, src, tgt_mask=causal_bool(L), memory_key_padding_mask=pad),
            atol=TOL,
            rtol=0,
        )


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_reproduces_torch(batch_first: bool, norm_first: bool) -> None:
    kw = {"num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": FF}
    kw |= {"batch_first": batch_first, "norm_first": norm_first}
    reference, ours = copied(nn.Transformer(E, H, **kw), Transformer(E, H, **kw))
    src, tgt = layout(x_of(N, S, E), batch_first), layout(x_of(N, L, E, seed=4), batch_first)
    masks = {
        "tgt_mask": nn.Transformer.generate_square_subsequent_mask(L),
        "src_key_padding_mask": padding([S, 5], S),
        "memory_key_padding_mask": padding([S, 5], S),
        "tgt_key_padding_mask": padding([L, 4], L),
    }
    with torch.no_grad():
        for kwargs in ({}, masks):
            expected, got = reference(src, tgt, **kwargs), ours(src, tgt, **kwargs)
            torch.testing.assert_close(got, expected, atol=TOL, rtol=0)


def test_gradients_match_torch() -> None:
    reference, ours = copied(
        nn.TransformerDecoderLayer(E, H, FF, batch_first=True),
        TransformerDecoderLayer(E, H, FF, batch_first=True),
    )
    tgt, memory = x_of(N, L, E), x_of(N, S, E, seed=2)
    for module in (reference, ours):
        module(tgt, memory, tgt_mask=causal_bool(L)).square().sum().backward()
    ref_grads = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None
        torch.testing.assert_close(p.grad, ref_grads[name].grad, atol=1e-4, rtol=1e-4)


def test_square_subsequent_mask_is_torchs() -> None:
    torch.testing.assert_close(
        Transformer.generate_square_subsequent_mask(6),
        nn.Transformer.generate_square_subsequent_mask(6),
    )


# --------------------------------------------------------------------------------------------
# Any score / alignment, grouped-query heads: the layer's formula around the attention module
# --------------------------------------------------------------------------------------------


def layer_formula(layer: TransformerEncoderLayer, x: Tensor, causal: bool) -> Tensor:
    """Post-/pre-norm encoder layer (Vaswani et al. 2017, §3.1), eval mode, [N, L, E]."""
    mask = causal_bool(x.shape[1]) if causal else None

    def sa(y: Tensor) -> Tensor:
        return layer.self_attn(y, y, y, attn_mask=mask, need_weights=False)[0]

    def ff(y: Tensor) -> Tensor:
        return layer.linear2(F.relu(layer.linear1(y)))

    if layer.norm_first:
        x = x + sa(layer.norm1(x))
        return x + ff(layer.norm2(x))
    x = layer.norm1(x + sa(x))
    return layer.norm2(x + ff(x))


@pytest.mark.parametrize(
    "options",
    [
        {"score": "additive"},
        {"score": "cosine", "align": "sparsemax"},
        {"num_kv_heads": 2},
        {"attention": ak.MultiHeadAttention(E, H, batch_first=True, score="general")},
    ],
    ids=["additive", "cosine-sparsemax", "gqa", "module"],
)
@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_with_any_attention(options: dict, norm_first: bool) -> None:
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(
        E, H, FF, batch_first=True, norm_first=norm_first, **options
    ).double()
    perturb(layer, 1)
    layer.eval()
    if "attention" in options:
        assert layer.self_attn is options["attention"]
    x = x_of(N, L, E).double()
    with torch.no_grad():
        torch.testing.assert_close(
            layer(x, src_mask=causal_bool(L)), layer_formula(layer, x, True), atol=1e-12, rtol=0
        )


def test_taxonomy_of_stacks_and_cross_attention() -> None:
    model = Transformer(E, H, 1, 1, FF)
    assert model.encoder.taxonomy["query_multiplicity"] == "Multi-Hop"
    assert model.decoder.taxonomy["query_multiplicity"] == "Multi-Hop"
    assert model.decoder.layers[0].multihead_attn.taxonomy["query_type"] == "Basic"
    row = ak.taxonomy.describe(model)
    text = str(row)
    assert "Multi-Hop" in text and "Multi-Head" in text
    assert "Basic" in text and "Self-Attentive" in text


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="activation"):
        TransformerEncoderLayer(E, H, activation="swish")
    with pytest.raises(ValueError, match="embed_dim"):
        TransformerEncoderLayer(E, H, attention=ak.MultiHeadAttention(8, 2, batch_first=True))
    with pytest.raises(ValueError, match="batch_first"):
        TransformerEncoderLayer(E, H, attention=ak.MultiHeadAttention(E, H))
    with pytest.raises(TypeError, match="attention"):
        TransformerEncoderLayer(E, H, attention=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown attention kind"):
        TransformerEncoderLayer(E, H, attention="nope")
    model = Transformer(E, H, 1, 1, FF, batch_first=True)
    with pytest.raises(ValueError, match="batch size"):
        model(x_of(2, S, E), x_of(3, L, E))
    with pytest.raises(ValueError, match="d_model"):
        model(x_of(2, S, E + 1), x_of(2, L, E))


class NoBias:
    """A position bias that adds nothing: forces the positional path, changes no score."""

    def score_mod(self, q_positions: Tensor, k_positions: Tensor):  # type: ignore[no-untyped-def]
        return lambda score, b, h, q_idx, kv_idx: score


@pytest.mark.parametrize("masks", MASKS)
def test_positional_path_applies_torch_masks_like_the_plain_path(masks: str) -> None:
    """With a bias of zero the layer takes the path that handles positions and caches: it must
    apply every torch mask exactly as torch's layer does."""
    reference, ours = copied(
        nn.TransformerEncoderLayer(E, H, FF, batch_first=True),
        TransformerEncoderLayer(E, H, FF, batch_first=True, position_bias=NoBias()),
    )
    src = x_of(N, L, E)
    kwargs = encoder_masks(masks)
    with torch.no_grad():
        torch.testing.assert_close(ours(src, **kwargs), reference(src, **kwargs), atol=TOL, rtol=0)
        causal = ours(src, is_causal=True)
        torch.testing.assert_close(
            causal, reference(src, src_mask=causal_bool(L)), atol=TOL, rtol=0
        )


def test_unbatched_inputs_like_torch() -> None:
    ref_enc, our_enc = copied(
        nn.TransformerEncoderLayer(E, H, FF), TransformerEncoderLayer(E, H, FF)
    )
    ref_dec, our_dec = copied(
        nn.TransformerDecoderLayer(E, H, FF), TransformerDecoderLayer(E, H, FF)
    )
    x, memory = x_of(L, E), x_of(S, E, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(our_enc(x), ref_enc(x), atol=TOL, rtol=0)
        torch.testing.assert_close(
            our_dec(x, memory, tgt_mask=causal_bool(L)),
            ref_dec(x, memory, tgt_mask=causal_bool(L)),
            atol=TOL,
            rtol=0,
        )
