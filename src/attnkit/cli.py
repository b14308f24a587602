"""The ``attnkit`` command.

Parsing imports nothing heavy: ``attnkit --help``, ``attnkit --version`` and ``attnkit COMMAND
--help`` answer without importing PyTorch; each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from attnkit import __version__

if TYPE_CHECKING:
    from attnkit.config import RunConfig


def _demo(args: argparse.Namespace) -> int:
    from attnkit.demo import run

    return run(runs_dir=args.runs_dir, overrides=args.set, quiet=args.quiet)


def _load_config(path: str, overrides: Sequence[str]) -> RunConfig:
    import attnkit.tasks  # noqa: F401  (registers the tasks a configuration's data.corpus names)
    from attnkit.config import load_config

    return load_config(path, overrides)


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None and args.run_dir is not None:
        raise ValueError("--run-dir names a new run; --resume continues RUN_DIR in place (one)")
    overrides = [*(args.set or []), *(["train.tensorboard=true"] if args.tensorboard else [])]
    config = _load_config(args.config, overrides)  # validated before the run is touched
    if args.check:
        return _check(args, config)
    from attnkit.train import train

    run = train(
        config,
        runs_dir=args.runs_dir,
        run_dir=args.run_dir,
        resume=args.resume,
        stop_after=args.stop_after,
        quiet=args.quiet,
        timeout=args.timeout,
    )
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for the run
        print(f"run directory: {run.path}")
    return 0


def _check(args: argparse.Namespace, config: RunConfig) -> int:
    """``attnkit train --check``: the configuration validated (above), its data read, the
    model's size compared with the memory available, and with ``--resume`` the run's
    architecture compared; nothing is written."""
    from attnkit.run import Run, check_model_fits
    from attnkit.tasks import job_for

    job = job_for(config)
    if args.resume is not None:
        from attnkit.checkpoint import CheckpointError

        try:
            Run.open(args.resume, config, job=job)  # restores what the run learnt into job
        except CheckpointError as error:  # --check answers 0 or 2: the configuration is refused
            raise ValueError(str(error)) from None
    else:
        job.learnt()  # the vocabularies the model's size depends on
    check_model_fits(config, job)
    sizes = ", ".join(f"{len(examples)} {split}" for split, examples in job.examples.items())
    print(f"{args.config}: valid; data: {sizes} {job.example_noun}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    import json

    import attnkit.tasks  # noqa: F401  (registers the tasks the configurations name)
    from attnkit import reproduce

    if args.list:
        for name in reproduce.names():
            spec = reproduce.load(name).reproduce
            assert spec is not None
            number = "" if spec.value is None else f" {spec.value:g}"
            print(f"{name:32s} {reproduce.metric_name(spec)}{number}  {spec.paper}: {spec.source}")
        return 0
    if args.name is None:
        raise ValueError("name a reproduction (attnkit reproduce --list shows them)")
    line = reproduce.reproduce(
        args.name,
        seeds=args.seeds,
        data=args.data,
        quick=args.quick,
        runs_dir=args.runs_dir,
        uniform=not args.no_uniform,
        quiet=args.quiet,
    )
    text = json.dumps(line, ensure_ascii=False)
    if args.record:
        with open(args.record, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    return 0


def _eval(args: argparse.Namespace) -> int:
    import json

    from attnkit.checkpoint import atomic_write
    from attnkit.run import Run, attention_as_configured, check_beam, lower_when_out_of_memory

    if args.set and not args.config:
        raise ValueError("--set changes a configuration given with --config (none was given)")
    config = _load_config(args.config, args.set) if args.config else None
    run = Run.open(args.run_dir, config)
    beam = check_beam(run, args.beam)
    model, step = run.load_model(args.checkpoint)
    examples = run.job.examples
    if args.split not in examples:
        raise ValueError(f"--split must be one of {', '.join(examples)}, got {args.split!r}")
    scope = attention_as_configured(run.config, model)
    with lower_when_out_of_memory(_beam_option(args.beam), beam), scope:
        results = run.job.evaluate(
            model, examples[args.split], beam_size=args.beam, quiet=args.quiet
        )
    results["step"] = step
    # printed before they are saved: a failed save (a full disk, a read-only run) loses nothing
    size, *lines = run.job.describe_results(results)
    print(f"{run.path.name} step {step}, {args.split} split, {size}", flush=True)
    for line in lines:
        print(line, flush=True)
    target = run.path / f"eval-{args.split}.json"
    try:
        atomic_write(target, json.dumps(results, indent=1))
    except OSError as error:
        print(
            f"attnkit eval: error: the results above were not saved to {target}: "
            f"{error.strerror or error}",
            file=sys.stderr,
        )
        return 1
    return 0


def _translate(args: argparse.Namespace) -> int:
    from attnkit.evaluate.translation import translate
    from attnkit.report import Alignment, format_matrix
    from attnkit.run import Run, attention_as_configured, check_beam, lower_when_out_of_memory
    from attnkit.tasks.translation import TranslationJob

    sentences = [_text_argument(sentence, "SENTENCE") for sentence in args.sentences]
    run = Run.open(args.run_dir)
    if not isinstance(run.job, TranslationJob):
        raise ValueError(
            f"{run.path}: a {run.config.data.corpus} run classifies; translate needs a "
            "translation run (use attnkit eval)"
        )
    vocabularies = run.job.vocabularies
    beam = check_beam(run, args.beam)
    model, _ = run.load_model(finite=True)
    for sentence in sentences:
        source = run.job.tokenize_source(sentence)
        if not source:
            raise ValueError(f"nothing to translate in {sentence!r}")
        scope = attention_as_configured(run.config, model)
        with lower_when_out_of_memory(_beam_option(args.beam), beam), scope:
            [(target, weights)] = translate(
                model,
                vocabularies,
                [source],
                beam_size=beam,
                max_length=run.config.decode.max_length,
            )
        print(run.job.detokenize_target(target))
        if not args.no_attention:
            known = [w if w in vocabularies.source else f"{w}(unk)" for w in source]
            print(format_matrix(Alignment(known, [*target, "<eos>"], weights)))
    return 0


def _beam_option(beam: int | None) -> str:
    """Where the beam came from: the flag, or the run's configuration."""
    return "decode.beam_size" if beam is None else "--beam"


