"""translate(): greedy and beam search of the RNN models against search by full recomputation."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.layers.decoding import beam_search
from attnkit.models import RNNSeq2Seq, Translation

BOS, EOS = 2, 3
STYLES = [{"style": "bahdanau"}, {"style": "luong", "num_layers": 2, "align": "local_monotonic"}]


def _model(target_vocab: int = 9, **kw) -> RNNSeq2Seq:
    torch.manual_seed(0)
    return RNNSeq2Seq(11, target_vocab, embed_dim=6, hidden_dim=5, window=2, **kw).double()


def _log_prob(model: RNNSeq2Seq, source, length, tokens: list[int], ended: bool) -> float:
    """log p(tokens [, EOS] | source) from one teacher-forced forward pass."""
    target_in = torch.tensor([[BOS, *tokens]])
    logp = model(source, length, target_in).logits[0].log_softmax(-1)
    targets = [*tokens, EOS] if ended else tokens
    return float(sum(logp[i, y] for i, y in enumerate(targets)))


@pytest.mark.parametrize("options", STYLES)
def test_greedy_equals_argmax_by_full_recomputation(options: dict) -> None:
    model = _model(**options)
    source = torch.tensor([[4, 7, 5, 9], [5, 6, 0, 0]])
    lengths = torch.tensor([4, 2])
    translations = model.translate(source, lengths, max_length=6)
    model.eval()
    with torch.no_grad():
        for i, translation in enumerate(translations):
            prefix: list[int] = []
            while len(prefix) < 6:  # argmax of a forward pass over the whole prefix, each step
                target_in = torch.tensor([[BOS, *prefix]])
                out = model(source[i : i + 1], lengths[i : i + 1], target_in)
                token = int(out.logits[0, -1].argmax())
                if token == EOS:
                    break
                prefix.append(token)
            assert isinstance(translation, Translation)
            assert translation.tokens == prefix
            ended = len(prefix) < 6
            full = model(source[i : i + 1], lengths[i : i + 1], torch.tensor([[BOS, *prefix]]))
            torch.testing.assert_close(translation.weights, full.weights[0, :, : lengths[i]])
            count = len(prefix) + ended
            expected = _log_prob(model, source[i : i + 1], lengths[i : i + 1], prefix, ended)
            assert translation.score == pytest.approx(expected / count, rel=1e-9)


@pytest.mark.parametrize("options", STYLES)
def test_beam_of_one_is_greedy(options: dict) -> None:
    model = _model(**options).eval()
    source, lengths = torch.tensor([[4, 7, 5, 9], [5, 6, 8, 0]]), torch.tensor([4, 3])
    greedy = model.translate(source, lengths, max_length=5)

    def step(tokens, caches):  # recomputes the whole prefix: independent of the model's caches
        return model(source, lengths, tokens).logits

    with torch.no_grad():
        tokens, _ = beam_search(step, torch.full((2, 1), BOS), 5, 1, eos_token_id=EOS)
    for row, translation in zip(tokens.tolist(), greedy, strict=True):
        expected = row[: row.index(EOS)] if EOS in row else row
        assert translation.tokens == expected


@pytest.mark.parametrize("options", STYLES)
def test_exhaustive_beam_finds_the_most_probable_output(options: dict) -> None:
    """With a beam as large as every sequence, beam search returns the best of all outputs of
    at most 3 tokens (by enumeration), so never less than greedy's score."""
    model = _model(target_vocab=5, **options)
    source, lengths = torch.tensor([[4, 7, 5]]), torch.tensor([3])
    greedy = model.translate(source, lengths, max_length=3, length_penalty=0.0)[0]
    beam = model.translate(source, lengths, max_length=3, beam_size=125, length_penalty=0.0)[0]
    model.eval()
    with torch.no_grad():
        best = max(
            _log_prob(model, source, lengths, list(tokens), len(tokens) < 3)
            for n in range(4)
            for tokens in itertools.product([0, 1, 2, 4], repeat=n)
        )
    assert beam.score == pytest.approx(best, rel=1e-9)
    assert beam.score >= greedy.score - 1e-12


def test_translate_restores_training_mode_and_keeps_no_graph() -> None:
    model = _model(style="bahdanau", dropout=0.3).train()
    translations = model.translate(torch.tensor([[4, 7]]), torch.tensor([2]), beam_size=2)
    assert model.training
    assert not translations[0].weights.requires_grad


@pytest.mark.parametrize("options", STYLES)
def test_a_copy_task_is_learned(options: dict) -> None:
    """Copy 2-5 symbols: after 200 steps greedy decoding reproduces the input."""
    torch.manual_seed(0)
    model = RNNSeq2Seq(10, 10, embed_dim=16, hidden_dim=32, **options)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    generator = torch.Generator().manual_seed(0)

    def batch(n: int):
        lengths = torch.randint(2, 6, (n,), generator=generator)
        symbols = torch.randint(4, 10, (n, 5), generator=generator)
        source = torch.where(torch.arange(5) < lengths[:, None], symbols, 0)
        target_in = torch.cat([torch.full((n, 1), BOS), source], 1)
        target_out = torch.cat([source, torch.zeros(n, 1, dtype=torch.long)], 1)
        target_out[torch.arange(n), lengths] = EOS
        return source, lengths, target_in, target_out

    for _ in range(200):
        source, lengths, target_in, target_out = batch(32)
        logits = model(source, lengths, target_in).logits
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), target_out.flatten(), ignore_index=0
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    source, lengths, _, _ = batch(50)
    translations = model.translate(source, lengths, max_length=7)
    copied = [t.tokens == source[i, : lengths[i]].tolist() for i, t in enumerate(translations)]
    assert sum(copied) >= 45


@pytest.mark.parametrize("options", STYLES)
def test_beam_search_in_a_batch_equals_each_sentence_alone(options: dict) -> None:
    model = _model(**options)
    source = torch.tensor([[4, 7, 5, 9], [5, 6, 0, 0], [8, 0, 0, 0]])
    lengths = torch.tensor([4, 2, 1])
    batch = model.translate(source, lengths, beam_size=4, max_length=5)
    for i, translation in enumerate(batch):
        length = int(lengths[i])
        alone = model.translate(
            source[i : i + 1, :length], lengths[i : i + 1], beam_size=4, max_length=5
        )[0]
        assert translation.tokens == alone.tokens
        assert translation.score == pytest.approx(alone.score, rel=1e-9)
        torch.testing.assert_close(translation.weights, alone.weights)


def test_ids_outside_the_vocabulary_raise() -> None:
    model = _model(style="bahdanau")
    with pytest.raises(ValueError, match=r"source ids must lie in \[0, 11\)"):
        model(torch.tensor([[11, 4]]), torch.tensor([2]), torch.tensor([[2]]))
    with pytest.raises(ValueError, match=r"target_in ids must lie in \[0, 9\)"):
        model(torch.tensor([[10, 4]]), torch.tensor([2]), torch.tensor([[2, 9]]))
    with pytest.raises(ValueError, match="T >= 1"):
        model(torch.tensor([[10, 4]]), torch.tensor([2]), torch.zeros(1, 0, dtype=torch.long))
