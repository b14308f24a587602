"""TransformerSeq2Seq: padding invariance, its attention weights, cached and uncached decoding."""

from __future__ import annotations

import math

import pytest
import torch

import attnkit as ak
from attnkit.core.kinds import kind_names
from attnkit.layers.decoding import greedy
from attnkit.layers.transformer import Transformer, kind_attention
from attnkit.models import TransformerSeq2Seq
from attnkit.models.transformer_seq2seq import DECODER_KINDS, NOT_DECODER_KINDS

BOS, EOS = 2, 3
SOURCE = torch.tensor([[4, 7, 5, 9, 6, 8], [5, 6, 0, 0, 0, 0], [9, 9, 4, 0, 0, 0]])
LENGTHS = torch.tensor([6, 2, 3])
TARGET_IN = torch.tensor([[2, 6, 8, 4], [2, 5, 0, 0], [2, 7, 7, 0]])


def _model(**kw) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    options = {"d_model": 16, "nhead": 2, "num_layers": 2, "dim_feedforward": 32} | kw
    return TransformerSeq2Seq(11, 9, max_length=16, **options).double().eval()


def test_a_sentence_alone_and_padded_in_a_batch_agree() -> None:
    model = _model()
    batch = model(SOURCE, LENGTHS, TARGET_IN)
    for i in range(3):
        length = int(LENGTHS[i])
        alone = model(SOURCE[i : i + 1, :length], LENGTHS[i : i + 1], TARGET_IN[i : i + 1])
        torch.testing.assert_close(batch.logits[i], alone.logits[0])
        torch.testing.assert_close(batch.weights[i, :, :length], alone.weights[0])


def test_weights_are_the_last_cross_attention_averaged_over_heads() -> None:
    """Recomputed from the last layer's projections: softmax(q k^T / sqrt(d)) per head."""
    model = _model()
    out = model(SOURCE, LENGTHS, TARGET_IN)
    layer = model.transformer.decoder.layers[-1]
    captured = {}
    layer.register_forward_pre_hook(lambda m, args: captured.update(x=args[0], memory=args[1]))
    model(SOURCE, LENGTHS, TARGET_IN)
    # post-norm layer: the cross-attention reads norm1(x + self_attention(x))
    x = captured["x"]
    x = layer.norm1(
        x
        + layer.self_attn(
            x, x, x, is_causal=True, need_weights=False, attn_mask=torch.ones(4, 4).triu(1).bool()
        )[0]
    )
    mha = layer.multihead_attn
    w_q, w_k, _ = mha.in_proj_weight.chunk(3) if hasattr(mha, "in_proj_weight") else (None,) * 3
    assert w_q is not None, "expected torch-style packed in_proj_weight"
    b_q, b_k, _ = mha.in_proj_bias.chunk(3)
    q = (x @ w_q.T + b_q).unflatten(-1, (2, 8)).transpose(1, 2)  # [B, H, T, d]
    k = (captured["memory"] @ w_k.T + b_k).unflatten(-1, (2, 8)).transpose(1, 2)
    e = q @ k.transpose(-1, -2) / math.sqrt(8)
    pad = torch.arange(6) >= LENGTHS[:, None]
    expected = e.masked_fill(pad[:, None, None, :], -math.inf).softmax(-1).mean(1)
    torch.testing.assert_close(out.weights, expected)
    real = ~pad[:, None, :]
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    assert torch.all(out.weights.masked_select(~real.expand_as(out.weights)) == 0)


def test_weights_carry_gradients_in_training() -> None:
    model = _model(dropout=0.0).train()
    out = model(SOURCE, LENGTHS, TARGET_IN)
    out.weights[:, :, 0].sum().backward()
    grad = model.transformer.decoder.layers[-1].multihead_attn.in_proj_weight.grad
    assert grad is not None and grad.abs().sum() > 0


@pytest.mark.parametrize("beam_size", [1, 3])
def test_decoding_with_and_without_caches_agree(beam_size: int) -> None:
    model = _model()
    cached = model.translate(SOURCE, LENGTHS, beam_size=beam_size, max_length=8)
    uncached = model.translate(SOURCE, LENGTHS, beam_size=beam_size, max_length=8, use_cache=False)
    for i, (a, b) in enumerate(zip(cached, uncached, strict=True)):
        assert a.tokens == b.tokens
        assert a.score == pytest.approx(b.score, rel=1e-12)
        assert a.weights.shape == (len(a.tokens) + 1, int(LENGTHS[i]))


def test_greedy_equals_argmax_by_full_recomputation() -> None:
    model = _model()
    translations = model.translate(SOURCE, LENGTHS, max_length=8)

    def step(tokens, caches):  # the whole target through forward, nothing cached
        return model(SOURCE, LENGTHS, tokens).logits

    with torch.no_grad():
        tokens = greedy(step, torch.full((3, 1), BOS), 8, eos_token_id=EOS)
    for row, translation in zip(tokens.tolist(), translations, strict=True):
        assert translation.tokens == (row[: row.index(EOS)] if EOS in row else row)


def test_tied_and_untied_output_and_taxonomy() -> None:
    tied, untied = _model(), _model(tie_embeddings=False)
    assert untied.output is not None and tied.output is None
    assert (
        sum(p.numel() for p in untied.parameters())
        == sum(p.numel() for p in tied.parameters()) + 9 * 16
    )
    row = ak.taxonomy.describe(tied).names()
    assert "Multi-Head" in row["query_multiplicity"]
    assert row["query_type"] == {"Basic", "Self-Attentive"}


