"""docs/reproductions.md from the JSON lines of `attnkit reproduce` (docs/reproductions/results.jsonl).

    python benchmarks/reproductions_table.py            # rewrites docs/reproductions.md
    python benchmarks/reproductions_table.py --check    # exit 1 if the page is out of date

Each reproduction's newest line is its row: the paper's number with its table, attnkit's mean ±
std over its seeds, the same model with uniform attention, the peer library's column, minutes per
seed on this machine, and the command. What explains a gap — a measurement, not a guess — comes
from docs/reproductions/notes.yaml (name: text), written by whoever ran the reproduction.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import yaml

import attnkit.tasks  # noqa: F401  (registers the tasks the configurations name)
from attnkit import reproduce
from attnkit.report import describe_model

ROOT = Path(__file__).resolve().parent.parent
LINES = ROOT / "docs/reproductions/results.jsonl"
NOTES = ROOT / "docs/reproductions/notes.yaml"
PAGE = ROOT / "docs/reproductions.md"

#: each configuration is read and validated once, however often the page refers to it
_config = functools.cache(reproduce.load)

HEADER = """# Reproductions

`attnkit reproduce NAME` trains a model of the literature on its paper's benchmark
(`../shared/data` by default, `--data DIR` otherwise) over several seeds, each an ordinary,
resumable run directory, and prints one JSON line; `attnkit reproduce --list` lists them. The
table below is generated from those lines (`docs/reproductions/results.jsonl`) by
`python benchmarks/reproductions_table.py`; the notes under it say what was measured about
each gap.

Columns: the paper's number and where it is; attnkit's mean ± standard deviation over the seeds
(n); *uniform*: the same model trained and evaluated with its attention replaced by uniform
weights over the admissible keys (survey §4.1, extrinsic evaluation); *peer*: the peer
library's implementation with the same hyper-parameters and seeds, where there is one; minutes
of training per seed on this machine (2 CPU cores shared with other work, 1 thread per run);
the command that reproduces the row.

A row reruns exactly on the same torch build and thread count: `attnkit reproduce capsule-trec
--seeds 1 --runs-dir /tmp/verify`, run from scratch on 2026-11-27, ended with final weights
bitwise equal to the row's seed 0 (all 12 tensors) and the same test accuracies, 87.6 with
attention and 88.8 with uniform attention. The same command on a new machine of the same kind
(AMD EPYC, 2 cores, torch 2.13.0+cpu, an empty runs directory; 2026-11-27, 21:38 UTC) gave the
same two accuracies, 87.6 and 88.8, in 2.1 minutes. Another CPU or torch build may differ in
the last bits of a step and so, after training, within the row's std.

"""


def newest_lines(path: Path) -> dict[str, dict]:
    """The last JSON line of each reproduction name, in first-seen order."""
    rows: dict[str, dict] = {}
    if path.is_file():
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if text.strip():
                try:
                    line = json.loads(text)
                except ValueError as error:
                    raise SystemExit(f"{path}:{number}: not a JSON line ({error})") from None
                rows[line["name"]] = line
    return rows


def _number(mean: float | None, std: float | None, n: int | None = None) -> str:
    if mean is None:
        return "—"
    spread = "" if std is None else f" ± {std:.1f}"
    return f"{mean:.1f}{spread}" + (f" (n={n})" if n else "")


def _paper(value: float | None, std: float | None) -> str:
    """The paper's number as the paper prints it (36.52 stays 36.52)."""
    if value is None:
        return "—"

    def printed(x: float) -> str:
        return f"{x:.1f}" if round(x, 1) == x else f"{x:g}"

    return printed(value) + ("" if std is None else f" ± {printed(std)}")


def _over_key(line: dict) -> str:
    """The key a per-value reproduction runs over, by its last part (data.task: "task")."""
    return line.get("over", "value").rsplit(".", 1)[-1]


def _per_value_table(line: dict) -> list[str]:
    """A reproduction over the values of one key (bAbI's tasks): one row per value, the
    paper's number, attnkit's (the run chosen on validation, or the mean of the runs) and the
    uniform-attention model's."""
    key = _over_key(line)
    paper, uniform = line.get("paper_per_value") or {}, line.get("uniform_per_value") or {}
    rows = ["| " + key + " | paper | attnkit | uniform |", "|---|---|---|---|"]
    for value, number in line["per_value"].items():
        rows.append(
            f"| {value} | {_number(paper.get(value), None)} | {number:.1f} | "
            f"{_number(uniform.get(value), None)} |"
        )
    return rows


