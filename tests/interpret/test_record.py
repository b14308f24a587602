"""record(): weights of every attention module, per head, outputs unchanged."""

import math

import pytest
import torch
from torch import nn

import attnkit as ak
from attnkit.core.hooks import observed
from attnkit.interpret import record


class Encoder(nn.Module):
    """Two attnkit self-attention layers, a GeneralAttention pooling and a torch MHA."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [ak.MultiHeadAttention(8, 2, dropout=dropout, batch_first=True) for _ in range(2)]
        )
        self.torch_attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.pool = ak.GeneralAttention(8, 8, score="additive")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x, x, x, need_weights=False)[0]
        x = x + self.torch_attn(x, x, x)[0]
        return self.pool(x.mean(1), x).context


def make(dropout: float = 0.0) -> tuple[Encoder, torch.Tensor]:
    torch.manual_seed(0)
    return Encoder(dropout).eval(), torch.randn(2, 5, 8)


def softmax_attention_float64(mha: ak.MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) per head (eq. 38-39), written out in float64."""
    w = mha.in_proj_weight.double()
    b = mha.in_proj_bias.double()
    e, h = mha.embed_dim, mha.num_heads
    q = x.double() @ w[:e].T + b[:e]
    k = x.double() @ w[e : 2 * e].T + b[e : 2 * e]
    d = e // h
    q = q.view(*q.shape[:2], h, d).transpose(1, 2)
    k = k.view(*k.shape[:2], h, d).transpose(1, 2)
    return (q @ k.transpose(-1, -2) / math.sqrt(d)).softmax(-1)


def test_outputs_bitwise_unchanged_and_every_module_recorded():
    model, x = make()
    expected = model(x)
    with record(model) as rec:
        got = model(x)
    assert torch.equal(got, expected)
    assert rec.keys() == ["layers.0", "layers.1", "torch_attn", "pool"]
    for name in ("layers.0", "layers.1", "torch_attn"):
        assert rec[name].shape == (2, 2, 5, 5)
    assert rec["pool"].shape == (2, 1, 1, 5)  # one query, one head


def test_weights_equal_the_formula_and_the_modules_own():
    model, x = make()
    with record(model) as rec:
        model(x)
    reference = softmax_attention_float64(model.layers[0], x)
    assert torch.allclose(rec["layers.0"].double(), reference, atol=1e-6)
    # torch's MHA reports the same per-head weights itself
    h = x + model.layers[0](x, x, x)[0]
    h = h + model.layers[1](h, h, h)[0]
    _, torch_weights = model.torch_attn(h, h, h, average_attn_weights=False)
    assert torch.allclose(rec["torch_attn"], torch_weights, atol=1e-6)


def test_dropout_stream_untouched_in_training():
    model, x = make(dropout=0.3)
    model.train()
    torch.manual_seed(1)
    expected = model(x)
    torch.manual_seed(1)
    with record(model, modules=["layers.*"]) as rec:
        got = model(x)
    assert torch.equal(got, expected)
    assert torch.allclose(rec["layers.0"].sum(-1), torch.ones(2, 2, 5))  # before dropout


def test_bounded_selection_of_modules_heads_rows():
    model, x = make()
    with record(model, modules=["layers.1"], heads=[1], rows=slice(0, 2)) as rec:
        model(x)
    with record(model) as full:
        model(x)
    assert rec.keys() == ["layers.1"]
    # the kept rows are computed apart (the materialised formula): equal up to rounding
    torch.testing.assert_close(rec["layers.1"], full["layers.1"][:, 1:2, 0:2], rtol=0, atol=1e-7)


def test_unknown_module_name_raises():
    model, _ = make()
    with pytest.raises(ValueError, match="no module of the model is named 'encoder'"):
        record(model, modules=["encoder"])


def test_engine_restored_and_hooks_removed():
    model, x = make()
    with record(model):
        model(x)
    assert not observed()  # the scope ended: no hook left in this context
    with record(model) as rec:
        pass
    model(x)
    assert len(rec) == 0


def test_user_module_calling_attention_and_repeated_calls():
    class Hops(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(3):
                x = ak.attention(x, x, x, causal=True).context
            return x

    model = nn.Sequential(Hops())
    x = torch.randn(1, 3, 4)
    with record(model) as rec:
        model(x)
    assert len(rec.weights["0"]) == 3
    causal = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]])
    first = rec.weights["0"][0][0, 0]
    assert torch.equal(first > 0, causal > 0)


def test_grad_mode_keeps_weights_in_the_graph():
    model, x = make()
    with record(model, modules=["layers.*"], grad=True) as rec:
        out = model(x)
    grad = torch.autograd.grad(out.sum(), rec["layers.0"])[0]
    assert grad.shape == (2, 2, 5, 5) and grad.abs().sum() > 0
    with pytest.raises(ValueError, match="heads/rows/device must be None"):
        record(model, grad=True, heads=[0])


def test_multi_hop_mechanism_one_record_per_hop():
    from attnkit.mechanisms.multi_hop import MultiHopAttention

    torch.manual_seed(0)
    hop = MultiHopAttention(d_query=8, d_feature=16, num_hops=3, transform="concat").eval()
    q, f = torch.randn(4, 8), torch.randn(4, 10, 16)
    expected = hop(q, f, return_weights=True)
    with record(hop) as rec:
        got = hop(q, f)
    assert torch.equal(got.context, expected.context)
    hops = torch.stack([w[:, 0, 0] for w in rec.weights[""]], 1)  # [B, hops, N]
    assert torch.allclose(hops, expected.weights)


def test_forced_backend_and_errors_restore_state():
    class Forced(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ak.attention(x, x, x, backend="reference").context

    model = nn.Sequential(Forced())
    x = torch.randn(1, 4, 3)
    with record(model) as rec:
        assert torch.equal(model(x), Forced()(x))
    assert rec["0"].shape == (1, 1, 4, 4)
    with pytest.raises(ValueError), record(model) as rec:
        model(torch.randn(1, 4))  # rank 2: the engine refuses
    assert not observed()  # the scope ended: no hook left in this context
    model(x)
    assert len(rec) == 0


def test_torch_transformer_layer_and_grad_through_torch_attention():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        expected = layer(x)
        with record(layer) as rec:
            got = layer(x)
    # hooks turn torch's fused encoder-layer kernel off, so equal up to rounding only
    assert torch.allclose(got, expected, atol=1e-5)
    _, own = layer.self_attn(x, x, x, average_attn_weights=False)
    assert torch.allclose(rec["self_attn"], own, atol=1e-6)
    with record(layer, grad=True) as rec:
        out = layer(x)
    assert torch.allclose(rec["self_attn"], own, atol=1e-6)
    grad = torch.autograd.grad(out.sum(), rec["self_attn"])[0]
    assert grad.shape == (2, 2, 5, 5) and grad.abs().sum() > 0
