"""Checkpoints: exact round trip, atomic writes under injected failures, refusal of truncated,
empty, corrupted and mismatched files with one line naming the file, no pickle anywhere."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import attnkit.checkpoint as ckpt
from attnkit.checkpoint import CheckpointError, latest_checkpoint, read_checkpoint, save_checkpoint

ARCH = {"model.hidden_dim": 8, "model.kind": "toy"}
ROOT = Path(__file__).parents[2]


def _trained(seed: int = 0, steps: int = 3):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 1.0 / (t + 1))
    for _ in range(steps):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def _save(directory, step, model, optimizer, scheduler, **kw):
    return save_checkpoint(
        directory,
        step,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        architecture=ARCH,
        **kw,
    )


def test_round_trip_restores_everything_exactly(tmp_path):
    model, optimizer, scheduler = _trained()
    _save(tmp_path, 3, model, optimizer, scheduler, extra={"data_position": 3})
    after_save = torch.randn(3)  # the RNG stream right after the checkpoint

    fresh, fresh_opt, fresh_sched = _trained(seed=1, steps=1)
    loaded = read_checkpoint(latest_checkpoint(tmp_path), ARCH)
    loaded.restore(fresh, fresh_opt, fresh_sched, rng=True)
    assert loaded.step == 3 and loaded.extra == {"data_position": 3}
    assert torch.equal(torch.randn(3), after_save)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    sa, sb = optimizer.state_dict(), fresh_opt.state_dict()
    for i in sa["state"]:
        for key, value in sa["state"][i].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(sb["state"][i][key]))
    assert scheduler.state_dict() == fresh_sched.state_dict()
    # the next optimisation step is identical too
    x = torch.randn(5, 4)
    for m, o in ((model, optimizer), (fresh, fresh_opt)):
        m.eval()
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)


def test_keeps_only_the_newest(tmp_path):
    model, optimizer, scheduler = _trained()
    for step in (1, 2, 3):
        _save(tmp_path, step, model, optimizer, scheduler, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000002.json",
        "step-00000002.safetensors",
        "step-00000003.json",
        "step-00000003.safetensors",
    ]


@pytest.mark.parametrize("fail_on", [".safetensors", ".json"])
def test_failure_during_replace_keeps_the_previous_checkpoint(tmp_path, monkeypatch, fail_on):
    model, optimizer, scheduler = _trained()
    _save(tmp_path, 1, model, optimizer, scheduler)
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith(fail_on):
            raise OSError("disk full (injected)")
        return real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", failing_replace)
    with pytest.raises(OSError, match="injected"):
        _save(tmp_path, 2, model, optimizer, scheduler)
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path).name == "step-00000001.json"
    assert read_checkpoint(latest_checkpoint(tmp_path), ARCH).step == 1
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind
    assert not (tmp_path / "step-00000002.json").exists()


def test_crash_half_way_through_a_write(tmp_path, monkeypatch):
    """The process dies after writing half of the tensor file's bytes."""
    model, optimizer, scheduler = _trained()
    _save(tmp_path, 1, model, optimizer, scheduler)
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            raise KeyboardInterrupt  # killed mid-write

    monkeypatch.setattr(ckpt.os, "fdopen", lambda fd, mode: HalfWriter(real_fdopen(fd, mode)))
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 2, model, optimizer, scheduler)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000001.json",
        "step-00000001.safetensors",
    ]
    assert read_checkpoint(latest_checkpoint(tmp_path), ARCH).step == 1


