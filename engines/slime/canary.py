"""The slime engine's canary (harness.engine: Engine.canary; engines.canary runs it before every other train job).

Sixty-odd jobs that start at once with two retries each turn a failure common to all of them (the image,
its torch computing another loss, Megatron's checks of the model's config.json, SGLang's weight
versions, a save the file system refuses, a resume that does not load) into thousands of GPU-hours
before anyone reads a log. The canary runs the grid's heaviest run (grid.jobs.canary_run: an R3 recipe
at the grid's largest lag) alone, through the same job script as a train job (engines.slime.job_script:
the container, the commit check, the pre-flight, Ray, slime's ``parse_args``), twice:

1. the walk (engines.slime.driver.canary_end): it trains until two pushes after training have sampled
   rollouts and a rollout was sampled at the full lag, saves that step (Megatron and HF) and stops
   there as at the time limit (the ``stopped`` mark); at interval lag 8 that is 18 steps;
2. the resume: the same job again resumes from that save, trains one step, saves it and ends.

It then checks what each job left in the scratch run folder, naming the job, the step and the file:
the exit code; the stop's mark at the walk's last step; the rollout log (engines.slime.metrics.log_rollout)
holding three SGLang weight versions (the first push and two after training) and a rollout at the full
lag; a finite metrics row for every step trained; the trainer's fingerprint of the recipe, computed
inside the image by the loss hook (engines.slime.loss.check_trainer_fingerprint), equal to the one
engines.canary recorded on the node; each job's Megatron save (``latest_checkpointed_iteration.txt``
names it) and HF save whole (harness.hf_save). Any failed check fails the canary, and no other train job
is submitted. A passed canary's two HF saves are published as the run's checkpoints of steps 18 and 19
(engines.slime.launch.publish_hf_checkpoints, as a train job publishes its own), where engines.canary then
starts the evaluation server on the first with the grid's eval command and scores one problem on each;
its two Megatron saves with their optimizer (~0.9 TB for Qwen3-30B-A3B) are deleted; its logs, job script
and rows stay for reading.
"""
from __future__ import annotations

import shutil
import subprocess

from engines.slime.driver import canary_end
from engines.slime.job_script import write_job_script
from engines.slime.launch import publish_hf_checkpoints
from engines.slime.metrics import first_non_finite
from harness.engine import CanaryFailed
from harness.hf_save import hf_checkpoint_problem
from harness.io import read_json, read_jsonl
from harness.run import RunDir
from harness.run_config import RunConfig


def saves(run: RunDir, rollout_id: int, job: str) -> tuple[list[str], dict]:
    """Whether the Megatron and HF saves of ``rollout_id`` are whole."""
    found, left = [], {}
    megatron = run.engine_file("resume_checkpoints")
    latest = megatron / "latest_checkpointed_iteration.txt"  # Megatron writes it once a save is whole
    iteration = latest.read_text().strip() if latest.is_file() else ""
    if iteration != str(rollout_id) or not (megatron / f"iter_{rollout_id:07d}").is_dir():
        found.append(f"{job}: no whole Megatron save of step {rollout_id + 1} ({latest} names {iteration or 'none'})")
    else:
        left["megatron_save"] = rollout_id
    if problem := hf_checkpoint_problem(run.engine_file("hf_saves") / f"iter_{rollout_id}"):
        found.append(f"{job}: no whole HF save of step {rollout_id + 1}: {problem}")
    else:
        left["hf_save"] = f"iter_{rollout_id}"
    return found, left


