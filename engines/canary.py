"""The canary of an engine that has one (harness.engine: Engine.canary), one job before every other train job:

    python -m engines.canary --run-dir <grid>/canary --config-json JSON --out <grid>/canary.json

JSON: the resolved run config of the grid's heaviest run (grid.jobs.canary_run). The canary trains it in
its own scratch folder (grid.folder.GridDir.canary_dir), from step 0 each time, as engines.train would
(the config pinned, the recipe's fingerprint recorded on this node, the run's lock held), and the engine
checks what its jobs left (the slime engine's: engines.slime.canary). The report is written only when the canary passes; a failure exits non-zero
naming what failed, so that Snakemake submits no train job (each depends on the report).
"""
from __future__ import annotations

import argparse
import shutil
import sys

from engines.train import record_fingerprint
from harness.cli import parse_json_arg, run_stage
from harness.io import write_json_atomic
from harness.run import RunDir
from harness.run_config import RunConfig


def canary(run_config: dict, run_dir) -> dict:
    """Check the run config, start a fresh scratch run from it, and run the engine's canary on it."""
    checked = RunConfig.check(run_config)
    if checked.engine.canary is None:
        raise ValueError(f"engine {checked.engine.name!r} has no canary")
    run = RunDir(run_dir)
    with run.lock("train", "canary"):
        # a last canary's saves would be resumed from: this one must take the first rollout, loss call and save
        shutil.rmtree(run.train_dir, ignore_errors=True)
        run.pin_config(checked.as_dict())
        record_fingerprint(run, checked)
        return checked.engine.canary(checked, run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the canary's scratch run folder")
    parser.add_argument("--config-json", required=True, help="the resolved run config (inline JSON or a file path)")
    parser.add_argument("--out", required=True, help="the report (JSON), written when the canary passes")
    args = parser.parse_args(argv)
    run_config = parse_json_arg(args.config_json, "--config-json")

    def work():
        report = canary(run_config, args.run_dir)
        write_json_atomic(args.out, report)
        return report

    return run_stage("engines.canary", work, lambda report, seconds: f"passed in {seconds:.1f} s -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
