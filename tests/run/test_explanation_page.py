"""docs/explanation.md shows what its commands printed: every number of "ours" on the page is
checked against the JSON line of the command run that produced it, kept in
docs/explanation/results.jsonl (one line per run: the command and its last output line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.explanation.faithfulness import faithfulness_table

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "explanation.md").read_text(encoding="utf-8")
LINES = PAGE.splitlines()
RUNS = [
    json.loads(line)
    for line in (ROOT / "docs" / "explanation" / "results.jsonl").read_text().splitlines()
]
ENCODERS = {"lstm": "BiLSTM", "cnn": "CNN", "average": "average"}
BASELINES = {
    "trained": "trained attention (base)",
    "uniform at test": "uniform at test (the base model, `α = 1/n`)",
    "frozen uniform": "frozen uniform (trained and tested)",
    "frozen random": "frozen random (trained and tested)",
}


def runs_of(experiment: str) -> list[dict]:
    found = [run for run in RUNS if run["experiment"] == experiment]
    assert found, f"no {experiment} run in docs/explanation/results.jsonl"
    return found


def signed(value: float, digits: int) -> str:
    """As the page prints a number: a true minus sign, no plus."""
    return f"{value:.{digits}f}".replace("-", "−")


def test_every_run_names_the_command_the_page_shows() -> None:
    for run in RUNS:
        assert run["command"].startswith("python -m attnkit.explanation ") or run[
            "command"
        ].startswith("OMP_NUM_THREADS=1 python -m attnkit.explanation ")
        assert (
            run["command"].split(" --data")[0].split("explanation ")[1].split()[0]
            == run["experiment"]
        )


@pytest.mark.parametrize(
    "row",
    [row for run in runs_of("jain-wallace") for row in run["result"]],
    ids=lambda row: f"{row['corpus']}-{row['encoder']}",
)
def test_jain_wallace_rows(row: dict) -> None:
    def pm(d: dict) -> str:
        return f"{signed(d['mean'], 2)} ± {d['std']:.2f}"

    jsd = row["adversarial_jsd"]
    tail = " | ".join(
        [
            pm(row["tau_gradient"]),
            f"{row['tau_gradient']['significant']:.2f}",
            pm(row["tau_loo"]),
            f"{row['tau_loo']['significant']:.2f}",
            f"{row['permutation_median_tvd']['median']:.3f}",
            f"{row['permutation_small']:.2f}",
            f"{jsd['mean']:.3f} / {jsd['median']:.3f}",
            f"{row['adversarial_found']:.2f}",
        ]
    )
    if row["corpus"] == "sst":
        head = f"| ours | {ENCODERS[row['encoder']]} | {row['test_accuracy']:.3f} (F1 {row['test_f1']:.3f}) |"
    else:
        task = row["corpus"].removeprefix("babi")
        head = f"| {task}, ours | {ENCODERS[row['encoder']]} | {row['test_accuracy']:.3f} |"
    matches = [line for line in LINES if line.startswith(head)]
    assert matches, f"no row {head!r} on the page"
    assert matches[0].endswith(f"| {tail} |"), (matches[0], tail)


def test_wiegreffe_pinter_rows() -> None:
    (run,) = runs_of("wiegreffe-pinter")[-1:]
    for name, m in run["result"]["baselines"].items():
        cells = f"| {BASELINES[name]} | {m['valid_accuracy']:.3f} | {m['test_accuracy']:.3f} | {m['test_f1']:.3f} |"
        assert any(line.startswith(cells) for line in LINES), cells
    for r in run["result"]["adversarial"]:
        cells = f"| {r['lambda']:g} | {r['tvd']:.3f} | {r['jsd']:.3f} | {r['accuracy']:.3f} | {r['f1']:.3f} |"
        assert any(line.startswith(cells) for line in LINES), cells


def test_faithfulness_rows() -> None:
    (run,) = runs_of("faithfulness")[-1:]
    ranked = [
        line
        for line in faithfulness_table(run["result"]).splitlines()
        if line.startswith("| ") and line.split(" | ")[0][2:].isdigit()
    ]
    assert len(ranked) == 16  # 6 maps of the BiLSTM, 10 of MiniLM
    for line in ranked:
        assert line in LINES, line


def test_the_minutes_on_the_page_are_the_runs() -> None:
    # the page may give the wall time of the whole process (`/usr/bin/time`), which adds the
    # start-up that the command's own count leaves out: at most a tenth of a minute here
    for run in RUNS:
        shown = {f"{run['minutes'] + extra:.1f} minutes" for extra in (0.0, 0.1)}
        assert any(text in PAGE for text in shown), (run["command"], run["minutes"])