def _over(mean: float | None, line: dict, runs: int | None) -> str:
    """A reproduction over several values (bAbI's tasks): the mean over the values of the run
    chosen for each; its std would be the spread of the tasks, not of the seeds, so none."""
    if mean is None:
        return "—"
    return f"{mean:.1f} ({len(line['per_value'])} {_over_key(line)}s, best of {runs} runs each)"


def _attnkit(line: dict) -> str:
    if "per_value" in line:
        return _over(line["mean"], line, line["seeds"])
    return _number(line["mean"], line["std"], line["seeds"])


def _uniform(line: dict) -> str:
    """The uniform-attention column; its number of seeds where it differs from the model's."""
    if "per_value" in line:
        return _over(line.get("uniform"), line, line.get("uniform_seeds") or line["seeds"])
    seeds = line.get("uniform_seeds")
    shown = seeds if seeds is not None and seeds != line["seeds"] else None
    return _number(line.get("uniform"), line.get("uniform_std"), shown)


#: the order of the benchmarks on the page: graphs, memory, sentences, aspects, translation
TASK_ORDER = ("planetoid", "babi", "sst2", "sst5", "trec", "mr", "semeval", "twitter", "multi30k")


def _task_rank(name: str) -> tuple[int, str]:
    corpus = _config(name).data.corpus
    rank = next((i for i, t in enumerate(TASK_ORDER) if corpus.startswith(t)), len(TASK_ORDER))
    return rank, name


def _not_measured(rows: dict[str, dict]) -> list[str]:
    """The reproductions with a configuration but no JSON line yet: named, never left out."""
    missing = sorted((n for n in reproduce.names() if n not in rows), key=_task_rank)
    if not missing:
        return []
    out = [
        "## Not measured yet\n",
        "Configured and tested with `--quick`, but no full reproduction has been run on this "
        "machine yet (machine time): each is one `attnkit reproduce NAME`.\n",
        "| reproduction | paper |",
        "|---|---|",
    ]
    for name in missing:
        spec = _config(name).reproduce
        out.append(f"| `{name}` | {_paper(spec.value, spec.std)} |")
    out.append("")
    return out


def _command(name: str, line: dict) -> str:
    """The command that reproduces the row: ``--seeds`` only where the row's differ."""
    seeds = line["seeds"] != _config(name).reproduce.seeds
    return f"attnkit reproduce {name}" + (f" --seeds {line['seeds']}" if seeds else "")


def render(rows: dict[str, dict], notes: dict[str, str]) -> str:
    rows = {name: rows[name] for name in sorted(rows, key=_task_rank)}
    out = [HEADER]
    out.append(
        "| reproduction | task | model | metric | paper | attnkit | uniform | peer | min/seed "
        "| command |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for name, line in rows.items():
        config = _config(name)
        task = config.data.corpus + (
            f" ({config.data.graph})" if hasattr(config.data, "graph") else ""
        )
        paper = _paper(line["paper"], line.get("paper_std"))
        if config.reproduce.cell and line["paper"] is not None:
            paper += f" ({config.reproduce.cell})"
        peer = line.get("peer")
        peer_text = (
            "—"
            if not peer
            else (
                f"{_number(peer['mean'], peer['std'], peer['seeds'])} "
                f"({peer['library']}, {peer['seconds_per_epoch']:.3f} s/epoch; attnkit "
                f"{line.get('seconds_per_step', float('nan')):.3f})"
            )
        )
        out.append(
            f"| `{name}` | {task} | {describe_model(config)} | {line['metric']} | {paper} | "
            f"**{_attnkit(line)}** | "
            f"{_uniform(line)} | {peer_text} | "
            f"{line['minutes']:.1f} | `{_command(name, line)}` |"
        )
    out.append("")
    out.append("## Sources, commands and what explains each gap\n")
    for name, line in rows.items():
        out.append(f"### `{name}`\n")
        out.append(f"- Paper: {line['paper_source'].rstrip('.')}.")
        out.append(
            f"- Command: `{_command(name, line)}` ({line['config']})"
            + (
                "; per-seed values: " + ", ".join(f"{v:.1f}" for v in line["values"]) + "."
                if "values" in line
                else "."
            )
        )
        if "per_value" in line:
            out += ["", *_per_value_table(line), ""]
        if name in notes:
            out.append(f"- {notes[name].strip()}")
        out.append("")
    out += _not_measured(rows)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    notes = yaml.safe_load(NOTES.read_text(encoding="utf-8")) if NOTES.is_file() else {}
    page = render(newest_lines(LINES), notes or {})
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
        if current != page:
            print(f"{PAGE} is out of date: run python benchmarks/reproductions_table.py")
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE} ({len(newest_lines(LINES))} reproductions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
