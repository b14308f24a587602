"""``HierarchicalAttention`` against the survey's hierarchical attention (§3.1.2, Fig. 8; HAN).

The expected values are Fig. 8 written out in float64 loops: for each sentence, the additive score
(Table 2) of every real word with the learned query ``u_w``, a softmax (eq. 25) over the real
words, the sentence vector as the weighted sum (eq. 4); then the same over the real sentences with
``u_s``, giving the document vector. Parameters are read from the module as plain tensors.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck

import attnkit as ak
from attnkit.mechanisms.hierarchical import (
    HierarchicalAttention,
    IdentityEncoder,
    RecurrentEncoder,
)

F64 = torch.float64
TOL = 1e-10


def close(x: Tensor, y: Tensor, tol: float = TOL) -> None:
    torch.testing.assert_close(x, y, rtol=0, atol=tol)


def additive(q: Tensor, k: Tensor, score: nn.Module) -> Tensor:
    """Table 2, one query/key pair: ``w^T tanh(W_1 q + W_2 k + b)``."""
    W1 = score.query_proj.weight.detach()
    W2 = score.key_proj.weight.detach()
    b = score.key_proj.bias.detach()
    w = score.out.weight.detach()[0]
    return w @ torch.tanh(W1 @ q + W2 @ k + b)


def attend_literal(
    u: Tensor, vectors: list[Tensor], score: nn.Module, d: int
) -> tuple[Tensor, list[Tensor]]:
    """One self-attentive module over a list of real vectors: ``(context, weights)`` (eq. 2-4, 25)."""
    if not vectors:
        return torch.zeros(d, dtype=F64), []
    e = [additive(u, k, score) for k in vectors]
    peak = max(float(x.detach()) for x in e)
    exp = [torch.exp(x - peak) for x in e]
    total = sum(exp)
    a = [x / total for x in exp]
    return sum(ai * v for ai, v in zip(a, vectors, strict=True)), a


def han_literal(
    model: HierarchicalAttention,
    words: Tensor,
    word_mask: Tensor,
    word_encoder=None,
    sentence_encoder=None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fig. 8 in loops: ``(c^(D) [B, d], C [B, n_S, d], word weights, sentence weights)``.

    ``word_encoder(list of real word vectors) -> list`` and ``sentence_encoder`` likewise stand for
    the feature model run on the real elements only (identity when ``None``).
    """
    b_size, n_s, n_w, _ = words.shape
    u_w, u_s = model.word_query.detach(), model.sentence_query.detach()
    d_w, d_s = model.d_word, model.d_sentence
    documents, all_c = [], []
    word_weights = torch.zeros(b_size, n_s, n_w, dtype=F64)
    sentence_weights = torch.zeros(b_size, n_s, dtype=F64)
    for b in range(b_size):
        C, real_sentences = [], []
        for s in range(n_s):
            real = [i for i in range(n_w) if word_mask[b, s, i]]
            h = [words[b, s, i] for i in real]
            if word_encoder is not None and h:
                h = word_encoder(h)
            c_s, a = attend_literal(u_w, h, model.word_score, d_w)
            for i, ai in zip(real, a, strict=True):
                word_weights[b, s, i] = ai
            C.append(c_s)
            if real:
                real_sentences.append(s)
        all_c.append(torch.stack(C))
        g = [C[s] for s in real_sentences]
        if sentence_encoder is not None and g:
            g = sentence_encoder(g)
        c_d, a = attend_literal(u_s, g, model.sentence_score, d_s)
        for s, ai in zip(real_sentences, a, strict=True):
            sentence_weights[b, s] = ai
        documents.append(c_d)
    return torch.stack(documents), torch.stack(all_c), word_weights, sentence_weights


def ragged_mask() -> Tensor:
    """``[3, 3, 4]``: full, ragged with an empty sentence, and a document with one word."""
    mask = torch.zeros(3, 3, 4, dtype=torch.bool)
    mask[0] = True
    mask[1, 0, :2] = True
    mask[1, 2, 1:] = True  # padding need not be at the end
    mask[2, 1, 3] = True
    return mask


def test_fig8_words_then_sentences_match_the_literal_formula():
    """Fig. 8: sentence vectors from word attention, the document vector from sentence attention."""
    torch.manual_seed(0)
    model = HierarchicalAttention(5, d_hidden=6).double()
    words = torch.randn(3, 3, 4, 5, dtype=F64)
    mask = ragged_mask()
    out = model(words, mask, return_weights=True)
    doc, C, a_w, a_s = han_literal(model, words, mask)
    assert out.context.shape == (3, 5) and out.sentence_vectors.shape == (3, 3, 5)
    assert out.word_weights.shape == (3, 3, 4) and out.sentence_weights.shape == (3, 3)
    close(out.context, doc)
    close(out.sentence_vectors, C)
    close(out.word_weights, a_w)
    close(out.sentence_weights, a_s)


