"""Exporting attnkit models (docs/export.md): ``torch.export`` with dynamic batch and sequence
lengths, and ONNX (``torch.onnx.export(..., dynamo=True)``) run in ONNX Runtime, each compared
with the eager model within 1e-5 at lengths other than the example's: the encoder layer with key
padding and a fully padded row, a non-dot (additive) score in cross-attention, a head- and
position-dependent ``score_mod`` with a ``mask_mod``; and, as the page's own snippets (which
assert the same bound), ``ak.MultiHeadAttention`` with its per-head weights and a Hugging Face
BERT on attnkit. Then what does not export.

The ONNX tests need the ``export`` extra (onnx, onnxruntime, onnxscript) and skip without it;
the Hugging Face snippet needs the ``hf`` extra. Exporting takes seconds per model, so each is
exported once for both of its tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch.export import Dim

import attnkit as ak

PAGE = Path(__file__).resolve().parent.parent / "docs" / "export.md"
BATCH = Dim("batch", min=1, max=64)
LENGTH = Dim("length", min=2, max=512)
SOURCE = Dim("source", min=2, max=512)


def onnx_runtime():
    """onnxruntime, with the exporter's packages; skip (with the reason) without them."""
    for package in ("onnx", "onnxscript"):
        pytest.importorskip(
            package, reason=f"optional: {package} is not installed (pip install -e .[export])"
        )
    return pytest.importorskip(
        "onnxruntime", reason="optional: onnxruntime is not installed (pip install -e .[export])"
    )


class Encoder(nn.Module):
    """attnkit's Transformer encoder layer over a padded batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = ak.layers.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)

    def forward(self, x: Tensor, padding: Tensor) -> Tensor:
        return self.layer(x, src_key_padding_mask=padding)


class AdditiveCrossAttention(nn.Module):
    """Queries of one length attending keys of another with Bahdanau's additive score."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = ak.MultiHeadAttention(16, 4, batch_first=True, score="additive")

    def forward(self, query: Tensor, memory: Tensor) -> Tensor:
        return self.attention(query, memory, memory, need_weights=False)[0]


def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """ALiBi (Press et al. 2022): a distance penalty with a slope of 2^-(h+1) per head."""
    return score - torch.exp2(-(h + 1.0)) * (q_idx - kv_idx).abs()


