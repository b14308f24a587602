"""``attnkit view --hf`` on a model directory it cannot show faithfully: one line naming the
directory or file and what is wrong, no page, never a traceback or a page of a partly random
model. Damaged weights (cut, a header that lies, a shard missing or a damaged index), pickled
weights, weights that do not fit ``config.json`` or lack a tensor, a ``config.json`` field of the
wrong type, no or unreadable tokenizer files, a tokenizer of another model, an input longer than
the model's positions or than memory allows."""

from __future__ import annotations

import json
import resource
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertModel, BertTokenizer

from attnkit.cli import main

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "."]


def _model_dir(folder: Path, *, vocab: int = len(WORDS), positions: int = 16) -> Path:
    """A tiny random BERT saved as transformers saves it (safetensors), with its tokenizer."""
    folder.mkdir()
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=positions,
    )
    BertModel(config).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(WORDS))
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def _explain(folder: Path, page: Path, capsys, text: str = "the cat sat .") -> tuple[int, str]:
    capsys.readouterr()  # transformers' progress bars of the saving
    code = main(["view", "--hf", str(folder), "--input", text, "--output", str(page)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("attnkit view")]
    assert "Traceback" not in err and len(lines) <= 1, err
    return code, lines[0] if lines else ""


def _cut(folder: Path) -> str:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    return f"{weights}: damaged weights ("


def _header_lies(folder: Path) -> str:
    """A header claiming one more row for the first tensor than the file holds."""
    weights = folder / "model.safetensors"
    blob = weights.read_bytes()
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + size])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"][0] += 1
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    weights.write_bytes(len(text).to_bytes(8, "little") + text + blob[8 + size :])
    return f"{weights}: damaged weights ("


def _pickled(folder: Path) -> str:
    weights = folder / "model.safetensors"
    torch.save(load_file(weights), folder / "pytorch_model.bin")
    weights.unlink()
    return f"{folder} holds its weights as a pickle (pytorch_model.bin); attnkit never unpickles"


def _config_of_another_size(folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=32, intermediate_size=64)
    (folder / "config.json").write_text(json.dumps(config))
    return f"{folder}: its weights do not fit its config.json: embeddings.LayerNorm.bias is [16]"


def _a_field_of_the_wrong_type(folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = "x"
    (folder / "config.json").write_text(json.dumps(config))
    return (
        f"{folder / 'config.json'}: Validation error for field 'hidden_size': TypeError: Field "
        "'hidden_size' expected int, got str (value: 'x')"
    )


def _a_tensor_missing(folder: Path) -> str:
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    del tensors["encoder.layer.0.attention.self.query.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    return f"{folder}: its weights lack encoder.layer.0.attention.self.query.weight"


def _sharded(folder: Path) -> Path:
    """The model's weights re-saved as transformers shards them: files of at most 5 KB and
    ``model.safetensors.index.json`` mapping each tensor to its file."""
    model = BertModel.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    model.save_pretrained(folder, max_shard_size="5KB")
    return folder / "model.safetensors.index.json"


def _a_shard_missing(folder: Path) -> str:
    index = _sharded(folder)
    shard = sorted(folder.glob("model-*.safetensors"))[1]
    shard.unlink()
    return f"{index}: names the shard {shard.name}, which is not in {folder}; fetch the missing"


def _a_damaged_index(folder: Path) -> str:
    index = _sharded(folder)
    index.write_text("{cut")
    return f"{index}: not an index of safetensors shards (JSONDecodeError"


def _no_tokenizer_files(folder: Path) -> str:
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    return f"{folder} has no tokenizer files (one of tokenizer.json, vocab.txt)"


def _damaged_tokenizer(folder: Path) -> str:
    (folder / "tokenizer.json").write_text("{not json")
    return f"{folder}: its tokenizer cannot be loaded (JSONDecodeError"


CASES: dict[str, tuple[Callable[[Path], str], int]] = {
    "cut weights": (_cut, 1),
    "a header that lies": (_header_lies, 1),
    "a shard missing": (_a_shard_missing, 1),
    "a damaged shard index": (_a_damaged_index, 1),
    "pickled weights": (_pickled, 2),
    "config of another size": (_config_of_another_size, 2),
    "a config field of the wrong type": (_a_field_of_the_wrong_type, 2),
    "a tensor missing": (_a_tensor_missing, 2),
    "no tokenizer files": (_no_tokenizer_files, 2),
    "damaged tokenizer": (_damaged_tokenizer, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_model_directory_is_one_line_naming_it(case, tmp_path, capsys) -> None:
    damage, code = CASES[case]
    folder = _model_dir(tmp_path / "model")
    expected = damage(folder)
    page = tmp_path / "page.html"
    got, line = _explain(folder, page, capsys)
    assert (got, line.startswith("attnkit view: error: ")) == (code, True), line
    assert expected in line
    assert not page.exists()


def test_the_undamaged_directory_and_one_without_a_pooler_are_shown(tmp_path, capsys) -> None:
    """The controls: the pooler reads the last layer's output (no attention map depends on it),
    and checkpoints saved without it are common."""
    folder = _model_dir(tmp_path / "model")
    assert _explain(folder, tmp_path / "page.html", capsys) == (0, "")
    weights = folder / "model.safetensors"
    save_file(
        {k: v for k, v in load_file(weights).items() if not k.startswith("pooler.")},
        weights,
        metadata={"format": "pt"},
    )
    assert _explain(folder, tmp_path / "without-pooler.html", capsys) == (0, "")
    assert (tmp_path / "page.html").is_file() and (tmp_path / "without-pooler.html").is_file()


def test_a_tokenizer_of_another_model_is_refused_naming_the_token(tmp_path, capsys) -> None:
    folder = _model_dir(tmp_path / "model", vocab=7)  # the tokenizer knows 9 words
    code, line = _explain(folder, tmp_path / "page.html", capsys)
    assert code == 2
    assert line == (
        "attnkit view: error: the tokenizer does not belong to this model: it gives 'sat' "
        "the id 7, and the model's vocabulary has 7 entries (ids 0 to 6)"
    )


def test_an_input_longer_than_the_positions_is_refused(tmp_path, capsys) -> None:
    folder = _model_dir(tmp_path / "model", positions=4)
    code, line = _explain(folder, tmp_path / "page.html", capsys)  # [CLS] + 4 words + [SEP]
    assert code == 2
    assert line == (
        "attnkit view: error: the input is 6 tokens, longer than the model's 4 positions; "
        "shorten the input to at most 4 tokens"
    )
    assert _explain(folder, tmp_path / "short.html", capsys, text="the cat") == (0, "")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux's /proc")
def test_an_input_too_long_for_memory_names_input(tmp_path, capsys) -> None:
    """A model without a table of positions (rotary: Llama) takes any length, and its weights
    for T tokens take L·H·T² numbers: 20,002 tokens ask 3.2 GB at once. Under an address space
    2 GB larger than the process, the allocator's error becomes one line naming ``--input``."""
    from transformers import LlamaConfig, LlamaModel

    folder = tmp_path / "llama"
    folder.mkdir()
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    LlamaModel(config).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(WORDS))
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    mapped = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    before = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mapped + 2 * 2**30, before[1]))
    try:
        code, line = _explain(folder, tmp_path / "page.html", capsys, "the cat sat . " * 5000)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)
    assert code == 2
    assert line == (
        "attnkit view: error: --input: 70000 characters: not enough memory for their "
        "attention (3.2 GB asked at once); shorten --input"
    )
    assert not (tmp_path / "page.html").exists()
