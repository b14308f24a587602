"""`attnkit reproduce`: the listing, a quick reproduction's JSON line, resuming by run directories,
early stopping by GAT's rule, and GAT's native uniform attention against the engine's."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from attnkit import reproduce
from attnkit.cli import main
from attnkit.config import validate
from attnkit.early_stopping import EarlyStopping
from attnkit.evaluate.ablation import ablate
from attnkit.mechanisms.graph import GraphAttention, GraphAttentionV2

KEYS = {"name", "metric", "mean", "std", "seeds", "paper", "paper_source", "uniform", "minutes"}


def test_list_names_each_reproduction_with_its_paper(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("gat-cora "))
    assert "accuracy 83" in line and "Veličković et al. (2018)" in line and "Table 3" in line


def test_an_unknown_name_is_refused_listing_the_known_ones(capsys):
    assert main(["reproduce", "gat-kora", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "unknown reproduction 'gat-kora'" in err and "gat-cora" in err


#: each corpus of configs/reproduce and the test file that runs its reproductions with
#: ``--quick``, each parametrised by reproduce.names() so that no configuration is left out
QUICK_TESTS = {
    "planetoid": "test_reproduce.py",
    "babi": "test_reproduce_babi.py",
    **dict.fromkeys(("sst2", "sst5", "trec", "mr"), "test_reproduce_sentences.py"),
    **dict.fromkeys(
        ("semeval14_restaurants", "semeval14_laptops", "twitter", "semeval2015", "semeval2016"),
        "test_reproduce_absa.py",
    ),
    "multi30k": "test_reproduce_multi30k.py",
}


def test_every_reproduction_has_a_quick_test() -> None:
    corpora = {name: reproduce.load(name).data.corpus for name in reproduce.names()}
    untested = {name: corpus for name, corpus in corpora.items() if corpus not in QUICK_TESTS}
    assert not untested, f"no --quick test runs these reproductions: {untested}"
    assert len(corpora) >= 53


def test_list_shows_the_compared_measure_and_where_the_number_is(capsys) -> None:
    assert main(["reproduce", "--list"]) == 0
    lines = {row.split()[0]: row for row in capsys.readouterr().out.splitlines()}
    assert set(lines) == set(reproduce.names())
    # bAbI's paper gives error rates: the listing says so, as the JSON line does
    assert " 1 - accuracy 13.9 " in lines["memn2n-babi"]
    for name in lines:
        spec = reproduce.load(name).reproduce
        assert (spec.cell is None) == (spec.value is None), name


def test_a_run_saved_before_the_cell_field_still_loads(tmp_path) -> None:
    """Run directories keep their configuration: one saved without ``reproduce.cell`` (before
    the field) must load for translate, eval and resuming."""
    raw = yaml.safe_load((reproduce.CONFIG_DIRS[1] / "gat-cora.yaml").read_text())
    del raw["reproduce"]["cell"]
    assert validate(raw).reproduce.cell is None


def test_the_gatv2_model_is_named_as_such() -> None:
    assert "GATv2" in reproduce.load("gatv2-cora").model.describe()
    assert "GATv2" not in reproduce.load("gat-cora").model.describe()


@pytest.mark.parametrize(
    "name", [n for n in reproduce.names() if reproduce.load(n).data.corpus == "planetoid"]
)
def test_a_quick_reproduction_ends_with_its_json_line(name, shared_data, tmp_path, capsys):
    argv = ["reproduce", name, "--quick", "--data", str(shared_data), "--runs-dir", str(tmp_path)]
    assert main([*argv, "--quiet", "--record", str(tmp_path / "lines.jsonl")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    line = json.loads(last)
    assert KEYS <= set(line) and line["name"] == name and line["seeds"] == 1
    assert 0 <= line["mean"] <= 100 and 0 <= line["uniform"] <= 100
    peer = line["peer"]  # PyTorch Geometric, when `make test` could install it
    assert peer is None or (0 <= peer["mean"] <= 100 and "torch_geometric" in peer["library"])
    assert json.loads((tmp_path / "lines.jsonl").read_text()) == line
    seed = tmp_path / "reproduce" / f"{name}-quick" / "seed-0"
    results = json.loads((seed / "results.json").read_text())
    assert line["values"] == [round(results["accuracy"] * 100, 3)]
    # a second call reads the finished seeds back: same line, nothing retrained
    before = (seed / "results.json").stat().st_mtime_ns
    assert main([*argv, "--quiet"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["values"] == line["values"] and again["uniform"] == line["uniform"]
    assert (seed / "results.json").stat().st_mtime_ns == before


def test_an_interrupted_seed_resumes_to_the_same_result(shared_data, tmp_path, capsys):
    argv = ["reproduce", "gat-cora", "--quick", "--no-uniform", "--data", str(shared_data)]
    assert main([*argv, "--runs-dir", str(tmp_path / "whole"), "--quiet"]) == 0
    whole = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the same seed stopped after its first step (as an interruption), then the command again
    seed = tmp_path / "cut" / "reproduce" / "gat-cora-quick" / "seed-0"
    overrides = ["--set", "train.steps=3", "--set", "train.patience=2"]
    overrides += ["--set", "train.checkpoint_every=1", "--set", f"data.root={shared_data}"]
    cut = ["train", "configs/reproduce/gat-cora.yaml", *overrides, "--run-dir", str(seed)]
    assert main([*cut, "--stop-after", "1", "--quiet"]) == 0
    assert not (seed / "results.json").exists()
    assert main([*argv, "--runs-dir", str(tmp_path / "cut"), "--quiet"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["values"] == whole["values"]


def test_a_finished_seed_of_other_settings_is_refused(shared_data, tmp_path, capsys):
    """A configuration changed since a seed finished: reading its result back would report a
    model the configuration no longer describes."""
    argv = ["reproduce", "gat-cora", "--quick", "--no-uniform", "--data", str(shared_data),
            "--runs-dir", str(tmp_path), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    seed = tmp_path / "reproduce" / "gat-cora-quick" / "seed-0"
    saved = yaml.safe_load((seed / "config.yaml").read_text())
    saved["reproduce"]["uniform_seeds"] = 7  # how seeds are compared, not how one trains
    (seed / "config.yaml").write_text(yaml.safe_dump(saved))
    assert main(argv) == 0
    capsys.readouterr()
    saved["train"]["lr"] = 0.5  # as if trained before the configuration's lr changed
    (seed / "config.yaml").write_text(yaml.safe_dump(saved))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a finished seed trained with other settings" in err
    assert "train.lr (saved 0.5, now 0.005)" in err and str(seed) in err
    assert main([*argv[:-3], "--runs-dir", str(tmp_path / "elsewhere"), "--quiet"]) == 0


def _stopper_trace(losses, accuracies, patience):
    """GAT's rule written out: (steps kept, step stopped at)."""
    best_loss, best_acc, waited, kept = math.inf, -math.inf, 0, []
    for step, (loss, acc) in enumerate(zip(losses, accuracies, strict=True), 1):
        if acc >= best_acc or loss <= best_loss:
            if acc >= best_acc and loss <= best_loss:
                kept.append(step)
            best_acc, best_loss, waited = max(acc, best_acc), min(loss, best_loss), 0
        else:
            waited += 1
            if waited == patience:
                return kept, step
    return kept, None


