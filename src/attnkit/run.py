"""A training run's directory: its configuration, what it learnt from its data, model,
checkpoints and metrics.

    runs/<name>-<timestamp>/
        config.yaml        the resolved configuration (defaults filled in)
        vocab.json         translation: source and target vocabularies
        task.json          classification: what the task learnt from its training split
        links.pharaoh      supervised attention: the aligner's links for the training pairs
        .lock              held (fcntl.flock) by the process writing the run; holds its pid
        metrics.jsonl      one line per step ({"step", "loss", "nll", "lr", ...}) and per evaluation
        checkpoints/       step-XXXXXXXX.safetensors + .json (see attnkit.checkpoint)
        results.json       final evaluation (BLEU, AER, accuracy, ...)
        report.html        the run's report; heatmaps/ its alignment matrices as PNG

:class:`Run` opens one (refusing a configuration of another architecture before anything is
loaded), restores its job (:func:`attnkit.tasks.job_for`: what the run learnt, in the job's
:attr:`~attnkit.tasks.job.Job.state_file`), builds its model and loads its checkpoints.
:func:`view_run` writes the attention viewer page of a run (its job's
:meth:`~attnkit.tasks.job.Job.view`).

A process that writes a run (``attnkit train``, also ``--resume``) holds :class:`RunLock`; a second
writer is refused naming the holder's pid. A new run's directory is a :class:`NewRunDirectory`:
removed again if the run's set-up fails, so a failed start leaves nothing behind. At the start of
a write, the temporary files of interrupted atomic writes are removed
(:func:`remove_stale_temporaries`), and a torn last line of ``metrics.jsonl`` is dropped and
reported (:func:`truncate_metrics`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnkit.checkpoint import (
    Checkpoint,
    CheckpointError,
    atomic_write,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
)
from attnkit.config import (
    ConfigError,
    RunConfig,
    architecture,
    differing_keys,
    parse_yaml,
    to_yaml,
    validate,
)
from attnkit.core.deprecation import warn_renamed
from attnkit.core.memory import process_available_memory
from attnkit.evaluate.ablation import ablate
from attnkit.tasks import Job, Task, job_for

__all__ = [
    "LOCK_FILE",
    "MetricsLog",
    "NewRunDirectory",
    "Run",
    "RunLock",
    "RunLockedError",
    "attention_as_configured",
    "available_memory",
    "check_beam",
    "check_model_fits",
    "check_new_run",
    "lower_when_out_of_memory",
    "make_run_dir",
    "memory_asked",
    "model_bytes",
    "new_run_path",
    "out_of_memory",
    "read_metrics",
    "remove_stale_temporaries",
    "require_finite",
    "truncate_metrics",
    "view_run",
]

#: the lock file of a run directory (see :class:`RunLock`)
LOCK_FILE = ".lock"


class RunLockedError(CheckpointError):
    """Another process is writing the run directory; the message names its pid."""


def _with_path(error: OSError, path: Path) -> OSError:
    """``error`` naming ``path`` (a failed write or flush does not name its file)."""
    return OSError(error.errno, error.strerror or str(error), str(path))


#: what a lock file holds: nothing, or the pid of its last holder and a newline
_PID = re.compile(rb"\d{0,20}\n?")
_LOCK_BYTES = 21
_NOT_A_LOCK = "not a lock file of attnkit"


def _open_lock_file(path: Path) -> int:
    """A descriptor of the lock file ``path``, opened (created if missing) without following a
    symbolic link and refused unless it is a regular file with no other hard link."""
    # O_NOFOLLOW: a symbolic link fails with ELOOP instead of opening (or creating) its target;
    # O_NONBLOCK: a FIFO put there does not block the open (it is refused below)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CheckpointError(
                f"{path}: {_NOT_A_LOCK} (a symbolic link, which is never followed); remove it"
            ) from None
        raise _with_path(error, path) from None
    status = os.fstat(fd)
    what = None
    if not stat.S_ISREG(status.st_mode):
        what = "not a regular file"
    elif status.st_nlink != 1:  # a hard link to a file elsewhere: truncating it would reach it
        what = f"a regular file with {status.st_nlink} hard links"
    if what is not None:
        os.close(fd)
        raise CheckpointError(f"{path}: {_NOT_A_LOCK} ({what}); remove it")
    return fd


class RunLock:
    """An exclusive lock of a run directory: ``fcntl.flock`` on ``RUN_DIR/.lock``, which holds
    the holder's pid. The kernel releases it when the process ends, even by ``kill -9``: a lock
    file left behind is free.

    Example::

        >>> with RunLock.acquire("runs/tiny"):
        ...     pass  # write the run
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, run_dir: str | Path) -> RunLock:
        """Lock ``run_dir`` (which must exist); :class:`RunLockedError` naming the holder's pid
        if another process holds it, ``OSError`` naming the lock file if it cannot be opened.

        The lock file is never followed or truncated unless it is this module's: a symbolic link,
        a file with other hard links, anything but a regular file, or a file holding anything but
        a pid is refused (:class:`~attnkit.checkpoint.CheckpointError` naming it), so a ``.lock``
        planted in a run directory cannot make the trainer overwrite another file."""
        path = Path(run_dir) / LOCK_FILE
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(
                f"{path}: the run is being written by another process (pid {holder}); wait for "
                "it to end"
            ) from None
        if not _PID.fullmatch(os.pread(fd, _LOCK_BYTES + 1, 0)):
            os.close(fd)  # never truncated: the file is not a lock file this module wrote
            raise CheckpointError(f"{path}: {_NOT_A_LOCK} (it holds other data); remove it")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as error:  # a full disk
            os.close(fd)
            raise _with_path(error, path) from None
        return cls(path, fd)

    def release(self) -> None:
        """Unlock (the file stays: removing it would race with a process opening it)."""
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# atomic_write's temporary files: ".<final name>.<8 random characters>.tmp"
_TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")
_TENSOR_FILE = re.compile(r"^step-\d{8}\.safetensors$")
# written by commands that do not lock the run (attnkit eval, attnkit view; its pages were
# explain-*.html before): never removed
_UNLOCKED_WRITES = (".eval-", ".view-", ".explain-")


