"""Train one run of the grid: ``python -m engines.run --run-dir DIR --config-json JSON``.

JSON is the resolved run config (engines.grid.resolve_run_config), inline or as a file path.
The run directory's config.json pins it: a directory holding a different config is refused
before anything is written; the same config resumes the run where it stopped.
Dispatches on config["engine"]: "tiny" (engines.tiny.trainer) or "slime" (engines.slime.launch).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engines.grid import run_key
from engines.io import write_json_atomic

ENGINES = ("tiny", "slime")


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


def run(run_config: dict, run_dir: str | Path) -> str:
    engine = run_config.get("engine")
    if engine not in ENGINES:
        raise ValueError(f"run config 'engine' = {engine!r}; expected one of {list(ENGINES)}")
    run_dir = Path(run_dir)
    run_config = {**run_config, "run_key": run_key(run_config)}  # a stale or missing key is recomputed
    if engine == "tiny":
        from engines.tiny.trainer import Trainer

        trainer = Trainer(run_config, run_dir)  # validates everything before the first write
        pin_config(run_config, run_dir)
        return trainer.run()
    from engines.slime import launch  # lazy: the cluster adapter needs slime only where it runs

    return launch.run(pin_config(run_config, run_dir), run_dir)


def parse_json_arg(value: str, flag: str) -> dict:
    """A JSON object given inline or as a path to a file holding one."""
    text = Path(value).read_text() if not value.lstrip().startswith("{") and Path(value).is_file() else value
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise SystemExit(f"{flag}: not valid JSON ({error})") from None
    if not isinstance(obj, dict):
        raise SystemExit(f"{flag}: expected a JSON object, got {type(obj).__name__}")
    return obj


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train one run of the grid (resumes if interrupted).")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--config-json", required=True, help="resolved run config, inline JSON or a file path")
    args = parser.parse_args(argv)
    try:
        status = run(parse_json_arg(args.config_json, "--config-json"), args.run_dir)
    except (ValueError, FileNotFoundError, KeyError) as error:
        raise SystemExit(f"engines.run: {error}") from None
    print(f"engines.run: {args.run_dir}: {status}", file=sys.stderr)


if __name__ == "__main__":
    main()
