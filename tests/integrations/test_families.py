"""Which Hugging Face model families run on attnkit: every tested family that routes its
attention through transformers' attention interface computes what ``attn_implementation="eager"``
computes, and every family that does not is refused with one line, never run silently wrong.

Each model is a tiny randomly initialised config built here (no download). The supported
families are compared with their eager twin on every tensor of the output (hidden states, logits,
pooled and projected embeddings, the attention weights of every layer) in float32 and float64,
and the engine must have been called (an eager fallback would agree trivially).
"""

from __future__ import annotations

import textwrap
import types

import pytest
import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM

import attnkit as ak
from attnkit.evaluate import ablate
from attnkit.integrations.huggingface import swap_attention, view_model
from attnkit.interpret import record

VOCAB, LENGTH = 99, 6
REFUSAL = (
    "does not route its attention through transformers' attention interface; attnkit cannot "
    "compute or observe it"
)
# largest error allowed, relative to the largest magnitude of the tensor (at least 1): float32
# against eager, two float32 computations of one formula (measured at most 8.6e-7, SigLIP's
# logits on the fused path); float64 against the formula in float64 (measured at most 1.8e-15)
TOLERANCE = {torch.float32: 2e-6, torch.float64: 1e-12}


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype, name: str) -> None:
    bound = TOLERANCE[dtype] * max(1.0, float(want.abs().max()))
    assert float((got - want).abs().max()) <= bound, name


def text_inputs() -> dict:
    """Two sequences, the second right-padded (no query is left without a key)."""
    ids = torch.randint(3, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, -2:] = 0
    return {"input_ids": ids.masked_fill(mask == 0, 1), "attention_mask": mask}


def pixels(size: int = 8) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


def decoder_config(config_class, **extra):
    sizes = {
        "vocab_size": VOCAB, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
    }  # fmt: skip
    return config_class(**{**sizes, **extra})


def encoder_config(config_class, **extra):
    sizes = {
        "vocab_size": VOCAB, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64,
        "pad_token_id": 1,
    }  # fmt: skip
    return config_class(**{**sizes, **extra})


def vision_sizes() -> dict:
    return {
        "image_size": 8, "patch_size": 4, "num_channels": 3, "hidden_size": 16,
        "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    }  # fmt: skip


def text_sizes() -> dict:
    return {
        "vocab_size": VOCAB, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 16,
    }  # fmt: skip


T = transformers
# family -> (auto class, config, inputs); features each family adds are in the comments
SUPPORTED = {
    "qwen2": lambda: (AutoModelForCausalLM, decoder_config(T.Qwen2Config), text_inputs()),
    "qwen3": lambda: (  # q/k RMS norms, explicit head_dim
        AutoModelForCausalLM,
        decoder_config(T.Qwen3Config, head_dim=4),
        text_inputs(),
    ),
    "gemma2": lambda: (  # soft-capped scores, sliding window, query_pre_attn_scalar
        AutoModelForCausalLM,
        decoder_config(
            T.Gemma2Config,
            head_dim=4,
            sliding_window=3,
            attn_logit_softcapping=0.5,
            query_pre_attn_scalar=8,
        ),
        text_inputs(),
    ),
    "gemma3": lambda: (  # local sliding-window and global layers
        AutoModelForCausalLM,
        decoder_config(
            T.Gemma3TextConfig,
            head_dim=4,
            sliding_window=3,
            query_pre_attn_scalar=8,
            layer_types=["sliding_attention", "full_attention"],
        ),
        text_inputs(),
    ),
    "phi3": lambda: (  # partial rotary
        AutoModelForCausalLM,
        decoder_config(T.Phi3Config, partial_rotary_factor=0.5),
        text_inputs(),
    ),
    "mixtral": lambda: (  # mixture of experts, grouped-query heads
        AutoModelForCausalLM,
        decoder_config(  # eager experts: the grouped GEMM has no float64
            T.MixtralConfig,
            num_local_experts=2,
            num_experts_per_tok=1,
            experts_implementation="eager",
        ),
        text_inputs(),
    ),
    "gpt_neox": lambda: (
        AutoModelForCausalLM,
        decoder_config(T.GPTNeoXConfig, num_key_value_heads=None, rotary_pct=0.5),
        text_inputs(),
    ),
    "opt": lambda: (
        AutoModelForCausalLM,
        T.OPTConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=2,
            ffn_dim=32,
            num_attention_heads=4,
            max_position_embeddings=64,
            word_embed_proj_dim=16,
            pad_token_id=1,
        ),
        text_inputs(),
    ),
    "modernbert": lambda: (  # local (windowed) and global layers, bidirectional
        AutoModel,
        encoder_config(
            T.ModernBertConfig,
            num_hidden_layers=3,
            local_attention=4,
            global_attn_every_n_layers=2,
            bos_token_id=0,
            eos_token_id=2,
            cls_token_id=0,
            sep_token_id=2,
        ),
        text_inputs(),
    ),
    "distilbert": lambda: (
        AutoModel,
        T.DistilBertConfig(
            vocab_size=VOCAB,
            dim=16,
            n_layers=2,
            n_heads=4,
            hidden_dim=32,
            max_position_embeddings=64,
            pad_token_id=1,
        ),
        text_inputs(),
    ),
    "roberta": lambda: (AutoModel, encoder_config(T.RobertaConfig), text_inputs()),
    "electra": lambda: (
        AutoModel,
        encoder_config(T.ElectraConfig, embedding_size=8),
        text_inputs(),
    ),
    "whisper": lambda: (  # encoder-decoder: cross-attention
        AutoModel,
        T.WhisperConfig(
            vocab_size=VOCAB,
            num_mel_bins=8,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            d_model=16,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            max_source_positions=8,
            max_target_positions=16,
            pad_token_id=1,
            decoder_start_token_id=0,
        ),
        {
            "input_features": torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(2)),
            "decoder_input_ids": torch.randint(3, VOCAB, (2, 5)),
        },
    ),
    "vit": lambda: (AutoModel, T.ViTConfig(**vision_sizes()), {"pixel_values": pixels()}),
    "clip": lambda: (  # causal text tower with padding, vision tower
        AutoModel,
        T.CLIPConfig(
            text_config={**text_sizes(), "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
            vision_config=vision_sizes(),
            projection_dim=8,
        ),
        {**text_inputs(), "pixel_values": pixels()},
    ),
    "siglip": lambda: (
        AutoModel,
        T.SiglipConfig(text_config=text_sizes(), vision_config=vision_sizes()),
        {"input_ids": text_inputs()["input_ids"], "pixel_values": pixels()},
    ),
}


