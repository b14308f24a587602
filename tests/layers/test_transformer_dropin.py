"""Transformer layers as drop-ins for torch's beyond eval outputs: ``activation_relu_or_gelu``,
overridable ``_sa_block`` / ``_mha_block`` / ``_ff_block`` (the same subclass of torch's layer and
of attnkit's gives the same output), ``Transformer._reset_parameters``, ``torch.compile`` and
nested tensors. Ground truth: torch's modules with the same ``state_dict``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.layers import (
    RotaryEmbedding,
    Transformer,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch: nested tensors

E, H, FF = 8, 2, 12
N, L, S = 2, 5, 4


def copied(reference: nn.Module, ours: nn.Module, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    result = ours.load_state_dict(reference.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    return reference, ours


def x_of(*shape: int, seed: int = 1) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "activation,expected",
    [("relu", 1), ("gelu", 2), (F.relu, 1), (F.gelu, 2), (nn.ReLU(), 1), (nn.GELU(), 2),
     (torch.tanh, 0), (nn.SiLU(), 0)],
    ids=["relu", "gelu", "F.relu", "F.gelu", "ReLU", "GELU", "tanh", "SiLU"],
)  # fmt: skip
def test_activation_relu_or_gelu_as_torch(activation, expected):
    ours = TransformerEncoderLayer(E, H, FF, activation=activation)
    reference = nn.TransformerEncoderLayer(E, H, FF, activation=activation)
    assert ours.activation_relu_or_gelu == reference.activation_relu_or_gelu == expected


# --------------------------------------------------------------------------------------------
# Overridable blocks: the same subclass of torch's layer and of ours
# --------------------------------------------------------------------------------------------


def encoder_subclass(base: type) -> type:
    class Custom(base):  # type: ignore[misc, valid-type]
        def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
            attended = super()._sa_block(x, attn_mask, key_padding_mask, is_causal=is_causal)
            return 0.5 * attended + x.flip(-1)  # flip: the layout must be torch's

        def _ff_block(self, x):
            return torch.tanh(self.linear2(self.activation(self.linear1(x)))) * 2

    return Custom


def decoder_subclass(base: type) -> type:
    class Custom(base):  # type: ignore[misc, valid-type]
        def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
            # written against the module itself, in the layer's layout, as users do
            return self.self_attn(x, x, x, attn_mask=attn_mask, need_weights=False)[0] * 0.3

        def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False):
            attended = super()._mha_block(x, mem, attn_mask, key_padding_mask, is_causal)
            return attended - mem.mean(0 if not self.self_attn.batch_first else 1, keepdim=True)

        def _ff_block(self, x):
            return super()._ff_block(x).relu()

    return Custom


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_subclass_overriding_blocks_matches_torch(batch_first, norm_first):
    kwargs = {"dropout": 0.0, "batch_first": batch_first, "norm_first": norm_first}
    reference, ours = copied(
        encoder_subclass(nn.TransformerEncoderLayer)(E, H, FF, **kwargs),
        encoder_subclass(TransformerEncoderLayer)(E, H, FF, **kwargs),
    )
    src = x_of(N, L, E) if batch_first else x_of(L, N, E)
    kpm = torch.tensor([[False] * L, [False] * 3 + [True] * 2])
    for options in ({}, {"src_key_padding_mask": kpm}, {"is_causal": True}):
        mask = (
            nn.Transformer.generate_square_subsequent_mask(L) if options.get("is_causal") else None
        )
        expected = reference(src, src_mask=mask, **options)
        torch.testing.assert_close(ours(src, src_mask=mask, **options), expected, rtol=0, atol=1e-5)
    plain = TransformerEncoderLayer(E, H, FF, **kwargs)
    plain.load_state_dict(ours.state_dict())
    assert (plain(src) - ours(src)).abs().max() > 1e-2  # the overrides did change the output


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_subclass_overriding_blocks_matches_torch(batch_first, norm_first):
    kwargs = {"dropout": 0.0, "batch_first": batch_first, "norm_first": norm_first}
    reference, ours = copied(
        decoder_subclass(nn.TransformerDecoderLayer)(E, H, FF, **kwargs),
        decoder_subclass(TransformerDecoderLayer)(E, H, FF, **kwargs),
    )
    tgt = x_of(N, L, E) if batch_first else x_of(L, N, E)
    memory = x_of(N, S, E, seed=2) if batch_first else x_of(S, N, E, seed=2)
    mask = nn.Transformer.generate_square_subsequent_mask(L)
    memory_kpm = torch.tensor([[False] * S, [False] * 2 + [True] * 2])
    expected = reference(tgt, memory, tgt_mask=mask, memory_key_padding_mask=memory_kpm)
    got = ours(tgt, memory, tgt_mask=mask, memory_key_padding_mask=memory_kpm)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_extras_keep_working_beside_the_blocks():
    """Rotary positions take attnkit's own path; ``need_weights`` returns the cross-attention
    weights before dropout (rows sum to 1 in training mode too) and the same output."""
    layer = TransformerEncoderLayer(E, H, FF, batch_first=True, rotary=RotaryEmbedding(E // H))
    src = x_of(N, L, E)
    plain = TransformerEncoderLayer(E, H, FF, batch_first=True)
    plain.load_state_dict(layer.state_dict())
    assert (layer.eval()(src) - plain.eval()(src)).abs().max() > 1e-3
    decoder = TransformerDecoderLayer(E, H, FF, dropout=0.3, batch_first=True).train()
    tgt, memory = x_of(N, L, E), x_of(N, S, E, seed=2)
    torch.manual_seed(0)
    weights = decoder(tgt, memory, need_weights=True).weights
    torch.testing.assert_close(weights.sum(-1), torch.ones(N, H, L), rtol=0, atol=1e-6)
    decoder.eval()
    torch.testing.assert_close(decoder(tgt, memory, need_weights=True).output, decoder(tgt, memory))


def test_transformer_reset_parameters_as_torch():
    """Same parameter order and the same rule (xavier_uniform_ on every matrix): the same draws."""
    reference = nn.Transformer(E, H, 1, 1, FF)
    ours = Transformer(E, H, 1, 1, FF)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in reference.named_parameters()]
    torch.manual_seed(4)
    reference._reset_parameters()
    torch.manual_seed(4)
    ours._reset_parameters()
    for (name, p), q in zip(ours.named_parameters(), reference.parameters(), strict=True):
        if p.dim() > 1:
            torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


# --------------------------------------------------------------------------------------------
# torch.compile(fullgraph=True)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masks", ["bool", "float_causal"])
def test_compiled_encoder_layer_equals_eager(masks):
    torch._dynamo.reset()
    layer = TransformerEncoderLayer(E, H, FF, batch_first=True).eval()
    src = x_of(N, L, E)
    kpm = torch.tensor([[False] * L, [False] * 3 + [True] * 2])
    if masks == "bool":
        options = {"src_mask": torch.rand(L, L) > 0.7, "src_key_padding_mask": kpm}
    else:
        causal = nn.Transformer.generate_square_subsequent_mask(L)
        options = {
            "src_mask": causal,
            "src_key_padding_mask": kpm.float() * -1e4,
            "is_causal": True,
        }
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(src, **options), layer(src, **options), rtol=0, atol=1e-5)


def test_compiled_decoder_layer_equals_eager():
    torch._dynamo.reset()
    layer = TransformerDecoderLayer(E, H, FF, batch_first=True).eval()
    tgt, memory = x_of(N, L, E), x_of(N, S, E, seed=2)
    options = {
        "tgt_is_causal": True,
        "tgt_mask": nn.Transformer.generate_square_subsequent_mask(L),
        "memory_key_padding_mask": torch.tensor([[False] * S, [False] * 2 + [True] * 2]),
    }
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = compiled(tgt, memory, **options)
    torch.testing.assert_close(got, layer(tgt, memory, **options), rtol=0, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Nested tensors
# --------------------------------------------------------------------------------------------


def nested(layout: torch.layout, lengths=(5, 3, 1)) -> Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.nested.nested_tensor(
        [torch.randn(n, E, generator=g) for n in lengths], layout=layout
    )


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=str)
@pytest.mark.parametrize("norm_first", [False, True])
def test_nested_encoder_layer_and_stack_equal_torch_fast_path(layout, norm_first):
    """torch's eval fast path takes a strided nested batch; attnkit gives its output for the
    same sequences in either layout (torch refuses jagged), for a layer and a stack."""
    kwargs = {"batch_first": True, "norm_first": norm_first}
    reference, ours = copied(
        nn.TransformerEncoderLayer(E, H, FF, **kwargs), TransformerEncoderLayer(E, H, FF, **kwargs)
    )
    reference.eval(), ours.eval()
    stack_ref = nn.TransformerEncoder(reference, 2, enable_nested_tensor=True).eval()
    stack = TransformerEncoder(ours, 2).eval()
    with torch.no_grad():
        for theirs, mine in ((reference, ours), (stack_ref, stack)):
            expected = theirs(nested(torch.strided))
            out = mine(nested(layout))
            assert out.is_nested and out.layout == layout
            for got, want in zip(out.unbind(), expected.unbind(), strict=True):
                torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


# --- Training with dropout: the same draws as torch under the same seed -----------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("layer", ["encoder", "decoder"])
def test_training_step_with_dropout_equals_torch_under_the_same_seed(layer, batch_first) -> None:
    """Dropout 0.1 keeps the fused path (SDPA's own dropout), and the layers make
    torch's random draws in torch's order and memory layout: with the same ``torch.manual_seed``
    the training-mode output and the gradients equal torch's; another seed gives another draw."""
    kwargs = {"dropout": 0.1, "batch_first": batch_first}
    if layer == "encoder":
        reference, ours = copied(
            nn.TransformerEncoderLayer(E, H, FF, **kwargs),
            TransformerEncoderLayer(E, H, FF, **kwargs),
        )
    else:
        reference, ours = copied(
            nn.TransformerDecoderLayer(E, H, FF, **kwargs),
            TransformerDecoderLayer(E, H, FF, **kwargs),
        )
    x = x_of(N, L, E) if batch_first else x_of(L, N, E)
    memory = x_of(N, S, E, seed=2) if batch_first else x_of(S, N, E, seed=2)
    padding = torch.tensor([[False] * L, [False] * (L - 2) + [True] * 2])
    args = (x,) if layer == "encoder" else (x, memory)
    extra = (
        {"src_key_padding_mask": padding}
        if layer == "encoder"
        else {"tgt_key_padding_mask": padding}
    )

    def step(module: nn.Module, seed: int) -> tuple[Tensor, list[Tensor]]:
        module.zero_grad()
        torch.manual_seed(seed)
        out = module(*args, **extra)
        (out.square().mean()).backward()
        return out.detach(), [p.grad.clone() for p in module.parameters()]

    expected, expected_grads = step(reference.train(), 7)
    got, grads = step(ours.train(), 7)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    again, _ = step(ours, 7)
    torch.testing.assert_close(again, got, rtol=0, atol=0)  # reproducible
    other, _ = step(ours, 8)
    assert not torch.allclose(other, got), "another seed draws another dropout mask"
