"""Train runs of the grid: ``python -m engines.train --run-dir DIR --config-json JSON [--run-dir ... --config-json ...]``.

Several pairs (a packed train job, grid.jobs.run_packs): the runs one after another in this process,
each exactly as if alone (its own checks, lock, pin, provenance, status and resume; harness.cli.run_each).

JSON is the resolved run config (grid.expand.resolve_run_config), inline or as a file path.
The run is checked once (harness.run_config.RunConfig.check: the harness's checks, the engine's parameter
checks and its check_run) before anything is written; the run directory's config.json then pins it
(harness.run.RunDir.pin_config): a directory holding a different config is refused, the same config
resumes where it stopped. The engine's train is given the checked RunConfig and the RunDir.
Before it trains, the job evaluates the recipe on a canned batch (stabilizers.fingerprint) and records it
in train/fingerprint.json: aggregate refuses a run whose loss is not its recipe's
(harness.run.RunDir.check_fingerprint), and a resume refuses a run that started with another loss.
Each attempt is recorded in run_dir/provenance.json (harness.provenance: code, versions, machine).
The engine is looked up by config["engine"] in the registry (harness.engine).

One writer per run: training holds the run's locks/train.lock (harness.lock) while it pins the config
and trains; a second process on the same run directory fails at once, naming the holder. When the job's
time limit is near (harness.engine.watch_time_limit: ``--stop-lead`` seconds before the end time SLURM
records for the job, or SLURM's warning signal, whichever comes first) the engine saves its resume state
and this exits with harness.engine.EXIT_RESUME (75): the job ends before its limit and the retry resumes.
Exit statuses: harness.cli.run_stage (2 bad input, 3 locked, 75 stopped to resume).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import parse_json_arg, run_each
from harness.engine import watch_time_limit
from harness.provenance import finish_attempt, start_attempt
from harness.run import RunDir
from harness.run_config import RunConfig
from stabilizers import fingerprint


def run(run_config: dict, run_dir: str | Path) -> str:
    run = RunDir(run_dir)
    base = run_config.get("base_model")
    grid_dir = run.grid_dir if base and not Path(base).is_absolute() else "."  # a relative base model is the grid's
    checked = RunConfig.check(run_config, grid_dir)  # the one check of this process: the engine is given it typed
    with run.lock("train", "train"):
        run.remove_train_temp_files()  # a killed attempt's: this process is the run's one writer now
        run.pin_config(checked.as_dict())
        record_fingerprint(run, checked)
        start_attempt(run, checked.engine.arithmetic_version(dict(checked.engine_params)))
        status = checked.engine.train(checked, run)
        finish_attempt(run, status)
        return status


def record_fingerprint(run: RunDir, checked: RunConfig) -> None:
    """The recipe on the canned batch, as this process computes it (train/fingerprint.json)."""
    ran = fingerprint(checked.recipe)
    started = run.read_fingerprint()
    if started is not None and started["digest"] != ran["digest"]:
        raise ValueError(f"{run.path} started with another loss (train/fingerprint.json {started['digest']}, "
                         f"recipe {checked.recipe.name!r} now {ran['digest']}): its stabilizer code changed; "
                         f"nothing was overwritten — train it in another directory or delete it")
    run.write_fingerprint(ran)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train runs of the grid, one after another (each resumes if interrupted).")
    parser.add_argument("--run-dir", required=True, action="append", help="once per run")
    parser.add_argument("--config-json", required=True, action="append",
                        help="resolved run config of the --run-dir in the same place, inline JSON or a file path")
    parser.add_argument("--stop-lead", type=float, metavar="SECONDS",
                        help="stop this long before the SLURM job's end time (the train rule's --signal lead)")
    args = parser.parse_args(argv)
    if len(args.run_dir) != len(args.config_json):
        parser.error(f"give one --config-json per --run-dir (got {len(args.run_dir)} and {len(args.config_json)})")
    runs = [(folder, parse_json_arg(text, "--config-json")) for folder, text in zip(args.run_dir, args.config_json)]
    print(f"engines.train: {watch_time_limit(args.stop_lead)}", file=sys.stderr)
    return run_each("engines.train", runs, lambda pair: run(pair[1], pair[0]),
                    lambda pair, status, seconds: f"{pair[0]}: {status} in {seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
