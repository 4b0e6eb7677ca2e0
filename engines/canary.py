"""The canary of an engine that has one (harness.engine: Engine.canary), one job before every other train job:

    python -m engines.canary --run-dir <grid>/canary --config-json JSON --eval-json EVAL --out <grid>/canary.json

JSON: the resolved run config of the grid's heaviest run (grid.jobs.canary_run); EVAL: ``{"tasks", "settings"}``,
the scored tasks and the settings of the grid's evaluate jobs (grid.settings.Eval.job_settings). The canary
trains the run in its own scratch folder (grid.folder.GridDir.canary_dir), from step 0 each time, as
engines.train would (the config pinned, the recipe's fingerprint recorded on this node, the run's lock
held); the engine walks its jobs' paths and checks what they left (engines.slime.canary, engines.tiny.canary),
publishing its saves as the run's checkpoints. Then the evaluation: the evaluate jobs' command
(``python -m eval.score``, workflow/rules/evaluate.smk) with their settings, one problem of each task, on
every checkpoint the canary left (the cluster engine: SGLang started on the first HF save, the second
swapped in by update_weights_from_disk). Its checkpoints are then deleted. The report is written only
when the canary passes; a failure exits non-zero naming each check that failed (the job, the step and the
file), so that Snakemake submits no train job (each depends on the report).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

from engines.train import record_fingerprint
from harness.cli import parse_json_arg, run_stage
from harness.engine import CanaryFailed
from harness.io import write_json_atomic
from harness.run import RunDir
from harness.run_config import RunConfig


def eval_command(run: RunDir, tasks: list[str], settings: dict) -> list[str]:
    """The evaluate rule's command for the canary's folder, one problem of each task."""
    one = {**settings, "problems": {task: 1 for task in tasks}}
    return [sys.executable, "-m", "eval.score", "--run-dir", str(run.path), "--tasks", *tasks,
            "--settings-json", json.dumps(one, sort_keys=True)]


def evaluate(run: RunDir, tasks: list[str], settings: dict) -> dict:
    """Score one problem of each task on every checkpoint of ``run``; returns each task's scores by step, or
    raises CanaryFailed naming the steps, the folder and the scorer's last words."""
    steps = sorted(run.checkpoints())
    job = f"the evaluation (python -m eval.score, one problem of {', '.join(tasks)})"
    if not steps:
        raise CanaryFailed([f"{job}: no checkpoint under {run.checkpoints_dir} to score"])
    done = subprocess.run(eval_command(run, tasks, settings), capture_output=True, text=True)
    print(done.stderr, file=sys.stderr, end="")  # the scorer's log, in the canary's
    if done.returncode:
        said = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        raise CanaryFailed([f"{job} of steps {steps} in {run.checkpoints_dir} exited with code {done.returncode}: "
                            + " | ".join(said)])
    found, scores = [], {}
    for task in tasks:
        rows = run.read_eval(task) if run.eval_path(task).is_file() else []
        scores[task] = {row["step"]: row["score"] for row in rows}
        if [row["step"] for row in rows] != steps or any(row["n_problems"] != 1 or not math.isfinite(row["score"])
                                                         for row in rows):
            found.append(f"{job}: {run.eval_path(task)} holds {[(r['step'], r['n_problems'], r['score']) for r in rows]}"
                         f", not one problem scored on each of steps {steps}")
    if found:
        raise CanaryFailed(found)
    return scores


def canary(run_config: dict, run_dir, evaluation: dict) -> dict:
    """Check the run config, start a fresh scratch run from it, run the engine's canary on it, then score one
    problem on what it saved (``evaluation``: tasks and settings)."""
    # the canary's folder is <grid>/canary (grid.folder.GridDir.canary_dir): a relative base model is the grid's
    checked = RunConfig.check(run_config, Path(run_dir).absolute().parent)
    if checked.engine.canary is None:
        raise ValueError(f"engine {checked.engine.name!r} has no canary")
    run = RunDir(run_dir)
    with run.lock("train", "canary"):
        # a last canary's saves would be resumed from (and its scores reused): this one starts afresh
        for folder in (run.train_dir, run.eval_dir):
            shutil.rmtree(folder, ignore_errors=True)
        run.pin_config(checked.as_dict())
        record_fingerprint(run, checked)
        try:
            report = checked.engine.canary(checked, run)
            report["evaluation"] = evaluate(run, evaluation["tasks"], evaluation["settings"])
        except CanaryFailed as failed:
            raise ValueError(f"the canary ({run.path}, recipe {checked.recipe.name}, lag {checked.lag}, seed "
                             f"{checked.seed}) failed, so no other train job of the grid is submitted: {failed}") from None
        shutil.rmtree(run.checkpoints_dir)  # nothing scores them again (~120 GB on the cluster)
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the canary's scratch run folder")
    parser.add_argument("--config-json", required=True, help="the resolved run config (inline JSON or a file path)")
    parser.add_argument("--eval-json", required=True,
                        help='{"tasks": [...], "settings": {...}}: the evaluate jobs\' tasks and settings')
    parser.add_argument("--out", required=True, help="the report (JSON), written when the canary passes")
    args = parser.parse_args(argv)
    run_config = parse_json_arg(args.config_json, "--config-json")
    evaluation = parse_json_arg(args.eval_json, "--eval-json")
    if not isinstance(evaluation, dict) or sorted(evaluation) != ["settings", "tasks"]:
        parser.error(f"--eval-json must hold tasks and settings, got {evaluation!r}")

    def work():
        report = canary(run_config, args.run_dir, evaluation)
        write_json_atomic(args.out, report)
        return report

    return run_stage("engines.canary", work, lambda report, seconds: f"passed in {seconds:.1f} s -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
