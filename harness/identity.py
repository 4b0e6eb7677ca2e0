"""Run identity: the run key (a hash of the resolved run config) and the run directory's pin.

The key names a run in MLflow and guards its directory: config.json pins the config a run
directory was started with, and a different config is refused before anything is written.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.io import write_json_atomic


def run_key(run_config: dict) -> str:
    body = {k: v for k, v in run_config.items() if k != "run_key"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def pin_config(run_config: dict, run_dir: Path) -> dict:
    """Write run_dir/config.json, or check that the one there is this config."""
    run_config = {**run_config, "run_key": run_key(run_config)}
    path = run_dir / "config.json"
    if path.exists():
        try:
            existing = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}); refusing to overwrite it") from None
        if run_key(existing) != run_config["run_key"]:
            changed = sorted(k for k in set(existing) | set(run_config)
                             if k != "run_key" and existing.get(k) != run_config.get(k))
            raise ValueError(f"{run_dir} holds a run with a different config (keys differing: {changed}); "
                             f"nothing was overwritten — use another directory or delete it")
    else:
        write_json_atomic(path, run_config)
    return run_config