def _damage(path: Path, how: str) -> None:
    blob = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(blob[: len(blob) // 3])
    elif how == "flipped":
        path.write_bytes(blob[:-10] + bytes(b ^ 0xFF for b in blob[-10:]))
    elif how == "garbage":
        path.write_bytes(b"\x00not json or tensors" * 3)
    elif how == "missing":
        path.unlink()


@pytest.mark.parametrize("which", ["json", "safetensors"])
@pytest.mark.parametrize("how", ["empty", "truncated", "flipped", "garbage", "missing"])
def test_damaged_files_are_one_line_errors_naming_the_file(tmp_path, which, how):
    model, optimizer, scheduler = _trained()
    json_path = _save(tmp_path, 1, model, optimizer, scheduler)
    damaged = json_path.with_suffix(f".{which}")
    _damage(damaged, how)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(json_path, ARCH)
    message = str(info.value)
    assert message.startswith(str(damaged)) and "\n" not in message


def test_mismatched_architecture_is_refused_before_loading(tmp_path, monkeypatch):
    model, optimizer, scheduler = _trained()
    json_path = _save(tmp_path, 1, model, optimizer, scheduler)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read the tensors"))
    given = {"model.hidden_dim": 16, "model.kind": "toy", "model.layers": 2}
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(json_path, given)
    assert str(info.value) == (
        f"{json_path}: saved with a different architecture: model.hidden_dim: saved 8, given 16; "
        "model.layers: saved '<absent>', given 2"
    )


def test_a_model_of_other_shapes_is_left_untouched(tmp_path):
    model, optimizer, scheduler = _trained()
    json_path = _save(tmp_path, 1, model, optimizer, scheduler)
    other = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 3))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"2.weight: saved \(2, 8\), model \(3, 8\)"):
        read_checkpoint(json_path).restore(other)
    for key, value in other.state_dict().items():
        assert torch.equal(value, before[key])  # nothing half-loaded


def test_resuming_under_another_optimizer_names_both_and_loads_nothing(tmp_path):
    model, optimizer, scheduler = _trained()  # Adam
    json_path = _save(tmp_path, 1, model, optimizer, scheduler)
    fresh = copy.deepcopy(model)
    sgd = torch.optim.SGD(fresh.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(json_path, ARCH).restore(fresh, sgd)
    message = str(info.value)
    assert message.startswith(f"{json_path}: saved by another optimizer") and "\n" not in message
    # Adam's own settings against SGD's own settings, as torch names them
    assert "amsgrad, betas" in message and "dampening, momentum, nesterov" in message
    assert sgd.state_dict()["state"] == {}
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, before[key])


#: files whose data format is a pickle, read by an Unpickler that admits listed classes only
RESTRICTED_UNPICKLERS = {"src/attnkit/data/planetoid.py"}  # Planetoid's ind.* files


def test_no_pickle_anywhere():
    """No ``pickle`` and no ``torch.load`` without ``weights_only=True`` in the code we ship,
    but for a data format that is a pickle, read with an allow-list ``find_class``."""
    offenders = []
    for folder in ("src", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if re.search(r"^\s*(import|from)\s+(c?pickle|dill|joblib)\b", text, re.M):
                restricted = str(path.relative_to(ROOT)) in RESTRICTED_UNPICKLERS
                if not (restricted and "def find_class(" in text and "pickle.load(" not in text):
                    offenders.append(f"{path}: imports pickle")
            for call in re.finditer(r"torch\.load\(([^()]|\([^()]*\))*\)", text):
                if "weights_only=True" not in call.group(0):
                    offenders.append(f"{path}: {call.group(0)}")
    assert offenders == []


def test_metadata_is_plain_json(tmp_path):
    model, optimizer, scheduler = _trained()
    meta = json.loads(_save(tmp_path, 1, model, optimizer, scheduler).read_text())
    assert meta["format"] == "attnkit-checkpoint/2" and meta["step"] == 1
    assert set(meta) >= {"architecture", "fingerprint", "tensors", "optimizer", "scheduler", "rng"}


def _rewrite(json_path: Path, change, rechecksum: bool) -> None:
    """Change the checkpoint JSON's content; with ``rechecksum`` also make its checksum agree (a
    file consistent with itself but wrong, which only the structural checks can catch)."""
    meta = json.loads(json_path.read_text())
    change(meta)
    if rechecksum:
        meta["checksum"] = ckpt.content_checksum(meta)
    json_path.write_text(json.dumps(meta, indent=1))


def _set(path: str, value):
    """A change that sets ``meta[a][b]...`` (dotted path; digits index lists) to ``value``."""

    def change(meta):
        *parents, leaf = path.split(".")
        node = meta
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(leaf) if leaf.isdigit() else leaf] = value

    return change


