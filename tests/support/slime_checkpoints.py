"""Checkpoints as slime and Megatron write them (at the commits of envs/slime-container.yaml).

- HF (slime/backends/megatron_utils/hf_checkpoint_saver.py): config.json and the tokenizer copied
  first, then the weight shards, and model.safetensors.index.json last, after every shard has its
  final name ``model-<i>-of-<n>.safetensors``. A job killed in between leaves config.json and some
  shards but no index. ``total_shards=1`` writes a single-file save (model.safetensors, no index).
- Megatron: ``<save>/iter_<rollout_id, 7 digits>/`` (slime saves with iteration = rollout id), then
  ``latest_checkpointed_iteration.txt`` once the save is complete.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_hf_save(path, *, shards_written: int, total_shards: int = 3) -> Path:
    """An HF save interrupted after ``shards_written`` shards (complete when it equals total_shards)."""
    path = Path(path)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"]}))
    (path / "tokenizer_config.json").write_text("{}")
    if total_shards == 1:
        if shards_written:
            save_file({"w": np.zeros(2, dtype=np.float32)}, str(path / "model.safetensors"))
        return path
    names = [f"model-{i + 1:05d}-of-{total_shards:05d}.safetensors" for i in range(total_shards)]
    for i, name in enumerate(names[:shards_written]):
        save_file({f"layer{i}.w": np.full(2, i, dtype=np.float32)}, str(path / name))
    if shards_written == total_shards:
        index = {"metadata": {"total_size": 8 * total_shards},
                 "weight_map": {f"layer{i}.w": name for i, name in enumerate(names)}}
        (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path


def write_megatron_save(save_dir, rollout_id: int) -> Path:
    """Megatron's save of a rollout; a resumed job that replays a step saves it again, in place."""
    path = Path(save_dir) / f"iter_{rollout_id:07d}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "common.pt").write_bytes(b"0" * 16)
    (Path(save_dir) / "latest_checkpointed_iteration.txt").write_text(str(rollout_id))
    return path
