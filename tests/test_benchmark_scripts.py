"""The device and machine-limit benchmark scripts run end to end (``--quick``: tiny sizes, one
round) and print every row they promise; their timings are not checked here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick", *args], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_limits_gives_every_call_as_a_fraction_of_the_machine() -> None:
    out = _run("limits.py")
    assert "GFLOP/s" in out and "ns/element" in out
    for call in (
        "sdpa (torch)",
        "scaled_dot",
        "general",
        "additive (H=1) compiled",
        "additive (H=1) tiled",
        "sparsemax",
        "1.5-entmax",
    ):
        rows = [line for line in out.splitlines() if f"| {call} |" in line]
        assert len(rows) == 4, call  # two sizes, fwd and fwd+bwd
    assert all("% of GEMM" in line or "tanh passes" in line for line in out.splitlines()
               if line.startswith("| 64 ") or line.startswith("| 128 "))  # fmt: skip
    for call in ("**scaled_dot, general**", "**additive**", "**sparsemax, 1.5-entmax**"):
        [line] = [line for line in out.splitlines() if line.startswith(f"- {call}: ")]
        assert "% of the GEMM rate" in line or "tanh passes" in line
    summary = [line for line in out.splitlines() if line.startswith("- additive kernel at n=")]
    assert len(summary) == 2 and all("target <= 4" in line for line in summary)


@pytest.mark.filterwarnings("ignore")
def test_device_runs_the_key_rows_on_this_device() -> None:
    out = _run("device.py", "--bf16")
    assert out.startswith("## The key rows on one device: CPU") and "\nDevice: " in out
    for row in (
        "SDPA parity",
        "soft-capping score_mod vs compiled Flex",
        "additive (H=1, d_w=64)",
        "weights on demand vs SDPA without",
        "MultiHeadAttention need_weights vs torch",
    ):
        assert f"| {row}" in out, row  # fmt: skip
    for line in out.splitlines():
        if line.startswith("| float32 ") and "no backward" not in line:
            assert float(line.split("|")[-2]) < 1e-4, line  # the outputs agree
        if line.startswith("| bfloat16 ") and "no backward" not in line:
            assert float(line.split("|")[-2]) < 5e-2, line  # within bf16's rounding
    assert sum(line.startswith("| bfloat16 ") for line in out.splitlines()) == 9


def test_weights_memory_compares_the_engine_with_tiled() -> None:
    out = _run("weights_memory.py")
    [row] = [line for line in out.splitlines() if line.startswith("| 256 |")][-1:]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] in {"dense", "tiled", "flex", "fused", "chunked"}
    assert all(cell != "failed" for cell in cells)  # both processes measured, both timed


@pytest.mark.parametrize(
    ("row", "peer", "package"),
    [("mha", "torch", None), ("weights", "naive", None), ("linformer", "peer", "linformer")],
)
def test_profile_peers_splits_the_time_into_gemm_and_the_rest(
    row: str, peer: str, package: str | None
) -> None:
    if package:  # the peer packages are installed only for the benchmarks (docs/benchmarks.md)
        pytest.importorskip(package, reason=f"the {package} package (a benchmark peer) is absent")
    out = _run("profile_peers.py", "--row", row)
    for side in ("attnkit", peer):
        assert f"{side}: self CPU " in out and "GEMM" in out


def test_peer_margins_reads_saved_runs(tmp_path) -> None:
    """Three saved peers.py outputs: each ratio per run, the median, the spread, the verdict."""
    runs = []
    for i, ratio in enumerate(("0.90", "1.00", "0.97")):
        text = (
            "## mha: MHA vs torch\n"
            f"n=512, weights=True | fwd | torch.nn.MultiheadAttention | 1 | 1 | {ratio} | — | — | 0\n"
            "| n=512, weights=True | fwd | torch.nn.MultiheadAttention | 1 | 1 | 9.99 | — | — | 0 |\n"
        )
        runs.append(tmp_path / f"run{i}.txt")
        runs[-1].write_text(text, encoding="utf-8")
    kept = tmp_path / "kept.json"  # the runs of a row not measured now, with their note
    kept.write_text(json.dumps({"encoder": {"note": "measured 2026-11-27, idle", "runs": [
        [["batch=8, n=128", "fwd+bwd", "torch", r]] for r in (0.93, 0.94, 0.99)]}}))  # fmt: skip
    before = kept.read_text()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "peer_margins.py"), "--no-write",
                           "--keep", str(kept), "--from", *map(str, runs)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    [row] = [line for line in done.stdout.splitlines() if line.startswith("| n=512")]
    # per run, median, spread, target, met (the markdown table's 9.99 is not a run's ratio)
    assert row.split(" | ")[3:] == ["0.90", "1.00", "0.97", "0.97", "0.10", "<= 0.95", "no |"]
    # the row not run keeps its runs, after the one run now; --no-write leaves the file alone
    [kept_row] = [line for line in done.stdout.splitlines() if line.startswith("| batch=8")]
    assert kept_row.split(" | ")[3:] == ["0.93", "0.94", "0.99", "0.94", "0.06", "<= 0.95", "yes |"]
    assert done.stdout.index("#### `mha`") < done.stdout.index("#### `encoder`")
    assert kept.read_text() == before


def test_peers_targets_carry_their_own_rows_date(monkeypatch) -> None:
    """A run of some rows keeps the other rows' tables; each target reads the date of the
    table it comes from, not the date of the last run."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import peers

    blocks = {
        row: [f"### {row}", "", f"Measured {date}: medians of 5 interleaved rounds, 1 thread(s)."]
        for row, date in (("mha", "2026-11-20"), ("softcap", "2026-11-27"))
    }

    def measured(peer: str, cfg: dict, ratio: float, memory_ratio: float) -> dict:
        return {"peer": peer, "cfg": cfg, "t": ratio, "t_peer": 1.0, "mib": memory_ratio,
                "mib_peer": 1.0}  # fmt: skip

    numbers = {
        "mha": [measured("torch", {"n": 512, "weights": True, "mode": "fwd"}, 0.5, 1.0)],
        "softcap": [measured("flex", {"n": 2048, "mode": "fwd"}, 1.5, 0.5)],
    }
    found = {t[0]: (t[2], t[4]) for t in peers.targets(numbers, peers.measured_on(blocks))}
    assert found["18(a) MHA need_weights=True, time <= 1.1x torch"] == (True, "2026-11-20")
    assert found["18(f) soft-capping score_mod fwd, time <= compiled Flex"] == (False, "2026-11-27")
    assert found["18(c) encoder step, dropout 0.1, <= 1.05x torch"] == (None, None)