def tensors(output, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a model output (nested outputs and tuples of layers flattened)."""
    found = {}
    items = output.items() if hasattr(output, "items") else enumerate(output)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (tuple, list)) or hasattr(value, "items"):
            found.update(tensors(value, f"{name}."))
    return found


def float64_formula(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **_
):
    """The attention formula materialised in float64, as an attention implementation:

        s = scaling · q kᵀ  (soft-capped: c · tanh(s / c)),  s += mask,  a = softmax(s),  o = a v

    with grouped key/value heads repeated. (Eager is no float64 reference: most families take
    its softmax in float32 whatever the inputs.)"""
    groups = query.shape[1] // key.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (key, value))
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    s = query.double() @ k.transpose(-2, -1) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if attention_mask is not None:  # transformers' eager_mask: 0 or the dtype's minimum
        s = s + attention_mask[..., : k.shape[-2]].double()
    a = torch.softmax(s, dim=-1)
    return (a @ v).transpose(1, 2).contiguous().to(query.dtype), a.to(query.dtype)


T.AttentionInterface.register("float64_formula", float64_formula)
T.masking_utils.AttentionMaskInterface.register("float64_formula", T.masking_utils.eager_mask)
REFERENCE = {torch.float32: "eager", torch.float64: "float64_formula"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("family", list(SUPPORTED))
def test_supported_family_matches_eager(twins, family, dtype) -> None:
    """float32: against HF's eager attention; float64: against the formula in float64."""
    auto, config, inputs = SUPPORTED[family]()
    eager, ours = twins(auto, config)
    reference = auto.from_config(config, attn_implementation=REFERENCE[dtype])
    reference.load_state_dict(eager.state_dict())
    reference, ours = reference.eval().to(dtype), ours.to(dtype)
    inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
    calls = []
    with torch.no_grad():
        expected = tensors(reference(**inputs, output_attentions=True, use_cache=False))
        with ak.attention_hooks(lambda call, module, run: calls.append(1) or run(call)):
            got = tensors(ours(**inputs, output_attentions=True, use_cache=False))
            # without weights the engine takes its fused path (SDPA where it applies)
            fast = tensors(ours(**inputs, use_cache=False))
    assert calls, "the model never called attnkit's engine"
    assert got.keys() == expected.keys()
    assert any("attentions" in name for name in got), "no attention weights compared"
    for name, want in expected.items():
        assert got[name].dtype == dtype
        assert_close(got[name], want, dtype, name)
        if name in fast:
            assert_close(fast[name], want, dtype, f"{name} (no weights)")


# --- the families that compute their own attention -------------------------------------------

REFUSED = {
    "bloom": lambda: T.BloomConfig(vocab_size=VOCAB, hidden_size=16, n_layer=1, n_head=2),
    "deberta-v2": lambda: T.DebertaV2Config(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    ),
    "xlnet": lambda: T.XLNetConfig(vocab_size=VOCAB, d_model=16, n_layer=1, n_head=2, d_inner=32),
    "big_bird": lambda: T.BigBirdConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        attention_type="original_full",
    ),
    "falcon": lambda: T.FalconConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2
    ),
    "gpt_neo": lambda: T.GPTNeoConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_layers=1,
        num_heads=2,
        attention_types=[[["global"], 1]],
    ),
    "mpt": lambda: T.MptConfig(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2),
}


DECODERS = ["bloom", "falcon", "gpt_neo", "mpt"]
CASES = [(f, AutoModel) for f in REFUSED] + [(f, AutoModelForCausalLM) for f in DECODERS]