def remove_stale_temporaries(run_dir: str | Path) -> list[Path]:
    """Remove what interrupted writes left in a run directory: the temporary files of atomic
    writes (in its root, ``checkpoints/``, ``heatmaps/``) and tensor files without their
    checkpoint JSON (a checkpoint exists only once its JSON does: these are a checkpoint cut off
    before its JSON, or one half-way pruned). Call it holding the run's :class:`RunLock`: no other
    writer of these files is running. Returns the removed paths."""
    removed = []
    root = Path(run_dir)
    for directory in (root, root / "checkpoints", root / "heatmaps"):
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            stale = _TEMPORARY.match(path.name) and not path.name.startswith(_UNLOCKED_WRITES)
            orphan = (
                directory.name == "checkpoints"
                and _TENSOR_FILE.match(path.name)
                and not path.with_suffix(".json").exists()
            )
            if stale or orphan:
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def new_run_path(
    config: RunConfig, runs_dir: str | Path = "runs", path: str | Path | None = None
) -> Path:
    """Where a new run of ``config`` goes: ``path``, or ``RUNS_DIR/<name>-<UTC timestamp>``."""
    if path is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        path = Path(runs_dir) / f"{config.name}-{stamp}"
    return Path(path)


def check_new_run(path: Path) -> None:
    """:class:`ConfigError` unless ``path`` is absent or empty but for a lock file (one a
    training that failed, or another training starting in it, leaves): a regular file holding
    nothing or a pid. Any other ``.lock`` (a symbolic link, a hard link, other data) is refused,
    naming it: :class:`RunLock` would refuse it too, after the directory was taken."""
    if path.exists() and any(p.name != LOCK_FILE for p in path.iterdir()):
        raise ConfigError(f"run directory {str(path)!r} exists and is not empty (use --resume)")
    lock = path / LOCK_FILE
    if os.path.lexists(lock):
        problem = _lock_file_problem(lock)
        if problem is not None:
            raise ConfigError(f"{lock}: {_NOT_A_LOCK} ({problem}); remove it or give another path")


