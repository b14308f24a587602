"""The sentence benchmarks (sst2, sst5, trec, mr) on the real files of the shared data pack: the
splits against the READMEs' counts, TREC's held-out tenth, MR's ten folds, GloVe initialisation,
the configuration checks, and ``attnkit reproduce NAME --quick`` for every model kind and set."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from attnkit import reproduce
from attnkit.config import ConfigError, validate
from attnkit.data.glove import load_glove
from attnkit.data.sentence_classification import (
    cross_validation_folds,
    load_movie_review_polarity,
    load_trec,
)
from attnkit.tasks.base import task_for

MODELS = ("self-attentive", "multi-dimensional", "capsule", "bilstm-attention")
SETS = ("sst2", "sst5", "trec", "mr")


def config(corpus: str, root: Path, model: dict | None = None, **data):
    return validate(
        {
            "name": "t",
            "data": {"corpus": corpus, "root": str(root), **data},
            "model": model or {"kind": "bilstm_attention", "hidden_dim": 4, "attention_hidden": 4},
            "train": {"steps": 1},
        }
    )


def splits(corpus: str, root: Path, seed: int = 0, **data) -> dict:
    cfg = config(corpus, root, **data).model_copy(update={"seed": seed})
    return {name: list(examples) for name, examples in task_for(cfg).load().items()}


def counts(examples) -> Counter:
    return Counter((e.tokens, e.label) for e in examples)


@pytest.mark.parametrize(
    ("corpus", "sizes", "labels"),
    [("sst2", (6920, 872, 1821), {0, 1}), ("sst5", (8544, 1101, 2210), {0, 1, 2, 3, 4})],
)
def test_sst_sentences_have_the_readme_counts(shared_data, corpus, sizes, labels) -> None:
    loaded = splits(corpus, shared_data)
    assert tuple(len(loaded[s]) for s in ("train", "valid", "test")) == sizes
    assert {e.label for e in loaded["train"]} == labels
    words = [t for e in loaded["train"] for t in e.tokens]
    assert words == [t.lower() for t in words]  # lower-cased, as Kim's SST preprocessing


@pytest.mark.parametrize(("corpus", "phrases"), [("sst2", 76961), ("sst5", 156817)])
def test_sst_phrases_option_trains_on_the_phrases_and_tests_on_sentences(
    shared_data, corpus, phrases
) -> None:
    sentences, loaded = splits(corpus, shared_data), splits(corpus, shared_data, phrases=True)
    assert len(loaded["train"]) == phrases
    assert loaded["valid"] == sentences["valid"] and loaded["test"] == sentences["test"]
    assert set(counts(sentences["train"])) <= set(counts(loaded["train"]))  # sentences among them
    assert min(len(e.tokens) for e in loaded["train"]) == 1


def test_trec_holds_out_the_same_tenth_of_its_training_questions(shared_data) -> None:
    official = load_trec(shared_data / "sentence-classification")
    first, other = splits("trec", shared_data), splits("trec", shared_data, seed=7)
    assert (len(first["train"]), len(first["valid"]), len(first["test"])) == (4907, 545, 500)
    assert counts(first["train"]) + counts(first["valid"]) == counts(official["train"])
    assert first["test"] == official["test"]
    assert first["valid"] == other["valid"]  # a property of the data, not of the run's seed
    assert len({e.label for e in first["valid"]}) == 6


def test_mr_rounds_cover_the_ten_folds_and_the_seed_selects_the_round(shared_data) -> None:
    everything = load_movie_review_polarity(shared_data / "sentence-classification")
    assert len(everything) == 10662
    tested = Counter()
    for fold in range(10):
        loaded = splits("mr", shared_data, fold=fold)
        parts = [loaded[s] for s in ("train", "valid", "test")]
        assert len(loaded["test"]) in (1066, 1067)
        assert len(loaded["valid"]) == round(0.1 * (10662 - len(loaded["test"])))
        assert sum(map(counts, parts), Counter()) == counts(everything)
        tested += counts(loaded["test"])
    assert tested == counts(everything)  # every sentence is tested exactly once
    by_seed = splits("mr", shared_data, seed=13)  # no data.fold: round 13 mod 10 = 3
    fold_3 = cross_validation_folds(everything)[3]
    assert counts(by_seed["test"]) == counts(everything[i] for i in fold_3)


def test_max_examples_samples_both_classes_and_max_length_cuts(shared_data) -> None:
    loaded = splits("mr", shared_data, fold=0, max_examples=20, max_length=3)
    assert len(loaded["train"]) == 20 and {e.label for e in loaded["train"]} == {0, 1}
    assert max(len(e.tokens) for split in loaded.values() for e in split) == 3


def test_glove_initialises_the_words_that_have_a_vector(shared_data) -> None:
    model = {"kind": "capsule", "embed_dim": 50, "hidden_dim": 4}
    cfg = config("sst2", shared_data, model=model, embeddings="glove", max_examples=300)
    task = task_for(cfg)
    task.fit(task.load()["train"])
    built = task.build_model()
    vectors = load_glove(shared_data / "glove-6b-50d")
    table = built.embedding.table.weight.detach()
    for word in ("film", "the", "movie"):
        expected = torch.from_numpy(vectors[word])
        assert torch.equal(table[task.words.stoi[word]], expected)
    assert task.coverage.total == len(task.words) - 4 and task.coverage.fraction > 0.9


def test_random_word_vectors_are_kims_uniform_draws(shared_data) -> None:
    model = {"kind": "self_attentive", "embed_dim": 20, "hidden_dim": 4, "hops": 2}
    tables = []
    for seed in (0, 0, 1):
        cfg = config("trec", shared_data, model=model, max_examples=300)
        task = task_for(cfg.model_copy(update={"seed": seed}))
        task.fit(task.load()["train"])
        tables.append(task.build_model().embedding.weight.detach())
    first, again, other = tables
    assert first.shape == (len(task.words), 20)
    assert torch.equal(first[0], torch.zeros(20))  # PAD
    assert first.abs().max() <= 0.25 and first[1:].abs().max() > 0.24  # U[-0.25, 0.25]
    assert abs(first[1:].mean().item()) < 0.01
    assert first[1:].var().item() == pytest.approx(0.25**2 / 3, rel=0.05)
    assert torch.equal(first, again) and not torch.equal(first, other)  # seeded by the run


@pytest.mark.parametrize(
    ("kind", "sizes"),
    [
        ("self_attentive", {"hidden_dim": 4, "attention_hidden": 5, "hops": 3, "mlp_hidden": 6}),
        ("multi_dimensional", {"hidden_dim": 4}),
        ("capsule", {"hidden_dim": 4}),
        ("bilstm_attention", {"hidden_dim": 4, "attention_hidden": 5}),
    ],
)
def test_every_kind_trains_and_its_attention_is_recorded(shared_data, kind, sizes) -> None:
    from attnkit.interpret import record
    from attnkit.tasks.trainer import objective

    cfg = config("trec", shared_data, model={"kind": kind, "embed_dim": 8, **sizes})
    task = task_for(cfg.model_copy(update={"seed": 0}))
    loaded = task.load()
    task.fit(loaded["train"][:200])
    batch = loaded["test"][:5]
    inputs = task.collate(batch)
    labels = torch.tensor([task.label(e) for e in batch])
    model = task.build_model()
    torch.manual_seed(0)  # the dropout masks, whatever ran before in this process
    loss = objective(model, inputs, labels)
    loss.backward()
    table = (
        model.embedding
        if isinstance(model.embedding, torch.nn.Embedding)
        else model.embedding.table
    )
    # word dropout may zero one word's vector; over the batch's words the gradient must arrive
    words = inputs["tokens"][inputs["tokens"] != 0]
    assert loss.isfinite() and table.weight.grad[words].abs().sum() > 0
    model.eval()
    with torch.no_grad(), record(model) as recorded:
        logits = model(**inputs)
    assert logits.shape == (5, 6)
    (weights,) = [recorded[name] for name in recorded.keys()]  # one attention, via the engine
    lengths = (inputs["tokens"] != 0).sum(-1)
    # [B, 1, M, L] (or [B, 1, 1, L, d] multi-dimensional): distributions over the real words
    over_words = weights if weights.dim() == 4 else weights.movedim(-1, -2)
    totals = over_words.sum(-1)
    assert torch.allclose(totals, torch.ones_like(totals), atol=1e-5)
    for b, length in enumerate(lengths.tolist()):
        assert torch.all(over_words[b, ..., length:] == 0)


def test_configuration_checks(shared_data) -> None:
    with pytest.raises(ConfigError, match=r"data\.embeddings: glove .* needs model\.embed_dim: 50"):
        config("trec", shared_data, embeddings="glove")  # the section's default embed_dim is 100
    with pytest.raises(ConfigError, match=r"data\.fold: only mr is cross-validated"):
        config("sst2", shared_data, fold=1)
    for corpus in ("trec", "mr"):
        with pytest.raises(ConfigError, match=r"data\.phrases: only sst2 and sst5 have labelled"):
            config(corpus, shared_data, phrases=True)
    with pytest.raises(ConfigError, match=r"data\.fold: Input should be less than 10"):
        config("mr", shared_data, fold=10)
    with pytest.raises(ConfigError, match=r"model\.kind: the sst5 corpus takes model kind"):
        config("sst5", shared_data, model={"kind": "sentence"})


def test_every_configuration_validates_and_quotes_kim() -> None:
    names = [
        n for n in reproduce.names() if n.split("-")[0] in ("self", "multi", "capsule", "bilstm")
    ]
    expected = {f"{m}-{s}{g}" for m in MODELS for s in SETS for g in ("", "-glove")}
    assert set(names) == expected
    for name in names:
        config = reproduce.load(name)
        spec = config.reproduce
        assert "Kim (2014)" in spec.paper and "CNN-rand" in spec.source
        assert spec.seeds == (10 if "-mr" in name else 3)
        # Kim's protocol: SST is trained on its labelled phrases, tested on whole sentences
        assert config.data.phrases == (config.data.corpus in ("sst2", "sst5"))


def _attentive(name: str) -> bool:
    config = reproduce.load(name)
    return config.data.corpus in SETS and config.model.kind != "cnn"


def test_every_attentive_model_is_configured_on_every_set_with_both_embeddings() -> None:
    expected = {f"{m}-{s}{g}" for m in MODELS for s in SETS for g in ("", "-glove")}
    assert {n for n in reproduce.names() if _attentive(n)} == expected


# every configuration of these sets, not a list kept by hand: a new one is run here at once
@pytest.mark.parametrize("name", [n for n in reproduce.names() if _attentive(n)])
def test_quick_reproduction(name: str, shared_data, tmp_path) -> None:
    lines: list[str] = []
    line = reproduce.reproduce(
        name, data=str(shared_data), quick=True, runs_dir=tmp_path, log=lines.append
    )
    assert line["name"] == name and line["seeds"] == 1 and line["uniform"] is not None
    assert 0.0 <= line["mean"] <= 100.0 and line["paper"] > 0
    run = tmp_path / "reproduce" / f"{name}-quick" / "seed-0"
    assert (run / "results.json").is_file()
    assert (tmp_path / "reproduce" / f"{name}-quick-uniform" / "seed-0" / "results.json").is_file()


KIM_CNN_RAND = {"sst2": 82.7, "sst5": 45.0, "trec": 91.2, "mr": 76.1}  # Kim (2014), Table 2


def test_the_cnn_rand_anchor_configurations_are_kims() -> None:
    for corpus, value in KIM_CNN_RAND.items():
        config = reproduce.load(f"cnn-rand-{corpus}")
        spec, model = config.reproduce, config.model
        assert config.data.corpus == corpus and config.data.embeddings == "random"
        assert "Kim (2014)" in spec.paper and "CNN-rand" in spec.source and spec.value == value
        assert spec.uniform is None  # no attention, so no uniform-attention twin
        assert spec.seeds == (10 if corpus == "mr" else 3)
        assert (model.kind, model.embed_dim, model.widths) == ("cnn", 300, (3, 4, 5))
        assert (model.feature_maps, model.dropout, model.max_norm) == (100, 0.5, 3.0)
        assert config.train.batch_size == 50 and config.train.clip_norm is None
        assert config.data.phrases == (corpus in ("sst2", "sst5"))


def test_the_cnn_has_no_attention_to_replace(shared_data) -> None:
    raw = {
        "name": "t",
        "data": {"corpus": "trec", "root": str(shared_data)},
        "model": {"kind": "cnn", "embed_dim": 8, "feature_maps": 2},
        "train": {"steps": 1, "attention": "uniform"},
    }
    with pytest.raises(ConfigError, match=r"train\.attention: the cnn model has no attention"):
        validate(raw)
    cnn = validate({**raw, "train": {"steps": 1}})
    assert task_for(cnn).ablation_column is False
    assert task_for(config("trec", shared_data)).ablation_column is True


@pytest.mark.parametrize("corpus", list(KIM_CNN_RAND))
def test_quick_cnn_rand_reproduction_has_no_uniform_twin(corpus, shared_data, tmp_path) -> None:
    import json

    name = f"cnn-rand-{corpus}"
    line = reproduce.reproduce(
        name, data=str(shared_data), quick=True, runs_dir=tmp_path, log=lambda _: None
    )
    assert line["name"] == name and line["seeds"] == 1 and 0.0 <= line["mean"] <= 100.0
    assert line["uniform"] is None and line["paper"] == KIM_CNN_RAND[corpus]
    results = json.loads(
        (tmp_path / "reproduce" / f"{name}-quick" / "seed-0" / "results.json").read_text()
    )
    assert "uniform_attention" not in results
    assert line["values"] == [round(results["accuracy"] * 100, 3)]
    assert not (tmp_path / "reproduce" / f"{name}-quick-uniform").exists()
