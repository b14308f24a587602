"""RNNSeq2Seq(style="luong") against the equations of Luong, Pham & Manning (2015)."""

from __future__ import annotations

import pytest
import torch
from seq2seq_formulas import gru_cell, gru_layer, softmax

import attnkit as ak
from attnkit.models import RNNSeq2Seq

SCORES = ["dot", "general", "concat", "location"]
ALIGNS = ["global", "local_monotonic", "local_predictive"]
WINDOW = 1


def _model(**kw) -> RNNSeq2Seq:
    torch.manual_seed(0)
    options = {"style": "luong", "embed_dim": 6, "hidden_dim": 5, "window": WINDOW} | kw
    return RNNSeq2Seq(11, 9, max_source_length=8, **options).double().eval()


def _score(model: RNNSeq2Seq, name: str, h_t: torch.Tensor, h_bar: torch.Tensor) -> torch.Tensor:
    """score(h_t, h̄_s) for every source position s (§3.1)."""
    p = dict(model.decoder.attention.score.named_parameters())
    if name == "dot":
        return h_bar @ h_t
    if name == "general":
        return h_bar @ (p["query_proj.weight"] @ h_t)
    if name == "concat":  # v_a^T tanh(W_a [h_t; h̄_s])
        hidden = p["query_proj.weight"] @ h_t + h_bar @ p["key_proj.weight"].T + p["key_proj.bias"]
        return torch.tanh(hidden) @ p["out.weight"][0]
    # location: a_t = softmax(W_a h_t), the first S of max_source_length positions
    return (p["proj.weight"] @ h_t + p["proj.bias"])[: h_bar.shape[0]]


def _align(model: RNNSeq2Seq, name: str, e: torch.Tensor, t: int, h_t: torch.Tensor):
    """a_t over S source positions (§3.1-3.2, eq. 9-10 of the paper)."""
    length = e.shape[0]
    s = torch.arange(length, dtype=torch.float64)
    if name == "global":
        return softmax(e, torch.ones(length, dtype=torch.bool))
    if name == "local_monotonic":  # p_t = t
        return softmax(e, (s - t).abs() <= WINDOW)
    align = dict(model.decoder.attention.align.named_parameters())
    p_t = length * torch.sigmoid(align["w_p.weight"][0] @ torch.tanh(align["W_p.weight"] @ h_t))
    gaussian = torch.exp(-((s - p_t) ** 2) / (2 * (WINDOW / 2) ** 2))
    return softmax(e, (s - p_t).abs() <= WINDOW) * gaussian


