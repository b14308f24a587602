"""Alignments from decoder attention: Shift-Att's step choice (Chen et al. 2020), head/layer
averaging and choice on development sentences, both directions symmetrized — small matrices
worked by hand."""

import pytest
import torch

from attnkit.evaluate import (
    AttentionChoice,
    alignment_error_rate,
    average_attention,
    choose_attention,
    corpus_alignment_error_rate,
    decoder_step_rows,
    links_from_weights,
    symmetrized_attention_links,
)


def one_hot_rows(columns, width):
    out = torch.zeros(len(columns), width)
    for row, column in enumerate(columns):
        out[row, column] = 1.0
    return out


def test_shift_att_reads_the_step_whose_input_is_the_word():
    # 3 target words, gold: y0-x1, y1-x0, y2-x2. Steps 0..3 (inputs BOS, y0, y1, y2): a decoder
    # that attends the source of the word it has just READ puts step t on the source of
    # y_{t-1}; step 0 (input BOS) looks at x0.
    gold = "1-0 0-1 2-2"
    steps = one_hot_rows([0, 1, 0, 2], 3)  # [steps = 4, S = 3]
    shifted = decoder_step_rows(steps, 3, "input")
    naive = decoder_step_rows(steps, 3, "output")
    assert torch.equal(shifted, steps[1:])
    assert torch.equal(naive, steps[:3])
    assert links_from_weights(shifted) == {(1, 0), (0, 1), (2, 2)}
    assert alignment_error_rate(links_from_weights(shifted), gold) == 0.0
    # Naive-Att links y0-x0 (wrong), y1-x1 (wrong), y2-x0 (wrong): 1 - 0 / 6.
    assert alignment_error_rate(links_from_weights(naive), gold) == 1.0


def test_step_rows_keep_leading_dims():
    attention = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)
    assert torch.equal(decoder_step_rows(attention, 4), attention[:, :, 1:5])
    assert torch.equal(decoder_step_rows(attention, 2, "output"), attention[:, :, :2])


@pytest.mark.parametrize(
    ("attention", "length", "step", "match"),
    [(torch.zeros(3, 4), 3, "input", "at least 4"), (torch.zeros(3, 4), 4, "output", "at least 4"),
     (torch.zeros(4), 1, "input", "steps, S"), (torch.zeros(4, 4), 1, "middle", "step must"),
     (torch.zeros(4, 4), -1, "input", "target_length")],
)  # fmt: skip
def test_step_rows_bad_input(attention, length, step, match):
    with pytest.raises(ValueError, match=match):
        decoder_step_rows(attention, length, step)


def test_average_by_hand():
    # [layers = 2, heads = 2, T = 1, S = 2]
    attention = torch.tensor([[[[1.0, 0.0]], [[0.5, 0.5]]], [[[0.0, 1.0]], [[0.2, 0.8]]]])
    assert torch.allclose(average_attention(attention), torch.tensor([[0.425, 0.575]]))
    assert torch.allclose(average_attention(attention, layers=[0]), torch.tensor([[0.75, 0.25]]))
    assert torch.allclose(
        average_attention(attention, layers=[0, 1], heads=[1]), torch.tensor([[0.35, 0.65]])
    )
    assert torch.equal(average_attention(list(attention)), average_attention(attention))
    with pytest.raises(ValueError, match="layers"):
        average_attention(attention, layers=[2])
    with pytest.raises(ValueError, match="heads"):
        average_attention(attention, heads=[])
    with pytest.raises(ValueError, match="layers, heads"):
        average_attention(attention[0])


def sentence(gold_columns, width):
    """[layers = 2, heads = 2, T, S]: layer 1 head 0 aligns (one-hot on the gold word); layer 1
    head 1 puts 0.4 on the gold word and 0.6 on its neighbour — wrong alone, right in layer 1's
    mean; layer 0 attends the last source word everywhere."""
    t = len(gold_columns)
    aligned = one_hot_rows(gold_columns, width)
    neighbour = one_hot_rows([(c + 1) % width for c in gold_columns], width)
    last = one_hot_rows([width - 1] * t, width)
    layer0 = torch.stack([last, last])
    layer1 = torch.stack([aligned, 0.4 * aligned + 0.6 * neighbour])
    return torch.stack([layer0, layer1])


