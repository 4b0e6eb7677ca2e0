"""The slime engine's canary (harness.engine: Engine.canary; engines.canary runs it before every other train job).

Sixty-odd jobs that start at once with two retries each turn a failure common to all of them (the image,
its torch computing another loss, Megatron's checks of the model's config.json, SGLang's weight
versions, a save the file system refuses) into ~1.3k GPU-hours before anyone reads a log. The canary
runs the grid's first run alone, through the same job script as a train job (engines.slime.job_script:
the container, the commit check, the pre-flight, Ray, slime's ``parse_args``), and its lag driver ends
after the first step and its save (engines.slime.driver: ``stalebench_canary``). It then checks what
that step left in the scratch run folder:

- the job ended with code 0;
- the first rollout is in the rollout log with the SGLang weight version that sampled it
  (engines.slime.metrics.log_rollout);
- the first loss call logged a finite metrics row (the loss hook ran, slime's training log reached us);
- the trainer's fingerprint of the recipe, computed inside the image by the loss hook
  (engines.slime.loss.check_trainer_fingerprint), equals the one engines.canary recorded on the node;
- the first save is whole: Megatron's (``latest_checkpointed_iteration.txt`` names it) and the HF one
  (harness.hf_save: the index and every shard it names).

Each failed check is named; any one fails the canary, and no other train job is submitted. A passed
canary's saves (one Megatron save with its optimizer, one HF save: ~0.5 TB for Qwen3-30B-A3B) are
deleted; its logs, job script and rows stay for reading.
"""
from __future__ import annotations

import shutil
import subprocess

from engines.slime.job_script import write_job_script
from engines.slime.metrics import first_non_finite
from harness.hf_save import hf_checkpoint_problem
from harness.io import read_json, read_jsonl
from harness.run import RunDir
from harness.run_config import RunConfig


def problems(run: RunDir, returncode: int) -> tuple[list[str], dict]:
    """What the canary's first step and save did not leave as they should (empty: passed), and what they left."""
    found, left = [], {}
    if returncode:
        found.append(f"the job exited with code {returncode} (its log above; {run.engine_file('job_script')})")
    rollouts = run.engine_file("rollouts")
    first = read_jsonl(rollouts)[:1] if rollouts.is_file() else []
    if first:
        left["rollout"] = first[0]
    else:
        found.append(f"no rollout was logged ({rollouts}): the first generation or its weight version did not "
                     "reach the rollout log")
    rows = run.read_metrics()
    if not rows:
        found.append(f"no training step was logged ({run.metrics_path}): the first loss call did not complete")
    elif row := first_non_finite(rows, fp16=RunConfig.check(run.read_config()).engine_params["precision"] == "fp16"):
        found.append(f"the first step's loss or grad norm is not finite ({row})")
    else:
        left["step"] = rows[0]
    host, trainer_path = run.read_fingerprint(), run.engine_file("trainer_fingerprint")
    trainer = read_json(trainer_path) if trainer_path.is_file() else None
    if trainer is None:
        found.append(f"the loss hook wrote no fingerprint ({trainer_path}): it never ran inside the image")
    elif host is None or trainer["digest"] != host["digest"]:
        found.append(f"the recipe's fingerprint inside the image, {trainer['digest']}, is not the node's, "
                     f"{host and host['digest']}: the image computes another loss")
    else:
        left["fingerprint"] = trainer["digest"]
    megatron = run.engine_file("resume_checkpoints")
    latest = megatron / "latest_checkpointed_iteration.txt"  # Megatron writes it once a save is whole
    iteration = latest.read_text().strip() if latest.is_file() else ""
    if not (iteration.isdigit() and (megatron / f"iter_{int(iteration):07d}").is_dir()):
        found.append(f"no whole Megatron save ({latest} does not name a save in {megatron})")
    else:
        left["megatron_save"] = int(iteration)
    hf = run.engine_file("hf_saves") / f"iter_{rows[0]['step'] - 1 if rows else 0}"
    if problem := hf_checkpoint_problem(hf):
        found.append(f"no whole HF save: {problem}")
    else:
        left["hf_save"] = hf.name
    return found, left


def canary(run_config: RunConfig, run: RunDir) -> dict:
    """Run the canary job of ``run_config`` in the scratch run folder ``run`` (engines.canary made it fresh);
    return what it checked, or raise ValueError naming every check that failed."""
    run = RunDir(run.path.resolve())
    script = write_job_script(run_config, run, canary=True)
    returncode = subprocess.run(["bash", str(script)], cwd=run.path).returncode
    found, left = problems(run, returncode)
    if found:
        raise ValueError(f"the canary ({run.path}, recipe {run_config.recipe.name}, lag {run_config.lag}, seed "
                         f"{run_config.seed}) failed, so no other train job of the grid is submitted: "
                         + "; ".join(found))
    for role in ("resume_checkpoints", "hf_saves"):  # ~0.5 TB that nothing resumes from or scores
        shutil.rmtree(run.engine_file(role))
    return {"run_dir": str(run.path), "recipe": run_config.recipe.name, "lag": run_config.lag, "seed": run_config.seed,
            "checked": left}