def _lock_file_problem(lock: Path) -> str | None:
    """Why ``lock`` is not a lock file :class:`RunLock` wrote, or ``None`` if it is one."""
    try:
        status = lock.lstat()
        if stat.S_ISLNK(status.st_mode):
            return "a symbolic link, which is never followed"
        if not stat.S_ISREG(status.st_mode):
            return "not a regular file"
        if status.st_nlink != 1:
            return f"a regular file with {status.st_nlink} hard links"
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            head = os.pread(fd, _LOCK_BYTES + 1, 0)
        finally:
            os.close(fd)
    except OSError as error:
        return f"unreadable: {error.strerror or error}"
    return None if _PID.fullmatch(head) else "it holds other data"


def make_run_dir(path: Path) -> None:
    """Create ``path`` (and its parents); ``OSError`` naming it when that fails."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _with_path(error, path) from None


class NewRunDirectory:
    """A new run's directory while the run sets up: made and locked by :meth:`create`, and
    removed again if the run fails before it records its first training step.

    ``attnkit train`` exits with code 2 when nothing was run or written. Until a step is recorded
    (a line of ``metrics.jsonl``, a checkpoint) the directory holds only what a new start writes
    again from the configuration and the data (``config.yaml``, the job's state, aligner links),
    so a failed set-up — the data, the model's size, a peer — loses nothing by its removal, and
    the same ``--run-dir`` can be given again. What existed before is never removed: a directory
    (or parent) that existed stays, and so does a lock file it held.

    Example::

        >>> with NewRunDirectory.create(Path("runs/tiny")) as new:
        ...     train_in(new.path)  # an exception before its first metrics line removes runs/tiny
    """

    def __init__(self, path: Path, lock: RunLock, made: list[Path], keep_lock: bool) -> None:
        self.path, self.lock = path, lock
        self._made, self._keep_lock = made, keep_lock

    @classmethod
    def create(cls, path: str | Path) -> NewRunDirectory:
        """Check (:func:`check_new_run`), make (with its parents) and lock ``path``."""
        path = Path(path)
        check_new_run(path)
        made = []  # the directories made here, deepest first
        missing = path
        while not os.path.lexists(missing) and missing != missing.parent:
            made.append(missing)
            missing = missing.parent
        keep_lock = os.path.lexists(path / LOCK_FILE)
        make_run_dir(path)
        try:
            lock = RunLock.acquire(path)
        except BaseException:
            _remove_empty_directories(made)
            raise
        try:
            # again, locked: another training may have written the directory since the check
            check_new_run(path)
        except BaseException:
            lock.release()
            raise
        return cls(path, lock, made, keep_lock)

    def started(self) -> bool:
        """Whether the run recorded a training step (a metrics line or a checkpoint)."""
        try:
            if (self.path / "metrics.jsonl").stat().st_size > 0:
                return True
        except OSError:
            pass
        return bool(list_checkpoints(self.path / "checkpoints"))

    def __enter__(self) -> NewRunDirectory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is not None and not self.started():
                self._remove()
        finally:
            self.lock.release()

    def _remove(self) -> None:
        # under the lock: no other training writes here; errors are ignored so that the
        # set-up's own error is the one reported
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)
            _remove_empty_directories(self._made[1:])
            return
        for entry in self.path.iterdir():
            if entry.name == LOCK_FILE and self._keep_lock:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _remove_empty_directories(directories: list[Path]) -> None:
    for directory in directories:  # deepest first
        try:
            directory.rmdir()
        except OSError:  # not empty (someone else's file), or already gone
            return


class Run:
    """A run directory: its configuration, its job (with what it learnt from the training
    split), model and checkpoints.

    :meth:`create` (a new run) and :meth:`resume` (an interrupted one) return the run open and
    locked for writing — use them as context managers: the lock is held until the block ends,
    and a new run that fails before its first step is removed again. :meth:`open` reads a run
    without locking it (evaluation, translation, the viewer)."""

    def __init__(
        self,
        path: Path,
        config: RunConfig,
        job: Job,
        *,
        holder: NewRunDirectory | RunLock | None = None,
        saved: RunConfig | None = None,
    ) -> None:
        self.path, self.config, self.job = path, config, job
        self._holder = holder
        self._saved = saved or config  # the configuration in config.yaml
        #: what :meth:`resume` removed: the temporary files of interrupted writes
        self.removed: list[Path] = []

    @property
    def task(self) -> Task | None:
        """A classification run's :class:`~attnkit.tasks.Task` (``None`` for translation)."""
        task = getattr(self.job, "task", None)
        return task if isinstance(task, Task) else None

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @classmethod
    def create(
        cls,
        config: RunConfig,
        *,
        runs_dir: str | Path = "runs",
        path: str | Path | None = None,
        job: Job | None = None,
    ) -> Run:
        """A new run of ``config``: ``path`` (default ``RUNS_DIR/<name>-<timestamp>``) checked
        to be new, made and locked, what the job learns from the training split
        (:meth:`~attnkit.tasks.job.Job.learnt`) written beside the resolved configuration.
        Returned open and locked; leaving its ``with`` block by an error before the first
        training step removes what it made (:class:`NewRunDirectory`)."""
        job = job or job_for(config)
        directory = NewRunDirectory.create(new_run_path(config, runs_dir, path))
        with contextlib.ExitStack() as failing:
            failing.push(directory)  # an error below removes the directory again
            learnt = job.learnt()
            atomic_write(directory.path / "config.yaml", to_yaml(config))
            atomic_write(directory.path / job.state_file, json.dumps(learnt))
            failing.pop_all()
        return cls(directory.path, config, job, holder=directory)

    @classmethod
    def resume(
        cls, path: str | Path, config: RunConfig | None = None, *, job: Job | None = None
    ) -> Run:
        """The run ``path`` opened (as :meth:`open`: a ``config`` of another architecture is
        refused) and locked for writing, the temporary files of interrupted writes removed.
        ``config`` (default: the run's own) is what it goes on with; :meth:`save_config` writes
        it once training has been set up."""
        run = cls.open(path, config, job=job)
        run._holder = RunLock.acquire(run.path)
        try:
            run.removed = remove_stale_temporaries(run.path)
        except BaseException:
            run.close()
            raise
        return run

    @classmethod
    def open(
        cls, path: str | Path, config: RunConfig | None = None, *, job: Job | None = None
    ) -> Run:
        """Open an existing run, without locking it; with ``config``, refuse it if the
        architecture differs. The run's state is restored into ``job`` (default: a new job of
        the configuration)."""
        path = Path(path)
        config_path = path / "config.yaml"
        if not config_path.is_file():
            raise CheckpointError(f"{config_path}: not a run directory (no config.yaml)")
        try:
            raw = parse_yaml(config_path.read_text(encoding="utf-8"), str(config_path))
        except (OSError, UnicodeDecodeError, ConfigError):
            raise CheckpointError(f"{config_path}: unreadable run configuration") from None
        saved = validate(raw, str(config_path))
        if config is not None:
            differences = differing_keys(architecture(saved), architecture(config))
            if differences:
                raise CheckpointError(
                    f"{config_path}: the given configuration's architecture differs: "
                    + "; ".join(differences)
                )
        config = config or saved
        job = job or job_for(config)
        state_path = path / job.state_file
        try:
            job.restore(_read_json(state_path))
        except ValueError as error:
            raise CheckpointError(f"{state_path}: not this run's state ({error})") from None
        return cls(path, config, job, saved=saved)

    def changed_settings(self) -> list[str]:
        """``"key: saved X, given Y"`` for each setting the run goes on with that differs from
        its ``config.yaml`` (none but on a resume with other settings)."""
        return differing_keys(
            self._saved.model_dump(mode="json"), self.config.model_dump(mode="json")
        )

    def save_config(self) -> bool:
        """Write the configuration the run goes on with to ``config.yaml`` (atomically), so
        ``eval``, ``translate`` and ``explain`` read it (``--resume ... --set
        decode.max_length=20``); returns whether it changed."""
        if not self.changed_settings():
            return False
        atomic_write(self.path / "config.yaml", to_yaml(self.config))
        self._saved = self.config
        return True

    def close(self) -> None:
        """Release what :meth:`create` or :meth:`resume` holds (a no-op for :meth:`open`)."""
        holder, self._holder = self._holder, None
        if isinstance(holder, NewRunDirectory):
            holder.__exit__(None, None, None)
        elif holder is not None:
            holder.release()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        holder, self._holder = self._holder, None
        if isinstance(holder, NewRunDirectory):
            holder.__exit__(exc_type, *exc)  # removes a run that failed before its first step
        elif holder is not None:
            holder.release()

    def _build(self) -> nn.Module:
        check_model_fits(self.config, self.job)  # before the allocator could take the memory
        try:
            return self.job.build_model()
        except (MemoryError, RuntimeError) as error:
            if not out_of_memory(error):
                raise
            key, value = _largest_size(self.config)
            raise ValueError(
                f"{key}: {value}: the model does not fit in memory ({memory_asked(error)}); "
                f"lower {key}"
            ) from None

    def new_model(self) -> nn.Module:
        torch.manual_seed(self.config.seed)
        return self._build()

    def load_model(
        self, checkpoint: str | Path | None = None, *, finite: bool = False
    ) -> tuple[nn.Module, int]:
        """The model of the newest (or the given) checkpoint, in eval mode, and its step; with
        ``finite``, :class:`CheckpointError` if a weight is NaN or infinite (a diverged run)."""
        path = checkpoint or latest_checkpoint(self.checkpoints)
        if path is None:
            raise CheckpointError(f"{self.checkpoints}: no checkpoint in this run")
        try:
            loaded = read_checkpoint(path, architecture(self.config))
        except CheckpointError as error:
            if checkpoint is None or Path(checkpoint).with_suffix(".json").is_file():
                raise
            held = ", ".join(p.name for p in list_checkpoints(self.checkpoints)) or "none"
            raise CheckpointError(f"{error} (this run's: {held}, in {self.checkpoints})") from None
        model = self._build()
        loaded.restore(model)
        if finite:
            require_finite(model, loaded.path)
        return model.eval(), loaded.step

    def resume_checkpoint(self) -> Checkpoint | None:
        """The newest checkpoint, read and verified, or ``None`` if there is none.

        A damaged newest checkpoint is refused, never skipped silently (the damage may be a
        failing disk, and its steps may be recoverable); the error names the newest older
        checkpoint that is intact and every damaged checkpoint newer than it, so that moving
        those out once lets the run continue from it."""
        found = list_checkpoints(self.checkpoints)
        if not found:
            return None
        arch = architecture(self.config)
        try:
            return read_checkpoint(found[-1], arch)
        except CheckpointError as error:
            damaged = [found[-1]]
            for older in reversed(found[:-1]):
                try:
                    step = read_checkpoint(older, arch).step
                except CheckpointError:
                    damaged.append(older)
                    continue
                files = [
                    p.name
                    for json_path in damaged
                    for p in (json_path, json_path.with_suffix(".safetensors"))
                    if os.path.lexists(p)
                ]
                also = ""
                if len(damaged) > 1:
                    verb = "is" if len(damaged) == 2 else "are"
                    also = f"; {_listed([p.name for p in damaged[1:]])} {verb} damaged too"
                raise CheckpointError(
                    f"{error}{also}; the older checkpoint {older.name} (step {step}) is intact: "
                    f"move {_listed(files)} out of {self.checkpoints} and resume again to "
                    f"continue from step {step}"
                ) from None
            raise


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _largest_size(config: RunConfig) -> tuple[str, int | None]:
    """The configuration's largest integer ``model.*`` size and its value: the key most likely
    to lower when the model does not fit."""
    sizes = {
        key: value
        for key, value in architecture(config).items()
        if key.startswith("model.") and type(value) is int
    }
    largest = max(sizes, key=sizes.__getitem__, default="model.*")
    return largest, sizes.get(largest)


def model_bytes(job: Job) -> int | None:
    """What the weights and buffers of ``job``'s model take, counted on a model built on the
    ``meta`` device (shapes without memory); ``None`` if the job cannot build it there. The
    random state is left as it was: building draws nothing from the run's generator."""
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            model = job.build_model()
    except Exception:  # a job that needs real tensors to build: its real build is the check
        return None
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def available_memory() -> int | None:
    """Bytes this process can still allocate, or ``None`` where none is known:
    :func:`attnkit.core.memory.process_available_memory` (the system's available memory,
    bounded by a container's limit and by ``ulimit -v``)."""
    return process_available_memory()


def check_model_fits(config: RunConfig, job: Job) -> None:
    """Refuse a model whose weights alone take more memory than this process can allocate,
    naming the configuration's largest size, before anything is allocated.

    The allocator alone is no guard: under the kernel's overcommit a 20 GB table on a 23 GB
    machine is granted, and filling it with its initial values takes the machine's memory
    (other processes are killed) before anything fails. Only a model that cannot fit even
    without gradients and optimizer state is refused, so nothing that could run is.

    Raises:
        ValueError: ``"model.embed_dim: 100000000: the model's weights take 51.2 GB, more
            than the 19.0 GB of memory available; lower model.embed_dim"``.
    """
    needed = model_bytes(job)
    free = available_memory()
    if needed is None or free is None or needed <= free:
        return
    key, value = _largest_size(config)
    raise ValueError(
        f"{key}: {value}: the model's weights take {needed / 1e9:.1f} GB, more than the "
        f"{free / 1e9:.1f} GB of memory available; lower {key}"
    )


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is the allocator's refusal (``MemoryError``, ``std::bad_alloc``,
    torch's ``DefaultCPUAllocator: can't allocate memory``, CUDA's out of memory)."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        marker in text for marker in ("can't allocate memory", "bad_alloc", "out of memory")
    )


