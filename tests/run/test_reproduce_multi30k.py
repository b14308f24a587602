"""Multi30k German→English translation: the configuration checks, the sacrebleu and lower-cased
token BLEU of the evaluation, and ``attnkit reproduce NAME --quick`` for each model."""

from __future__ import annotations

import json

import pytest

from attnkit import reproduce
from attnkit.config import ConfigError, validate

# every Multi30k configuration, not a list kept by hand: a new one is checked and run here at once
NAMES = [n for n in reproduce.names() if reproduce.load(n).data.corpus == "multi30k"]


def test_the_three_models_are_configured() -> None:
    assert set(NAMES) == {"bahdanau-multi30k", "luong-multi30k", "transformer-multi30k"}


def config(root, **data):
    return validate(
        {
            "name": "t",
            "data": {"corpus": "multi30k", "root": str(root), **data},
            "model": {"kind": "rnn", "embed_dim": 4, "hidden_dim": 4},
            "train": {"steps": 1},
        }
    )


def test_the_languages_must_differ(tmp_path) -> None:
    with pytest.raises(ConfigError, match="target_lang: must differ from source_lang"):
        config(tmp_path, source_lang="en", target_lang="en")


def test_reverse_is_refused_in_favour_of_the_languages(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"data.reverse: .*swap data.source_lang"):
        config(tmp_path, reverse=True)


def test_a_root_without_multi30k_is_named(tmp_path) -> None:
    from attnkit.tasks.translation import Multi30kTranslationJob

    job = Multi30kTranslationJob(config(tmp_path))
    with pytest.raises(ConfigError, match=r"data.root: expected the shared data folder"):
        job.load()


@pytest.mark.parametrize("name", NAMES)
def test_the_anchor_is_quoted_and_compared_on_lowercased_tokens(name: str) -> None:
    spec = reproduce.load(name).reproduce
    assert spec is not None and spec.metric == "bleu_lowercased_tokens.greedy"
    assert spec.value == (36.52 if name.startswith("transformer") else 28.3)
    assert "pytorch-seq2seq" in spec.paper and "lower-cased" in spec.source


@pytest.mark.parametrize("name", NAMES)
def test_quick_reproduction(name: str, shared_data, tmp_path) -> None:
    if not (shared_data / "multi30k").is_dir():
        pytest.skip(f"the shared data pack has no multi30k folder ({shared_data / 'multi30k'})")
    line = reproduce.reproduce(
        name, data=str(shared_data), quick=True, runs_dir=tmp_path, log=lambda _: None
    )
    assert line["name"] == name and line["seeds"] == 1 and line["uniform"] is not None
    assert 0.0 <= line["mean"] <= 100.0
    run = tmp_path / "reproduce" / f"{name}-quick" / "seed-0"
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    sacre, lowercased = results["sacrebleu"], results["bleu_lowercased_tokens"]
    assert sacre["beam_size"] == 5 and {"greedy", "beam"} <= set(sacre) & set(lowercased)
    assert sacre["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert results["bleu"] == sacre["greedy"] and results["sentences"] == 8
    # the raw reference of test2016's first caption, not a re-detokenised token list
    first = (shared_data / "multi30k" / "test_2016_flickr.en.gz").open("rb")
    import gzip

    with gzip.open(first, "rt", encoding="utf-8") as text:
        assert results["samples"][0]["reference"] == text.readline().rstrip("\n")
    assert (tmp_path / "reproduce" / f"{name}-quick-uniform" / "seed-0" / "results.json").is_file()


def test_translate_reads_german_and_writes_english(shared_data, tmp_path, capsys) -> None:
    """``attnkit translate`` on a Multi30k run tokenises the input as the run's source language
    (Moses, German, cased) and detokenises as its target language, not as English → French."""
    if not (shared_data / "multi30k").is_dir():
        pytest.skip(f"the shared data pack has no multi30k folder ({shared_data / 'multi30k'})")
    from attnkit.cli import main
    from attnkit.data.multi30k import tokenize

    reproduce.reproduce(
        "bahdanau-multi30k",
        data=str(shared_data),
        quick=True,
        runs_dir=tmp_path,
        log=lambda _: None,
        seeds=1,
    )
    run = tmp_path / "reproduce" / "bahdanau-multi30k-quick" / "seed-0"
    sentence = "Zwei Männer stehen draußen."
    capsys.readouterr()
    assert main(["translate", str(run), sentence]) == 0
    printed = capsys.readouterr().out
    # the matrix's columns are the German Moses tokens (cased; "draußen" and "." apart)
    header = next(line for line in printed.splitlines() if "Zwei" in line or "zwei" in line)
    for token in tokenize(sentence, "de"):
        assert token in header, (token, header)
    assert "zwei" not in header  # the English tokenizer lower-cases