def test_bad_input() -> None:
    model = _model()
    with pytest.raises(ValueError, match="divisible"):
        TransformerSeq2Seq(11, 9, d_model=10, nhead=3)
    with pytest.raises(ValueError, match="max_length=16"):
        model(torch.full((1, 17), 4), torch.tensor([17]), TARGET_IN[:1])
    with pytest.raises(ValueError, match="max_length"):
        model.translate(SOURCE, LENGTHS, max_length=16)


# --- efficient attention kinds (attnkit.efficient) in the encoder and the decoder ----------------

ENCODER_KINDS = kind_names()


def test_each_kind_reaches_the_attention_it_names() -> None:
    model = _model(attention="linear", decoder_attention="performer", dropout=0.3)
    encoder, decoder = model.transformer.encoder.layers, model._decoder().layers
    assert [layer.self_attn.attention for layer in encoder] == ["linear", "linear"]
    assert [layer.self_attn.attention for layer in decoder] == ["performer", "performer"]
    assert [layer.multihead_attn.attention for layer in decoder] == ["exact", "exact"]
    # efficient kinds form no weights to drop; exact cross-attention keeps torch's dropout
    assert encoder[0].self_attn.dropout == decoder[0].self_attn.dropout == 0.0
    assert decoder[0].multihead_attn.dropout == 0.3 and encoder[0].dropout1.p == 0.3


def test_a_wide_window_equals_exact_attention_and_linear_attention_does_not() -> None:
    """With the same parameters: sliding_window (window 256 > 6 tokens) admits every key, so the
    logits are exact attention's; linear attention (elu+1 features) changes them."""
    exact = _model()
    expected = exact(SOURCE, LENGTHS, TARGET_IN)
    for kinds, equal in (
        ({"attention": "sliding_window", "decoder_attention": "sliding_window"}, True),
        ({"attention": "linear"}, False),
        ({"decoder_attention": "linear"}, False),
    ):
        model = _model(**kinds)
        model.load_state_dict(exact.state_dict())  # parameter-free kinds: the same tensors
        got = model(SOURCE, LENGTHS, TARGET_IN)
        torch.testing.assert_close(got.weights.sum(-1), torch.ones_like(got.weights[..., 0]))
        if equal:
            torch.testing.assert_close(got.logits, expected.logits)
        else:
            assert (got.logits - expected.logits).abs().max() > 1e-3


@pytest.mark.parametrize("kind", [k for k in ENCODER_KINDS if k != "nystrom"])
def test_an_encoder_kind_ignores_padding(kind: str) -> None:
    """A padded sentence translates as it does alone. (Not Nyström: its landmarks are means over
    segments of the padded sequence, so they move with the padding.)"""
    model = _model(attention=kind)
    batch = model(SOURCE, LENGTHS, TARGET_IN)
    for i in range(3):
        length = int(LENGTHS[i])
        alone = model(SOURCE[i : i + 1, :length], LENGTHS[i : i + 1], TARGET_IN[i : i + 1])
        torch.testing.assert_close(batch.logits[i], alone.logits[0])


@pytest.mark.parametrize("kind", DECODER_KINDS[1:])
def test_a_decoder_kind_decodes_with_caches_as_over_the_whole_target(kind: str) -> None:
    model = _model(decoder_attention=kind)
    full = model(SOURCE, LENGTHS, TARGET_IN).logits
    memory, padding = model.encode(SOURCE, LENGTHS)
    caches = model._decoder().new_caches(8)
    step = model.step_function(memory, padding, incremental=True)
    with torch.no_grad():
        steps = [step(TARGET_IN[:, t : t + 1], caches) for t in range(TARGET_IN.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    cached = model.translate(SOURCE, LENGTHS, beam_size=2, max_length=8)
    uncached = model.translate(SOURCE, LENGTHS, beam_size=2, max_length=8, use_cache=False)
    assert [t.tokens for t in cached] == [t.tokens for t in uncached]


@pytest.mark.parametrize("kind", sorted(NOT_DECODER_KINDS))
def test_other_kinds_are_refused_for_the_decoder_because_they_cannot_serve(kind: str) -> None:
    """The refusal names the kind and why; and the reason is real: a decoder built with the kind
    anyway fails, or decodes one token at a time differently from the whole target."""
    with pytest.raises(ValueError, match=f"decoder's self-attention cannot be '{kind}'"):
        TransformerSeq2Seq(11, 9, decoder_attention=kind)
    torch.manual_seed(0)
    transformer = Transformer(16, 2, 1, 1, 32, 0.0, batch_first=True,
                              decoder_attention=kind_attention(kind, 16, 2)).eval()  # fmt: skip
    if kind == "synthesizer_random":  # its learned rows start near zero: make them count
        with torch.no_grad():
            transformer.decoder.layers[0].self_attn._attend.r.normal_(0.0, 3.0)
    memory, target = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    try:
        with torch.no_grad():
            full = transformer.decode(target, memory, tgt_is_causal=True)
            caches = transformer.decoder.new_caches(8)
            steps = [transformer.decode(target[:, t : t + 1], memory, caches=caches)
                     for t in range(6)]  # fmt: skip
    except ValueError:
        return
    assert (torch.cat(steps, 1) - full).abs().max() > 1e-3


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown attention kind 'fast'; expected one of: .*exact, linear"):
        TransformerSeq2Seq(11, 9, attention="fast")