def _drop(path: str):
    def change(meta):
        *parents, leaf = path.split(".")
        node = meta
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[leaf]

    return change


def _short_python_rng(meta):
    meta["rng"]["python"][1] = meta["rng"]["python"][1][:100]


# Content that is valid JSON but wrong (the audit's cases first); each must be refused with one
# line naming the JSON file, whether or not the checksum was made to agree.
CONTENT_DAMAGE = {
    "tensors.file missing": _drop("tensors.file"),
    "tensors.file elsewhere": _set("tensors.file", "../step-00000001.safetensors"),
    "scheduler junk": _set("scheduler", {"junk": 1}),
    "scheduler last_epoch a string": _set("scheduler.last_epoch", "3"),
    "step a string": _set("step", "abc"),
    "step another step": _set("step", 2),
    "tensors a string": _set("tensors", "abc"),
    "architecture a list": _set("architecture", ["model.hidden_dim", 8]),
    "architecture without its fingerprint": lambda meta: meta["architecture"].update(
        {"model.hidden_dim": 9}
    ),
    "python RNG state too short": _short_python_rng,
    "python RNG version": _set("rng.python.0", "three"),
    "numpy RNG of another kind": _set("rng.numpy.0", "PCG64"),
    "lr a string": _set("optimizer.param_groups.0.lr", "abc"),
    "a group setting missing": _drop("optimizer.param_groups.0.betas"),
    "group parameters changed": _set("optimizer.param_groups.0.params", [0, 1]),
    "param_groups empty": _set("optimizer.param_groups", []),
    "scalars keyed by a name": _set("optimizer.scalars", {"first": {}}),
    "extra null": _set("extra", None),
    "format of another version": _set("format", "attnkit-checkpoint/1"),
    "checksum missing": _drop("checksum"),
    "an unknown key": _set("comment", "hello"),
    "not an object": lambda meta: meta.clear(),
}
# Values that are well-formed: only the checksum can tell they were changed.
VALUE_DAMAGE = {
    "lr changed": _set("optimizer.param_groups.0.lr", 1.0),
    "scheduler step changed": _set("scheduler.last_epoch", 1),
    "data position changed": _set("extra.data_position", 0),
}


def _state(model, optimizer, scheduler):
    """Everything ``restore`` could change, copied."""
    import random

    import numpy as np

    return {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "scheduler": copy.deepcopy(scheduler.state_dict()),
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002
    }


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    oa, ob = a["optimizer"], b["optimizer"]
    assert oa["param_groups"] == ob["param_groups"] and oa["state"].keys() == ob["state"].keys()
    for i in oa["state"]:
        for key, value in oa["state"][i].items():
            assert torch.equal(value, ob["state"][i][key]), (i, key)
    assert a["scheduler"] == b["scheduler"] and a["python"] == b["python"]
    assert torch.equal(a["torch"], b["torch"])
    assert all(
        (x == y).all() if hasattr(x, "shape") else x == y
        for x, y in zip(a["numpy"], b["numpy"], strict=True)
    )


@pytest.mark.parametrize(
    ("damage", "rechecksum"),
    [
        pytest.param(
            damage, rechecksum, id=f"{damage}-{'checksum-agrees' if rechecksum else 'as-is'}"
        )
        for damage in CONTENT_DAMAGE
        for rechecksum in (False, True)
        if not (rechecksum and damage in ("checksum missing", "not an object"))
    ],
)
def test_wrong_json_content_is_refused_with_nothing_loaded(tmp_path, damage, rechecksum):
    model, optimizer, scheduler = _trained()
    json_path = _save(tmp_path, 1, model, optimizer, scheduler, extra={"data_position": 1})
    if damage == "not an object":  # a JSON list: no checksum to agree
        json_path.write_text("[1, 2, 3]")
    else:
        _rewrite(json_path, CONTENT_DAMAGE[damage], rechecksum)
    fresh, fresh_opt, fresh_sched = _trained(seed=1, steps=2)
    before = _state(fresh, fresh_opt, fresh_sched)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(json_path, ARCH).restore(fresh, fresh_opt, fresh_sched, rng=True)
    message = str(info.value)
    assert message.startswith(f"{json_path}: ") and "\n" not in message, message
    _assert_same_state(before, _state(fresh, fresh_opt, fresh_sched))  # nothing half-loaded


