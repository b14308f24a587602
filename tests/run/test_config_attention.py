"""model.attention / model.decoder_attention in run configurations (issue 8: every efficient
kind usable from configs): validated at config time (exit code 2, one line naming the key and
the known kinds or the reason), kept out of the architecture of exact runs, and built into the
model the config describes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import yaml

from attnkit.cli import main
from attnkit.config import (
    ConfigError,
    architecture,
    differing_keys,
    known_attention_kinds,
    validate,
)
from attnkit.core.kinds import kind_names
from attnkit.data.corpus import Vocabularies
from attnkit.data.vocabulary import Vocabulary
from attnkit.models.transformer_seq2seq import DECODER_KINDS, NOT_DECODER_KINDS
from attnkit.report import describe_model
from attnkit.tasks.translation import build_model

TRANSFORMER = {"kind": "transformer", "d_model": 16, "nhead": 2, "num_layers": 1,
               "dim_feedforward": 32, "max_length": 16}  # fmt: skip
VIT = {"kind": "vit", "patch_size": 7, "d_model": 16, "nhead": 4, "num_layers": 1}


def _raw(model: dict, **keys: str) -> dict:
    if model["kind"] == "vit":
        return {"name": "t", "data": {"corpus": "fashion_mnist"}, "model": model | keys,
                "train": {"steps": 1}}  # fmt: skip
    # decoding stays within the Transformer's 16 positions
    return {"name": "t", "data": {"corpus": "tatoeba"}, "model": model | keys,
            "train": {"steps": 1}, "decode": {"max_length": 15}}  # fmt: skip


def test_the_known_kinds_are_the_registered_ones():
    known = known_attention_kinds()
    assert known == kind_names() and known[0] == "exact"
    assert {"sliding_window", "linear", "performer", "nystrom", "lsh", "linformer"} <= set(known)
    for kind in known:  # every kind is accepted where nothing restricts it
        assert validate(_raw(VIT, attention=kind)).model.attention == kind
        assert validate(_raw(TRANSFORMER, attention=kind)).model.attention == kind
    assert set(DECODER_KINDS) | set(NOT_DECODER_KINDS) == set(known)


@pytest.mark.parametrize("model", [TRANSFORMER, VIT], ids=["transformer", "vit"])
def test_an_unknown_kind_names_the_key_and_lists_the_known_kinds(model):
    with pytest.raises(ConfigError) as info:
        validate(_raw(model, attention="flash"), "c.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("c.yaml: model.attention: unknown attention kind 'flash'; expected ")
    assert message.endswith(", ".join(known_attention_kinds()))


@pytest.mark.parametrize("kind", sorted(NOT_DECODER_KINDS))
def test_a_kind_that_cannot_decode_is_refused_for_the_decoder(kind):
    with pytest.raises(ConfigError) as info:
        validate(_raw(TRANSFORMER, decoder_attention=kind), "c.yaml")
    message = str(info.value)
    assert "\n" not in message and NOT_DECODER_KINDS[kind] in message
    assert message.startswith(
        f"c.yaml: model.decoder_attention: the decoder's self-attention cannot be '{kind}'"
    )
    assert message.endswith("use one of " + ", ".join(DECODER_KINDS))
    assert validate(_raw(TRANSFORMER, attention=kind)).model.attention == kind  # encoder: fine


def test_the_cli_refuses_with_exit_code_2_and_one_line(tmp_path, capsys):
    for keys, expected in (
        ({"attention": "flash"}, "model.attention: unknown attention kind 'flash'"),
        ({"decoder_attention": "nystrom"}, "model.decoder_attention: the decoder's self-attention"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump(_raw(TRANSFORMER, **keys)))
        assert main(["train", str(bad), "--runs-dir", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err and str(bad) in err
        assert not (tmp_path / "runs").exists()


def test_the_refusal_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_raw(VIT, attention="flash")))
    done = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", "train", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"attnkit train: error: {bad}: model.attention: unknown attention kind")


def test_exact_runs_keep_their_architecture_and_other_kinds_are_part_of_it():
    """A run of exact attention has the architecture keys it had before the key existed (so its
    checkpoints still load); another kind is an architecture difference (resume refused)."""
    exact = architecture(validate(_raw(TRANSFORMER)))
    assert "model.attention" not in exact and "model.decoder_attention" not in exact
    assert "model.attention" not in architecture(validate(_raw(VIT)))
    linear = architecture(validate(_raw(TRANSFORMER, attention="linear")))
    assert differing_keys(exact, linear) == ["model.attention: saved '<absent>', given 'linear'"]


def test_the_config_builds_the_kinds_it_names():
    config = validate(_raw(TRANSFORMER, attention="nystrom", decoder_attention="linear"))
    vocab = Vocabulary.build([["a", "b", "c"]])
    torch.manual_seed(0)
    model = build_model(config, Vocabularies(vocab, vocab))
    assert model.transformer.encoder.layers[0].self_attn.attention == "nystrom"
    decoder = model.transformer.decoder.layers[0]
    assert (decoder.self_attn.attention, decoder.multihead_attn.attention) == ("linear", "exact")
    assert describe_model(config).endswith("nystrom encoder / linear decoder self-attention")
    assert "[" not in describe_model(validate(_raw(VIT)))  # exact: the name as before
    assert describe_model(validate(_raw(VIT, attention="lsh"))).endswith("[lsh attention]")
