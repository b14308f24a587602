"""Fixtures shared by the viewer and ``attnkit view`` tests: tiny trained translation runs,
an independent float64 recomputation of their attention. (Headless Chromium, ``browser``, is in
tests/conftest.py: the docs site test uses it too.)"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import attnkit.tasks.translation
from attnkit.config import validate
from attnkit.data.tokenize import tokenize
from attnkit.mechanisms.multi_head import MultiHeadAttention
from attnkit.run import Run
from attnkit.train import train

MODELS = {
    "bahdanau": {"kind": "rnn", "style": "bahdanau", "embed_dim": 16, "hidden_dim": 16},
    "luong": {"kind": "rnn", "style": "luong", "embed_dim": 16, "hidden_dim": 16},
    "transformer": {
        "kind": "transformer",
        "d_model": 16,
        "nhead": 2,
        "num_layers": 2,
        "dim_feedforward": 32,
        "max_length": 16,
    },
}
BOS = 2

#: the Transformer's attention modules by the viewer's map name (``{}``: the layer index)
TRANSFORMER_MODULES = {
    "cross-attention": "transformer.decoder.layers.{}.multihead_attn",
    "encoder self-attention": "transformer.encoder.layers.{}.self_attn",
    "decoder self-attention": "transformer.decoder.layers.{}.self_attn",
}


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One tiny trained run per model kind of :data:`MODELS`: ``{kind: run directory}``."""
    loaded = {}
    original = attnkit.tasks.translation.load_examples

    def load_once(config):  # the runs read the same 200 pairs: tokenise them once
        key = config.data.model_dump_json()
        if key not in loaded:
            loaded[key] = original(config)
        return loaded[key]

    directories = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attnkit.tasks.translation, "load_examples", load_once)
        for kind, model in MODELS.items():
            raw = {
                "name": f"tiny-{kind}",
                "seed": 0,
                "data": {"corpus": "tatoeba", "max_length": 6, "max_pairs": 200},
                "model": model,
                "train": {"steps": 4, "batch_size": 16},
                "decode": {"max_length": 6, "max_eval_sentences": 4},
            }
            directory = tmp_path_factory.mktemp(kind) / "run"
            # stop_after=3 < steps: a checkpoint at step 3 without the final evaluation and
            # report, which view does not need (and which would triple the fixture's time)
            train(validate(raw), run_dir=directory, stop_after=3, quiet=True, log=lambda s: None)
            directories[kind] = directory
    return directories


def softmax_attention_reference(mha, query, key, causal) -> torch.Tensor:
    """float64 ``softmax(Q Kᵀ / √d_head)`` per head from the module's input projections
    (Vaswani et al. 2017, eq. 1; torch's packed in_proj layout): ``[H, M, N]``."""
    w = mha.in_proj_weight.detach().double()
    b = mha.in_proj_bias.detach().double()
    d = w.shape[1]
    heads = mha.num_heads
    q = query.double() @ w[:d].T + b[:d]  # [1, M, d]
    k = key.double() @ w[d : 2 * d].T + b[d : 2 * d]  # [1, N, d]
    q = q.unflatten(-1, (heads, -1)).transpose(1, 2)  # [1, H, M, d_head]
    k = k.unflatten(-1, (heads, -1)).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        m, n = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(m, n).triu(1).bool(), float("-inf"))
    return scores.softmax(-1)[0]


@pytest.fixture(scope="session")
def attention_reference() -> Callable[[Path, str], dict[str, np.ndarray]]:
    """``reference(run_dir, sentence)``: the attention of the run's model on its own greedy
    translation of ``sentence``, computed without :mod:`attnkit.interpret`:
    ``{map name: float64 [layers, heads, rows, columns]}``.

    A recurrent model gives its own ``Seq2SeqOutput.weights`` as one cross-attention map; a
    Transformer gives every layer's cross-, encoder self- and decoder self-attention
    recomputed in float64 from each module's projections and the inputs it received."""

    def reference(run_dir: Path, sentence: str) -> dict[str, np.ndarray]:
        run = Run.open(run_dir)
        model, _ = run.load_model()
        ids = run.job.vocabularies.source.encode(tokenize(sentence, "en"))
        source, lengths = torch.tensor([ids]), torch.tensor([len(ids)])
        (hypothesis,) = model.translate(
            source, lengths, beam_size=1, max_length=run.config.decode.max_length
        )
        target_in = torch.tensor([[BOS, *hypothesis.tokens]])
        inputs = {}

        def keep_inputs(name):
            def hook(module, args):
                inputs[name] = (args[0], args[1])  # query, key

            return hook

        hooks = [
            module.register_forward_pre_hook(keep_inputs(name))
            for name, module in model.named_modules()
            if isinstance(module, MultiHeadAttention)
        ]
        try:
            with torch.no_grad():
                out = model(source, lengths, target_in)
        finally:
            for hook in hooks:
                hook.remove()
        if not inputs:  # recurrent: the decoder's attention, one row per target step
            return {"cross-attention": out.weights[0].double().numpy()[None, None]}
        maps = {}
        layers = run.config.model.num_layers
        for name, pattern in TRANSFORMER_MODULES.items():
            per_layer = []
            for layer in range(layers):
                module = pattern.format(layer)
                query, key = inputs[module]
                causal = name == "decoder self-attention"
                per_layer.append(
                    softmax_attention_reference(model.get_submodule(module), query, key, causal)
                )
            maps[name] = torch.stack(per_layer).numpy()
        return maps

    return reference
