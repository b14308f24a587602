"""attn_implementation="attnkit" against transformers' eager implementation: encoders,
decoder-only models with KV caches and generate(), encoder-decoders, on padded batches.

Hidden states agree to 1e-4, weights to 1e-5 (both float32). Padding positions whose query has
no admissible key are compared nowhere: eager spreads such a row uniformly over masked keys,
attnkit returns zeros (docs/reliability.md), and neither reaches a real token's output.
"""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    BartConfig,
    BertConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    T5Config,
)

import attnkit as ak

HIDDEN, WEIGHTS = 1e-4, 1e-5
VOCAB = 99


def bert_config() -> BertConfig:
    return BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip


def gpt2_config() -> GPT2Config:
    return GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip


def llama_config() -> LlamaConfig:
    # rotary positions and grouped-query heads: 4 query heads share 2 key/value heads
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=37, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip


def batch(lengths: list[int], length: int, *, left: bool = False, seed: int = 1):
    """Random token ids with padding (0) after (or before) each row's ``lengths[b]`` tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (len(lengths), length), generator=g)
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for b, n in enumerate(lengths):
        if left:
            mask[b, length - n :] = 1
        else:
            mask[b, :n] = 1
    return ids.masked_fill(mask == 0, 0), mask


def assert_weights_close(eager, ours, mask) -> None:
    """Per layer ``[B, H, M, N]``, compared on the rows of real (unpadded) queries."""
    assert len(eager) == len(ours) > 0
    rows = mask.bool()[:, None, :, None]
    for a, b in zip(eager, ours, strict=True):
        assert b is not None and a.shape == b.shape
        diff = (a - b).abs().masked_fill(~rows, 0)
        assert diff.max() <= WEIGHTS


def assert_hidden_close(eager, ours, mask) -> None:
    real = mask.bool()[..., None]
    assert ((eager - ours).abs().masked_fill(~real, 0)).max() <= HIDDEN


class Calls:
    """An attention hook counting the engine's calls and the backend chosen for each."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str, bool, float]] = []

    def __call__(self, call, module, run):
        self.seen.append((module, run.chosen.name, call.return_weights, call.dropout))
        return run(call)