def test_padding_gets_exactly_zero_weight_and_zero_gradient_at_every_level():
    torch.manual_seed(1)
    model = HierarchicalAttention(4).double()
    mask = ragged_mask()
    words = torch.randn(3, 3, 4, 4, dtype=F64, requires_grad=True)
    out = model(words, mask, return_weights=True)
    assert torch.all(out.word_weights[~mask] == 0)
    assert torch.all(out.sentence_weights[~mask.any(-1)] == 0)
    real_sentences = mask.any(-1)
    sums = out.word_weights.sum(-1)
    close(sums[real_sentences], torch.ones_like(sums[real_sentences]), 1e-12)
    close(out.sentence_weights.sum(-1), torch.ones(3, dtype=F64), 1e-12)
    (out.context.square().sum() + out.sentence_vectors.sum()).backward()
    assert torch.all(words.grad[~mask] == 0)
    assert words.grad[mask].abs().sum() > 0
    # Whatever the padding holds, nothing changes.
    noisy = words.detach().clone()
    noisy[~mask] = 1e6
    again = model(noisy, mask, return_weights=True)
    assert torch.equal(again.context, out.context.detach())
    assert torch.equal(again.word_weights, out.word_weights.detach())


def test_empty_sentence_and_empty_document_give_zeros_never_nan():
    torch.manual_seed(2)
    model = HierarchicalAttention(3).double()
    words = torch.randn(2, 2, 3, 3, dtype=F64, requires_grad=True)
    mask = torch.zeros(2, 2, 3, dtype=torch.bool)
    mask[0, 1, :2] = True  # document 0: sentence 0 empty; document 1: no word at all
    out = model(words, mask, return_weights=True)
    assert torch.all(out.sentence_vectors[0, 0] == 0) and torch.all(out.sentence_vectors[1] == 0)
    assert torch.all(out.context[1] == 0)
    assert torch.all(out.sentence_weights[1] == 0) and torch.all(out.word_weights[1] == 0)
    assert out.sentence_weights[0].tolist() == [0.0, 1.0]
    out.context.sum().backward()
    assert not torch.isnan(words.grad).any() and torch.all(words.grad[~mask] == 0)
    assert all(not torch.isnan(p.grad).any() for p in model.parameters() if p.grad is not None)


def test_sentence_mask_removes_whole_sentences_at_both_levels():
    torch.manual_seed(3)
    model = HierarchicalAttention(3).double()
    words = torch.randn(2, 3, 2, 3, dtype=F64)
    sentence_mask = torch.tensor([[True, False, True], [True, True, True]])
    out = model(words, sentence_mask=sentence_mask, return_weights=True)
    assert torch.all(out.word_weights[0, 1] == 0) and out.sentence_weights[0, 1] == 0
    expected_mask = sentence_mask.unsqueeze(-1).expand(2, 3, 2)
    doc, C, a_w, a_s = han_literal(model, words, expected_mask)
    close(out.sentence_vectors, C)
    close(out.context, doc)
    close(out.word_weights, a_w)
    close(out.sentence_weights, a_s)
    # No mask at all: every word and sentence is real.
    full = model(words, return_weights=True)
    close(full.context, han_literal(model, words, torch.ones(2, 3, 2, dtype=torch.bool))[0])


def test_gradcheck_inputs_and_parameters():
    torch.manual_seed(4)
    model = HierarchicalAttention(3, d_hidden=2).double()
    mask = torch.tensor([[[True, True, False], [True, True, True]], [[True, False, False]] * 2])
    words = torch.randn(2, 2, 3, 3, dtype=F64, requires_grad=True)
    params = list(model.parameters())

    def f(words: Tensor, *_: Tensor) -> tuple[Tensor, ...]:
        # gradcheck perturbs the parameters in place and the module reads them directly: with
        # torch.func.functional_call the tiled backend's backward re-reads the restored module
        # parameters and gives the additive score's w a zero gradient (a core issue).
        out = model(words, mask, return_weights=True)
        return out.context, out.word_weights, out.sentence_weights

    assert gradcheck(f, (words, *params), eps=1e-6, atol=1e-6)


def test_recurrent_encoder_runs_over_the_real_words_only():
    torch.manual_seed(5)
    gru = nn.GRU(3, 2, batch_first=True, bidirectional=True).double()
    encoder = RecurrentEncoder(gru)
    x = torch.randn(3, 4, 3, dtype=F64)
    mask = torch.tensor([[True, True, True, True], [False, True, False, True], [False] * 4])
    out = encoder(x, mask)
    assert out.shape == (3, 4, 4)
    for n in range(3):
        real = mask[n].nonzero().flatten()
        if len(real):
            close(out[n, real], gru(x[n, real].unsqueeze(0))[0][0])
    assert torch.all(out[~mask] == 0)
    assert torch.equal(encoder(x, None), gru(x)[0])
    with pytest.raises(ValueError, match="batch_first"):
        RecurrentEncoder(nn.GRU(3, 2))