def walk_problems(run_config: RunConfig, run: RunDir, returncode: int) -> tuple[list[str], dict]:
    """What the walk (the first canary job) did not leave as it should (empty: passed), and what it left."""
    job, lag = "the walk (first job)", run_config.lag
    last = canary_end(mode=run_config.lag_mode, lag=lag, seed=run_config.seed, start=0, end=run_config.steps)
    found, left = [], {"stop_step": last + 1}
    if returncode:
        found.append(f"{job} exited with code {returncode} (its log above; {run.engine_file('job_script')})")
    mark = run.engine_file("stopped")
    stopped = mark.read_text().strip() if mark.is_file() else ""
    if stopped != str(last):
        found.append(f"{job} did not stop after step {last + 1} as at the time limit ({mark}: {stopped or 'missing'})")
    rollouts = run.engine_file("rollouts")
    records = read_jsonl(rollouts) if rollouts.is_file() else []
    versions = sorted({version for record in records for version in record["weight_versions"]})
    if len(versions) < 3:
        found.append(f"{job}: {len(versions)} SGLang weight version(s) {versions} in {rollouts}, not the first push "
                     f"and two after training: a post-training push by step {last + 1} did not reach SGLang")
    deepest = max((record["realized_lag"] for record in records), default=None)
    if deepest is None or deepest < lag:
        found.append(f"{job}: no rollout in {rollouts} was sampled {lag} steps back (largest realized lag "
                     f"{deepest}): the lag was not crossed by step {last + 1}")
    left.update(weight_versions=versions, realized_lag=deepest)
    rows = run.read_metrics()
    fp16 = run_config.engine_params["precision"] == "fp16"
    if [row["step"] for row in rows] != list(range(1, last + 2)):
        found.append(f"{job}: {run.metrics_path} holds steps {[row['step'] for row in rows]}, not 1-{last + 1}: "
                     "a loss call or slime's training log did not complete")
    elif row := first_non_finite(rows, fp16=fp16):
        found.append(f"{job}: step {row['step']}'s loss or grad norm is not finite ({row})")
    host, trainer_path = run.read_fingerprint(), run.engine_file("trainer_fingerprint")
    trainer = read_json(trainer_path) if trainer_path.is_file() else None
    if trainer is None:
        found.append(f"{job}: the loss hook wrote no fingerprint ({trainer_path}): it never ran inside the image")
    elif host is None or trainer["digest"] != host["digest"]:
        found.append(f"{job}: the recipe's fingerprint inside the image, {trainer['digest']}, is not the node's, "
                     f"{host and host['digest']}: the image computes another loss")
    else:
        left["fingerprint"] = trainer["digest"]
    more, kept = saves(run, last, job)
    return found + more, {**left, **kept}


def resume_problems(run: RunDir, returncode: int, walked: int) -> tuple[list[str], dict]:
    """What the resumed canary job (from the walk's save of rollout ``walked``) did not leave as it should."""
    job, step = "the resume (second job)", walked + 2
    found = [f"{job} exited with code {returncode} (its log above; {run.engine_file('job_script')})"] if returncode else []
    rows = run.read_metrics()
    if not rows or rows[-1]["step"] != step or first_non_finite(rows[-1:]):
        found.append(f"{job} did not train step {step} from the save of step {walked + 1} ({run.metrics_path}: last row "
                     f"{rows[-1] if rows else None})")
    more, kept = saves(run, walked + 1, job)
    return found + more, {f"resumed_{key}": value for key, value in kept.items()}


def canary(run_config: RunConfig, run: RunDir) -> dict:
    """Run the canary's two jobs of ``run_config`` in the scratch run folder ``run`` (engines.canary made it
    fresh) and publish their HF saves as the run's checkpoints; return what they checked, or raise
    CanaryFailed naming every check that failed."""
    run = RunDir(run.path.resolve())

    def job() -> int:
        return subprocess.run(["bash", str(write_job_script(run_config, run, canary=True))], cwd=run.path).returncode

    found, left = walk_problems(run_config, run, job())
    if not found:
        more, resumed = resume_problems(run, job(), left["stop_step"] - 1)
        found, left = more, {**left, **resumed}
    if found:
        raise CanaryFailed(found)
    # the HF saves where the evaluation finds them, as a train job publishes them (the walk's and the resume's)
    publish_hf_checkpoints(run)
    for role in ("resume_checkpoints", "hf_saves"):  # ~0.9 TB that nothing resumes from; hf_saves is left empty
        shutil.rmtree(run.engine_file(role))
    left["published_steps"] = sorted(run.checkpoints())
    return {"run_dir": str(run.path), "recipe": run_config.recipe.name, "lag": run_config.lag, "seed": run_config.seed,
            "checked": left}
