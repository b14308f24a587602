"""``explain_run``: the attention page of a trained translation run, checked against the model
itself — its own ``Seq2SeqOutput.weights`` and a float64 softmax(QKᵀ/√d) recomputed from each
Transformer attention module's projections and the inputs it received."""

import json
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

from attnkit.checkpoint import CheckpointError
from attnkit.data.tokenize import detokenize, tokenize
from attnkit.interpret.explain import slug
from attnkit.report import describe_model
from attnkit.run import Run, explain_run

SENTENCE = "I love you, Zorblax."  # "zorblax" is in no vocabulary: an unknown word
BOS, EOS = 2, 3


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.scripts: list[tuple[dict, str]] = []
        self.heading = ""
        self.notes = ""
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "script":
            self.scripts.append((attrs, ""))
            self._in = "script"
        elif tag == "h1":
            self._in = "h1"
        elif tag == "p" and attrs.get("id") == "notes":
            self._in = "notes"

    def handle_endtag(self, tag):
        if tag in ("script", "h1", "p"):
            self._in = None

    def handle_data(self, data):
        if self._in == "script":
            attrs, body = self.scripts[-1]
            self.scripts[-1] = (attrs, body + data)
        elif self._in == "h1":
            self.heading += data
        elif self._in == "notes":
            self.notes += data


def parse(path) -> tuple[_Page, dict]:
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    page.close()
    data = [body for attrs, body in page.scripts if attrs.get("type") == "application/json"]
    assert len(data) == 1
    return page, json.loads(data[0])


def model_pass(run_dir, sentence, beam_size=1):
    """Translate with the checkpoint and run the teacher-forced pass, as a user would."""
    run = Run.open(run_dir)
    model, _ = run.load_model()
    vocab = run.job.vocabularies
    tokens = tokenize(sentence, "en")
    ids = vocab.source.encode(tokens)
    source, lengths = torch.tensor([ids]), torch.tensor([len(ids)])
    (hypothesis,) = model.translate(
        source, lengths, beam_size=beam_size, max_length=run.config.decode.max_length
    )
    target_in = torch.tensor([[BOS, *hypothesis.tokens]])
    return run, model, tokens, ids, hypothesis.tokens, source, lengths, target_in


def expected_source_labels(vocab, tokens):
    return [t if t in vocab else f"{t}(unk)" for t in tokens]


def by_name(data):
    return {m["name"]: m for m in data["maps"]}


