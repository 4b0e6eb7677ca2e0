"""Launch one run on slime: a checked run config and its run folder -> its job script, run -> the run's files.

    run(run_config, run)       (a harness.run_config.RunConfig and its RunDir) write the job script
                               (engines.slime.job_script), execute it, publish the HF checkpoints,
                               write the run's status
    python -m engines.slime.launch --run-dir DIR --config-json JSON [--dry-run [--no-path-check]]
    python -m engines.slime.launch --fingerprints CONFIG [--compare FILE]

``--fingerprints`` prints every recipe's fingerprint of the grid (stabilizers.fingerprint) as this
interpreter's torch computes it, as JSON; run inside the image (docs/cluster.md, First day), its output
is ``--compare``d with the login node's: each recipe whose digest differs is named.

The modules behind it, in the order they build on each other: ``params`` (engine_params, the
container pin, the model's shape), ``flags`` (every slime / Megatron flag of the run),
``preflight`` (the checks before the first GPU-hour), ``job_script`` (the job script).

Every file of the run is named by its RunDir (harness.run: ENGINE_FILES for the engine's own). When the
clock reaches the job's stop time (harness.engine.stop_time, handed to the driver in the custom config)
or SLURM's warning signal reaches the job script (which marks ``stop_requested``), the lag driver (every mode) then
saves Megatron's state of its last trained step, marks ``stopped`` and stops, and ``run`` raises
TimeLimitReached (engines.train exits 75, the retry resumes). A job that ends early without that mark
(it failed, also after the warning) is a failure.

Checkpoints: Megatron's (for resuming) in the run's ``resume_checkpoints`` folder, the last
``keep_megatron_checkpoints`` kept (engines.slime.retention, every few minutes while the job runs);
HF ones written by slime's ``--save-hf <hf_saves>/iter_{rollout_id}`` every ``eval_every`` steps and
renamed to the run's checkpoint of step rollout_id + 1 (RunDir.checkpoint_path) when the job ends,
where the evaluation stage finds them. Only complete HF saves are published (harness.hf_save); an
interrupted one is reported in the run's status and left where slime wrote it.

Everything is checked before the script is written: a recipe slime cannot express, a missing
model or data path, an unpinned container, inconsistent batch or parallel sizes, and the
pre-flight checks of engines.slime.preflight (reward vs prompt format, memory per GPU, context,
extra_args), whose report heads the job script. The job runs the pre-flight again, with slime's own
reward functions, before it starts Ray.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from engines.slime.job_script import write_job_script
from engines.slime.metrics import first_non_finite, overflow_steps
from engines.slime.plan import report as plan_report
from grid.config import load
from grid.settings import Config
from harness.cli import parse_json_arg
from harness.engine import TimeLimitReached, stop_time
from harness.hf_save import hf_checkpoint_problem
from harness.run import RunDir
from harness.run_config import RunConfig


def publish_hf_checkpoints(run: RunDir, run_config: RunConfig | None = None) -> tuple[list[Path], list[str]]:
    """Rename slime's complete HF saves <hf_saves>/iter_<r>/ to the run's checkpoint of step r + 1 (the
    layout the evaluation stage reads). Returns (published, problems): an incomplete save
    (harness.hf_save: index + every shard it names) stays where it is and is reported, never
    published. With the run config, a save off the evaluation cadence (made at a time-limit stop)
    is deleted instead: the evaluated steps are those of an uninterrupted run."""
    finish_interrupted_swaps(run)
    published, problems = [], []
    for source in sorted(run.engine_file("hf_saves").glob("iter_*")):
        match = re.fullmatch(r"iter_(\d+)", source.name)
        if not match:
            continue
        if problem := hf_checkpoint_problem(source):
            problems.append(problem)
            continue
        step = int(match.group(1)) + 1
        if run_config and step % run_config.eval_every and step != run_config.steps:
            shutil.rmtree(source)
            continue
        target = run.checkpoint_path(step)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # saved again by a resumed job: the newer save wins
            old = target.with_name(target.name + ".replaced")
            target.rename(old)
            source.rename(target)
            shutil.rmtree(old)
        else:
            source.rename(target)
        published.append(target)
    return published, problems


def finish_interrupted_swaps(run: RunDir) -> None:
    """A publish killed inside its swap (a step folder renamed to step_<N>.replaced, the newer save
    not yet renamed in, or the old one not yet deleted): the old one goes unless it is the only whole
    copy, which goes back in place (the newer save, if any, stays in hf_saves for the loop to publish)."""
    for old in sorted(run.checkpoints_dir.glob("step_*.replaced")):
        target = old.with_suffix("")
        source = run.engine_file("hf_saves") / f"iter_{int(target.name[len('step_'):]) - 1}"
        if target.exists() or (source.is_dir() and hf_checkpoint_problem(source) is None):
            shutil.rmtree(old)
        else:
            old.rename(target)


def final_status(run_config: RunConfig, run: RunDir, returncode: int) -> dict:
    """The run's status from its metrics and the job's exit code; an fp16 run's loss-scale overflows are
    skipped steps, named in the message, not divergence (engines.slime.metrics.first_non_finite)."""
    rows, fp16 = run.read_metrics(), run_config.engine_params["precision"] == "fp16"
    last = rows[-1]["step"] if rows else 0
    if row := first_non_finite(rows, fp16=fp16):
        what = "loss" if fp16 else "loss or grad norm"
        return {"status": "diverged", "step": row["step"], "message": f"non-finite {what} at step {row['step']}"}
    if returncode == 0 and last == run_config.steps:
        skipped = overflow_steps(rows) if fp16 else []
        note = f" ({len(skipped)} skipped at an fp16 loss-scale overflow: steps {skipped})" if skipped else ""
        return {"status": "completed", "step": last, "message": f"completed {last} steps{note}"}
    return {"status": "failed", "step": last, "message": f"slime job exited with code {returncode} after step {last}"}


def finished(run_config: RunConfig, run: RunDir) -> str | None:
    """The status of a run that needs no job (diverged, or completed with its last HF checkpoint
    published whole), None for one that does. A completed run whose last HF checkpoint is missing
    or incomplete raises: its job would resume after its last step and train nothing."""
    status = (run.read_status() or {}).get("status")
    if status == "completed":
        last = run.checkpoint_path(run_config.steps)
        if problem := hf_checkpoint_problem(last):
            raise FileNotFoundError(f"{run.status_path} says completed, but its last HF checkpoint is not there whole "
                                    f"({problem}); delete {run.train_dir} to train the run again")
    return status if status in ("completed", "diverged") else None


def run(run_config: RunConfig, run: RunDir) -> str:
    """Train (or resume) one run on slime; returns its final status (failed raises after writing it).
    A finished run returns at once: no job starts Ray, loads the model and trains nothing."""
    run = RunDir(run.path.resolve())
    if status := finished(run_config, run):
        return status
    script = write_job_script(run_config, run, stop_at=stop_time())
    returncode = subprocess.run(["bash", str(script)], cwd=run.path).returncode
    _, incomplete = publish_hf_checkpoints(run, run_config)
    for problem in incomplete:
        print(f"engines.slime.launch: incomplete HF checkpoint not published: {problem}", file=sys.stderr)
    status = final_status(run_config, run, returncode)
    # a stop only where the driver says it stopped at the warning with its save on disk (its `stopped`
    # mark); a job that failed after the warning came is a failure, not a resume
    if status["status"] == "failed" and run.engine_file("stopped").exists():
        raise TimeLimitReached(f"stopped after step {status['step']} of {run_config.steps} at the time-limit "
                               "warning; Megatron state saved, run again to continue")
    if incomplete:
        status["incomplete_hf_checkpoints"] = incomplete
    run.write_status(**status)
    if status["status"] == "failed":
        raise RuntimeError(f"{run.path}: {status['message']} (log: the job's output above)")
    return status["status"]


def fingerprints(model: Config) -> dict:
    """Each recipe's fingerprint digest on this interpreter, and the torch that computed them."""
    import torch

    from stabilizers import fingerprint
    from stabilizers.recipes import recipe_from_named_dict

    recipes = {run[0]: run_config["recipe"] for run, run_config in model.run_configs.items()}
    return {"torch": torch.__version__,
            "digests": {name: fingerprint(recipe_from_named_dict(recipe, name))["digest"]
                        for name, recipe in sorted(recipes.items())}}


