"""RNNSeq2Seq(style="bahdanau") against the equations of Bahdanau, Cho & Bengio (2015)."""

from __future__ import annotations

import pytest
import torch
from seq2seq_formulas import gru_cell, gru_layer, softmax

import attnkit as ak
from attnkit.models import RNNSeq2Seq, Seq2SeqOutput


def _model(**kw) -> RNNSeq2Seq:
    torch.manual_seed(0)
    options = {"style": "bahdanau", "embed_dim": 6, "hidden_dim": 5} | kw
    return RNNSeq2Seq(11, 9, **options).double().eval()


def test_decoder_steps_match_the_papers_equations_in_float64() -> None:
    model = _model()
    source = torch.tensor([[4, 7, 5, 9, 0, 0]])
    lengths = torch.tensor([4])
    target_in = torch.tensor([[2, 6, 8]])
    out = model(source, lengths, target_in)
    p = dict(model.named_parameters())
    n = model.encoder.hidden_dim

    # Encoder: h_j = [->h_j; <-h_j] over the 4 real words only (§3.2).
    x = p["encoder.embedding.weight"][source[0, :4]]
    rnn = model.encoder.rnn
    annotations = torch.cat([gru_layer(x, rnn, 0), gru_layer(x, rnn, 0, reverse=True)], -1)
    # s_0 = tanh(W_s <-h_1) (appendix A.2.2).
    s = torch.tanh(p["decoder.init_proj.weight"] @ annotations[0, n:] + p["decoder.init_proj.bias"])
    w_a = p["decoder.attention.score.query_proj.weight"]
    u_a = p["decoder.attention.score.key_proj.weight"]
    b_a = p["decoder.attention.score.key_proj.bias"]
    v_a = p["decoder.attention.score.out.weight"][0]
    cell = [p[f"decoder.cell.{n}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    embed = p["target_embedding.weight"]
    for i in range(3):
        # e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j): the query is the previous state.
        e = torch.tanh(w_a @ s + annotations @ u_a.T + b_a) @ v_a
        a = softmax(e, torch.ones(4, dtype=torch.bool))
        c = a @ annotations
        y_prev = embed[target_in[0, i]]
        s = gru_cell(torch.cat([y_prev, c]), s, *cell)  # s_i = f(s_{i-1}, y_{i-1}, c_i)
        # t~_i = U_o s_i + V_o E y_{i-1} + C_o c_i; t_i = max over pairs; p(y_i) ∝ exp(W_o t_i)
        t_tilde = p["decoder.readout_proj.weight"] @ torch.cat([s, y_prev, c])
        t_tilde = t_tilde + p["decoder.readout_proj.bias"]
        t = torch.maximum(t_tilde[0::2], t_tilde[1::2])
        logits = p["decoder.output.weight"] @ t + p["decoder.output.bias"]
        torch.testing.assert_close(out.weights[0, i, :4], a, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out.logits[0, i], logits, rtol=1e-10, atol=1e-12)
    assert torch.all(out.weights[0, :, 4:] == 0)


def test_step_attention_equals_ak_attention() -> None:
    """The cached-key step equals one ``ak.attention`` call with the same score and mask."""
    model = _model()
    attention = model.decoder.attention
    torch.manual_seed(1)
    query = torch.randn(3, 1, 5, dtype=torch.float64)
    keys = torch.randn(3, 7, 10, dtype=torch.float64)
    mask = torch.arange(7) < torch.tensor([[7], [3], [1]])
    context, weights = attention(query, attention.key_features(keys), keys, mask)
    ref = ak.attention(
        query, keys, keys, score=attention.score, mask=mask[:, None, :], return_weights=True
    )
    torch.testing.assert_close(weights, ref.weights)
    torch.testing.assert_close(context, ref.context)


@pytest.mark.parametrize("align", ["global", "local_monotonic", "local_predictive"])
def test_a_sentence_alone_and_padded_in_a_batch_agree(align: str) -> None:
    model = _model(align=align, window=1)
    source = torch.tensor([[4, 7, 5, 9, 6, 8], [5, 6, 0, 0, 0, 0], [9, 9, 4, 0, 0, 0]])
    lengths = torch.tensor([6, 2, 3])
    target_in = torch.tensor([[2, 6, 8, 4], [2, 5, 0, 0], [2, 7, 7, 0]])
    batch = model(source, lengths, target_in)
    for i in range(3):
        length = int(lengths[i])
        alone = model(source[i : i + 1, :length], lengths[i : i + 1], target_in[i : i + 1])
        torch.testing.assert_close(batch.logits[i], alone.logits[0])
        torch.testing.assert_close(batch.weights[i, :, :length], alone.weights[0])
        assert torch.all(batch.weights[i, :, length:] == 0)


def test_forward_shapes_dropout_and_taxonomy() -> None:
    model = RNNSeq2Seq(11, 9, embed_dim=6, hidden_dim=5, dropout=0.5)
    source, lengths = torch.tensor([[4, 7, 5], [4, 0, 0]]), torch.tensor([3, 1])
    target_in = torch.tensor([[2, 6], [2, 0]])
    torch.manual_seed(0)
    a = model(source, lengths, target_in)
    torch.manual_seed(1)
    b = model(source, lengths, target_in)
    assert isinstance(a, Seq2SeqOutput)
    assert a.logits.shape == (2, 2, 9) and a.weights.shape == (2, 2, 3)
    assert not torch.allclose(a.logits, b.logits)  # dropout is active in training mode
    model.eval()
    torch.testing.assert_close(
        model(source, lengths, target_in).logits, model(source, lengths, target_in).logits
    )
    row = ak.taxonomy.describe(model)
    assert row.names()["scoring"] == {"Additive"}
    assert row.names()["alignment"] == {"Global"}
    assert row.names()["query_type"] == {"Basic"}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"style": "transformer"}, "style"),
        ({"score": "dot"}, "same size"),  # decoder state 5 vs annotations 10
        ({"score": "cosine"}, "unknown score"),
        ({"align": "hard"}, "unknown align"),
        ({"num_layers": 2}, "one layer"),
        ({"embed_dim": 0}, "embed_dim"),
    ],
)
def test_bad_configuration_raises_value_error(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        RNNSeq2Seq(11, 9, embed_dim=kwargs.pop("embed_dim", 6), hidden_dim=5, **kwargs)


def test_bad_batches_raise_naming_shapes() -> None:
    model = _model()
    source, lengths = torch.tensor([[4, 7, 5]]), torch.tensor([3])
    with pytest.raises(TypeError, match="integer ids"):
        model(source.double(), lengths, torch.tensor([[2]]))
    with pytest.raises(ValueError, match=r"source_lengths must be \[B\]"):
        model(source, torch.tensor([3, 3]), torch.tensor([[2]]))
    with pytest.raises(ValueError, match=r"lie in \[1, S=3\]"):
        model(source, torch.tensor([4]), torch.tensor([[2]]))
    with pytest.raises(ValueError, match="target_in"):
        model(source, lengths, torch.tensor([2, 5]))
    with pytest.raises(ValueError, match="beam_size"):
        model.translate(source, lengths, beam_size=0)
