"""The tiny engine's canary (harness.engine: Engine.canary; engines.canary runs it, then scores one problem on
its checkpoints): the steps of the cluster engine's canary (engines.slime.canary) on the tiny trainer, so that a
laptop's first day (config key ``canary: true``) rehearses the path the cluster's first day takes:

1. the walk: a fresh trainer trains the grid's heaviest run until batches sampled by two versions after the
   base (two broadcasts of trained weights to the rollout engine) were trained and one batch was sampled at
   the full lag (harness.lag.canary_step: step 18 at interval lag 8), saves that step with its checkpoint
   and stops there by the time-limit stop's own path (Trainer: TimeLimitReached);
2. the resume: a second trainer resumes from that save, trains one step, saves it with its checkpoint and
   stops the same way.

It checks each job's end, the metrics rows (one finite row per step, the walk's rows kept by the resume), the
versions and realized lags they record, each resume state and each checkpoint, naming the job, the step and
the file; any failed check raises CanaryFailed.
"""
from __future__ import annotations

import math

from harness.engine import CanaryFailed, TimeLimitReached
from harness.io import read_json
from harness.lag import canary_step
from harness.queue_lag import queue_model
from harness.run import RunDir
from harness.run_config import RunConfig

from .checkpoint import RESUME_META
from .trainer import Trainer


def job(run_config: RunConfig, run: RunDir, stop: int) -> str | None:
    """One canary job to ``stop``; None when it stopped after it as at the time limit, else how it ended."""
    try:
        status = Trainer(run_config, run, canary_stop=stop).run()
    except TimeLimitReached:
        return None
    except Exception as error:  # noqa: BLE001 - what broke is the canary's finding, named in its report
        return f"failed: {type(error).__name__}: {error}"
    return f"ended with status {status!r}"


def saved(run: RunDir, step: int, name: str) -> list[str]:
    """What is missing of the save of ``step``: the resume state holding it, with its checkpoint."""
    found, meta_path = [], run.train_dir / "resume" / RESUME_META
    meta = read_json(meta_path) if meta_path.is_file() else {}
    if meta.get("step") != step or not meta.get("checkpoint"):
        found.append(f"{name}: the resume state {meta_path} holds step {meta.get('step')} "
                     f"(checkpoint {meta.get('checkpoint')}), not the save of step {step} with its checkpoint")
    if step not in run.checkpoints():
        found.append(f"{name}: no checkpoint of step {step} ({run.checkpoint_path(step)})")
    return found


def rows_problems(run: RunDir, last: int, name: str) -> list[str]:
    rows = run.read_metrics()
    if [row["step"] for row in rows] != list(range(1, last + 1)):
        return [f"{name}: {run.metrics_path} holds steps {[row['step'] for row in rows]}, not 1-{last}"]
    return [f"{name}: step {row['step']}'s loss is not finite ({row['loss']})" for row in rows
            if not math.isfinite(row["loss"])][:1]


def canary(run_config: RunConfig, run: RunDir) -> dict:
    """The walk and the resume of ``run_config`` in the scratch run folder ``run`` (engines.canary made it fresh);
    returns what they checked, or raises CanaryFailed naming every check that failed."""
    queue = queue_model(run_config.raw["lag_queue"], run_config.engine_params["prompts_per_step"], run_config.lag) \
        if run_config.lag_mode == "queue" else None
    stop = canary_step(run_config.lag, run_config.lag_mode, run_config.seed, run_config.steps, queue)
    if stop >= run_config.steps:
        raise CanaryFailed([f"the run's {run_config.steps} steps leave no step to resume after the walk's stop at "
                            f"step {stop} (two versions after the base and lag {run_config.lag} crossed)"])
    name = "the walk (first job)"
    found = [f"{name} {ended}, not stopped after step {stop} as at the time limit"] \
        if (ended := job(run_config, run, stop)) else []
    found += rows_problems(run, stop, name) + saved(run, stop, name)
    rows = run.read_metrics()
    versions = sorted({row["policy_version"] for row in rows})
    deepest = max((row["realized_lag"] for row in rows), default=None)
    if len([version for version in versions if version > 0]) < 2:
        found.append(f"{name}: {run.metrics_path} records batches of versions {versions}: fewer than two "
                     f"broadcasts of trained weights reached the rollout engine by step {stop}")
    if deepest is None or deepest < run_config.lag:
        found.append(f"{name}: no batch in {run.metrics_path} was sampled {run_config.lag} steps back (largest "
                     f"realized lag {deepest}): the lag was not crossed by step {stop}")
    if not found:
        name, walked = "the resume (second job)", rows
        found = [f"{name} {ended}, not stopped after step {stop + 1}"] if (ended := job(run_config, run, stop + 1)) else []
        found += rows_problems(run, stop + 1, name) + saved(run, stop + 1, name)
        if not found and run.read_metrics()[:stop] != walked:
            found.append(f"{name} rewrote steps 1-{stop} of {run.metrics_path} instead of resuming from the save "
                         f"of step {stop}")
    if found:
        raise CanaryFailed(found)
    return {"run_dir": str(run.path), "recipe": run_config.recipe.name, "lag": run_config.lag, "seed": run_config.seed,
            "checked": {"stop_step": stop, "policy_versions": versions, "realized_lag": deepest,
                        "saves": [stop, stop + 1], "published_steps": sorted(run.checkpoints())}}