def compare_fingerprints(ours: dict, theirs: dict) -> list[str]:
    """The recipes whose digests differ (or that one side lacks), each named with both digests."""
    names = sorted(set(ours["digests"]) | set(theirs["digests"]))
    return [f"{name}: {ours['digests'].get(name)} here (torch {ours['torch']}), {theirs['digests'].get(name)} there "
            f"(torch {theirs['torch']})" for name in names if ours["digests"].get(name) != theirs["digests"].get(name)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write (and run) the slime job of one run.")
    parser.add_argument("--plan", metavar="CONFIG", help="print the grid's GPU-hour plan (engines.slime.plan); run nothing")
    parser.add_argument("--timings", metavar="FILE", help="with --plan: YAML of measured timings (engines.slime.plan)")
    parser.add_argument("--fingerprints", metavar="CONFIG", help="print every recipe's fingerprint (JSON); run nothing")
    parser.add_argument("--compare", metavar="FILE", help="with --fingerprints: name each recipe whose digest differs "
                                                           "from FILE's (another interpreter's --fingerprints output)")
    parser.add_argument("--run-dir")
    parser.add_argument("--config-json", help="resolved run config, inline JSON or a file path")
    parser.add_argument("--dry-run", action="store_true", help="write the job script and print it; run nothing")
    parser.add_argument("--no-path-check", action="store_true",
                        help="with --dry-run: do not require the model and data paths to exist here")
    args = parser.parse_args(argv)
    if args.plan:
        try:
            given = yaml.safe_load(Path(args.timings).read_text()) if args.timings else None
            print(plan_report(Config.build(load(args.plan)), given))  # loaded and typed once
        except (ValueError, KeyError, OSError) as error:
            raise SystemExit(f"engines.slime.launch --plan: {error}") from None
        return
    if args.fingerprints:
        ours = fingerprints(Config.build(load(args.fingerprints)))
        if not args.compare:
            print(json.dumps(ours, indent=1, sort_keys=True))
            return
        differ = compare_fingerprints(ours, json.loads(Path(args.compare).read_text()))
        if differ:
            raise SystemExit("engines.slime.launch --fingerprints: the image computes other losses: " + "; ".join(differ))
        print(f"engines.slime.launch --fingerprints: all {len(ours['digests'])} digests equal {args.compare}'s")
        return
    if not (args.run_dir and args.config_json):
        parser.error("--run-dir and --config-json are required (or --plan CONFIG)")
    raw = parse_json_arg(args.config_json, "--config-json")
    try:
        run_config, folder = RunConfig.check(raw), RunDir(args.run_dir)  # checked once, as engines.train does
        if args.dry_run:
            print(write_job_script(run_config, folder, check_files=not args.no_path_check).read_text())
        else:
            print(f"engines.slime.launch: {run(run_config, folder)}", file=sys.stderr)
    except (ValueError, FileNotFoundError, KeyError) as error:
        raise SystemExit(f"engines.slime.launch: {error}") from None


if __name__ == "__main__":
    main()
