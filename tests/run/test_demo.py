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


def results_of(run_dir):
    """The supervised run's results and its unsupervised twin's."""
    guided = json.loads((run_dir / "results.json").read_text())
    twin = json.loads((run_dir / "unsupervised" / "results.json").read_text())
    return guided, twin


def test_the_i_love_you_alignment_matrices_are_printed_side_by_side(demo):
    lines, run_dir = demo
    guided, twin = (r["showcase"][0] for r in results_of(run_dir))
    assert guided["source"] == twin["source"] == ["i", "love", "you", "."]
    start = next(i for i, line in enumerate(lines) if line.startswith("I love you.  →  "))
    titles = lines[start + 1]
    assert titles.startswith("supervised attention: ") and "unsupervised twin: " in titles
    split = titles.index("unsupervised twin: ")  # the right block starts in that column
    header = lines[start + 2]
    assert header[:split].split() == header[split:].split() == ["i", "love", "you", "."]
    for column, shown in ((slice(0, split), guided), (slice(split, None), twin)):
        rows = lines[start + 3 : start + 3 + len(shown["target"])]
        assert [row[column].split()[0] for row in rows] == shown["target"]  # rows: targets
        for row, weights in zip(rows, shown["weights"], strict=True):
            printed = [float(x) for x in row[column].split()[1:]]
            assert printed == [round(w, 2) for w in weights]  # the saved matrix, 2 decimals
            assert sum(weights) == pytest.approx(1.0, abs=1e-5)  # a distribution
    height = max(len(guided["target"]), len(twin["target"]))
    assert lines[start + 3 + height] == ""  # the matrices end there


def test_the_demo_says_its_attention_is_supervised_and_by_whom(demo):
    lines, run_dir = demo
    [line] = [line for line in lines if line.startswith("supervised attention: the loss adds ")]
    assert "fast_align" in line and "unsupervised twin" in line
    report = (run_dir / "report.html").read_text()
    assert "supervised" in report and "fast_align" in report and "unsupervised twin" in report
    # the twin's heatmaps are embedded beside the supervised ones
    for image in sorted((run_dir / "unsupervised" / "heatmaps").glob("*.png")):
        assert base64.b64encode(image.read_bytes()).decode() in report
    assert (run_dir / "links.pharaoh").is_file()  # the teacher's links the demo fitted


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
    for label, results in zip(
        ("supervised attention: ", "unsupervised twin:    "), results_of(run_dir), strict=True
    ):
        gold = results["tatoeba_gold"]
        assert gold["sentences"] == 50 and 0.0 <= gold["aer"] <= 1.0
        [line] = [line for line in lines if line.startswith(label + "held-out BLEU")]
        assert line == label + (
            f"held-out BLEU {results['bleu']:.2f} (beam 4) on {results['sentences']} test "
            "sentences, "
            f"attention AER {gold['aer']:.3f} on the 50 hand-aligned Tatoeba test sentences "
            "(argmax)"
        )
    guided, twin = results_of(run_dir)
    report = (run_dir / "report.html").read_text()
    assert "Tatoeba gold (50 test sentences)" in report
    assert (
        f"{guided['tatoeba_gold']['aer']:.3f} (unsupervised twin {twin['tatoeba_gold']['aer']:.3f})"
        in report
    )


def test_the_i_love_you_argmax_links_are_named(demo):
    lines, run_dir = demo
    for label, results in zip(
        ("supervised attention", "unsupervised twin"), results_of(run_dir), strict=True
    ):
        shown = results["showcase"][0]
        prefix = f'"I love you." {label}: '
        [line] = [line for line in lines if line.startswith(prefix)]
        # each target word's argmax source word, from the saved matrix (first maximum on ties)
        best = [shown["source"][row.index(max(row))] for row in shown["weights"]]
        pairs = ", ".join(f"{t} → {s}" for t, s in zip(shown["target"], best, strict=True))
        assert line.removeprefix(prefix).startswith(pairs + "  (")


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


def test_the_unsupervised_twin_differs_only_by_the_supervision():
    from attnkit.demo import demo_config, guided, unsupervised_twin

    config = demo_config()
    assert guided(config) and config.model.query == "conditional"
    twin = unsupervised_twin(config)
    assert not guided(twin) and twin.name == "demo-unsupervised"
    assert twin.model == config.model and twin.seed == config.seed
    assert twin.train.steps == config.train.steps * 2 // 5  # the time budget: two fifths
    kept = {"supervised_weight", "steps", "warmup", "eval_every", "checkpoint_every"}
    assert twin.train.model_dump(exclude=kept) == config.train.model_dump(exclude=kept)
    supervision = {"supervision", "symmetrization", "aligner_alpha"}
    assert twin.data.model_dump(exclude=supervision) == config.data.model_dump(exclude=supervision)
