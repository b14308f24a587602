"""Decoding strategies against exhaustive search and hand-written definitions.

Beam search with a beam wide enough to hold every prefix must return the exhaustive argmax of the
length-normalised log-probability (computed here by scoring every sequence with full forwards);
a beam of 1 is greedy; top-k 1 sampling is greedy; nucleus filtering keeps the smallest set of
most probable tokens reaching ``p``; cached and uncached runs give the same tokens.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor

from attnkit.layers import KVCache, Transformer
from attnkit.layers.decoding import beam_search, filter_logits, greedy, sample, seq2seq_step
from attnkit.layers.language_model import CausalLanguageModel

V = 5


def lm(seed: int = 0, vocab: int = V) -> CausalLanguageModel:
    torch.manual_seed(seed)
    model = CausalLanguageModel(vocab, 16, 2, 1, 32, positional="rotary", max_len=32).eval()
    with torch.no_grad():
        model.head.weight.mul_(8)  # peaked distributions: greedy and beam search differ
    return model


def stepper(model: CausalLanguageModel):  # type: ignore[no-untyped-def]
    def step(t: Tensor, c: list[KVCache] | None) -> Tensor:
        return model(t, caches=c)

    return step


def sequence_logp(model: CausalLanguageModel, prompt: Tensor, continuation: list[int]) -> float:
    """log p(continuation | prompt) from one full forward, in float64."""
    tokens = torch.cat([prompt, torch.tensor([continuation])], 1)
    with torch.no_grad():
        logp = model(tokens)[0].double().log_softmax(-1)
    p = prompt.shape[1]
    return sum(float(logp[p - 1 + i, tok]) for i, tok in enumerate(continuation))


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_search_without_eos_is_exhaustive_argmax(use_cache: bool) -> None:
    model = lm()
    prompt = torch.tensor([[1, 3]])
    steps = 3
    caches = model.new_caches(2 + steps) if use_cache else None
    # K = V^(T-1) beams keep every prefix alive
    tokens, scores = beam_search(stepper(model), prompt, steps, V ** (steps - 1), caches)
    best = max(
        itertools.product(range(V), repeat=steps),
        key=lambda c: sequence_logp(model, prompt, list(c)),
    )
    assert tokens[0].tolist() == list(best)
    assert abs(scores[0].item() - sequence_logp(model, prompt, list(best)) / steps) < 1e-4


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
def test_beam_search_with_eos_maximises_the_length_normalised_score(length_penalty: float) -> None:
    model = lm(seed=3)
    prompt = torch.tensor([[2]])
    eos, steps = 0, 3
    tokens, scores = beam_search(
        stepper(model),
        prompt,
        steps,
        V**steps,
        model.new_caches(1 + steps),
        eos_token_id=eos,
        length_penalty=length_penalty,
        early_stopping=False,
    )
    candidates = [  # every finished hypothesis: ends in eos, or reaches max length
        list(c[: c.index(eos) + 1]) if eos in c else list(c)
        for c in itertools.product(range(V), repeat=steps)
    ]
    best = max((sequence_logp(model, prompt, c) / len(c) ** length_penalty, c) for c in candidates)
    got = tokens[0].tolist()[: len(best[1])]
    assert got == best[1]
    assert abs(scores[0].item() - best[0]) < 1e-4


def test_beam_of_one_is_greedy_and_batches_are_independent() -> None:
    model = lm(seed=1, vocab=11)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    tokens, _ = beam_search(stepper(model), prompt, 6, 1, model.new_caches(9))
    assert torch.equal(tokens, greedy(stepper(model), prompt, 6, model.new_caches(9)))
    both, _ = beam_search(stepper(model), prompt, 5, 3, model.new_caches(8))
    for i in range(2):
        alone, _ = beam_search(stepper(model), prompt[i : i + 1], 5, 3, model.new_caches(8))
        assert torch.equal(both[i], alone[0])


def test_early_stopping_ends_rows_with_enough_finished_hypotheses() -> None:
    model = lm(seed=3)
    prompt = torch.tensor([[2]])
    stopped, _ = beam_search(stepper(model), prompt, 12, 2, None, eos_token_id=0)
    assert stopped.shape[1] <= 12
    assert 0 in stopped[0].tolist()


def test_greedy_stops_at_eos() -> None:
    model = lm(seed=3)
    prompt = torch.tensor([[2], [4]])
    out = greedy(stepper(model), prompt, 10, None, eos_token_id=0)
    for row in out.tolist():
        if 0 in row:
            assert all(t == 0 for t in row[row.index(0) :])


def test_sampling_is_reproducible_and_top_k_one_is_greedy() -> None:
    model = lm(seed=2, vocab=11)
    prompt = torch.tensor([[1, 2], [3, 4]])
    runs = [
        sample(
            stepper(model),
            prompt,
            8,
            model.new_caches(10),
            generator=torch.Generator().manual_seed(7),
        )
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])
    assert runs[0].min() >= 0 and runs[0].max() < 11
    top1 = sample(stepper(model), prompt, 8, None, top_k=1, temperature=0.7)
    assert torch.equal(top1, greedy(stepper(model), prompt, 8, None))


def test_sampling_follows_the_tempered_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    g = torch.Generator().manual_seed(0)

    def step(t: Tensor, c: None) -> Tensor:
        return logits.expand(t.shape[0], 4)[:, None, :].expand(-1, t.shape[1], -1)

    draws = sample(step, torch.zeros(20000, 1, dtype=torch.long), 1, temperature=2.0, generator=g)
    freq = torch.bincount(draws[:, 0], minlength=4).double() / 20000
    expected = (logits[0].double() / 2.0).softmax(-1)
    assert (freq - expected).abs().max() < 0.015


def test_filter_logits_top_k_and_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.4, 0.05, 0.3, 0.15]]))
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[False, True, False, True, False]]
    # sorted: 0.4, 0.3, 0.15, 0.1, 0.05; p = 0.8 needs 0.4 + 0.3 + 0.15
    kept = torch.isfinite(filter_logits(logits, top_p=0.8))
    assert kept.tolist() == [[False, True, False, True, True]]
    kept = torch.isfinite(filter_logits(logits, top_p=0.3))
    assert kept.tolist() == [[False, True, False, False, False]]
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(logits, top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        filter_logits(logits, top_k=0)


def test_encoder_decoder_beam_search_with_and_without_cache() -> None:
    torch.manual_seed(0)
    model = Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True).eval()
    embed, head = torch.nn.Embedding(7, 16), torch.nn.Linear(16, 7)
    with torch.no_grad():
        head.weight.mul_(5)
    memory = model.encode(torch.randn(2, 5, 16)).repeat_interleave(3, 0)  # 3 beams per row
    step = seq2seq_step(model, embed, head, memory)
    bos = torch.zeros(2, 1, dtype=torch.long)
    cached = beam_search(step, bos, 4, 3, model.decoder.new_caches(5))
    uncached = beam_search(step, bos, 4, 3, None)
    assert torch.equal(cached[0], uncached[0])
    torch.testing.assert_close(cached[1], uncached[1])


def test_bad_arguments() -> None:
    model = lm()
    with pytest.raises(ValueError, match="prompt"):
        greedy(stepper(model), torch.zeros(2, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="need caches"):
        greedy(stepper(model), torch.zeros(2, 2, dtype=torch.long), 3, lengths=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="temperature"):
        sample(stepper(model), torch.zeros(1, 1, dtype=torch.long), 3, temperature=0.0)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(stepper(model), torch.zeros(1, 1, dtype=torch.long), 3, 0)
