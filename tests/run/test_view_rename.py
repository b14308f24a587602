"""The attention viewer is "view" (``attnkit view``, ``attnkit.run.view_run``,
``attnkit.integrations.huggingface.view_model``, ``Job.view``,
``attnkit.interpret.translation_view``); "explain" names only the engine's backend report
(``ak.explain``). The viewer's old names keep working: each warns with a ``DeprecationWarning``,
and ``attnkit explain`` prints one deprecation line before doing what ``attnkit view`` does.
"""

from __future__ import annotations

import importlib

import pytest

import attnkit as ak
from attnkit.cli import main

DEPRECATION = "attnkit explain is deprecated: use attnkit view (same arguments)\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, pytest.CaptureResult]:
    """The exit code (argparse's refusals exit through SystemExit) and what was printed."""
    try:
        code = main(argv)
    except SystemExit as done:
        code = int(done.code or 0)
    return code, capsys.readouterr()


@pytest.mark.parametrize(
    "arguments",
    [
        ["--input", "I love you."],  # neither RUN_DIR nor --hf
        ["no-such-run", "--input", "I love you.", "--beam", "0"],
        ["no-such-run", "--input", "I love you."],
    ],
    ids=["no-source", "bad-beam", "missing-run"],
)
def test_the_old_command_prints_one_deprecation_line_then_does_what_view_does(
    arguments, capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, view = run(["view", *arguments], capsys)
    old_code, old = run(["explain", *arguments], capsys)
    assert old_code == code != 0
    assert old.out == view.out
    assert old.err.startswith(DEPRECATION)

    def named(err: str) -> str:  # a run-time error names the command as typed
        return err.replace("attnkit explain", "attnkit view").replace("explain takes", "view takes")

    assert named(old.err[len(DEPRECATION) :]) == view.err
    assert view.err.count("\n") == 1 and "deprecated" not in view.err


def test_the_new_command_is_listed_and_the_old_one_is_its_alias(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out
    assert "view (explain)" in listing


@pytest.mark.parametrize(
    "module,old,new",
    [
        ("attnkit.interpret.explain", "explain", ("attnkit.interpret.translation_view", "view_translation")),
        ("attnkit.interpret.explain", "Explanation", ("attnkit.interpret.translation_view", "TranslationView")),
        ("attnkit.interpret.explain", "slug", ("attnkit.interpret.translation_view", "slug")),
        ("attnkit.integrations.huggingface", "explain_model", ("attnkit.integrations.huggingface.view", "view_model")),
        ("attnkit.integrations.huggingface.explain", "explain_model", ("attnkit.integrations.huggingface.view", "view_model")),
    ],
)  # fmt: skip
def test_old_python_names_warn_and_are_the_new_objects(module, old, new) -> None:
    if module.startswith("attnkit.integrations"):
        pytest.importorskip("transformers")
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: use .*{new[1]}"):
        value = getattr(importlib.import_module(module), old)
    assert value is getattr(importlib.import_module(new[0]), new[1])


def test_old_names_are_not_advertised() -> None:
    """``__all__`` lists the new names only (a star import never warns)."""
    import attnkit.run

    assert "view_run" in attnkit.run.__all__ and "explain_run" not in attnkit.run.__all__
    pytest.importorskip("transformers")
    import attnkit.integrations.huggingface as hf

    assert "view_model" in hf.__all__ and "explain_model" not in hf.__all__


def test_explain_run_warns_and_calls_view_run(tmp_path) -> None:
    """The same refusal as ``view_run`` for a folder that is not a run, after the warning."""
    from attnkit.checkpoint import CheckpointError
    from attnkit.run import explain_run, view_run

    with pytest.raises(CheckpointError) as new:
        view_run(tmp_path, "I love you.")
    with (
        pytest.warns(
            DeprecationWarning, match="explain_run is deprecated: use attnkit.run.view_run"
        ),
        pytest.raises(CheckpointError) as old,
    ):
        explain_run(tmp_path, "I love you.")
    assert str(old.value) == str(new.value)


def test_job_explain_warns_and_calls_view(tmp_path) -> None:
    """``Job.explain`` hands its call to the job's ``view``, after the warning."""
    from types import SimpleNamespace

    from attnkit.tasks.job import Job

    calls = []

    def view(*args, **kwargs):
        calls.append((args, kwargs))
        return tmp_path / "page.html"

    job = SimpleNamespace(view=view)
    with pytest.warns(DeprecationWarning, match=r"Job\.explain is deprecated: use Job\.view"):
        path = Job.explain(job, "model", 7, "I love you.", directory=tmp_path, beam_size=2)
    assert path == tmp_path / "page.html"
    assert calls == [
        (("model", 7, "I love you."), {"directory": tmp_path, "output": None, "beam_size": 2})
    ]


def test_ak_explain_is_still_the_backend_report() -> None:
    import torch

    q = torch.randn(1, 1, 3, 4)
    assert "runs on:" in ak.explain(q, q, q)
