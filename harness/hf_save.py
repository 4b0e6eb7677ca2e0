"""Is a directory a complete Hugging Face save? (publishing and scoring accept nothing less)

slime writes an HF save in this order (slime/backends/megatron_utils/hf_checkpoint_saver.py at the
commit of envs/slime-container.yaml): config.json and the tokenizer first, then the weight shards,
and model.safetensors.index.json last, after every shard has its final name. A job killed in
between leaves config.json and some shards: only the index, and every shard it names, prove a
save complete. A single-file save (model.safetensors, no index) is complete when the file is there.
"""
from __future__ import annotations

import json
from pathlib import Path

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def hf_checkpoint_problem(path: str | Path) -> str | None:
    """None for a complete HF save; otherwise one line saying what is missing."""
    path = Path(path)
    if not (path / "config.json").is_file():
        return f"{path / 'config.json'} is missing"
    index = path / INDEX
    if not index.is_file():
        if (path / SINGLE).is_file():
            return None
        return f"{path}: neither {INDEX} nor {SINGLE} (a save interrupted before its index was written)"
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{index} is not a safetensors index ({type(error).__name__}: {error})"
    if not shards:
        return f"{index} names no shard"
    missing = sorted(name for name in shards if not (path / name).is_file())
    if missing:
        return f"{path}: shard(s) named in {INDEX} missing: {missing}"
    return None