@pytest.mark.parametrize("kind", ["bahdanau", "luong", "transformer"])  # conftest.MODELS
def test_page_is_one_self_contained_document(runs, kind):
    path = explain_run(runs[kind], SENTENCE)
    assert path == runs[kind] / "explain-i-love-you-zorblax.html"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert text.count("<html") == 1 and text.count("</html>") == 1
    for external in ('src="http', "src='http", 'href="http', "href='http", "@import", "url("):
        assert external not in text
    page, _ = parse(path)
    assert page.tags.count("html") == 1
    assert all("src" not in attrs for attrs, _ in page.scripts)  # every script inline
    # written atomically: no temporary file left beside the page
    assert [p.name for p in runs[kind].iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("kind", ["bahdanau", "luong"])
def test_recurrent_page_shows_the_models_alignment(runs, kind):
    run, model, tokens, ids, emitted, source, lengths, target_in = model_pass(runs[kind], SENTENCE)
    with torch.no_grad():
        out = model(source, lengths, target_in)
    page, data = parse(explain_run(runs[kind], SENTENCE))

    assert [m["name"] for m in data["maps"]] == ["cross-attention"]
    cross = data["maps"][0]
    words = [run.job.vocabularies.target.itos[i] for i in emitted]
    # greedy search: it ended exactly when the last position's best word is <eos>
    ended = int(out.logits[0, -1].argmax()) == EOS
    assert cross["rows"] == [*words, "<eos>" if ended else "<cut at max_length>"]
    assert cross["columns"] == expected_source_labels(run.job.vocabularies.source, tokens)
    assert "zorblax(unk)" in cross["columns"]
    assert (cross["layers"], cross["heads"]) == (1, 1)
    shown = np.array(cross["weights"])[0, 0]
    assert shown.shape == (len(emitted) + 1, len(ids))
    np.testing.assert_allclose(shown, out.weights[0].double().numpy(), rtol=0, atol=1e-7)
    np.testing.assert_allclose(shown.sum(-1), 1.0, atol=1e-6)

    assert run.path.name in page.heading and SENTENCE in page.heading
    assert detokenize(words, "fr") in page.heading
    assert describe_model(run.config) in page.notes
    assert "step 3" in page.notes and "zorblax(unk)" in page.notes


def test_transformer_page_shows_every_layer_and_head(runs, attention_reference):
    run, model, tokens, ids, emitted, source, lengths, target_in = model_pass(
        runs["transformer"], SENTENCE
    )
    with torch.no_grad():
        out = model(source, lengths, target_in)
    # every module's weights recomputed in float64 from its projections and inputs
    reference = attention_reference(runs["transformer"], SENTENCE)
    _, data = parse(explain_run(runs["transformer"], SENTENCE))
    maps = by_name(data)

    assert list(maps) == ["cross-attention", "encoder self-attention", "decoder self-attention"]
    s, t = len(ids), len(emitted) + 1
    source_labels = expected_source_labels(run.job.vocabularies.source, tokens)
    words = [run.job.vocabularies.target.itos[i] for i in emitted]
    ended = int(out.logits[0, -1].argmax()) == EOS
    expected = {
        "cross-attention": ((2, 2, t, s), [*words, "<eos>" if ended else "<cut at max_length>"],
                            source_labels),
        "encoder self-attention": ((2, 2, s, s), source_labels, source_labels),
        "decoder self-attention": ((2, 2, t, t), ["<bos>", *words], ["<bos>", *words]),
    }  # fmt: skip
    for name, (shape, rows, columns) in expected.items():
        weights = np.array(maps[name]["weights"])
        assert weights.shape == shape, name
        assert maps[name]["rows"] == rows and maps[name]["columns"] == columns, name
        np.testing.assert_allclose(weights, reference[name], rtol=0, atol=1e-5, err_msg=name)

    # the model's own weights: the last layer's cross-attention averaged over heads
    cross = np.array(maps["cross-attention"]["weights"])
    np.testing.assert_allclose(cross[-1].mean(0), out.weights[0].double().numpy(), atol=1e-7)
    # decoder self-attention is causal: no row sees a later input
    decoder = np.array(maps["decoder self-attention"]["weights"])
    assert np.all(np.triu(np.ones((t, t)), 1)[None, None] * decoder == 0)
    # self-attention stacks offer the rollout, cross-attention does not
    assert maps["encoder self-attention"]["rollout"] is not None
    assert maps["cross-attention"]["rollout"] is None


def test_beam_size_and_output_path(runs, tmp_path):
    target = tmp_path / "page.html"
    path = explain_run(runs["luong"], "I am cold.", output=target, beam_size=3)
    assert path == target and target.is_file()
    _, model, _, _, emitted, source, lengths, target_in = model_pass(
        runs["luong"], "I am cold.", beam_size=3
    )
    with torch.no_grad():
        out = model(source, lengths, target_in)
    page, data = parse(target)
    assert "beam 3" in page.notes
    shown = np.array(data["maps"][0]["weights"])[0, 0]
    assert shown.shape[0] == len(emitted) + 1
    np.testing.assert_allclose(shown, out.weights[0].double().numpy(), rtol=0, atol=1e-7)


def test_bad_run_directory_is_a_checkpoint_error(tmp_path, runs):
    with pytest.raises(CheckpointError, match="not a run directory"):
        explain_run(tmp_path, SENTENCE)
    without_checkpoint = tmp_path / "copy"
    without_checkpoint.mkdir()
    for name in ("config.yaml", "vocab.json"):
        (without_checkpoint / name).write_bytes((runs["bahdanau"] / name).read_bytes())
    with pytest.raises(CheckpointError, match="no checkpoint"):
        explain_run(without_checkpoint, SENTENCE)
    assert list(without_checkpoint.glob("*.html")) == []


@pytest.mark.parametrize("sentence", ["", "   ", "\u00a0"])
def test_empty_input_is_a_value_error(runs, sentence):
    with pytest.raises(ValueError, match="at least one word"):
        explain_run(runs["bahdanau"], sentence)


def test_bad_arguments(runs):
    with pytest.raises(TypeError, match="must be a str, got bytes"):
        explain_run(runs["bahdanau"], b"I love you.")
    with pytest.raises(ValueError, match="beam_size must be a positive int or None, got 0"):
        explain_run(runs["bahdanau"], SENTENCE, beam_size=0)


def test_slug():
    assert slug("I love you.") == "i-love-you"
    assert slug("Où est la gare ?") == "o-est-la-gare"
    assert slug("¿?") == "input"
    assert len(slug("word " * 50)) <= 40 and not slug("word " * 50).endswith("-")
