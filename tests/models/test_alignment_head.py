"""TransformerSeq2Seq's alignment head (Garg et al. 2019): which attention it is, its full target
context, and that the alignment loss trains it."""

from __future__ import annotations

import pytest
import torch

from attnkit.evaluate.supervised import supervised_attention_loss
from attnkit.interpret import record_cross_attention
from attnkit.models import TransformerSeq2Seq

PAD = 0
SOURCE = torch.tensor([[4, 7, 5, 9, 6, 8], [5, 6, 0, 0, 0, 0], [9, 9, 4, 0, 0, 0]])
LENGTHS = torch.tensor([6, 2, 3])
TARGET_IN = torch.tensor([[2, 6, 8, 4], [2, 5, 0, 0], [2, 7, 7, 0]])


def _model(**kw) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    options = {"d_model": 16, "nhead": 4, "num_layers": 3, "dim_feedforward": 32} | kw
    return TransformerSeq2Seq(11, 9, max_length=16, **options).double().eval()


def _full_context_cross_attention(model: TransformerSeq2Seq, layer: int) -> torch.Tensor:
    """Reference: layer ``layer``'s cross-attention per head ``[B, H, T, S]``, recorded from the
    public Transformer's decoder run over the whole target without the causal mask."""

    def forward() -> object:
        memory, padding = model.encode(SOURCE, LENGTHS)
        target = model._embed(model.target_embedding, TARGET_IN)
        return model.transformer.decode(
            target,
            memory,
            tgt_key_padding_mask=TARGET_IN == PAD,
            memory_key_padding_mask=padding,
            tgt_is_causal=False,
        )

    name = f"transformer.decoder.layers.{layer}.multihead_attn"
    return record_cross_attention(model, forward, [name])[:, 0]


@pytest.mark.parametrize(("layer", "head"), [(-2, 0), (-2, 3), (0, 1), (2, 2)])
def test_the_head_is_its_layers_cross_attention_head_over_the_full_target(
    layer: int, head: int
) -> None:
    model = _model(alignment_layer=layer, alignment_head=head)
    out = model(SOURCE, LENGTHS, TARGET_IN)
    expected = _full_context_cross_attention(model, layer % 3)
    torch.testing.assert_close(out.alignment, expected[:, head])
    # another head of the same layer is a different distribution (the test can tell heads apart)
    other = expected[:, (head + 1) % 4]
    assert not torch.allclose(out.alignment, other)
    pad = torch.arange(6) >= LENGTHS[:, None]
    assert torch.all(out.alignment.masked_select(pad[:, None, :].expand_as(out.alignment)) == 0)
    torch.testing.assert_close(out.alignment.sum(-1), torch.ones(3, 4, dtype=torch.float64))


def test_the_translation_pass_is_unchanged_and_recorded_last() -> None:
    """The head adds no parameters and changes neither logits nor weights; a recorder of every
    layer (Shift-Att) sees the causal translation pass, which runs after the alignment pass."""
    plain, headed = _model(), _model(alignment_layer=-1, alignment_head=1)
    headed.load_state_dict(plain.state_dict())
    a, b = plain(SOURCE, LENGTHS, TARGET_IN), headed(SOURCE, LENGTHS, TARGET_IN)
    assert a.alignment is None and b.alignment is not None
    torch.testing.assert_close(b.logits, a.logits)
    torch.testing.assert_close(b.weights, a.weights)
    names = ["transformer.decoder.layers.*.multihead_attn"]
    recorded = record_cross_attention(headed, lambda: headed(SOURCE, LENGTHS, TARGET_IN), names)
    torch.testing.assert_close(recorded[:, -1].mean(1), b.weights)
    # the last layer's head 1 in the causal pass is not the full-context alignment head
    assert not torch.allclose(recorded[:, -1, 1], b.alignment)


def test_row_t_sees_the_word_it_aligns_and_later_words() -> None:
    """Row ``t`` predicts ``y_t`` (input ``y_{t-1}``): changing ``y_t`` (input position
    ``t + 1``) changes the alignment head's row ``t`` but not the causal pass's."""
    model = _model(alignment_layer=-2)
    changed = TARGET_IN.clone()
    changed[0, 2] = 5  # y_1 of sentence 0
    a, b = model(SOURCE, LENGTHS, TARGET_IN), model(SOURCE, LENGTHS, changed)
    assert not torch.allclose(a.alignment[0, 1], b.alignment[0, 1])
    torch.testing.assert_close(a.weights[0, :2], b.weights[0, :2])
    torch.testing.assert_close(a.alignment[1:], b.alignment[1:])


def test_a_sentence_alone_and_padded_in_a_batch_agree() -> None:
    model = _model(alignment_layer=1, alignment_head=2)
    batch = model(SOURCE, LENGTHS, TARGET_IN).alignment
    for i in range(3):
        length, steps = int(LENGTHS[i]), int((TARGET_IN[i] != PAD).sum())
        alone = model(
            SOURCE[i : i + 1, :length], LENGTHS[i : i + 1], TARGET_IN[i : i + 1, :steps]
        ).alignment
        torch.testing.assert_close(batch[i, :steps, :length], alone[0])


def test_the_alignment_loss_trains_the_head() -> None:
    """A few Adam steps on ``CE(gold, head)`` plus the translation loss lower the alignment loss
    on a tiny corpus whose gold links are the anti-diagonal (no attention starts there)."""
    torch.manual_seed(1)
    model = TransformerSeq2Seq(
        12, 12, d_model=32, nhead=4, num_layers=2, dim_feedforward=64, dropout=0.0,
        alignment_layer=-2, alignment_head=0,
    )  # fmt: skip
    source = torch.randint(4, 12, (8, 5))
    target_out = torch.cat([source.flip(1), torch.full((8, 1), 3)], 1)
    target_in = torch.cat([torch.full((8, 1), 2), source.flip(1)], 1)
    gold = torch.zeros(8, 6, 5)
    gold[:, torch.arange(5), 4 - torch.arange(5)] = 1.0  # y_t = x_{4-t}; the EOS row has none
    lengths = torch.full((8,), 5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        out = model(source, lengths, target_in)
        alignment_loss = supervised_attention_loss(out.alignment, gold, "ce")
        nll = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), target_out.flatten())
        optimizer.zero_grad()
        (nll + 0.5 * alignment_loss).backward()
        optimizer.step()
        losses.append(alignment_loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert losses[0] > 1.0  # it started far from the gold (uniform over 5 words: log 5 = 1.6)


def test_bad_alignment_head_arguments() -> None:
    for kw, match in [
        ({"alignment_layer": 3}, "alignment_layer must be an int in \\[-3, 2\\]"),
        ({"alignment_layer": -4}, "alignment_layer"),
        ({"alignment_layer": 1.0}, "alignment_layer"),
        (
            {"alignment_layer": 1, "alignment_head": 4},
            "alignment_head must be an int in \\[0, 3\\]",
        ),
        ({"alignment_layer": 1, "alignment_head": -1}, "alignment_head"),
    ]:
        with pytest.raises(ValueError, match=match):
            _model(**kw)