@pytest.mark.parametrize(("family", "auto"), CASES, ids=[f"{f}-{a.__name__}" for f, a in CASES])
def test_refused_family_is_refused_at_load(family, auto, tmp_path) -> None:
    config = REFUSED[family]()
    with pytest.raises(ValueError) as error:
        auto.from_config(config, attn_implementation="attnkit")
    assert str(error.value).endswith(REFUSAL) and "\n" not in str(error.value)
    # from a saved folder too, and through the viewer's loader
    if auto is AutoModel:
        auto.from_config(config, attn_implementation="eager").save_pretrained(tmp_path)
        with pytest.raises(ValueError, match=REFUSAL):
            auto.from_pretrained(tmp_path, attn_implementation="attnkit")
        with pytest.raises(ValueError, match=REFUSAL):
            view_model(tmp_path, "the cat sat")


def test_bloom_loaded_eager_cannot_be_swapped_or_viewed(tmp_path) -> None:
    bloom = AutoModel.from_config(REFUSED["bloom"](), attn_implementation="eager").eval()
    with pytest.raises(ValueError, match=REFUSAL):
        with swap_attention(bloom, align="sparsemax"):
            pass
    with pytest.raises(ValueError, match=REFUSAL):
        view_model(bloom, "the cat sat", tokenizer=object())


def test_view_hf_refuses_a_refused_family_in_one_line(tmp_path, capsys) -> None:
    """``attnkit view --hf`` on a BLOOM folder: exit 2, the one line, no page."""
    from attnkit.cli import main

    AutoModel.from_config(REFUSED["bloom"](), attn_implementation="eager").save_pretrained(tmp_path)
    page = tmp_path / "page.html"
    command = ["view", "--hf", str(tmp_path), "--input", "hi", "--output", str(page)]
    capsys.readouterr()  # transformers' progress bars of the saving above
    assert main(command) == 2
    stderr = capsys.readouterr().err
    assert stderr == f"attnkit view: error: BloomModel {REFUSAL}\n"
    assert not page.exists()


# --- a model whose source cannot tell: refused at its first forward ---------------------------

NOTEBOOK_MODEL = '''
import torch
from torch import nn
from transformers import BertConfig, PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import eager_attention_forward


class ToySelfAttention(nn.Module):
    """Computes its own softmax attention: never asks transformers for a function."""

    def __init__(self, config):
        super().__init__()
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


class RoutedSelfAttention(nn.Module):
    """Asks transformers' attention interface for its function, as transformers' models do."""

    def __init__(self, config):
        super().__init__()
        self.config, self.is_causal = config, False
        self.heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(x).chunk(3, -1))
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        return attend(self, q, k, v, None, dropout=0.0)[0].reshape(b, t, -1)


class ToyModel(PreTrainedModel):
    config_class = BertConfig
    attention_class = ToySelfAttention

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.attention = self.attention_class(config)
        self.post_init()

    def forward(self, input_ids):
        return self.attention(self.embed(input_ids))


class RoutedModel(ToyModel):
    attention_class = RoutedSelfAttention
'''


@pytest.fixture
def notebook_model():
    """A model class defined where no source can be read (as in a notebook or a REPL)."""
    namespace = types.ModuleType("toy_notebook")  # not in sys.modules: no source to inspect
    exec(compile(textwrap.dedent(NOTEBOOK_MODEL), "<notebook cell>", "exec"), vars(namespace))
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=8, num_hidden_layers=1, num_attention_heads=2
    )
    return namespace, config


def test_a_model_that_never_reaches_attnkit_is_refused_at_its_first_forward(notebook_model):
    namespace, config = notebook_model
    toy_class = namespace.ToyModel
    config._attn_implementation = "attnkit"
    toy = toy_class(config).eval()
    ids = text_inputs()["input_ids"]
    for _ in range(2):  # and at every forward after it
        with pytest.raises(ValueError, match=f"^ToyModel {REFUSAL}$"):
            toy(ids)
    # record and ablate raise the same way: never an empty recording or an unchanged model
    with pytest.raises(ValueError, match=REFUSAL):
        with record(toy):
            toy(ids)
    with pytest.raises(ValueError, match=REFUSAL):
        with ablate(toy, "uniform"):
            toy(ids)
    # on eager it runs as ever
    config._attn_implementation = "eager"
    assert toy_class(config)(ids).shape == (2, LENGTH, 8)


def test_a_model_whose_source_cannot_tell_but_reaches_attnkit_runs(notebook_model) -> None:
    """The same notebook, a model routing through the interface: it runs, equal to eager."""
    namespace, config = notebook_model
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    eager = namespace.RoutedModel(config).eval()
    config._attn_implementation = "attnkit"
    ours = namespace.RoutedModel(config).eval()
    ours.load_state_dict(eager.state_dict())
    ids = text_inputs()["input_ids"]
    with torch.no_grad():
        for _ in range(2):
            assert (ours(ids) - eager(ids)).abs().max() <= 1e-6
    with record(ours) as rec, torch.no_grad():
        ours(ids)
    assert list(rec.keys()) == ["attention"]