def memory_asked(error: BaseException) -> str:
    """What the allocator was asked for, from its message (``24.4 GB asked at once``)."""
    found = re.search(r"allocate (\d+) bytes", str(error))
    if found is None:
        return "out of memory"
    return f"{int(found.group(1)) / 1e9:.1f} GB asked at once"


@contextlib.contextmanager
def lower_when_out_of_memory(option: str, value: object) -> Iterator[None]:
    """Turn the allocator's refusal inside the block into a ``ValueError`` naming ``option``,
    the user-given size behind the allocation (``--beam 5000: ...; lower --beam``)."""
    try:
        yield
    except (MemoryError, RuntimeError) as error:
        if not out_of_memory(error):
            raise
        raise ValueError(
            f"{option} {value}: not enough memory ({memory_asked(error)}); lower {option}"
        ) from None


def check_beam(run: Run, beam: int | None, option: str = "--beam") -> int:
    """The beam a translation run decodes with (``option``'s ``beam``, else its
    ``decode.beam_size``), refused when it is wider than the target vocabulary: the first step
    has only that many continuations, so a wider beam holds nothing more and only allocates."""
    size = run.config.decode.beam_size if beam is None else beam
    vocabularies = getattr(run.job, "vocabularies", None)
    if vocabularies is None or type(size) is not int:  # nothing decoded; or the job refuses it
        return size
    words = len(vocabularies.target)
    if size > words:
        name = "decode.beam_size" if beam is None else option
        raise ValueError(
            f"{name} {size}: wider than the target vocabulary of {run.path} ({words} words): "
            f"the first step has {words} continuations to keep; give at most {words}"
        )
    return size


