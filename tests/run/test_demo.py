"""``attnkit demo`` end to end at a tiny size (``--set`` overrides of its embedded
configuration): what it prints, what it writes, and that ``attnkit eval`` and ``attnkit
translate`` work on its run directory."""

from __future__ import annotations

import base64
import contextlib
import io
import json

import pytest
import torch

from attnkit.cli import main
from attnkit.demo import seed_links

PNG = b"\x89PNG\r\n\x1a\n"
TINY = [
    "train.steps=2",
    "train.warmup=0",
    "train.eval_every=2",
    "train.checkpoint_every=null",
    "data.max_pairs=200",
    "model.embed_dim=8",
    "model.hidden_dim=8",
    "decode.max_eval_sentences=4",
    "decode.max_length=6",
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's stdout lines and its run directory."""
    runs = tmp_path_factory.mktemp("demo") / "runs"
    out = io.StringIO()  # capsys is per test; the demo prints through print(), to sys.stdout
    with contextlib.redirect_stdout(out):
        code = main(["demo", "--runs-dir", str(runs), "--quiet", *[f"--set={s}" for s in TINY]])
    assert code == 0
    [run_dir] = list(runs.iterdir())
    assert run_dir.name.startswith("demo-")
    return out.getvalue().splitlines(), run_dir


def test_the_last_line_names_the_report(demo):
    lines, run_dir = demo
    assert lines[-1] == f"report: {run_dir / 'report.html'}"


def test_report_and_heatmaps_are_written_and_the_report_is_self_contained(demo):
    _, run_dir = demo
    report = (run_dir / "report.html").read_text()
    assert report.startswith("<!DOCTYPE html>") and 'src="http' not in report
    images = sorted((run_dir / "heatmaps").glob("*.png"))
    assert len(images) == 4 and images[0].name == "01-i-love-you.png"
    for image in images:
        data = image.read_bytes()
        assert data.startswith(PNG)
        assert base64.b64encode(data).decode() in report  # embedded, not linked


def test_the_i_love_you_alignment_matrix_is_printed(demo):
    lines, run_dir = demo
    shown = json.loads((run_dir / "results.json").read_text())["showcase"][0]
    assert shown["source"] == ["i", "love", "you", "."]
    start = next(i for i, line in enumerate(lines) if line.startswith("I love you.  →  "))
    assert lines[start + 1].split() == ["i", "love", "you", "."]  # columns: the source words
    rows = lines[start + 2 : start + 2 + len(shown["target"])]
    assert [row.split()[0] for row in rows] == shown["target"]  # rows: the target words
    for row, weights in zip(rows, shown["weights"], strict=True):
        printed = [float(x) for x in row.split()[1:]]
        assert printed == [round(w, 2) for w in weights]  # the saved matrix, to 2 decimals
        assert sum(weights) == pytest.approx(1.0, abs=1e-5)  # a distribution over the source
    assert lines[start + 2 + len(shown["target"])] == ""  # the matrix ends there


def test_eval_and_translate_work_on_the_demo_run(demo, capsys):
    _, run_dir = demo
    assert main(["eval", str(run_dir), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"{run_dir.name} step 2, test split, 4 sentences" in out
    assert json.loads((run_dir / "eval-test.json").read_text())["step"] == 2
    assert main(["translate", str(run_dir), "I love you."]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [w.removesuffix("(unk)") for w in lines[1].split()]  # tiny vocabulary: unknowns
    assert header == ["i", "love", "you", "."] and lines[-1].startswith("<eos>")


def test_the_attention_aer_on_the_tatoeba_gold_is_printed_next_to_bleu(demo):
    lines, run_dir = demo
    results = json.loads((run_dir / "results.json").read_text())
    gold = results["tatoeba_gold"]
    assert gold["sentences"] == 50 and 0.0 <= gold["aer"] <= 1.0
    [line] = [line for line in lines if line.startswith("held-out BLEU")]
    assert line == (
        f"held-out BLEU {results['bleu']:.2f} on {results['sentences']} test sentences, "
        f"attention AER {gold['aer']:.3f} on the 50 hand-aligned Tatoeba test sentences (argmax)"
    )
    report = (run_dir / "report.html").read_text()
    assert "Tatoeba gold (50 test sentences)" in report and f"{gold['aer']:.3f}" in report


def test_the_i_love_you_argmax_links_are_named(demo):
    lines, run_dir = demo
    shown = json.loads((run_dir / "results.json").read_text())["showcase"][0]
    [line] = [line for line in lines if line.startswith('"I love you." by argmax: ')]
    # each target word's argmax source word, from the saved matrix (first maximum on ties)
    best = [shown["source"][row.index(max(row))] for row in shown["weights"]]
    pairs = ", ".join(f"{t} → {s}" for t, s in zip(shown["target"], best, strict=True))
    assert line.removeprefix('"I love you." by argmax: ').startswith(pairs + "  (")


def test_seed_links_by_hand():
    weights = torch.tensor(
        [[0.6, 0.1, 0.2, 0.1], [0.1, 0.2, 0.6, 0.1], [0.1, 0.5, 0.3, 0.1], [0.1, 0.1, 0.1, 0.7]]
    )
    source, target = ["i", "love", "you", "."], ["je", "t'", "aime", "."]
    assert seed_links(source, target, weights) == (
        "je → i, t' → you, aime → love, . → .  (seed Fig. 1's je–I, vous/t'–you, aime–love: 3 of 3)"
    )
    # the demo's measured matrix of docs/results.md: je → you, vous → you, aime → love
    measured = torch.tensor(
        [[0.01, 0.15, 0.77, 0.07], [0.01, 0.44, 0.50, 0.06], [0.01, 0.70, 0.14, 0.14]]
    )
    assert seed_links(source, ["je", "vous", "aime"], measured).endswith(": 2 of 3)")
    assert seed_links(source, ["nous", "."], weights[:2]).endswith(
        "(the translation has none of je, vous/t', aime)"
    )
    with pytest.raises(ValueError, match="len\\(target\\)"):
        seed_links(source, target, weights[:3])
