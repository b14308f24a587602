"""ablate(): the weights inside attention modules replaced, masks respected; adversarial search."""

import pytest
import torch
from torch import nn

import attnkit as ak
from attnkit.evaluate import ablate, adversarial_attention
from attnkit.interpret import record


class CausalLayer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ak.attention(x, x, x, causal=True).context


def values() -> torch.Tensor:
    return torch.tensor([[[1.0], [2.0], [3.0]]], dtype=torch.float64)


def test_uniform_by_hand_respects_the_causal_mask():
    model = nn.Sequential(CausalLayer())
    with ablate(model, "uniform"):
        out = model(values())
    # query i averages the values of keys 0..i: [1, (1+2)/2, (1+2+3)/3]
    assert torch.allclose(out[0, :, 0], torch.tensor([1.0, 1.5, 2.0], dtype=torch.float64))
    assert torch.equal(model(values()), CausalLayer()(values()))  # restored after the block


class MultiDimensionalLayer(nn.Module):
    """Multi-dimensional attention (eq. 30-32): one distribution over the keys per value feature."""

    def __init__(self) -> None:
        super().__init__()
        self.score = ak.scores.Additive(2, 2, 4, value_features=3).double()

    def forward(self, q, k, v, mask):
        return ak.attention(q, k, v, score=self.score, mask=mask).context


def test_uniform_multi_dimensional_attention_averages_every_feature():
    g = torch.Generator().manual_seed(0)
    q, k = (
        torch.randn(2, 4, 2, generator=g, dtype=torch.float64),
        torch.randn(2, 5, 2, generator=g, dtype=torch.float64),
    )
    v = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 4, 5, generator=g) > 0.4
    mask[0, 1] = False  # a row with no admissible key stays zero
    model = MultiDimensionalLayer()
    with ablate(model, "uniform"):
        out = model(q, k, v, mask)
    keep = mask.double()
    expected = (keep @ v) / keep.sum(-1, keepdim=True).clamp_min(1.0)  # c_i = mean over keys
    assert torch.allclose(out, expected, atol=1e-12)
    assert not torch.allclose(model(q, k, v, mask), expected)  # the learnt weights differ


def test_permuted_and_random_keep_rows_on_admissible_keys():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 4)
    model = nn.Sequential(CausalLayer())
    with record(model) as original:
        model(x)
    allowed = torch.ones(6, 6).tril().bool()
    for mode in ("permuted", "random"):
        with ablate(model, mode, seed=3), record(model) as rec:
            model(x)
        w = rec["0"]
        assert torch.allclose(w.sum(-1), torch.ones(2, 1, 6))
        assert torch.all(w[..., ~allowed] == 0)
        assert not torch.allclose(w, original["0"])
        if mode == "permuted":  # the same weights per row, in another order
            assert torch.allclose(w.sort(-1).values, original["0"].sort(-1).values)


def test_zero_head_on_multi_head_attention():
    torch.manual_seed(0)
    mha = ak.MultiHeadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    with ablate(mha, "zero_head"):
        out, _ = mha(x, x, x)
    assert torch.allclose(out, mha.out_proj.bias.expand(1, 4, 8))  # no head contributes
    # head 1 zeroed: W_O applied to [context of head 0, 0]
    with record(mha) as rec:
        mha(x, x, x)
    v = x @ mha.in_proj_weight[16:].T + mha.in_proj_bias[16:]
    head0 = rec[""][0, 0] @ v[0, :, :4]
    expected = head0 @ mha.out_proj.weight[:, :4].T + mha.out_proj.bias
    with ablate(mha, "zero_head", heads=[1]):
        got, _ = mha(x, x, x)
    assert torch.allclose(got[0], expected, atol=1e-6)


def test_bad_mode_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        ablate(nn.Sequential(CausalLayer()), "shuffle")


def test_torch_multihead_attention_is_reached():
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    expected, _ = torch_mha(x, x, x)
    with ablate(torch_mha, "zero_head"):
        out, _ = torch_mha(x, x, x)
    assert torch.allclose(out, torch_mha.out_proj.bias.expand(1, 4, 8))
    with ablate(torch_mha, "uniform"):
        out, weights = torch_mha(x, x, x)
    assert torch.allclose(weights, torch.full((1, 4, 4), 0.25))
    # uniform attention: every query gets the mean value, projected by W_O
    v = x @ torch_mha.in_proj_weight[16:].T + torch_mha.in_proj_bias[16:]
    mean = v.mean(1, keepdim=True) @ torch_mha.out_proj.weight.T + torch_mha.out_proj.bias
    assert torch.allclose(out, mean.expand(1, 4, 8), atol=1e-6)
    assert torch.equal(torch_mha(x, x, x)[0], expected)  # torch's own forward again


class Classifier(nn.Module):
    def __init__(self, sensitive: bool) -> None:
        super().__init__()
        self.attn = ak.GeneralAttention(4, 4, score="dot")
        self.sensitive = sensitive

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.sensitive:
            x = x[:, :1].expand_as(x)  # every key carries the same value
        return self.attn(x.mean(1), x).context.softmax(-1)


def test_adversarial_attention():
    torch.manual_seed(0)
    x = torch.randn(1, 5, 4)
    free_model = Classifier(sensitive=False)
    free = adversarial_attention(free_model, lambda: free_model(x), "attn", steps=40)
    assert free.found and free.tvd <= 0.01 and free.jsd > 0.3  # ln 2 ≈ 0.69 is the maximum
    sensitive_model = Classifier(sensitive=True)
    tight = adversarial_attention(
        sensitive_model, lambda: sensitive_model(x), "attn", epsilon=0.0, steps=20
    )
    assert not tight.found and torch.equal(tight.weights, tight.original)


class TorchSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x)[0]


def test_record_inside_ablate_sees_the_replaced_weights_once():
    torch.manual_seed(0)
    model = TorchSelfAttention().eval()
    x = torch.randn(1, 4, 8)
    with ablate(model, "uniform"), record(model) as rec:
        model(x)
    assert len(rec.weights["attn"]) == 1
    assert torch.allclose(rec["attn"], torch.full((1, 2, 4, 4), 0.25))


@pytest.mark.parametrize("session", ["record", "ablate"])
def test_efficient_kinds_are_refused_not_silently_skipped(session):
    # Linear attention forms no weights: recording or ablating it must say so, not return the
    # model's own output as if the weights had been replaced.
    torch.manual_seed(0)
    model = nn.Sequential(ak.MultiHeadAttention(16, 2, batch_first=True, attention="linear"))
    x = torch.randn(2, 5, 16)
    enter = (lambda: record(model)) if session == "record" else (lambda: ablate(model, "uniform"))
    with pytest.raises(ValueError, match=r"module '0' runs the efficient attention kind 'linear'"):
        with enter():
            model[0](x, x, x)
    # inside exact_kinds the module attends exactly, so uniform weights are the mean of values
    with ak.layers.exact_kinds(model), ablate(model, "uniform"):
        out = model[0](x, x, x, need_weights=False)[0]
    mha = model[0]
    v = x @ mha.in_proj_weight[32:].T + mha.in_proj_bias[32:]  # [2, 5, 16]: heads side by side
    expected = mha.out_proj(v.mean(1, keepdim=True).expand(-1, 5, -1))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