def require_finite(model: nn.Module, source: str | Path) -> None:
    """:class:`CheckpointError` naming ``source`` if a weight of ``model`` is NaN or infinite."""
    bad = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CheckpointError(
            f"{source}: the model's weights are not finite (NaN or inf in {', '.join(bad[:3])}"
            f"{more}): the run diverged; train it again with a smaller train.lr "
            "(train.stop_on_nonfinite: true stops a run at its first non-finite loss)"
        )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable run state ({error})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: the run state must be a JSON object")
    return state


def _metric_records(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The records of ``metrics.jsonl`` and a note if a torn last line (an interrupted append)
    was dropped; :class:`CheckpointError` naming the file and line for any other damage."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise _with_path(error, path) from None
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline, as every complete append does
    records, note = [], None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError as error:
            raise CheckpointError(
                f"{path}: line {number} is not a metrics record ({error}); the file is damaged"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise CheckpointError(f"{path}: line {number} is not a metrics record (no step)")
        records.append(record)
    if tail.strip():
        try:
            record = json.loads(tail.decode("utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError("no step")
            records.append(record)  # complete but for its newline
        except ValueError:
            note = (
                f"{path}: dropped its torn last line ({len(tail)} bytes: an interrupted write "
                f"after line {len(lines)})"
            )
    return records, note


def truncate_metrics(path: Path, step: int) -> str | None:
    """Keep metric lines up to ``step`` (a resumed run rewrites what came after its checkpoint).

    A torn last line (what a crash or a full disk leaves mid-append) is dropped; returns a one-line
    note saying so, else ``None``."""
    if not path.is_file():
        return None
    records, note = _metric_records(path)
    kept = [json.dumps(record) + "\n" for record in records if record["step"] <= step]
    atomic_write(path, "".join(kept))
    return note


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (a torn last line left out)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return _metric_records(path)[0]


class MetricsLog:
    """Appends to a run's ``metrics.jsonl``, one JSON record a line; a failed write or flush
    (a full disk) raises ``OSError`` naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = path.open("a", encoding="utf-8")
        except OSError as error:
            raise _with_path(error, path) from None

    def write(self, record: dict[str, Any]) -> None:
        try:
            self._file.write(json.dumps(record) + "\n")
        except OSError as error:
            raise _with_path(error, self.path) from None

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as error:
            raise _with_path(error, self.path) from None

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as error:
            raise _with_path(error, self.path) from None

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:  # already failing: close without masking that error with a second one
            try:
                self._file.close()
            except OSError:
                pass


def attention_as_configured(
    config: RunConfig, model: nn.Module
) -> contextlib.AbstractContextManager:
    """The scope a run's model computes in: with ``train.attention: uniform`` every attention
    the model computes through the engine uses uniform weights over its admissible keys (survey
    §4.1: the same model without what its attention learns); else nothing changes. Training,
    the final evaluation and every command that loads a run's model (``attnkit eval``,
    ``attnkit translate``, :func:`view_run`) compute in it, so a uniform run is always read as
    the model it was trained as."""
    if config.train.attention == "uniform":
        return ablate(model, mode="uniform")
    return contextlib.nullcontext()


def view_run(
    run_dir: str | Path,
    text: str,
    *,
    output: str | Path | None = None,
    beam_size: int | None = None,
) -> Path:
    """The attention viewer page of the run ``run_dir`` on the input ``text``, from its newest
    checkpoint (``attnkit view``): its job's :meth:`~attnkit.tasks.job.Job.view` — for a
    translation run, the translation of ``text`` with every attention map.

    Raises:
        attnkit.checkpoint.CheckpointError: ``run_dir`` is not a run or has no checkpoint.
        ValueError: the run's task has no viewer page, or a bad input or ``beam_size``.

    Example::

        >>> view_run("runs/tiny-20261122-101500", "I love you.")
        PosixPath('runs/tiny-20261122-101500/view-i-love-you.html')
    """
    run = Run.open(run_dir)
    beam = check_beam(run, beam_size, "beam_size")
    model, step = run.load_model(finite=True)
    with lower_when_out_of_memory("beam_size", beam), attention_as_configured(run.config, model):
        return run.job.view(
            model, step, text, directory=run.path, output=output, beam_size=beam_size
        )


def explain_run(
    run_dir: str | Path,
    text: str,
    *,
    output: str | Path | None = None,
    beam_size: int | None = None,
) -> Path:
    """Deprecated name of :func:`view_run` (warns with a ``DeprecationWarning``)."""
    warn_renamed("attnkit.run.explain_run", "attnkit.run.view_run")
    return view_run(run_dir, text, output=output, beam_size=beam_size)