def _text_argument(text: str, name: str) -> str:
    """A command-line text refused unless it is UTF-8: other bytes reach Python as surrogate
    escapes, which no tokenizer or page can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        byte = ord(text[error.start]) - 0xDC00  # surrogateescape maps byte b to U+DC00 + b
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else f"{text[error.start]!r}"
        raise ValueError(
            f"{name}: not UTF-8 text ({shown} at character {error.start + 1}); give the text "
            "in UTF-8"
        ) from None
    return text


def _info(args: argparse.Namespace) -> int:
    import platform

    import torch

    from attnkit.core.align import ALIGNS, LocalPredictive, build_align
    from attnkit.core.engine import explain
    from attnkit.core.scores import Location, build_score

    print(f"attnkit {__version__}, torch {torch.__version__}, Python {platform.python_version()}")
    print(
        f"machine: {platform.machine()}, {torch.get_num_threads()} threads, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    import attnkit.efficient  # noqa: F401  (registers the efficient kinds)
    from attnkit.core.kinds import kind_names

    print(f"attention kinds (MultiHeadAttention(attention=...)): {', '.join(kind_names())}")
    d = args.dim
    if args.score == "location":
        score = Location(d, args.keys)
    else:
        score = build_score(args.score, d, d)
    if ALIGNS.get(args.align) is LocalPredictive:
        align = LocalPredictive(d, args.window)
    else:
        align = build_align(args.align, d, d)
    dtype = getattr(torch, args.dtype)
    q = torch.empty(args.batch, args.heads, args.queries, d, device="meta", dtype=dtype)
    k = torch.empty(args.batch, args.heads, args.keys, d, device="meta", dtype=dtype)
    v = torch.empty(
        args.batch, args.heads, args.keys, args.value_dim or d, device="meta", dtype=dtype
    )
    print(
        explain(
            q,
            k,
            v,
            score=score,
            align=align,
            causal=args.causal,
            dropout=args.dropout,
            return_weights=args.weights,
            summary=args.summary,
            backend=args.backend,
        )
    )
    return 0


def _zoo(args: argparse.Namespace) -> int:
    from attnkit.zoo import render

    print(render())
    return 0


def _explain(args: argparse.Namespace) -> int:
    if (args.run_dir is None) == (args.hf is None):
        raise ValueError(f"{args.command} takes a RUN_DIR or --hf MODEL_DIR (one of the two)")
    text = _text_argument(args.input, "--input")
    if args.output is not None:
        # refused as torch.save and matplotlib's savefig refuse it: no folder is made on a typo
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            raise ValueError(f"--output: the folder {folder} does not exist (create it first)")
        if os.path.isdir(args.output):
            raise ValueError(f"--output: {args.output} is a folder; give a file name (.html)")
        _check_explain_output(args.output, args.run_dir, force=args.force)
    if args.hf is not None:
        from attnkit.integrations.huggingface import view_model
        from attnkit.run import memory_asked, out_of_memory

        try:
            path = view_model(args.hf, text, output=args.output)
        except (MemoryError, RuntimeError) as error:
            if not out_of_memory(error):
                raise
            # the model is the user's; what sets the sizes is the input (weights are L·H·T²)
            raise ValueError(
                f"--input: {len(text)} characters: not enough memory for their attention "
                f"({memory_asked(error)}); shorten --input"
            ) from None
        print(f"attention viewer: {path}")
        return 0
    from attnkit.run import Run, check_beam, view_run

    check_beam(Run.open(args.run_dir), args.beam)  # named as given: --beam
    path = view_run(args.run_dir, text, output=args.output, beam_size=args.beam)
    print(f"attention viewer: {path}")
    return 0


def _check_explain_output(output: str, run_dir: str | None, *, force: bool) -> None:
    """``explain --output``: never into a run's ``checkpoints/`` folder (a page there would
    replace a checkpoint or sit among them), and onto an existing file only with ``--force``."""
    explained = None if run_dir is None else os.path.realpath(os.path.join(run_dir, "checkpoints"))
    # where the page's name is replaced (a symbolic link itself, never followed) and, for a
    # symbolic link, the file it points at
    for place in {Path(os.path.abspath(output)), Path(os.path.realpath(output))}:
        for folder in place.parents:
            if os.path.realpath(folder) == explained or (
                folder.name == "checkpoints" and (folder.parent / "config.yaml").is_file()
            ):
                raise ValueError(
                    f"--output: {output} is in the run's checkpoints folder {folder}; write the "
                    "page elsewhere"
                )
    if os.path.lexists(output) and not force:
        raise ValueError(f"--output: {output} exists; give --force to replace it")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (``attnkit train: error: argument --stop-after:
    ...``, exit code 2), as every other error of the command; ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number > 0), got {text!r}") from None
    if not seconds > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text}")
    return seconds


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir", default="runs", help="where run directories go (default runs)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a configuration key, e.g. --set train.steps=100",
    )
    parser.add_argument("--quiet", action="store_true", help="plain log lines, no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="attnkit", description="Attention mechanisms in deep learning, on PyTorch."
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="train English→French translation with Bahdanau attention (~5 min), show its "
        "alignments",
        description="Trains a GRU encoder–decoder with additive (Bahdanau) attention on the "
        "bundled Tatoeba pairs, prints held-out BLEU, translates a few sentences with their "
        "alignment matrices, and writes an HTML report and PNG heatmaps into "
        "runs/demo-<timestamp>/.",
    )
    _run_options(demo)
    demo.set_defaults(func=_demo)

    train = commands.add_parser("train", help="train a run configuration (YAML)")
    train.add_argument("config", help="a YAML run configuration, e.g. configs/demo.yaml")
    _run_options(train)
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue this run from its newest checkpoint (bit-exact)",
    )
    train.add_argument(
        "--run-dir", default=None, help="write the run here (default: RUNS_DIR/<name>-<timestamp>)"
    )
    train.add_argument(
        "--stop-after",
        type=_positive_int,
        default=None,
        metavar="STEP",
        help="stop after this step with a checkpoint (resume later)",
    )
    train.add_argument(
        "--tensorboard",
        action="store_true",
        help="log the training and evaluation scalars and, at each evaluation, the report's "
        "attention heatmaps to RUN_DIR/tensorboard (as --set train.tensorboard=true)",
    )
    train.add_argument(
        "--check",
        action="store_true",
        help="validate the configuration and read its data (with --resume: compare the run's "
        "architecture), then exit 0 without training, or 2 with the problem",
    )
    train.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=1800.0,
        metavar="SECONDS",
        help="under torchrun: how long a process waits for the others (a collective) before it "
        "stops with an error naming the failure (default 1800)",
    )
    train.set_defaults(func=_train)

    evaluate = commands.add_parser(
        "eval",
        help="evaluate a run's newest checkpoint: BLEU, loss, and AER where gold alignments exist",
    )
    evaluate.add_argument("run_dir", help="a run directory")
    evaluate.add_argument("--split", default="test", help="valid or test (default test)")
    evaluate.add_argument(
        "--beam", type=_positive_int, default=None, help="beam size (default: config)"
    )
    evaluate.add_argument("--checkpoint", default=None, help="a checkpoint JSON (default newest)")
    evaluate.add_argument(
        "--config", default=None, help="check this configuration's architecture against the run's"
    )
    evaluate.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key of --config"
    )
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    evaluate.set_defaults(func=_eval)

    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run and print their alignment matrices",
    )
    translate.add_argument("run_dir", help="a run directory")
    translate.add_argument("sentences", nargs="+", help="English sentences")
    translate.add_argument(
        "--beam", type=_positive_int, default=None, help="beam size (default: config)"
    )
    translate.add_argument(
        "--no-attention", action="store_true", help="print only the translations"
    )
    translate.set_defaults(func=_translate)

    info = commands.add_parser(
        "info", help="versions, and which backend runs a given attention call and why"
    )
    info.add_argument("--score", default="scaled_dot", help="score name (default scaled_dot)")
    info.add_argument("--align", default="softmax", help="alignment name (default softmax)")
    info.add_argument("--batch", type=_positive_int, default=1)
    info.add_argument("--heads", type=_positive_int, default=8)
    info.add_argument("--queries", type=_positive_int, default=4096, help="M (default 4096)")
    info.add_argument("--keys", type=_positive_int, default=4096, help="N (default 4096)")
    info.add_argument("--dim", type=_positive_int, default=64, help="d_q = d_k (default 64)")
    info.add_argument("--value-dim", type=_positive_int, default=None, help="d_v (default: --dim)")
    info.add_argument("--window", type=_positive_int, default=10, help="D of local alignments")
    info.add_argument(
        "--dtype", default="float32", choices=["float16", "bfloat16", "float32", "float64"]
    )
    info.add_argument("--causal", action="store_true")
    info.add_argument("--weights", action="store_true", help="ask for the attention weights")
    info.add_argument("--dropout", type=_probability, default=0.0)
    info.add_argument("--summary", choices=["column_sum", "entropy", "argmax"], default=None)
    info.add_argument("--backend", default=None, help="force a backend and see if it can run")
    info.set_defaults(func=_info)

    explain = commands.add_parser(
        "view",
        aliases=["explain"],  # deprecated: "explain" is the name of the backend report
        help="translate an input with a trained run and write its attention maps as one "
        "self-contained interactive HTML page (`explain`: its deprecated name)",
    )
    explain.add_argument("run_dir", nargs="?", default=None, help="a run directory")
    explain.add_argument(
        "--hf",
        metavar="MODEL_DIR",
        default=None,
        help="instead of a run: a local Hugging Face model directory (encoder or decoder; every "
        "layer and head, the model's own tokens; needs the hf extra)",
    )
    explain.add_argument("--input", required=True, help="an English sentence (any text with --hf)")
    explain.add_argument(
        "--output",
        default=None,
        help="HTML path (default: in the run dir); an existing file is refused unless --force, "
        "a run's checkpoints/ folder always",
    )
    explain.add_argument(
        "--force", action="store_true", help="replace the --output file if it exists"
    )
    explain.add_argument(
        "--beam", type=_positive_int, default=None, help="beam size (default: config)"
    )
    explain.set_defaults(func=_explain)

    reproduce = commands.add_parser(
        "reproduce",
        help="train a paper's model on its benchmark over several seeds, compare with its number",
        description="Trains the seeds of configs/reproduce/NAME.yaml (and the same model with "
        "uniform attention), one run directory each under RUNS_DIR/reproduce/ (an interrupted "
        "reproduction resumes), prints a row per seed, the mean ± std beside the paper's "
        "number, and last one JSON line.",
    )
    reproduce.add_argument("name", nargs="?", help="a reproduction (see --list)")
    reproduce.add_argument("--list", action="store_true", help="list the reproductions")
    reproduce.add_argument(
        "--seeds", type=_positive_int, default=None, help="seeds (default: the paper's protocol)"
    )
    reproduce.add_argument(
        "--data", default=None, help="the shared data folder (default ../shared/data)"
    )
    reproduce.add_argument(
        "--quick", action="store_true", help="a few steps of one seed (what the tests run)"
    )
    reproduce.add_argument(
        "--no-uniform", action="store_true", help="skip the uniform-attention model"
    )
    reproduce.add_argument(
        "--record", default=None, metavar="FILE", help="also append the JSON line to FILE"
    )
    reproduce.add_argument("--runs-dir", default="runs", help="where runs are written")
    reproduce.add_argument("--quiet", action="store_true", help="plain log lines")
    reproduce.set_defaults(func=_reproduce)

    zoo = commands.add_parser(
        "zoo", help="every mechanism with its taxonomy row (survey Table 3) and what it is"
    )
    zoo.set_defaults(func=_zoo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["explain"]:  # the viewer's old name; "explain" is the backend report's
        print("attnkit explain is deprecated: use attnkit view (same arguments)", file=sys.stderr)
    args = build_parser().parse_args(argv)  # --help and --version end here, before torch
    from attnkit.checkpoint import CheckpointError
    from attnkit.distributed.process_group import PeerFailureError

    try:
        return int(args.func(args))
    except (CheckpointError, PeerFailureError) as error:
        # an unusable run or checkpoint, a run another process writes, or a dead or silent peer
        # under torchrun: one line, code 1
        return _fail(args.command, error, 1)
    except OSError as error:  # a full disk, a read-only run directory: the path, code 1
        where = f"{error.filename}: " if error.filename else ""
        return _fail(args.command, f"{where}{error.strerror or error}", 1)
    except (ValueError, TypeError) as error:  # bad configuration or arguments: exit code 2
        return _fail(args.command, error, 2)
    except (MemoryError, RuntimeError) as error:
        from attnkit.run import memory_asked, out_of_memory
        from attnkit.train import NonFiniteLossError

        if out_of_memory(error):  # an allocation the commands above did not attribute to a flag
            return _fail(
                args.command,
                f"not enough memory ({memory_asked(error)}); lower "
                f"{_SIZES.get(args.command, _RUN_SIZES)}",
                1,
            )
        if not isinstance(error, NonFiniteLossError):
            raise
        return _fail(args.command, error, 1)  # a diverged training run
    except KeyboardInterrupt:
        print(f"attnkit {args.command}: interrupted", file=sys.stderr)
        return 130


#: what sets the sizes a command allocates: a run's configuration and --beam, or the flags
#: of ``attnkit info``'s attention call
_RUN_SIZES = "the sizes given: model.*, train.batch_size, data.max_length, --beam"
_SIZES = {"info": "the sizes given: --batch, --heads, --queries, --keys, --dim, --value-dim"}


def _fail(command: str, error: object, code: int) -> int:
    # one line, whatever the message holds (a key with a newline, a multi-line library error)
    print(f"attnkit {command}: error: {' '.join(str(error).split())}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
