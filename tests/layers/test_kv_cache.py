"""KV-cache decoding equals the full causal forward (1e-5 in float32).

Ground truth: the model's full forward over all ``P + T`` tokens with a causal mask (no cache), run
on the same parameters; the cached run prefills ``P`` tokens, then feeds the rest one at a time or
in chunks of 3. Ragged rows are checked against each row run alone.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attnkit.layers import KVCache, Transformer
from attnkit.layers.decoding import greedy, seq2seq_step
from attnkit.layers.language_model import CausalLanguageModel

V = 23
TOL = 1e-5

MODELS = {
    "none": {"positional": None},
    "sinusoidal": {"positional": "sinusoidal"},
    "learned": {"positional": "learned"},
    "rotary": {"positional": "rotary"},
    "alibi": {"positional": "alibi"},
    "t5": {"positional": "t5"},
    "rotary-gqa": {"positional": "rotary", "num_kv_heads": 2},
    "mqa-alibi": {"positional": "alibi", "num_kv_heads": 1},
    "rotary-window": {"positional": "rotary", "window": 4},
    "alibi-window": {"positional": "alibi", "window": 3},
}


def model_of(options: dict, seed: int = 0) -> CausalLanguageModel:
    torch.manual_seed(seed)
    model = CausalLanguageModel(V, 32, 4, 2, 48, max_len=64, **options).eval()
    with torch.no_grad():  # T5's table starts at zero-mean noise; make every bias matter
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def tokens_of(n: int, length: int, seed: int = 1) -> Tensor:
    return torch.randint(0, V, (n, length), generator=torch.Generator().manual_seed(seed))


def cached_logits(model: CausalLanguageModel, tokens: Tensor, prefill: int, chunk: int) -> Tensor:
    caches = model.new_caches(tokens.shape[1])
    out = []
    with torch.no_grad():
        if prefill:
            out.append(model(tokens[:, :prefill], caches=caches))
        for start in range(prefill, tokens.shape[1], chunk):
            out.append(model(tokens[:, start : start + chunk], caches=caches))
    return torch.cat(out, 1)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("chunk", [1, 3])
def test_cached_decoding_equals_full_forward(name: str, chunk: int) -> None:
    model = model_of(MODELS[name])
    tokens = tokens_of(2, 6 + 7)
    with torch.no_grad():
        full = model(tokens)
    got = cached_logits(model, tokens, prefill=6, chunk=chunk)
    assert (got - full).abs().max() <= TOL


@pytest.mark.parametrize("name", ["rotary", "alibi-window", "rotary-gqa"])
def test_greedy_tokens_identical_with_and_without_cache(name: str) -> None:
    model = model_of(MODELS[name])
    prompt = tokens_of(2, 5)

    def step(t: Tensor, c: list[KVCache] | None) -> Tensor:
        return model(t, caches=c)

    with_cache = greedy(step, prompt, 8, model.new_caches(13))
    without = greedy(step, prompt, 8, None)
    assert with_cache.shape == (2, 8)
    assert torch.equal(with_cache, without)


def test_empty_cache_decodes_from_scratch() -> None:
    model = model_of(MODELS["rotary"])
    tokens = tokens_of(2, 5)
    with torch.no_grad():
        full = model(tokens)
    got = cached_logits(model, tokens, prefill=0, chunk=1)
    assert (got - full).abs().max() <= TOL
    cache = KVCache(4)
    assert cache.size == 0
    k = torch.randn(2, 3, 0, 8)
    k_all, _v_all, k_pos, q_pos = cache.append(k, k)
    assert k_all.shape == (2, 3, 0, 8) and k_pos.shape == (2, 0) and q_pos.shape == (2, 0)


def test_exceeding_capacity_raises() -> None:
    model = model_of(MODELS["rotary"])
    caches = model.new_caches(5)
    with torch.no_grad():
        model(tokens_of(2, 4), caches=caches)
        model(tokens_of(2, 1), caches=caches)
        with pytest.raises(ValueError, match="capacity exceeded: it holds 5 of 5"):
            model(tokens_of(2, 1), caches=caches)
    with pytest.raises(ValueError, match="capacity"):
        KVCache(-1)


def test_sliding_window_cache_evicts_beyond_the_window() -> None:
    model = model_of(MODELS["rotary-window"])  # window 4
    tokens = tokens_of(2, 20)
    caches = model.new_caches(4 - 1 + 3)  # window - 1 kept + a chunk of 3
    out = []
    with torch.no_grad():
        for start in range(0, 20, 3):
            out.append(model(tokens[:, start : start + 3], caches=caches))
            assert all(c.size <= 3 for c in caches)  # only window - 1 keys survive a step
        full = model(tokens)
    assert (torch.cat(out, 1) - full).abs().max() <= TOL


def test_ragged_batch_rows_continue_from_their_own_lengths() -> None:
    model = model_of(MODELS["alibi"])
    lengths = torch.tensor([6, 3, 5])
    rows = [tokens_of(1, int(n), seed=10 + i) for i, n in enumerate(lengths)]
    prompt = torch.zeros(3, 6, dtype=torch.long)
    for i, r in enumerate(rows):
        prompt[i, : r.shape[1]] = r[0]
    caches = model.new_caches(6 + 4)
    nxt = tokens_of(3, 4, seed=5)
    with torch.no_grad():
        first = model(prompt, caches=caches, lengths=lengths)
        steps = [model(nxt[:, j : j + 1], caches=caches) for j in range(4)]
        for i, r in enumerate(rows):
            alone = model(torch.cat([r, nxt[i : i + 1]], 1))  # the row by itself, no padding
            n = r.shape[1]
            assert (first[i, :n] - alone[0, :n]).abs().max() <= TOL
            got = torch.cat([s[i] for s in steps], 0)
            assert (got - alone[0, n:]).abs().max() <= TOL


def test_ragged_greedy_equals_each_row_alone() -> None:
    model = model_of(MODELS["rotary"])
    lengths = torch.tensor([2, 5])
    prompt = tokens_of(2, 5)

    def step(t: Tensor, c: list[KVCache] | None, **kw: Tensor) -> Tensor:
        return model(t, caches=c, **kw)

    batched = greedy(step, prompt, 6, model.new_caches(11), lengths=lengths)
    for i, n in enumerate(lengths.tolist()):
        alone = greedy(step, prompt[i : i + 1, :n], 6, None)
        assert torch.equal(batched[i], alone[0])


def test_cache_refuses_masks_and_shape_changes() -> None:
    model = model_of(MODELS["rotary"])
    caches = model.new_caches(8)
    with torch.no_grad():
        model(tokens_of(2, 2), caches=caches)
        with pytest.raises(ValueError, match=r"holds \[B=2"):
            model(tokens_of(3, 1), caches=caches)
    layer = model.layers.layers[0]
    with pytest.raises(ValueError, match="lengths="):
        layer(torch.randn(2, 1, 32), torch.zeros(1, 1, dtype=torch.bool), cache=KVCache(4))


def test_encoder_decoder_cross_attention_cache() -> None:
    torch.manual_seed(0)
    model = Transformer(16, 4, 1, 2, 32, dropout=0.0, batch_first=True, num_kv_heads=2).eval()
    embed = torch.nn.Embedding(V, 16)
    head = torch.nn.Linear(16, V)
    src = torch.randn(2, 7, 16)
    pad = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])
    tgt = tokens_of(2, 6)
    with torch.no_grad():
        memory = model.encode(src, src_key_padding_mask=pad)
        causal = Transformer.generate_square_subsequent_mask(6)
        full = head(model.decode(embed(tgt), memory, causal, memory_key_padding_mask=pad))
        caches = model.decoder.new_caches(6)
        step = seq2seq_step(model, embed, head, memory, pad)
        parts = [step(tgt[:, :2], caches)]
        cross_k = caches[0].cross_attn.k
        parts += [step(tgt[:, j : j + 1], caches) for j in range(2, 6)]
        assert caches[0].cross_attn.k is cross_k  # projected once, on the first step
        assert caches[0].self_attn.k is not None and caches[0].self_attn.k.shape[1] == 2  # GQA
    assert (torch.cat(parts, 1) - full).abs().max() <= TOL
    with_cache = greedy(step, tgt[:, :1], 5, model.decoder.new_caches(6))
    without = greedy(step, tgt[:, :1], 5, None)
    assert torch.equal(with_cache, without)


def test_kv_cache_bad_input() -> None:
    with pytest.raises(ValueError, match="window"):
        KVCache(4, window=0)
    cache = KVCache(4)
    with pytest.raises(ValueError, match=r"\[B, G, M, D\]"):
        cache.append(torch.randn(2, 3, 8), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match=r"lengths must be \[B=2\] in \[0, 3\]"):
        cache.append(torch.randn(2, 1, 3, 8), torch.randn(2, 1, 3, 8), torch.tensor([1, 4]))
    cache = KVCache(4)
    cache.append(torch.randn(2, 1, 3, 8), torch.randn(2, 1, 3, 8))
    with pytest.raises(ValueError, match="d_k=8"):
        cache.append(torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4))


def test_reorder_follows_the_chosen_rows() -> None:
    cache = KVCache(4)
    k = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 2, 1)
    cache.append(k, k, torch.tensor([2, 1, 2]))
    cache.reorder(torch.tensor([1, 1, 0]))
    k_all, _, k_pos, q_pos = cache.append(torch.zeros(3, 1, 1, 1), torch.zeros(3, 1, 1, 1))
    assert k_all[:, 0, :2, 0].tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert k_pos.tolist() == [[0, -1, 1], [0, -1, 1], [0, 1, 2]]
    assert q_pos.tolist() == [[1], [1], [2]]