@pytest.mark.parametrize("damage", list(VALUE_DAMAGE), ids=list(VALUE_DAMAGE))
def test_changed_values_fail_the_checksum(tmp_path, damage):
    model, optimizer, scheduler = _trained()
    json_path = _save(tmp_path, 1, model, optimizer, scheduler, extra={"data_position": 1})
    _rewrite(json_path, VALUE_DAMAGE[damage], rechecksum=False)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(json_path, ARCH)
    assert str(info.value) == (
        f"{json_path}: corrupted checkpoint metadata (its content does not match its checksum)"
    )
    _rewrite(json_path, lambda meta: None, rechecksum=True)  # the same values, vouched for
    assert read_checkpoint(json_path, ARCH).step == 1  # well-formed: accepted


def test_checksum_is_of_the_content_without_itself(tmp_path):
    """Independent reference: SHA-256 of the canonical JSON (sorted keys, no spaces)."""
    import hashlib

    model, optimizer, scheduler = _trained()
    meta = json.loads(_save(tmp_path, 1, model, optimizer, scheduler).read_text())
    body = {k: v for k, v in meta.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert meta["checksum"] == "sha256:" + hashlib.sha256(canonical).hexdigest()


def _rewrite_tensors(json_path: Path, change) -> None:
    """Change the tensor file and make both its hash and the JSON's checksum agree."""
    import hashlib

    from safetensors.torch import load, save

    tensor_path = json_path.with_suffix(".safetensors")
    tensors = load(tensor_path.read_bytes())
    change(tensors)
    blob = save(tensors)
    tensor_path.write_bytes(blob)
    meta = json.loads(json_path.read_text())
    meta["tensors"].update(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    meta["checksum"] = ckpt.content_checksum(meta)
    json_path.write_text(json.dumps(meta))


TENSOR_DAMAGE = {
    "optimizer moment of another shape": lambda t: t.update(
        {"optimizer.0.exp_avg": torch.zeros(3, 3)}
    ),
    "optimizer state of no parameter": lambda t: t.update({"optimizer.9.exp_avg": torch.zeros(2)}),
    "torch RNG state too short": lambda t: t.update({"rng.torch": t["rng.torch"][:100]}),
    "torch RNG state missing": lambda t: t.pop("rng.torch"),
    "numpy RNG key too short": lambda t: t.update({"rng.numpy": t["rng.numpy"][:5]}),
    "an unknown tensor": lambda t: t.update({"notes": torch.zeros(1)}),
}


@pytest.mark.parametrize("damage", list(TENSOR_DAMAGE), ids=list(TENSOR_DAMAGE))
def test_wrong_tensor_content_is_refused_with_nothing_loaded(tmp_path, damage):
    model, optimizer, scheduler = _trained()
    json_path = _save(tmp_path, 1, model, optimizer, scheduler)
    _rewrite_tensors(json_path, TENSOR_DAMAGE[damage])
    fresh, fresh_opt, fresh_sched = _trained(seed=1, steps=2)
    before = _state(fresh, fresh_opt, fresh_sched)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(json_path, ARCH).restore(fresh, fresh_opt, fresh_sched, rng=True)
    message = str(info.value)
    assert message.split(": ")[0] in (str(json_path), str(json_path.with_suffix(".safetensors")))
    assert "\n" not in message
    _assert_same_state(before, _state(fresh, fresh_opt, fresh_sched))