def window(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx - kv_idx < 8


class AlibiAttention(nn.Module):
    """Causal self-attention with a ``score_mod`` and a ``mask_mod`` (FlexAttention's forms)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 48)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (t.unflatten(-1, (4, -1)).transpose(1, 2) for t in self.proj(x).chunk(3, -1))
        out = ak.attention(q, k, v, causal=True, score_mod=alibi, mask_mod=window)
        return out.context.transpose(1, 2).flatten(2)


def padded(batch: int, length: int, lengths: list[int], seed: int) -> dict[str, Tensor]:
    """``x [batch, length, 16]`` and its key padding mask (True = padding) for ``lengths``."""
    generator = torch.Generator().manual_seed(seed)
    padding = torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None]
    return {"x": torch.randn(batch, length, 16, generator=generator), "padding": padding}


def sequences(*shape: int, seed: int) -> dict[str, Tensor]:
    return {"x": torch.randn(*shape, generator=torch.Generator().manual_seed(seed))}


def cross(batch: int, queries: int, keys: int, seed: int) -> dict[str, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "query": torch.randn(batch, queries, 16, generator=generator),
        "memory": torch.randn(batch, keys, 16, generator=generator),
    }


@dataclass(frozen=True)
class Case:
    """A module to export, its example inputs, their dynamic axes, and inputs of other sizes."""

    module: Callable[[], nn.Module]
    example: dict[str, Tensor]
    dynamic: dict[str, dict[int, Dim]]
    probes: list[dict[str, Tensor]]


CASES = {
    "encoder layer, padding": Case(
        Encoder,
        padded(3, 6, [6, 4, 5], seed=3),
        {"x": {0: BATCH, 1: LENGTH}, "padding": {0: BATCH, 1: LENGTH}},
        [padded(4, 11, [7, 11, 0, 2], seed=4), padded(2, 40, [40, 1], seed=5)],
    ),
    "additive score, cross-attention": Case(
        AdditiveCrossAttention,
        cross(2, 5, 8, seed=6),
        {"query": {0: BATCH, 1: LENGTH}, "memory": {0: BATCH, 1: SOURCE}},
        [cross(3, 9, 4, seed=8), cross(1, 2, 30, seed=10)],
    ),
    "causal ALiBi score_mod, window mask_mod": Case(
        AlibiAttention,
        sequences(2, 9, 16, seed=12),
        {"x": {0: BATCH, 1: LENGTH}},
        [sequences(3, 20, 16, seed=13), sequences(1, 3, 16, seed=14)],
    ),
}

_EXPORTED: dict[str, tuple[nn.Module, torch.export.ExportedProgram]] = {}


def exported(name: str) -> tuple[nn.Module, torch.export.ExportedProgram]:
    """The case's module (eval mode, seeded) and its ``torch.export`` program, made once."""
    if name not in _EXPORTED:
        case = CASES[name]
        torch.manual_seed(0)
        module = case.module().eval()
        program = torch.export.export(module, (), kwargs=case.example, dynamic_shapes=case.dynamic)
        _EXPORTED[name] = (module, program)
    return _EXPORTED[name]


def outputs(value) -> list[Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.mark.parametrize("name", list(CASES))
def test_torch_export_with_dynamic_lengths_matches_eager(name):
    module, program = exported(name)
    for probe in CASES[name].probes:
        with torch.no_grad():
            expected = outputs(module(**probe))
            got = outputs(program.module()(**probe))
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert torch.isfinite(b).all()  # a fully padded row gives zeros, never NaN
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_onnx_runtime_with_dynamic_lengths_matches_eager(name):
    ort = onnx_runtime()
    import onnx

    module, program = exported(name)
    model = torch.onnx.export(program, dynamo=True, verbose=False).model_proto
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(CASES[name].example)
    for probe in CASES[name].probes:
        with torch.no_grad():
            expected = outputs(module(**probe))
        got = session.run(None, {key: value.numpy() for key, value in probe.items()})
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(torch.from_numpy(a), b, rtol=0, atol=1e-5)


def test_the_encoder_attends_no_padding_and_a_fully_padded_row_attends_nothing():
    """What the exported encoder is compared with: padded keys change nothing, and a batch row
    with no key left gets zero weights (its attention output is the projection's bias alone)."""
    torch.manual_seed(0)
    layer = ak.layers.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    probe = padded(2, 6, [4, 0], seed=18)
    x, padding = probe["x"], probe["padding"]
    with torch.no_grad():
        out = layer(x, src_key_padding_mask=padding)
        alone = layer(x[:1, :4])
        attention, weights = layer.self_attn(x[1:], x[1:], x[1:], key_padding_mask=padding[1:])
    torch.testing.assert_close(out[0, :4], alone[0], rtol=0, atol=1e-6)
    assert torch.isfinite(out).all() and torch.equal(weights, torch.zeros_like(weights))
    assert torch.equal(attention[0], layer.self_attn.out_proj.bias.expand(6, 16))


class ForcedBackend(nn.Module):
    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend

    def forward(self, x: Tensor) -> Tensor:
        return ak.attention(x, x, x, backend=self.backend).context


@pytest.mark.parametrize("backend", ["sdpa", "dense", "flex", "tiled"])
def test_a_model_that_forces_a_kernel_backend_is_refused_by_torch_export(backend):
    """Under torch.export only the materialised formula (the "reference" backend) runs: a
    forced kernel is refused in one line that says why."""
    with pytest.raises(ValueError, match=rf"backend '{backend}' cannot run this call: "
                                         r"torch.compile is tracing"):  # fmt: skip
        torch.export.export(ForcedBackend(backend), (torch.randn(1, 4, 8),))
    program = torch.export.export(ForcedBackend("reference"), (torch.randn(1, 4, 8),))
    x = torch.randn(1, 4, 8)
    torch.testing.assert_close(program.module()(x), ForcedBackend("reference")(x))


class EuclideanAttention(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return ak.attention(x, x, x, score="euclidean").context


def test_the_euclidean_score_exports_but_has_no_onnx_translation():
    """torch.cdist (aten._cdist_forward) has no ONNX function in torch.onnx: docs/export.md
    lists it; torch.export itself works."""
    x = torch.randn(1, 5, 8)
    program = torch.export.export(EuclideanAttention(), (x,), dynamic_shapes=({1: LENGTH},))
    y = torch.randn(1, 9, 8)
    torch.testing.assert_close(program.module()(y), EuclideanAttention()(y), rtol=0, atol=1e-5)
    onnx_runtime()
    with pytest.raises(Exception, match="_cdist_forward"):
        torch.onnx.export(program, dynamo=True, verbose=False)


def page_snippets() -> list[str]:
    return re.findall(r"```py\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def run_snippets(snippets: list[tuple[int, str]], namespace: dict | None = None) -> dict:
    """Run the page's snippets in order in one namespace; fail naming the one that failed."""
    namespace = {"__name__": "__snippet__"} if namespace is None else namespace
    for i, code in snippets:
        try:
            exec(compile(code, f"<export.md snippet {i}>", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"snippet {i} of docs/export.md failed: {error!r}\n{code}")
    return namespace


def test_the_multi_head_attention_snippets_export_and_match_eager(tmp_path, monkeypatch):
    """``ak.MultiHeadAttention`` over a padded batch with a fully padded row: output and
    per-head weights, from torch.export and from ONNX Runtime, within 1e-5 (the snippets'
    asserts)."""
    monkeypatch.chdir(tmp_path)  # the snippets write their .onnx file here
    snippets = [(i, code) for i, code in enumerate(page_snippets()) if "transformers" not in code]
    assert len(snippets) == 2
    namespace = run_snippets(snippets[:1])  # torch.export
    assert namespace["weights"].shape == (3, 4, 12, 12) and not namespace["weights"][2].any()
    onnx_runtime()
    run_snippets(snippets[1:], namespace)  # ONNX, in ONNX Runtime
    assert namespace["weights"].shape == (3, 4, 12, 12) and not namespace["weights"][2].any()


def test_the_hugging_face_snippet_exports_bert_on_attnkit(tmp_path, monkeypatch):
    """A tiny random BERT with attn_implementation="attnkit": its attention is attnkit's (a
    recorder sees both layers), and its export matches it within 1e-5 (the snippet's asserts)."""
    onnx_runtime()
    pytest.importorskip(
        "transformers", reason="optional: transformers is not installed (pip install -e .[hf])"
    )
    from attnkit.interpret import record

    monkeypatch.chdir(tmp_path)
    snippets = [(i, code) for i, code in enumerate(page_snippets()) if "transformers" in code]
    assert len(snippets) == 1
    namespace = run_snippets(snippets)
    with torch.no_grad(), record(namespace["encoder"]) as rec:
        namespace["encoder"](namespace["ids"], namespace["mask"])
    assert len(rec) == 2  # both layers' attention went through attnkit's engine


def test_the_torchscript_exporter_fixes_the_example_length(tmp_path):
    """``dynamo=False`` traces with the example's values: the encoder layer's graph keeps the
    example's length 6 whatever dynamic_axes says, and fails in ONNX Runtime at length 11."""
    ort = onnx_runtime()
    torch.manual_seed(0)
    encoder = Encoder().eval()
    example = padded(3, 6, [6, 4, 5], seed=3)
    path = tmp_path / "legacy.onnx"
    axes = {"x": {0: "batch", 1: "length"}, "padding": {0: "batch", 1: "length"}}
    with pytest.warns(DeprecationWarning):
        torch.onnx.export(
            encoder, (example["x"], example["padding"]), str(path), dynamo=False,
            input_names=["x", "padding"], dynamic_axes=axes,
        )  # fmt: skip
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    probe = padded(4, 11, [7, 11, 0, 2], seed=4)
    with pytest.raises(Exception, match="broadcast"):
        session.run(None, {key: value.numpy() for key, value in probe.items()})