def test_choose_attention_on_development_sentences():
    dev_gold = [[1, 0, 2], [0, 1, 2, 3], [2, 2, 0]]
    widths = [3, 4, 3]
    attentions = [sentence(g, w) for g, w in zip(dev_gold, widths, strict=True)]
    sure = [{(c, t) for t, c in enumerate(g)} for g in dev_gold]
    best, candidates = choose_attention(attentions, sure)
    # Candidates: all layers, layer 0, layer 1, then (layer, head) for 2 x 2 heads.
    assert [(c.layers, c.heads) for c in candidates] == [
        ((0, 1), None), ((0,), None), ((1,), None),
        ((0,), (0,)), ((0,), (1,)), ((1,), (0,)), ((1,), (1,)),
    ]  # fmt: skip
    # Layer 1's mean is right everywhere (0.7 on gold vs 0.3): AER 0, and it comes before the
    # single head (1, 0), also at AER 0.
    assert best == AttentionChoice((1,), None, 0.0)
    assert candidates[5].aer == 0.0
    # Layer 1, head 1 alone links every word to the gold word's neighbour: AER 1.
    assert candidates[6].aer == 1.0
    # Only layers: the same layer is chosen; applied to a held-out sentence it is right.
    best_layer, _ = choose_attention(attentions, sure, per_head=False)
    assert best_layer.layers == (1,)
    held_out = sentence([3, 0, 1, 2, 4], 5)
    assert links_from_weights(best.weights(held_out)) == {(3, 0), (0, 1), (1, 2), (2, 3), (4, 4)}


def test_choose_attention_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        choose_attention([], [])
    with pytest.raises(ValueError, match="same"):
        choose_attention([torch.zeros(2, 2, 1, 1), torch.zeros(1, 2, 1, 1)], [{(0, 0)}] * 2)


def test_perfect_prediction_scores_zero():
    gold = ["0-0 1-2 2?1", "0-1 1-0"]
    predicted = [{(0, 0), (1, 2)}, {(0, 1), (1, 0)}]
    assert corpus_alignment_error_rate(predicted, gold) == 0.0


def test_symmetrized_attention_links_by_hand():
    # e = 3 English words, f = 2 French words.
    # forward (e→f model) [T_f = 2, S_e = 3]: f0 -> e0, f1 -> e2.
    forward = torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]])
    # backward (f→e model) [T_e = 3, S_f = 2]: e0 -> f0, e1 -> f1, e2 -> f1.
    backward = torch.tensor([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8]])
    assert symmetrized_attention_links(forward, backward, "intersection") == {(0, 0), (2, 1)}
    assert symmetrized_attention_links(forward, backward, "union") == {(0, 0), (2, 1), (1, 1)}
    # grow-diag: (1,1) has e1 unaligned and neighbours (0,0) and (2,1) -> added.
    assert symmetrized_attention_links(forward, backward, "grow-diag") == {(0, 0), (2, 1), (1, 1)}
    with pytest.raises(ValueError, match="same sentence pair"):
        symmetrized_attention_links(forward, backward[:2])


def test_record_cross_attention_of_a_transformer():
    from attnkit.interpret import record_cross_attention
    from attnkit.models import TransformerSeq2Seq

    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        11, 9, d_model=16, nhead=2, num_layers=3, dim_feedforward=32, max_length=16
    ).eval()
    source, lengths = torch.tensor([[4, 5, 6, 7, 3], [4, 8, 3, 0, 0]]), torch.tensor([5, 3])
    target_in = torch.tensor([[2, 4, 5, 6], [2, 7, 8, 0]])  # BOS y0 y1 y2 (the EOS step's input y2)
    with torch.no_grad():
        out = model(source, lengths, target_in)
    maps = record_cross_attention(
        model,
        lambda: model(source, lengths, target_in),
        ["transformer.decoder.layers.*.multihead_attn"],
    )
    assert maps.shape == (2, 3, 2, 4, 5)  # [B, layers, heads, steps, S]
    # The model's own weights are its last layer's cross-attention averaged over heads.
    assert torch.allclose(maps[:, -1].mean(1), out.weights, atol=1e-6)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 2, 4), atol=1e-5)
    assert torch.all(maps[1, ..., 3:] == 0)  # the padded source words get no weight
    assert decoder_step_rows(maps[0], 3).shape == (3, 2, 3, 5)
    with pytest.raises(ValueError, match="no attention"):
        record_cross_attention(
            model, lambda: model(source, lengths, target_in), ["source_embedding"]
        )