@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("score", SCORES)
def test_decoder_steps_match_the_papers_equations_in_float64(score: str, align: str) -> None:
    model = _model(score=score, align=align)
    source = torch.tensor([[4, 7, 5, 9, 6, 0, 0]])
    target_in = torch.tensor([[2, 6, 8, 4]])
    out = model(source, torch.tensor([5]), target_in)
    p = dict(model.named_parameters())
    # Encoder: unidirectional GRU over the 5 real words; its last state starts the decoder.
    h_bar = gru_layer(p["encoder.embedding.weight"][source[0, :5]], model.encoder.rnn, 0)
    h = h_bar[-1]
    feed = torch.zeros(5, dtype=torch.float64)  # h~_0 = 0
    cell = [p[f"decoder.cells.0.{n}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    for t in range(4):
        # Input feeding: [E y_{t-1}; h~_{t-1}]; the query is the current state h_t.
        h = gru_cell(torch.cat([p["target_embedding.weight"][target_in[0, t]], feed]), h, *cell)
        a = _align(model, align, _score(model, score, h, h_bar), t, h)
        c = a @ h_bar
        feed = torch.tanh(p["decoder.combine.weight"] @ torch.cat([c, h]))  # h~_t
        logits = p["decoder.output.weight"] @ feed + p["decoder.output.bias"]
        torch.testing.assert_close(out.weights[0, t, :5], a, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out.logits[0, t], logits, rtol=1e-10, atol=1e-12)
    assert torch.all(out.weights[0, :, 5:] == 0)


def test_stacked_layers_without_input_feeding_match_the_equations() -> None:
    model = _model(num_layers=2, input_feeding=False, score="general")
    source, target_in = torch.tensor([[4, 7, 5]]), torch.tensor([[2, 6, 8]])
    out = model(source, torch.tensor([3]), target_in)
    p = dict(model.named_parameters())
    rnn = model.encoder.rnn
    layer0 = gru_layer(p["encoder.embedding.weight"][source[0]], rnn, 0)
    h_bar = gru_layer(layer0, rnn, 1)
    hidden = [layer0[-1], h_bar[-1]]  # each decoder layer starts from its encoder layer
    for t in range(3):
        x = p["target_embedding.weight"][target_in[0, t]]
        for layer in range(2):
            names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            cell = [p[f"decoder.cells.{layer}.{n}"] for n in names]
            hidden[layer] = x = gru_cell(x, hidden[layer], *cell)
        a = softmax(_score(model, "general", x, h_bar), torch.ones(3, dtype=torch.bool))
        h_tilde = torch.tanh(p["decoder.combine.weight"] @ torch.cat([a @ h_bar, x]))
        logits = p["decoder.output.weight"] @ h_tilde + p["decoder.output.bias"]
        torch.testing.assert_close(out.weights[0, t], a, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out.logits[0, t], logits, rtol=1e-10, atol=1e-12)


def test_a_bidirectional_encoder_matches_the_equations_padded_in_a_batch() -> None:
    """``bidirectional_encoder``: each of 2 layers runs both ways with hidden_dim / 2 units;
    ``h̄_s = [->h_s; <-h_s]`` of the top layer are the annotations, and decoder layer l starts
    from ``[->h_S; <-h_1]`` of encoder layer l (the backward GRU starts at the last real word)."""
    model = _model(num_layers=2, hidden_dim=6, bidirectional_encoder=True, score="general")
    source = torch.tensor([[4, 7, 5, 9], [5, 6, 8, 0]])
    target_in = torch.tensor([[2, 6, 8], [2, 5, 4]])
    out = model(source, torch.tensor([4, 3]), target_in)
    p = dict(model.named_parameters())
    rnn = model.encoder.rnn
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    for i, length in enumerate((4, 3)):
        x, hidden = p["encoder.embedding.weight"][source[i, :length]], []
        for layer in range(2):
            forward, backward = gru_layer(x, rnn, layer), gru_layer(x, rnn, layer, reverse=True)
            hidden.append(torch.cat([forward[-1], backward[0]]))
            x = torch.cat([forward, backward], -1)  # [S, 6]
        h_bar, feed = x, torch.zeros(6, dtype=torch.float64)  # h~_0 = 0
        for t in range(3):
            y = torch.cat([p["target_embedding.weight"][target_in[i, t]], feed])
            for layer in range(2):
                cell = [p[f"decoder.cells.{layer}.{n}"] for n in names]
                hidden[layer] = y = gru_cell(y, hidden[layer], *cell)
            a = softmax(_score(model, "general", y, h_bar), torch.ones(length, dtype=torch.bool))
            feed = torch.tanh(p["decoder.combine.weight"] @ torch.cat([a @ h_bar, y]))  # h~_t
            logits = p["decoder.output.weight"] @ feed + p["decoder.output.bias"]
            torch.testing.assert_close(out.weights[i, t, :length], a, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(out.logits[i, t], logits, rtol=1e-10, atol=1e-12)
        assert torch.all(out.weights[i, :, length:] == 0)


@pytest.mark.parametrize(
    ("style", "hidden_dim"), [("bahdanau", 6), ("luong", 5)], ids=["bahdanau", "odd"]
)
def test_a_bidirectional_encoder_is_luongs_option_with_an_even_size(style, hidden_dim) -> None:
    with pytest.raises(ValueError, match=r"bidirectional_encoder.*hidden_dim"):
        RNNSeq2Seq(11, 9, style=style, hidden_dim=hidden_dim, bidirectional_encoder=True)


@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("score", ["general", "location"])
def test_a_sentence_alone_and_padded_in_a_batch_agree(score: str, align: str) -> None:
    model = _model(score=score, align=align, num_layers=2)
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


def test_local_predictive_weights_are_differentiable_in_the_position() -> None:
    """The Gaussian makes a_t depend on p_t, so W_p and v_p get gradients (§3.2)."""
    model = _model(align="local_predictive").float().train()
    out = model(torch.tensor([[4, 7, 5, 9]]), torch.tensor([4]), torch.tensor([[2, 6]]))
    out.weights.sum().backward()
    grad = model.decoder.attention.align.w_p.weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_taxonomy_and_location_length_limit() -> None:
    model = _model(score="location", align="local_predictive")
    row = ak.taxonomy.describe(model).names()
    assert row["scoring"] == {"Location"} and row["alignment"] == {"Local"}
    with pytest.raises(ValueError, match="max_length=8"):
        model(torch.full((1, 9), 4), torch.tensor([9]), torch.tensor([[2]]))
    longest = model(torch.full((1, 8), 4), torch.tensor([8]), torch.tensor([[2]]))
    assert torch.isfinite(longest.logits).all()
