"""Checkpoints you can trust: safetensors for tensors, JSON for the rest, atomic writes, checked reads.

A checkpoint of step ``k`` is two files in a run's ``checkpoints/`` directory:

- ``step-0000000k.safetensors``: the model's parameters and buffers (``model.*``), the optimizer's
  per-parameter state (``optimizer.<index>.<name>``) and the tensor-valued RNG states (``rng.*``);
- ``step-0000000k.json``: everything else — format version, step, the architecture keys and their
  fingerprint, the optimizer's parameter groups, the scheduler's state, Python's RNG state, the data
  position, the SHA-256 and size of the tensor file, and a ``checksum`` of the JSON's own content
  (SHA-256 of its canonical serialisation without that field).

Both are written atomically (a temporary file in the same directory, flush, ``fsync``,
``os.replace``, then ``fsync`` of the directory), tensors first and the JSON last: a checkpoint
exists only once its JSON does, and the JSON vouches for the tensor file's exact bytes. A crash
half-way leaves the previous checkpoint untouched and nothing partial under a final name.

Reading never unpickles (safetensors and JSON only) and validates everything before any state is
copied into a module or generator: the JSON's structure and types (a strict pydantic model of it,
:class:`CheckpointMeta`) and its checksum, the architecture against the caller's (refused before
any tensor is read, each differing key listed), the tensor file's size and hash, the RNG states (set
on throw-away generators first), and — in :meth:`Checkpoint.restore` — keys and shapes against the
model, parameter groups and state shapes against the optimizer, the scheduler state's keys and
types against the scheduler. Only then is anything changed, so a bad file never leaves a
half-loaded model, optimizer or generator. Every problem is a :class:`CheckpointError`: one line
naming the file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from attnkit.config import differing_keys, fingerprint

# 2: the JSON carries a checksum of its own content (format 1 had none and is refused)
FORMAT = "attnkit-checkpoint/2"
_NAME = re.compile(r"^step-(\d{8})\.json$")


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the message is one line naming the file."""


class _Strict(BaseModel):
    # strict: a JSON "3" is not the step 3, a list is not a mapping; nothing unknown is ignored
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class TensorFileMeta(_Strict):
    """The tensor file a checkpoint JSON vouches for: its name beside the JSON, size and hash."""

    file: str = Field(pattern=r"^step-\d{8}\.safetensors$")
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class OptimizerMeta(_Strict):
    """The optimizer's parameter groups and the non-tensor entries of its per-parameter state
    (keyed by parameter index); its tensors are in the tensor file."""

    param_groups: list[dict[str, Any]] = Field(min_length=1)
    scalars: dict[Annotated[str, Field(pattern=r"^\d+$")], dict[str, Any]]


class RngMeta(_Strict):
    """Python's ``random.getstate()`` as ``[version, state (625 ints), gauss]`` and NumPy's legacy
    generator as ``[name, pos, has_gauss, cached_gaussian]`` (its key is in the tensor file)."""

    python: list[Any] = Field(min_length=3, max_length=3)
    numpy: list[Any] = Field(min_length=4, max_length=4)


class CheckpointMeta(_Strict):
    """The checkpoint JSON, field by field; a file that does not fit it is corrupted."""

    format: Literal["attnkit-checkpoint/2"]
    step: int = Field(ge=0)
    architecture: dict[str, Any]
    fingerprint: str
    tensors: TensorFileMeta
    optimizer: OptimizerMeta
    scheduler: dict[str, Any] | None
    rng: RngMeta
    extra: dict[str, Any]
    checksum: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")


