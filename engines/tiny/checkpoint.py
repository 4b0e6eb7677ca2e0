"""Model checkpoints on disk: a directory holding model.safetensors and config.json.

Writes are atomic (a temp directory beside the target, renamed into place), so a reader
sees the old checkpoint or the new one, never half of one.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .model import ModelConfig, TinyMoELM, TinyPolicy

WEIGHTS, CONFIG = "model.safetensors", "config.json"
RESUME_TENSORS, RESUME_META = "state.safetensors", "state.json"  # a trainer's resume state (engines.tiny.trainer)
# replace_dir_atomic builds the new copy in .<name>.tmp-*, moves the one it replaces to
# .<name>.old-*/x, then swaps the new one in
_BUILDING, _ASIDE, _MOVED = ".tmp-", ".old-", "x"


def replace_dir_atomic(directory: str | Path, fill) -> Path:
    """Build a directory with ``fill(tmp_path)`` in a temp dir beside ``directory``, then swap it in.
    The swap is two renames (the old copy aside, the new one in): a kill between them leaves no
    ``directory``, which recover_replaced_dir puts back."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}{_BUILDING}"))
    try:
        fill(tmp)
        if directory.exists():
            old = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}{_ASIDE}"))
            os.replace(directory, old / _MOVED)
            os.replace(tmp, directory)
            shutil.rmtree(old)
        else:
            os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def recover_replaced_dir(directory: str | Path) -> None:
    """Undo a replace_dir_atomic that a kill interrupted: when ``directory`` is missing, the last
    copy moved aside (complete: it was in place) goes back; every leftover temp dir beside it
    (an unfinished new copy, or an old one not yet deleted) is removed."""
    directory = Path(directory)
    if not directory.parent.is_dir():
        return
    aside = sorted(directory.parent.glob(f".{directory.name}{_ASIDE}*"), key=lambda path: path.stat().st_mtime_ns)
    moved_aside = [path / _MOVED for path in aside if (path / _MOVED).is_dir()]
    if not directory.exists() and moved_aside:
        os.replace(moved_aside[-1], directory)
    for leftover in [*aside, *directory.parent.glob(f".{directory.name}{_BUILDING}*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def recover_replaced_dirs(parent: str | Path) -> None:
    """recover_replaced_dir for every folder of ``parent`` that a replace_dir_atomic left leftovers beside."""
    parent = Path(parent)
    if not parent.is_dir():
        return
    names = {leftover.name[1:].rsplit(marker, 1)[0] for leftover in parent.glob(".*")
             for marker in (_BUILDING, _ASIDE) if marker in leftover.name}
    for name in sorted(names):
        recover_replaced_dir(parent / name)


def save_checkpoint(model: TinyMoELM, directory: str | Path, extra: dict | None = None) -> Path:
    """Write model.safetensors (float32) + config.json (model config, plus ``extra`` keys)."""
    state = {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}
    config = {"model": asdict(model.config), "format": "stalebench-tiny", **(extra or {})}

    def fill(tmp: Path) -> None:
        save_file(state, str(tmp / WEIGHTS))
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    return replace_dir_atomic(directory, fill)


def read_config(directory: str | Path) -> dict:
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint config not found: {path}")
    try:
        config = json.loads(path.read_text())
        ModelConfig(**config["model"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"corrupt checkpoint config {path}: {error}") from None
    return config


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file, with a clear error naming it when missing or unreadable."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"corrupt checkpoint file {path}: {error}") from None


def state_tensors(model: TinyMoELM, optimizer, snapshots: dict[int, dict], batch: dict) -> dict[str, torch.Tensor]:
    """A trainer's resume state as one flat dict, each part under its prefix: model., optim.<index>.,
    snap.<version>. (the weights the engine may still be broadcast) and batch. (the batch in flight)."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        tensors.update({f"optim.{index}.{name}": value for name, value in state.items()})
    for version, state in snapshots.items():
        tensors.update({f"snap.{version}.{k}": v for k, v in state.items()})
    return tensors | {f"batch.{k}": v for k, v in batch.items()}


def load_state_tensors(tensors: dict, model: TinyMoELM, optimizer, versions: list[int]) -> tuple[dict, dict]:
    """state_tensors read back: the model and the optimizer in place; returns (snapshots, batch)."""
    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

    model.load_state_dict(part("model."))
    optim = optimizer.state_dict()
    for index in range(len(optim["param_groups"][0]["params"])):
        optim["state"][index] = part(f"optim.{index}.")
    optimizer.load_state_dict(optim)
    return {v: part(f"snap.{v}.") for v in versions}, part("batch.")


def write_resume_state(directory: Path, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """RESUME_TENSORS and RESUME_META, replaced as one folder (replace_dir_atomic)."""
    def fill(tmp: Path) -> None:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / RESUME_TENSORS))
        (tmp / RESUME_META).write_text(json.dumps(meta, indent=2) + "\n")

    replace_dir_atomic(directory, fill)


def load_model(directory: str | Path) -> TinyMoELM:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {directory}")
    config = read_config(directory)
    model = TinyMoELM(ModelConfig(**config["model"]))
    try:
        model.load_state_dict(load_state(directory / WEIGHTS))
    except RuntimeError as error:  # missing/unexpected keys or wrong shapes
        raise ValueError(f"corrupt checkpoint file {directory / WEIGHTS}: {error}") from None
    return model


def load_policy(directory: str | Path) -> TinyPolicy:
    """The float32 policy of a checkpoint directory (safetensors only)."""
    return TinyPolicy(load_model(directory))