def test_han_with_gru_encoders_between_levels():
    """Yang et al.: bidirectional GRU word and sentence encoders, attention at both levels."""
    torch.manual_seed(6)
    word_gru = nn.GRU(4, 3, batch_first=True, bidirectional=True).double()
    sentence_gru = nn.GRU(6, 2, batch_first=True, bidirectional=True).double()
    model = HierarchicalAttention(
        6,
        4,
        word_encoder=RecurrentEncoder(word_gru),
        sentence_encoder=RecurrentEncoder(sentence_gru),
    ).double()
    words = torch.randn(3, 3, 4, 4, dtype=F64)
    mask = ragged_mask()
    out = model(words, mask, return_weights=True)

    def run(gru: nn.GRU):
        return lambda vs: list(gru(torch.stack(vs).unsqueeze(0))[0][0])

    doc, C, a_w, a_s = han_literal(model, words, mask, run(word_gru), run(sentence_gru))
    assert out.context.shape == (3, 4)
    close(out.context, doc)
    close(out.sentence_vectors, C)
    close(out.word_weights, a_w)
    close(out.sentence_weights, a_s)


SCORES = ["additive", "dot", "scaled_dot", "general", "biased_general", "activated_general"]
SCORES += ["cosine", "euclidean"]


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("align", ["softmax", "sparsemax", "entmax15", "hard"])
def test_any_score_and_alignment_respect_padding(score: str, align: str):
    torch.manual_seed(7)
    model = HierarchicalAttention(4, score=score, align=align).double()
    words = torch.randn(3, 3, 4, 4, dtype=F64)
    mask = ragged_mask()
    out = model(words, mask, return_weights=True)
    assert torch.all(out.word_weights[~mask] == 0)
    assert torch.all(out.sentence_weights[~mask.any(-1)] == 0)
    real = mask.any(-1)
    close(out.word_weights.sum(-1)[real], torch.ones(int(real.sum()), dtype=F64), 1e-12)
    close(out.sentence_weights.sum(-1), torch.ones(3, dtype=F64), 1e-12)
    # eq. (4) at the document level: c^(D) = Σ_s a_s c^(s) (identity encoder).
    expected = torch.einsum("bs,bsd->bd", out.sentence_weights, out.sentence_vectors)
    close(out.context, expected, 1e-12)


def test_one_score_and_alignment_per_level_and_dot_score_literal():
    """A pair gives each level its own; with the dot score, ``e = u^T h``."""
    torch.manual_seed(8)
    model = HierarchicalAttention(3, score=("dot", "additive"), align=("softmax", "sparsemax"))
    model = model.double()
    assert isinstance(model.word_score, ak.scores.Dot)
    assert isinstance(model.sentence_score, ak.scores.Additive)
    assert isinstance(model.sentence_align, ak.align.Sparsemax)
    words = torch.randn(1, 2, 3, 3, dtype=F64)
    out = model(words, return_weights=True)
    u = model.word_query.detach()
    for s in range(2):
        e = torch.stack([u @ words[0, s, i] for i in range(3)])
        a = torch.exp(e) / torch.exp(e).sum()
        close(out.word_weights[0, s], a)
        close(out.sentence_vectors[0, s], sum(a[i] * words[0, s, i] for i in range(3)))


def test_taxonomy_is_yang_et_al_row_of_table3():
    row = ak.taxonomy.describe(HierarchicalAttention(8))
    assert str(row) == (
        "Singular | Hierarchical | Single-Representational | Additive | Global | "
        "Single-Dimensional | Self-Attentive | Singular"
    )
    assert HierarchicalAttention.taxonomy == {
        "feature_levels": "Hierarchical",
        "query_type": "Self-Attentive",
    }


def test_bad_input_names_the_shapes():
    model = HierarchicalAttention(4)
    with pytest.raises(ValueError, match=r"\[B, n_sentences, n_words, d\]"):
        model(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"word_mask must have shape \(2, 3, 5\)"):
        model(torch.randn(2, 3, 5, 4), torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        model(torch.randn(2, 3, 5, 4), torch.ones(2, 3, 5))
    with pytest.raises(ValueError, match=r"sentence_mask must have shape \(2, 3\)"):
        model(torch.randn(2, 3, 5, 4), sentence_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"word_encoder must return \(6, 5, 4\)"):
        model(torch.randn(2, 3, 5, 7))
    with pytest.raises(ValueError, match="pair"):
        HierarchicalAttention(4, score=("dot", "dot", "dot"))


def test_empty_sizes_and_default_encoder():
    model = HierarchicalAttention(2)
    assert isinstance(model.word_encoder, IdentityEncoder)
    out = model(torch.randn(2, 3, 0, 2), return_weights=True)  # no word anywhere
    assert torch.equal(out.context, torch.zeros(2, 2)) and out.word_weights.shape == (2, 3, 0)
    out = model(torch.randn(0, 3, 4, 2))
    assert out.context.shape == (0, 2)
    assert not math.isnan(float(model(torch.randn(1, 1, 1, 2)).context.detach().sum()))
