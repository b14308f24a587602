"""The aspect-sentiment benchmarks (SemEval-2014 restaurants and laptops, Twitter, the HAABSA
splits of SemEval-2015 and 2016) as attnkit tasks on the real files of the shared data pack: the
splits against the README's counts, the held-out validation share, GloVe and random word vectors,
the majority-class baseline, the configuration checks, and ``attnkit reproduce NAME --quick`` for
every LCR-Rot and LCR-Rot-hop configuration."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from attnkit import reproduce
from attnkit.config import ConfigError, validate
from attnkit.data.absa import DATASETS, load_absa, majority_baseline
from attnkit.data.glove import load_glove
from attnkit.data.vocabulary import PAD
from attnkit.evaluate.metrics import accuracy, macro_f1
from attnkit.tasks.base import task_for

# corpus name of the task, benchmark name of the loader, README's train / test counts
CORPORA = {
    "semeval14_restaurants": ("semeval14-restaurants", 3608, 1120),
    "semeval14_laptops": ("semeval14-laptops", 2328, 638),
    "twitter": ("twitter", 6248, 692),
    "semeval2015": ("semeval2015", 1279, 597),
    "semeval2016": ("semeval2016", 1879, 650),
}
REPRODUCTIONS = (
    "lcr-rot-semeval14-restaurants",
    "lcr-rot-semeval14-laptops",
    "lcr-rot-twitter",
    "lcr-rot-hop-semeval2015",
    "lcr-rot-hop-semeval2016",
)


def config(corpus: str, root: Path, model: dict | None = None, **data):
    return validate(
        {
            "name": "t",
            "data": {"corpus": corpus, "root": str(root), **data},
            "model": model or {"kind": "lcr_rot_hop", "embed_dim": 6, "hidden_dim": 4},
            "train": {"steps": 1},
        }
    )


def task(corpus: str, root: Path, seed: int = 0, model: dict | None = None, **data):
    return task_for(config(corpus, root, model, **data).model_copy(update={"seed": seed}))


def counts(examples) -> Counter:
    return Counter((e.left, e.target, e.right, e.label) for e in examples)


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_splits_have_the_readme_counts_and_hold_out_a_seeded_share(shared_data, corpus) -> None:
    name, train, test = CORPORA[corpus]
    loaded = task(corpus, shared_data).load()
    held_out = round(0.15 * train)  # data.valid_fraction's default
    assert [len(loaded[s]) for s in ("train", "valid", "test")] == [
        train - held_out,
        held_out,
        test,
    ]
    files = load_absa(shared_data / "absa", name, lowercase=True)
    assert counts(loaded["train"]) + counts(loaded["valid"]) == counts(files["train"])
    assert loaded["test"] == files["test"]
    words = [w for e in loaded["train"] for w in e.tokens]
    assert words == [w.lower() for w in words]  # lower-cased for GloVe 6B
    other = task(corpus, shared_data, seed=1).load()
    assert counts(other["valid"]) != counts(loaded["valid"])  # the run's seed draws it


def test_max_examples_and_max_length(shared_data) -> None:
    loaded = task("semeval2016", shared_data, max_examples=50, max_length=2).load()
    assert len(loaded["train"]) == 50 and len(loaded["test"]) == 650
    for split in loaded.values():
        for e in split:
            assert len(e.left) <= 2 and len(e.right) <= 2
    # the words nearest the target are kept
    full = load_absa(shared_data / "absa", "semeval2016", lowercase=True)["test"]
    for cut, whole in zip(loaded["test"], full, strict=True):
        assert cut.left == whole.left[max(0, len(whole.left) - 2) :]
        assert cut.right == whole.right[:2] and cut.target == whole.target


def test_majority_baseline_against_the_metrics_module(shared_data) -> None:
    expected = {  # majority class of the training file, its share of the test file
        "semeval14-restaurants": ("positive", 728 / 1120),
        "semeval14-laptops": ("positive", 341 / 638),
        "semeval2015": ("positive", 353 / 597),
        "semeval2016": ("positive", 483 / 650),
        "twitter": ("neutral", 346 / 692),
    }
    for name in DATASETS:
        splits = load_absa(shared_data / "absa", name)
        base = majority_baseline(splits["train"], splits["test"])
        labels = torch.tensor([e.label for e in splits["test"]])
        always = torch.full_like(labels, ("negative", "neutral", "positive").index(base["class"]))
        assert (base["class"], base["accuracy"]) == pytest.approx(expected[name])
        assert base["accuracy"] == pytest.approx(accuracy(always, labels))
        assert base["macro_f1"] == pytest.approx(macro_f1(always, labels, num_classes=3))
    with pytest.raises(ValueError, match="needs training and test examples, got 0 and 1"):
        majority_baseline([], splits["test"][:1])


def test_glove_and_random_word_vectors(shared_data) -> None:
    glove = task(
        "semeval14_laptops",
        shared_data,
        model={"kind": "lcr_rot_hop", "embed_dim": 50, "hidden_dim": 4, "hops": 1},
        embeddings="glove",
    )
    glove.fit(glove.load()["train"])
    table = glove.build_model().embedding.weight.detach()
    vectors = load_glove(shared_data / "glove-6b-50d")
    for word in ("battery", "screen", "the"):
        assert torch.equal(table[glove.words.stoi[word]], torch.from_numpy(vectors[word]))
    assert glove.coverage.fraction > 0.9 and torch.equal(table[PAD], torch.zeros(50))
    tables = []
    for seed in (0, 0, 1):
        random_task = task("semeval2015", shared_data, seed=seed)
        random_task.fit(random_task.load()["train"])
        tables.append(random_task.build_model().embedding.weight.detach())
    first, again, other = tables
    assert first.abs().max() <= 0.25 and first[1:].abs().max() > 0.24  # U[-0.25, 0.25]
    assert torch.equal(first[PAD], torch.zeros(6))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_glove_vocabulary_keeps_vectors_of_words_unseen_in_training(shared_data) -> None:
    model = {"kind": "lcr_rot_hop", "embed_dim": 50, "hidden_dim": 4}
    plain = task("semeval2015", shared_data, model=model, embeddings="glove")
    wide = task("semeval2015", shared_data, model=model, embeddings="glove", glove_vocabulary=True)
    train = plain.load()["train"]
    plain.fit(train)
    state = wide.fit(train)
    assert plain.words.itos == wide.words.itos[: len(plain.words)]
    unseen = [w for w in wide.words.itos[len(plain.words) :]][:3]
    assert len(wide.words) > 20_000 and unseen and all(w not in plain.words for w in unseen)
    again = task("semeval2015", shared_data, model=model, embeddings="glove", glove_vocabulary=True)
    again.restore(state)
    assert again.words == wide.words


def test_collate_and_the_model_read_the_three_parts(shared_data) -> None:
    from attnkit.interpret import record
    from attnkit.tasks.trainer import objective

    t = task("twitter", shared_data, model={"kind": "lcr_rot_hop", "embed_dim": 8, "hidden_dim": 4})
    loaded = t.load()
    t.fit(loaded["train"])
    batch = loaded["test"][:6]
    inputs = t.collate(batch)
    for part in ("left", "target", "right"):
        for row, example in zip(inputs[part].tolist(), batch, strict=True):
            words = t.words.decode([i for i in row if i != PAD])
            known = [w if w in t.words else "<unk>" for w in getattr(example, part)]
            assert words == known
    model = t.build_model()
    labels = torch.tensor([t.label(e) for e in batch])
    loss = objective(model, inputs, labels)
    loss.backward()
    assert loss.isfinite() and model.embedding.weight.grad.abs().sum() > 0
    with torch.no_grad(), record(model) as recorded:
        assert model(**inputs).shape == (6, 3)
    assert sum(len(calls) for calls in recorded.weights.values()) == 4 * 3  # 3 hops by default
    with pytest.raises(TypeError, match="AspectExample"):
        t.label(("not", "an", "example"))


def test_configuration_checks(shared_data) -> None:
    with pytest.raises(ConfigError, match=r"data\.embeddings: glove .* needs model\.embed_dim: 50"):
        config("semeval2016", shared_data, embeddings="glove")
    with pytest.raises(
        ConfigError, match=r"data\.glove_vocabulary: .* needs data\.embeddings: glove"
    ):
        config("semeval2016", shared_data, glove_vocabulary=True)
    with pytest.raises(ConfigError, match=r"valid_fraction"):
        config("semeval2016", shared_data, valid_fraction=1.0)
    with pytest.raises(ConfigError, match=r"model\.kind: the twitter corpus takes model kind"):
        config("twitter", shared_data, model={"kind": "sentence"})


def test_every_configuration_validates_and_names_its_paper() -> None:
    names = [n for n in reproduce.names() if n.startswith("lcr-rot")]
    assert set(names) == {f"{r}{g}" for r in REPRODUCTIONS for g in ("", "-glove")}
    for name in names:
        cfg = reproduce.load(name)
        spec = cfg.reproduce
        hop = name.startswith("lcr-rot-hop")
        assert cfg.model.hops == (3 if hop else 1)
        assert ("Wallaart & Frasincar (2019)" if hop else "Zheng & Xia (2018)") in spec.paper
        assert cfg.data.embeddings == ("glove" if name.endswith("-glove") else "random")
        assert spec.metric == "accuracy" and spec.scale == 100


def test_each_model_is_configured_with_both_embeddings() -> None:
    expected = {f"{r}{g}" for r in REPRODUCTIONS for g in ("", "-glove")}
    assert {n for n in reproduce.names() if reproduce.load(n).data.corpus in CORPORA} == expected


# every configuration of these corpora, not a list kept by hand: a new one is run here at once
@pytest.mark.parametrize(
    "name", [n for n in reproduce.names() if reproduce.load(n).data.corpus in CORPORA]
)
def test_quick_reproduction(name: str, shared_data, tmp_path) -> None:
    lines: list[str] = []
    line = reproduce.reproduce(
        name, data=str(shared_data), quick=True, runs_dir=tmp_path, log=lines.append
    )
    assert line["name"] == name and line["seeds"] == 1 and line["uniform"] is not None
    assert 0.0 <= line["mean"] <= 100.0
    run = tmp_path / "reproduce" / f"{name}-quick" / "seed-0"
    assert (run / "results.json").is_file()
    assert (tmp_path / "reproduce" / f"{name}-quick-uniform" / "seed-0" / "results.json").is_file()
