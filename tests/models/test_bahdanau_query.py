"""The Bahdanau decoder's attention query, and which decoding step a displayed attention row
belongs to, against float64 references written here from the equations.

- ``query="previous_state"`` (Bahdanau et al. 2015): ``e_ij = a(s_{i-1}, h_j)``, and ``s_{i-1}``
  has not read ``y_{i-1}``; ``query="conditional"`` (the conditional GRU of dl4mt/Nematus,
  Sennrich et al. 2017 §2.2): ``s'_i = GRU_1(E y_{i-1}, s_{i-1})`` queries, then
  ``s_i = GRU_2(c_i, s'_i)``.
- The rows ``attnkit.evaluate.translation.translate`` returns (what ``attnkit demo`` prints) are,
  row ``t``, the attention of the greedy step that emitted target token ``t``.
"""

from __future__ import annotations

import pytest
import torch
from seq2seq_formulas import gru_cell, gru_layer, softmax

from attnkit.data.corpus import Vocabularies
from attnkit.data.vocabulary import Vocabulary
from attnkit.evaluate.translation import translate
from attnkit.models import RNNSeq2Seq

QUERIES = ("previous_state", "conditional")


def _model(query: str, seed: int = 0, sizes: tuple[int, int] = (11, 9)) -> RNNSeq2Seq:
    torch.manual_seed(seed)
    return RNNSeq2Seq(*sizes, style="bahdanau", embed_dim=6, hidden_dim=5, query=query).double()


class Reference:
    """The decoder of ``model`` from its parameters, step by step in float64."""

    def __init__(self, model: RNNSeq2Seq, source: torch.Tensor) -> None:
        self.p = p = dict(model.named_parameters())
        self.query = model.decoder.query
        n, length = model.encoder.hidden_dim, source.shape[0]
        x = p["encoder.embedding.weight"][source]
        rnn = model.encoder.rnn
        self.h = torch.cat([gru_layer(x, rnn, 0), gru_layer(x, rnn, 0, reverse=True)], -1)
        self.s = torch.tanh(
            p["decoder.init_proj.weight"] @ self.h[0, n:] + p["decoder.init_proj.bias"]
        )  # s_0 = tanh(W_s <-h_1)
        self.all = torch.ones(length, dtype=torch.bool)

    def cell(self, name: str) -> list[torch.Tensor]:
        return [
            self.p[f"decoder.{name}.{k}"] for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]

    def step(self, y_prev_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a_i [S], logits_i [V])`` given ``y_{i-1}``; advances the state."""
        p = self.p
        y_prev = p["target_embedding.weight"][y_prev_id]
        if self.query == "conditional":
            query = gru_cell(y_prev, self.s, *self.cell("query_cell"))  # s'_i
        else:
            query = self.s  # s_{i-1}
        e = (
            torch.tanh(
                p["decoder.attention.score.query_proj.weight"] @ query
                + self.h @ p["decoder.attention.score.key_proj.weight"].T
                + p["decoder.attention.score.key_proj.bias"]
            )
            @ p["decoder.attention.score.out.weight"][0]
        )
        a = softmax(e, self.all)
        c = a @ self.h
        if self.query == "conditional":
            self.s = gru_cell(c, query, *self.cell("cell"))  # s_i = GRU_2(c_i, s'_i)
        else:
            self.s = gru_cell(torch.cat([y_prev, c]), self.s, *self.cell("cell"))
        t = p["decoder.readout_proj.weight"] @ torch.cat([self.s, y_prev, c])
        t = t + p["decoder.readout_proj.bias"]
        t = torch.maximum(t[0::2], t[1::2])
        return a, p["decoder.output.weight"] @ t + p["decoder.output.bias"]


@pytest.mark.parametrize("query", QUERIES)
def test_teacher_forced_steps_match_the_equations(query: str) -> None:
    model = _model(query).eval()
    source, lengths = torch.tensor([[4, 7, 5, 9, 0]]), torch.tensor([4])
    target_in = torch.tensor([[2, 6, 8, 5]])
    out = model(source, lengths, target_in)
    reference = Reference(model, source[0, :4])
    for i in range(target_in.shape[1]):
        a, logits = reference.step(int(target_in[0, i]))
        torch.testing.assert_close(out.weights[0, i, :4], a, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out.logits[0, i], logits, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("query", QUERIES)
def test_only_the_conditional_query_reads_the_word_just_emitted(query: str) -> None:
    """Row i's attention under teacher forcing, with y_{i-1} changed: the paper's query
    s_{i-1} cannot see it, the conditional GRU's s'_i does."""
    model = _model(query).eval()
    source, lengths = torch.tensor([[4, 7, 5, 9]]), torch.tensor([4])
    one = model(source, lengths, torch.tensor([[2, 6, 8]])).weights
    other = model(source, lengths, torch.tensor([[2, 6, 7]])).weights  # y_2 changed
    torch.testing.assert_close(one[0, :2], other[0, :2])  # rows before it: unchanged
    changed = (one[0, 2] - other[0, 2]).abs().max() > 1e-6
    assert bool(changed) == (query == "conditional")


@pytest.mark.parametrize("query", QUERIES)
def test_the_displayed_row_of_a_target_word_is_the_attention_that_emitted_it(query: str) -> None:
    source_words = Vocabulary.build([["i", "love", "you", ".", "a", "b", "c"]])
    target_words = Vocabulary.build([["je", "t'", "aime", "vous", "."]])
    vocabularies = Vocabularies(source_words, target_words)
    model = _model(query, seed=3, sizes=(len(source_words), len(target_words)))
    sentence = ["i", "love", "you", "."]
    [(target, rows)] = translate(model, vocabularies, [sentence], max_length=6)
    # greedy decoding by the equations: the step that emits token t attends with row t
    reference = Reference(model, torch.tensor(source_words.encode(sentence)))
    token, emitted, attended = model.bos_id, [], []
    for _ in range(6):
        a, logits = reference.step(token)
        token = int(logits.argmax())
        attended.append(a)
        if token == model.eos_id:
            break
        emitted.append(token)
    else:  # stopped at max_length: the last row is the step after the last token
        attended.append(reference.step(token)[0])
    assert target == target_words.decode(emitted)
    assert rows.shape == (len(emitted) + 1, len(sentence))  # one row per token, then EOS's
    torch.testing.assert_close(rows, torch.stack(attended), rtol=1e-9, atol=1e-12)


def test_luong_has_no_bahdanau_query() -> None:
    with pytest.raises(ValueError, match="query 'conditional' is Bahdanau's"):
        RNNSeq2Seq(11, 9, style="luong", query="conditional")