def test_early_stopping_follows_gats_rule(tmp_path):
    g = torch.Generator().manual_seed(0)
    losses = (1.0 / torch.arange(1, 41) + 0.05 * torch.rand(40, generator=g)).tolist()
    accuracies = (torch.rand(40, generator=g) * 0.2 + torch.linspace(0.5, 0.7, 40)).tolist()
    kept, stop = _stopper_trace(losses, accuracies, patience=3)
    model = torch.nn.Linear(2, 2)
    stopper = EarlyStopping(3, tmp_path)
    seen = []
    for step, (loss, acc) in enumerate(zip(losses, accuracies, strict=True), 1):
        with torch.no_grad():
            model.weight.fill_(step)
        stopper.update(step, {"loss": loss, "accuracy": acc}, model)
        if stopper.best_step == step:
            seen.append(step)
        if stopper.stopped:
            break
    assert seen == kept and step == (stop or 40)
    # the kept model is the last one kept, also after a restore from the counters
    again = EarlyStopping(3, tmp_path)
    again.restore(json.loads(json.dumps(stopper.state())))
    again.best_into(model)
    assert torch.all(model.weight == kept[-1]) and again.stopped == stopper.stopped


@pytest.mark.parametrize("layer", [GraphAttention, GraphAttentionV2])
def test_native_uniform_graph_attention_equals_the_engines(layer):
    """``uniform=True`` on the edge list equals the engine's uniform ablation of the layer."""
    torch.manual_seed(0)
    x = torch.randn(7, 5, dtype=torch.float64)
    edges = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 1], [1, 2, 3, 4, 5, 6, 0, 3]])
    learned = layer(5, 4, 3).double().eval()
    uniform = layer(5, 4, 3, uniform=True).double().eval()
    uniform.load_state_dict(learned.state_dict())
    with ablate(learned, mode="uniform"):
        expected = learned(x, edges)
    got = uniform(x, edges)
    assert torch.allclose(got.nodes, expected.nodes, atol=1e-12)
    # and the weights are 1/|N(i)| (self-loops included)
    degree = torch.bincount(got.edge_index[1], minlength=7).double()
    assert torch.allclose(got.weights, (1 / degree[got.edge_index[1]])[:, None].expand(-1, 3))


def test_the_reproductions_page_is_generated_from_the_json_lines():
    """docs/reproductions.md is what benchmarks/reproductions_table.py makes of the lines."""
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "reproductions_table.py"
    main_of_script = runpy.run_path(str(script))["main"]
    assert main_of_script(["--check"]) == 0


def test_uniform_null_means_no_uniform_twin_and_an_empty_list_is_refused():
    from attnkit.config import ReproduceSection

    base = {"paper": "p", "source": "s", "metric": "accuracy"}
    assert ReproduceSection(**base).uniform == ["train.attention=uniform"]
    assert ReproduceSection(**base, uniform=None).uniform is None
    with pytest.raises(ValueError, match=r"uniform: \[\] would train the same model again"):
        ReproduceSection(**base, uniform=[])
