"""``view --hf`` never runs a model directory's own code: no "run the custom code? [y/N]"
prompt (one ``y`` would run it), a one-line refusal naming the directory instead."""

from __future__ import annotations

import io
import json
import re

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizer

from attnkit.integrations.huggingface import view_model


def plant(folder, marker, name: str) -> None:
    """A Python file that, if imported, leaves ``marker`` behind (and defines the classes)."""
    (folder / name).write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PretrainedConfig, PreTrainedModel\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n"
        "class EvilModel(PreTrainedModel):\n    config_class = EvilConfig\n"
    )


def answer_yes(monkeypatch) -> None:
    """A user at the terminal who answers every question with ``y``."""
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 10))


def test_a_directory_with_its_own_model_code_is_refused(tmp_path, monkeypatch, capsys) -> None:
    folder, marker = tmp_path / "custom model", tmp_path / "ran"
    folder.mkdir()
    plant(folder, marker, "configuration_evil.py")
    plant(folder, marker, "modeling_evil.py")
    auto_map = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModel": "modeling_evil.EvilModel",
    }
    (folder / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": auto_map}))
    answer_yes(monkeypatch)
    with pytest.raises(ValueError) as error:
        view_model(folder, "the cat sat", output=tmp_path / "page.html")
    message = str(error.value)
    assert "\n" not in message and str(folder) in message
    assert "configuration_evil.py" in message and "modeling_evil.py" in message
    shown = capsys.readouterr()
    assert "[y/N]" not in shown.out + shown.err
    assert not marker.exists() and not (tmp_path / "page.html").exists()


def tiny_bert(folder) -> None:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=9, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16,
    )  # fmt: skip
    BertModel(config).save_pretrained(folder)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]))
    BertTokenizer(str(vocab)).save_pretrained(folder)


def test_a_directory_with_its_own_tokenizer_code_is_refused(tmp_path, monkeypatch) -> None:
    folder, marker = tmp_path / "model", tmp_path / "ran"
    folder.mkdir()
    tiny_bert(folder)
    plant(folder, marker, "tokenization_evil.py")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings.update(
        tokenizer_class="EvilTokenizer",
        auto_map={"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]},
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    answer_yes(monkeypatch)
    with pytest.raises(
        ValueError, match=re.escape("tokenizer_config.json auto_map: tokenization_evil.py")
    ):
        view_model(folder, "the cat sat", output=tmp_path / "page.html")
    assert not marker.exists()


def test_a_known_model_type_loads_with_transformers_own_class(tmp_path, monkeypatch) -> None:
    """An ``auto_map`` beside a ``model_type`` transformers has: its class is used, the
    directory's code never runs (what ``trust_remote_code=False`` means)."""
    folder, marker = tmp_path / "model", tmp_path / "ran"
    folder.mkdir()
    tiny_bert(folder)
    plant(folder, marker, "modeling_evil.py")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    answer_yes(monkeypatch)
    page = view_model(folder, "the cat sat", output=tmp_path / "page.html")
    assert page.is_file() and not marker.exists()
