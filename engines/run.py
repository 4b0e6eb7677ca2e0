"""Train one run of the grid: ``python -m engines.run --run-dir DIR --config-json JSON``.

JSON is the resolved run config (harness.grid.resolve_run_config), inline or as a file path.
The run is checked (harness.grid.check_run, then the engine's own parameter checks) before
anything is written; the run directory's config.json then pins it (harness.identity): a
directory holding a different config is refused, the same config resumes where it stopped.
Each attempt is recorded in run_dir/provenance.json (harness.provenance: code, versions, machine).
The engine is looked up by config["engine"] in the registry (harness.engine).

One writer per run: training holds the run's locks/train.lock (harness.lock) while it pins the config
and trains; a second process on the same run directory fails at once, naming the holder. When
SLURM's time-limit warning arrives (harness.engine.TIME_LIMIT_SIGNAL) the engine saves its resume state
and this exits with harness.engine.EXIT_RESUME (75): the job ends before its limit and the retry resumes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import engine as engines
from harness.cli import parse_json_arg
from harness.grid import check_run
from harness.identity import pin_config, run_key
from harness.lock import RunLocked, writer_lock
from harness.provenance import finish_attempt, start_attempt


def run(run_config: dict, run_dir: str | Path) -> str:
    try:
        engine = engines.get(run_config.get("engine"))
    except KeyError as error:
        raise ValueError(f"run config 'engine': {error.args[0]}") from None
    run_dir = Path(run_dir)
    run_config = {**run_config, "run_key": run_key(run_config)}  # a stale or missing key is recomputed
    check_run(run_config)
    engine.resolve_params(run_config.get("engine_params") or {})
    if engine.check_run is not None:
        engine.check_run(run_config)
    with writer_lock(run_dir / "locks" / "train.lock", "train"):
        pinned = pin_config(run_config, run_dir)
        start_attempt(run_dir)
        status = engine.train(pinned, run_dir)
        finish_attempt(run_dir, status)
        return status


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train one run of the grid (resumes if interrupted).")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--config-json", required=True, help="resolved run config, inline JSON or a file path")
    args = parser.parse_args(argv)
    engines.watch_time_limit()
    try:
        status = run(parse_json_arg(args.config_json, "--config-json"), args.run_dir)
    except engines.TimeLimitReached as stop:
        print(f"engines.run: {args.run_dir}: {stop}", file=sys.stderr)
        raise SystemExit(engines.EXIT_RESUME) from None
    except (ValueError, FileNotFoundError, KeyError, RunLocked) as error:
        raise SystemExit(f"engines.run: {error}") from None
    print(f"engines.run: {args.run_dir}: {status}", file=sys.stderr)


if __name__ == "__main__":
    main()
