"""One training pipeline: every corpus has a job behind one interface, a run
directory restores its job, and the library never imports the application."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import attnkit
from attnkit.checkpoint import CheckpointError
from attnkit.cli import main
from attnkit.config import TASKS, model_kinds, validate
from attnkit.data.corpus import Example, Vocabularies
from attnkit.run import Run
from attnkit.tasks import job_for
from attnkit.tasks.job import Job
from attnkit.tasks.trainer import ClassificationJob
from attnkit.tasks.translation import Multi30kTranslationJob, TranslationJob

SRC = Path(attnkit.__file__).resolve().parent
APPLICATION = ("tasks", "train", "run", "config", "checkpoint", "report", "demo", "data_parallel")
APPLICATION += ("cli", "__main__", "reproduce", "early_stopping", "tensorboard")

PAIRS = [
    Example(("i", "love", "you", "."), ("je", "t'", "aime", ".")),
    Example(("i", "am", "cold", "."), ("j'", "ai", "froid", ".")),
]


def _config(corpus: str, **data):
    extra = {"root": "/nowhere"} if corpus == "hansards" else {}
    return validate(
        {
            "name": "p",
            "data": {"corpus": corpus, **extra, **data},
            "model": {"kind": model_kinds(corpus)[0]},
            "train": {"steps": 1},
        }
    )


@pytest.mark.parametrize("corpus", sorted(TASKS.names()))
def test_every_corpus_has_a_job(corpus):
    job = job_for(_config(corpus))
    assert isinstance(job, Job)
    translation = {
        "tatoeba": TranslationJob,
        "hansards": TranslationJob,
        "multi30k": Multi30kTranslationJob,
    }
    expected = translation.get(corpus, ClassificationJob)
    assert type(job) is expected
    assert job.state_file == ("vocab.json" if corpus in translation else "task.json")


def test_a_translation_run_keeps_its_vocabularies_as_before(tmp_path, monkeypatch):
    config = _config("tatoeba")
    job = job_for(config)
    monkeypatch.setattr(job, "load", lambda: {"train": PAIRS, "valid": PAIRS, "test": PAIRS})
    with Run.create(config, path=tmp_path / "run", job=job) as run:
        pass
    # vocab.json is what the run directory always held: the two vocabularies' token lists
    saved = json.loads((run.path / "vocab.json").read_text())
    expected = Vocabularies.build(PAIRS)
    assert saved == {"source": expected.source.to_dict(), "target": expected.target.to_dict()}
    assert not (run.path / "task.json").exists()
    reopened = Run.open(run.path)
    assert isinstance(reopened.job, TranslationJob) and reopened.task is None
    assert reopened.job.vocabularies == expected
    assert reopened.job.vocabularies.source.encode(["i", "love"]) == expected.source.encode(
        ["i", "love"]
    )


def test_a_damaged_state_file_names_the_file(tmp_path, monkeypatch, capsys):
    config = _config("tatoeba")
    job = job_for(config)
    monkeypatch.setattr(job, "load", lambda: {"train": PAIRS, "valid": PAIRS, "test": PAIRS})
    with Run.create(config, path=tmp_path / "run", job=job) as run:
        pass
    (run.path / "vocab.json").write_text('{"source": {"tokens": []}}')
    with pytest.raises(CheckpointError, match=r"vocab\.json: not this run's state"):
        Run.open(run.path)
    (run.path / "vocab.json").write_text("{not json")
    assert main(["eval", str(run.path)]) == 1
    assert "vocab.json: unreadable run state" in capsys.readouterr().err


def test_vocabularies_round_trip_and_refuse_other_states():
    vocabularies = Vocabularies.build(PAIRS, min_freq=1)
    assert Vocabularies.from_dict(vocabularies.to_dict()) == vocabularies
    with pytest.raises(
        ValueError, match=r"expected the keys \['source', 'target'\], got \['words'\]"
    ):
        Vocabularies.from_dict({"words": {"tokens": []}})


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            if node.module == "attnkit":
                names += [f"attnkit.{alias.name}" for alias in node.names]
    return names


def test_the_library_never_imports_the_application():
    application = tuple(f"attnkit.{name}" for name in APPLICATION)
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[0] in APPLICATION:
            continue
        for name in _imports(path):
            if name in application or name.startswith(tuple(f"{a}." for a in application)):
                offenders.append(f"{'/'.join(parts)}.py imports {name}")
    assert offenders == []