def test_encoder_matches_eager_on_a_padded_batch(twins) -> None:
    eager, ours = twins(AutoModel, bert_config())
    ids, mask = batch([7, 4, 1], 7)
    with torch.no_grad():
        a = eager(input_ids=ids, attention_mask=mask, output_attentions=True)
        calls = Calls()
        with ak.attention_hooks(calls, model=ours):
            b = ours(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert_hidden_close(a.last_hidden_state, b.last_hidden_state, mask)
    assert_weights_close(a.attentions, b.attentions, mask)
    # one engine call per layer, made inside the HF attention module, weights from the engine's
    # weights-on-demand path (the dense backend), not a fallback to eager
    assert [s[0] for s in calls.seen] == [f"encoder.layer.{i}.attention.self" for i in (0, 1)]
    assert all(s[1] == "dense" and s[2] for s in calls.seen)
    # without output_attentions no weights are formed: the fused kernel runs
    calls.seen.clear()
    with torch.no_grad(), ak.attention_hooks(calls, model=ours):
        c = ours(input_ids=ids, attention_mask=mask)
    assert all(s[1] == "sdpa" and not s[2] for s in calls.seen)
    assert c.attentions is None
    assert_hidden_close(a.last_hidden_state, c.last_hidden_state, mask)


@pytest.mark.parametrize("config", [gpt2_config, llama_config], ids=["gpt2", "llama-gqa-rope"])
@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_decoder_matches_eager_on_a_padded_batch(twins, config, left) -> None:
    eager, ours = twins(AutoModelForCausalLM, config())
    ids, mask = batch([6, 3], 6, left=left)
    with torch.no_grad():
        a = eager(input_ids=ids, attention_mask=mask, output_attentions=True)
        b = ours(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert_hidden_close(a.logits, b.logits, mask)
    assert_weights_close(a.attentions, b.attentions, mask)
    # causal: no weight on a future key
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    assert all(w[..., future].abs().max() == 0 for w in b.attentions)


@pytest.mark.parametrize("config", [gpt2_config, llama_config], ids=["gpt2", "llama-gqa-rope"])
def test_kv_cache_decoding_equals_the_full_forward(twins, config) -> None:
    _, ours = twins(AutoModelForCausalLM, config())
    ids, _ = batch([6, 6], 6)
    with torch.no_grad():
        full = ours(input_ids=ids).logits
        prefix = ours(input_ids=ids[:, :4], use_cache=True)
        cache = prefix.past_key_values  # the output keeps its name
        steps = [prefix.logits]
        for t in (4, 5):
            out = ours(input_ids=ids[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    assert (torch.cat(steps, 1) - full).abs().max() <= HIDDEN


@pytest.mark.parametrize("config", [gpt2_config, llama_config], ids=["gpt2", "llama-gqa-rope"])
def test_generate_gives_the_greedy_tokens_of_eager(twins, config) -> None:
    eager, ours = twins(AutoModelForCausalLM, config(), seed=3)
    ids, mask = batch([5, 2, 4], 5, left=True)  # left padding, as batched generation needs
    options = {"max_new_tokens": 8, "do_sample": False, "num_beams": 1, "pad_token_id": 0}
    with torch.no_grad():
        a = eager.generate(input_ids=ids, attention_mask=mask, **options)
        b = ours.generate(input_ids=ids, attention_mask=mask, **options)
    assert a.shape == b.shape == (3, 13)
    assert torch.equal(a, b)


def t5_config() -> T5Config:
    return T5Config(
        vocab_size=VOCAB, d_model=32, num_layers=2, num_heads=4, d_kv=8, d_ff=37,
        relative_attention_num_buckets=8, decoder_start_token_id=0, dropout_rate=0.0,
    )  # fmt: skip


def bart_config() -> BartConfig:
    return BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
        decoder_ffn_dim=37, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip


@pytest.mark.parametrize("config", [t5_config, bart_config], ids=["t5-relative-bias", "bart"])
def test_encoder_decoder_matches_eager(twins, config) -> None:
    eager, ours = twins(AutoModelForSeq2SeqLM, config())
    ids, mask = batch([7, 5], 7)
    target, target_mask = batch([4, 4], 4, seed=2)
    kwargs = {"attention_mask": mask, "decoder_input_ids": target, "output_attentions": True}
    # train mode (no dropout configured): T5's learned relative bias gets its gradient through
    # attnkit's engine exactly as through eager
    eager.train(), ours.train()
    a = eager(input_ids=ids, labels=target, **kwargs)
    b = ours(input_ids=ids, labels=target, **kwargs)
    a.loss.backward()
    b.loss.backward()
    assert_hidden_close(a.logits, b.logits, target_mask)
    assert_hidden_close(a.encoder_last_hidden_state, b.encoder_last_hidden_state, mask)
    assert_weights_close(a.encoder_attentions, b.encoder_attentions, mask)
    assert_weights_close(a.decoder_attentions, b.decoder_attentions, target_mask)
    assert_weights_close(a.cross_attentions, b.cross_attentions, target_mask)
    grads = dict(ours.named_parameters())
    for name, p in eager.named_parameters():
        if p.grad is not None:
            assert grads[name].grad is not None, name
            assert (p.grad - grads[name].grad).abs().max() <= 1e-4, name
    if isinstance(config(), T5Config):
        bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        assert grads[bias].grad.abs().max() > 0


def test_sliding_window_matches_eager(twins) -> None:
    config = MistralConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=37, sliding_window=3, pad_token_id=0,
    )  # fmt: skip
    eager, ours = twins(AutoModelForCausalLM, config)
    ids, mask = batch([8, 5], 8)
    with torch.no_grad():
        a = eager(input_ids=ids, attention_mask=mask, output_attentions=True)
        b = ours(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert_hidden_close(a.logits, b.logits, mask)
    assert_weights_close(a.attentions, b.attentions, mask)
    # a window of 3 keys: the key 3 places back gets nothing
    assert b.attentions[0][0, :, 5, 2].abs().max() == 0 and b.attentions[0][0, :, 5, 3].min() > 0


def test_dropout_reaches_the_engine(twins) -> None:
    config = bert_config()
    config.attention_probs_dropout_prob = 0.25
    _, ours = twins(AutoModel, config)
    ids, mask = batch([5, 5], 5)
    calls = Calls()
    with ak.attention_hooks(calls, model=ours):
        ours.train()(input_ids=ids, attention_mask=mask)
        ours.eval()(input_ids=ids, attention_mask=mask)
    assert [s[3] for s in calls.seen] == [0.25, 0.25, 0.0, 0.0]