def content_checksum(meta: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of the checkpoint JSON's content without its ``checksum`` field, in a
    canonical serialisation (sorted keys, no spaces, ASCII), so any change of a value is seen."""
    body = {key: value for key, value in meta.items() if key != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, racing threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that ``path`` holds either the old or the new bytes, never a
    mix: temporary file in the same directory, flush, fsync, ``os.replace``, fsync the directory.

    The file gets the mode a plain ``open`` would (``0o666`` less the umask; ``mkstemp`` alone
    makes it ``0o600``). A failure (a full disk, a read-only directory) raises ``OSError`` naming
    ``path``, with the temporary file removed."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as error:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror or str(error), str(path)) from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def capture_rng() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every RNG state: tensors (torch CPU generator, NumPy's key) and JSON (Python's, NumPy's
    scalars)."""
    version, state, gauss = random.getstate()
    # the legacy global generator is what third-party code seeds and draws from
    name, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    tensors = {
        "rng.torch": torch.get_rng_state(),
        "rng.numpy": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
    }
    plain = {
        "python": [version, list(state), gauss],
        "numpy": [name, int(pos), int(has_gauss), float(cached)],
    }
    return tensors, plain


def _rng_states(
    tensors: Mapping[str, torch.Tensor], plain: Mapping[str, Any]
) -> tuple[tuple[Any, ...], tuple[Any, ...], torch.Tensor]:
    """Python's, NumPy's and torch's states in the forms their setters take, each set on a
    throw-away generator first: a bad state raises here, before any global generator changes."""
    version, state, gauss = plain["python"]
    python_state = (version, tuple(state), gauss)
    random.Random().setstate(python_state)
    name, pos, has_gauss, cached = plain["numpy"]
    keys = tensors["rng.numpy"].numpy().astype(np.uint32)
    numpy_state = (name, keys, pos, has_gauss, cached)
    np.random.RandomState().set_state(numpy_state)
    torch_state = tensors["rng.torch"]
    torch.Generator().set_state(torch_state)
    return python_state, numpy_state, torch_state


def restore_rng(tensors: Mapping[str, torch.Tensor], plain: Mapping[str, Any]) -> None:
    """Set every global RNG from :func:`capture_rng`'s output (all validated before any is set)."""
    _set_rng(*_rng_states(tensors, plain))


def _set_rng(python_state: tuple, numpy_state: tuple, torch_state: torch.Tensor) -> None:
    """Set the global generators from states :func:`_rng_states` validated."""
    random.setstate(python_state)
    np.random.set_state(numpy_state)  # noqa: NPY002
    torch.set_rng_state(torch_state)


def _split_optimizer(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value.detach().contiguous().clone()
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _join_optimizer(tensors: Mapping[str, torch.Tensor], plain: Mapping[str, Any]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)  # read_checkpoint checked the names' form
            state.setdefault(int(index), {})[key] = value
    for index, entries in plain["scalars"].items():
        state.setdefault(int(index), {}).update(copy.deepcopy(entries))
    return {"state": state, "param_groups": copy.deepcopy(plain["param_groups"])}


def _as_json(value: Any) -> Any:
    """``value`` as a checkpoint's JSON holds it (tuples → lists, keys → strings)."""
    return json.loads(json.dumps(value))


def _kind_difference(expected: Any, given: Any, where: str) -> str | None:
    """Where ``given`` (read from a checkpoint) differs in structure or type from ``expected`` (the
    live object's state as JSON): same keys, same list lengths, same scalar types. None if it fits.
    Values may differ — that is what a checkpoint is for — but a string where a learning rate was,
    or a missing key, would be accepted by ``load_state_dict`` and break training later."""
    if isinstance(expected, dict):
        if not isinstance(given, dict):
            return f"{where}: expected a mapping, got {type(given).__name__}"
        if set(expected) != set(given):
            missing, unknown = (
                sorted(set(expected) - set(given)),
                sorted(set(given) - set(expected)),
            )
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unexpected {', '.join(unknown)}"] if unknown else []
            )
            return f"{where}: {'; '.join(parts)}"
        for key in expected:
            problem = _kind_difference(expected[key], given[key], f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(given, list) or len(given) != len(expected):
            return f"{where}: expected a list of {len(expected)}, got {given!r:.40}"
        for i, (a, b) in enumerate(zip(expected, given, strict=True)):
            problem = _kind_difference(a, b, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if type(given) is not type(expected):  # JSON keeps int, float, bool, str and null apart
        return f"{where}: expected {type(expected).__name__}, got {given!r:.40}"
    return None


def _group_sizes(groups: list[dict[str, Any]]) -> list[int | None]:
    return [len(g["params"]) if isinstance(g.get("params"), list) else None for g in groups]


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def checkpoint_path(directory: str | Path, step: int) -> Path:
    """The JSON file of step ``step``'s checkpoint."""
    return Path(directory) / f"step-{step:08d}.json"


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Checkpoint JSON files in ``directory``, oldest step first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def save_checkpoint(
    directory: str | Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    architecture: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    keep: int | None = None,
) -> Path:
    """Write step ``step``'s checkpoint atomically (tensors, then JSON) and keep the ``keep``
    newest. Returns the JSON path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # clone: tied parameters share storage, which safetensors refuses to write twice
    tensors = {f"model.{k}": v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    optim_tensors, optim_plain = _split_optimizer(optimizer.state_dict())
    rng_tensors, rng_plain = capture_rng()
    blob = save_tensors({**tensors, **optim_tensors, **rng_tensors})
    json_path = checkpoint_path(directory, step)
    tensor_path = json_path.with_suffix(".safetensors")
    atomic_write(tensor_path, blob)
    # the checksum is of the content as a reader will parse it (tuples → lists, keys → strings)
    meta = _as_json(
        {
            "format": FORMAT,
            "step": step,
            "architecture": dict(architecture),
            "fingerprint": fingerprint(architecture),
            "tensors": {
                "file": tensor_path.name,
                "bytes": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest(),
            },
            "optimizer": optim_plain,
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "rng": rng_plain,
            "extra": dict(extra or {}),
        }
    )
    meta["checksum"] = content_checksum(meta)
    atomic_write(json_path, json.dumps(meta, indent=1))
    if keep is not None:
        for old in list_checkpoints(directory)[:-keep]:
            old.unlink()  # the JSON first: a checkpoint without JSON no longer exists
            old.with_suffix(".safetensors").unlink(missing_ok=True)
    return json_path


@dataclass
class Checkpoint:
    """A checkpoint read and verified in memory; nothing has been copied into a module yet."""

    path: Path
    step: int
    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @property
    def extra(self) -> dict[str, Any]:
        return self.meta["extra"]

    def model_state(self) -> dict[str, torch.Tensor]:
        return {k[6:]: v for k, v in self.tensors.items() if k.startswith("model.")}

    def restore(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        rng: bool = False,
    ) -> None:
        """Copy the state into ``model`` (and optimizer, scheduler, global RNGs).

        Everything is checked before anything changes — the model's keys and shapes, the
        optimizer's parameter groups (count, sizes, settings' types) and per-parameter state
        shapes, the scheduler state's keys and types, the RNG states on throw-away generators —
        so a :class:`CheckpointError` leaves the model, optimizer, scheduler and RNGs as they
        were."""
        state = self._model_state_for(model)
        optimizer_state = None if optimizer is None else self._optimizer_state_for(optimizer)
        scheduler_state = None if scheduler is None else self._scheduler_state_for(scheduler)
        rng_states = None
        if rng:
            try:
                rng_states = _rng_states(self.tensors, self.meta["rng"])
            except Exception as error:  # as in read_checkpoint: nothing global was touched
                raise CheckpointError(
                    f"{self.path}: corrupted RNG state ({_one_line(error)})"
                ) from None
        # every check passed: from here on nothing can fail half-way
        model.load_state_dict(state)
        if optimizer is not None:
            optimizer.load_state_dict(optimizer_state)
        if scheduler is not None:
            scheduler.load_state_dict(scheduler_state)
        if rng_states is not None:
            _set_rng(*rng_states)

    def _model_state_for(self, model: nn.Module) -> dict[str, torch.Tensor]:
        state = self.model_state()
        own = model.state_dict()
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        wrong = [k for k in own if k in state and own[k].shape != state[k].shape]
        if missing or unexpected or wrong:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing[:5])}")
            if unexpected:
                parts.append(f"unexpected {', '.join(unexpected[:5])}")
            if wrong:
                parts.append(
                    ", ".join(
                        f"{k}: saved {tuple(state[k].shape)}, model {tuple(own[k].shape)}"
                        for k in wrong[:5]
                    )
                )
            raise CheckpointError(f"{self.path}: does not fit the model ({'; '.join(parts)})")
        return state

    def _optimizer_state_for(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        saved = _join_optimizer(self.tensors, self.meta["optimizer"])
        own = optimizer.state_dict()
        groups, saved_groups = own["param_groups"], saved["param_groups"]
        if _group_sizes(groups) != _group_sizes(saved_groups):
            raise CheckpointError(f"{self.path}: optimizer parameter groups differ")
        # another optimizer's settings (SGD's momentum where Adam keeps betas) are a changed
        # configuration, not damage: say which settings each has
        if groups and saved_groups and isinstance(saved_groups[0], dict):
            own_keys = set(groups[0]) - {"params"}
            saved_keys = set(saved_groups[0]) - {"params"}
            if own_keys != saved_keys:
                raise CheckpointError(
                    f"{self.path}: saved by another optimizer (settings only it has: "
                    f"{', '.join(sorted(saved_keys - own_keys)) or 'none'}; only this optimizer "
                    f"has: {', '.join(sorted(own_keys - saved_keys)) or 'none'}); resume with "
                    f"the optimizer the run was trained with, or start a new run"
                )
        # the settings of each group: same keys and types as this optimizer's (values may differ)
        problem = _kind_difference(_as_json(groups), saved_groups, "param_groups")
        if problem is None and [g["params"] for g in groups] != [g["params"] for g in saved_groups]:
            problem = "param_groups: parameter indices differ"
        if problem:
            raise CheckpointError(f"{self.path}: corrupted optimizer state ({problem})")
        shapes = {
            index: param.shape
            for group, own_group in zip(optimizer.param_groups, groups, strict=True)
            for index, param in zip(own_group["params"], group["params"], strict=True)
        }
        for index, entries in saved["state"].items():
            if index not in shapes:
                raise CheckpointError(
                    f"{self.path}: corrupted optimizer state (state of parameter {index}, "
                    f"which no group holds)"
                )
            for key, value in entries.items():
                # per-parameter tensors are the parameter's shape (moments) or scalars (step)
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != shapes[index]:
                    raise CheckpointError(
                        f"{self.path}: corrupted optimizer state (optimizer.{index}.{key}: "
                        f"shape {tuple(value.shape)}, parameter {tuple(shapes[index])})"
                    )
        return saved

    def _scheduler_state_for(self, scheduler: torch.optim.lr_scheduler.LRScheduler) -> dict:
        saved = self.meta["scheduler"]
        if saved is None:
            raise CheckpointError(f"{self.path}: saved without a scheduler state")
        problem = _kind_difference(_as_json(scheduler.state_dict()), saved, "scheduler")
        if problem:
            raise CheckpointError(f"{self.path}: corrupted scheduler state ({problem})")
        return copy.deepcopy(saved)  # LambdaLR.load_state_dict pops from what it is given


_TENSOR_NAME = re.compile(r"^(model\..+|optimizer\.\d+\..+|rng\.(torch|numpy))$")


def _parse_meta(json_path: Path, text: str) -> dict[str, Any]:
    """The checkpoint JSON ``text``, checked against :class:`CheckpointMeta` and its checksum."""
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):
        raise CheckpointError(f"{json_path}: corrupted checkpoint (not valid JSON)") from None
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"{json_path}: corrupted checkpoint (a JSON {type(meta).__name__}, not an object)"
        )
    found = meta.get("format")
    if found != FORMAT:
        if isinstance(found, str) and found.startswith("attnkit-checkpoint/"):
            raise CheckpointError(
                f"{json_path}: checkpoint format {found!r} is not readable by this attnkit "
                f"(it reads {FORMAT!r})"
            )
        raise CheckpointError(f"{json_path}: not an attnkit checkpoint (format {found!r})")
    try:
        CheckpointMeta.model_validate(meta)
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'checkpoint'}: {e['msg']}"
            + (f" (given {e['input']!r:.40})" if e["type"] != "missing" else "")
            for e in error.errors()[:3]
        ]
        raise CheckpointError(
            f"{json_path}: corrupted checkpoint metadata: {'; '.join(problems)}"
        ) from None
    if content_checksum(meta) != meta["checksum"]:
        raise CheckpointError(
            f"{json_path}: corrupted checkpoint metadata (its content does not match its checksum)"
        )
    named = _NAME.match(json_path.name)
    if named and int(named.group(1)) != meta["step"]:
        raise CheckpointError(f"{json_path}: corrupted checkpoint (it says step {meta['step']})")
    if fingerprint(meta["architecture"]) != meta["fingerprint"]:
        raise CheckpointError(
            f"{json_path}: corrupted checkpoint (architecture does not match its fingerprint)"
        )
    return meta


def read_checkpoint(path: str | Path, architecture: Mapping[str, Any] | None = None) -> Checkpoint:
    """Read and verify a checkpoint from its JSON path (or its ``.safetensors`` path).

    With ``architecture``, a checkpoint of a different architecture is refused before its tensors
    are read, listing each differing key. Raises :class:`CheckpointError` (one line naming the
    file) for a missing, empty, truncated or corrupted file — in either file, in bytes or in
    content (wrong structure or types, a checksum that does not match, a bad RNG state)."""
    given = Path(path)
    expected = "a checkpoint is a step-XXXXXXXX.json (or its .safetensors) of a run's checkpoints/"
    if given.suffix not in (".json", ".safetensors"):
        raise CheckpointError(f"{given}: not a checkpoint of attnkit; {expected}")
    json_path = given.with_suffix(".json")
    try:
        text = json_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if given != json_path and given.exists():  # the tensors without the JSON vouching them
            raise CheckpointError(
                f"{given}: its checkpoint {json_path.name} is missing (a checkpoint exists once "
                "its JSON does)"
            ) from None
        raise CheckpointError(f"{given}: no such checkpoint; {expected}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{json_path}: unreadable ({_one_line(error)})") from None
    if not text.strip():
        raise CheckpointError(f"{json_path}: empty checkpoint file")
    meta = _parse_meta(json_path, text)
    if architecture is not None:
        differences = differing_keys(meta["architecture"], architecture)
        if differences:
            raise CheckpointError(
                f"{json_path}: saved with a different architecture: " + "; ".join(differences)
            )
    tensors_info = meta["tensors"]
    tensor_path = json_path.parent / tensors_info["file"]
    try:
        blob = tensor_path.read_bytes()
    except OSError:
        raise CheckpointError(f"{tensor_path}: missing tensor file") from None
    if len(blob) != tensors_info["bytes"]:
        what = "empty" if not blob else "truncated or extended"
        raise CheckpointError(
            f"{tensor_path}: {what} ({len(blob)} bytes, expected {tensors_info['bytes']})"
        )
    if hashlib.sha256(blob).hexdigest() != tensors_info["sha256"]:
        raise CheckpointError(f"{tensor_path}: corrupted (SHA-256 does not match its checkpoint)")
    try:
        tensors = load_tensors(blob)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{tensor_path}: corrupted ({_one_line(error)})") from None
    odd = sorted(name for name in tensors if not _TENSOR_NAME.match(name))
    if odd:
        raise CheckpointError(f"{tensor_path}: corrupted (unexpected tensors {', '.join(odd[:5])})")
    absent = [name for name in ("rng.torch", "rng.numpy") if name not in tensors]
    if absent:
        raise CheckpointError(f"{tensor_path}: corrupted (no {' or '.join(absent)} tensor)")
    try:
        _rng_states(tensors, meta["rng"])  # on throw-away generators: the global ones are untouched
    except Exception as error:  # whatever a setter objects to (NumPy raises IndexError, too)
        raise CheckpointError(f"{json_path}: corrupted RNG state ({_one_line(error)})") from None
    return Checkpoint(path=json_path, step=meta["step"], meta=meta, tensors=tensors)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The JSON path of the newest checkpoint in ``directory``, or None."""
    found = list_checkpoints(directory)
    return found[-1] if found else None
