"""Checkpoints you can trust: safetensors for tensors, JSON for the rest, atomic writes, checked reads.

A checkpoint of step ``k`` is two files in a run's ``checkpoints/`` directory:

- ``step-0000000k.safetensors``: the model's parameters and buffers (``model.*``), the optimizer's
  per-parameter state (``optimizer.<index>.<name>``) and the tensor-valued RNG states (``rng.*``);
- ``step-0000000k.json``: everything else — format version, step, the architecture keys and their
  fingerprint, the optimizer's parameter groups, the scheduler's state, Python's RNG state, the data
  position, and the SHA-256 and size of the tensor file.

Both are written atomically (a temporary file in the same directory, flush, ``fsync``,
``os.replace``, then ``fsync`` of the directory), tensors first and the JSON last: a checkpoint
exists only once its JSON does, and the JSON vouches for the tensor file's exact bytes. A crash
half-way leaves the previous checkpoint untouched and nothing partial under a final name.

Reading never unpickles (safetensors and JSON only) and validates everything — the architecture
against the caller's (refused before any tensor is read, each differing key listed), sizes, hashes,
keys and shapes against the model — before any state is copied into a module, so a bad file never
leaves a half-loaded model. Every problem is a :class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from attnkit.config import differing_keys, fingerprint

FORMAT = "attnkit-checkpoint/1"
_NAME = re.compile(r"^step-(\d{8})\.json$")


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the message is one line naming the file."""


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that ``path`` holds either the old or the new bytes, never a
    mix: temporary file in the same directory, flush, fsync, ``os.replace``, fsync the directory."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


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


def restore_rng(tensors: Mapping[str, torch.Tensor], plain: Mapping[str, Any]) -> None:
    version, state, gauss = plain["python"]
    random.setstate((version, tuple(state), gauss))
    name, pos, has_gauss, cached = plain["numpy"]
    keys = tensors["rng.numpy"].numpy().astype(np.uint32)
    np.random.set_state((name, keys, pos, has_gauss, cached))  # noqa: NPY002
    torch.set_rng_state(tensors["rng.torch"])


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
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    for index, entries in plain["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    return {"state": state, "param_groups": plain["param_groups"]}


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
    meta = {
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
        """Copy the state into ``model`` (and optimizer, scheduler, RNGs). Keys and shapes are
        checked against ``model`` first, so a mismatch raises before anything changes."""
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
        optimizer_state = None
        if optimizer is not None:
            optimizer_state = _join_optimizer(self.tensors, self.meta["optimizer"])
            groups = optimizer.state_dict()["param_groups"]
            saved = optimizer_state["param_groups"]
            if [len(g["params"]) for g in groups] != [len(g["params"]) for g in saved]:
                raise CheckpointError(f"{self.path}: optimizer parameter groups differ")
        model.load_state_dict(state)
        if optimizer is not None:
            optimizer.load_state_dict(optimizer_state)
        if scheduler is not None and self.meta["scheduler"] is not None:
            scheduler.load_state_dict(self.meta["scheduler"])
        if rng:
            restore_rng(self.tensors, self.meta["rng"])


def read_checkpoint(path: str | Path, architecture: Mapping[str, Any] | None = None) -> Checkpoint:
    """Read and verify a checkpoint from its JSON path (or its ``.safetensors`` path).

    With ``architecture``, a checkpoint of a different architecture is refused before its tensors
    are read, listing each differing key. Raises :class:`CheckpointError` (one line naming the
    file) for a missing, empty, truncated or corrupted file."""
    json_path = Path(path).with_suffix(".json")
    try:
        text = json_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{json_path}: no such checkpoint") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{json_path}: unreadable ({error})") from None
    if not text.strip():
        raise CheckpointError(f"{json_path}: empty checkpoint file")
    try:
        meta = json.loads(text)
        if meta.get("format") != FORMAT:
            raise CheckpointError(
                f"{json_path}: not an attnkit checkpoint (format {meta.get('format')!r})"
            )
        step, saved_arch, tensors_info = meta["step"], meta["architecture"], meta["tensors"]
        _ = meta["optimizer"]["param_groups"], meta["rng"]["python"], meta["extra"]
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CheckpointError(
            f"{json_path}: corrupted checkpoint (invalid JSON metadata)"
        ) from None
    if architecture is not None:
        differences = differing_keys(saved_arch, architecture)
        if differences:
            raise CheckpointError(
                f"{json_path}: saved with a different architecture: " + "; ".join(differences)
            )
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
        raise CheckpointError(f"{tensor_path}: corrupted ({error})") from None
    return Checkpoint(path=json_path, step=int(step), meta=meta, tensors=tensors)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The JSON path of the newest checkpoint in ``directory``, or None."""
    found = list_checkpoints(directory)
    return found[-1] if found else None
