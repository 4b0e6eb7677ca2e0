"""The cluster engine: THUDM/slime (SGLang rollout + Megatron-core training) driven by the harness.

Modules (slime and megatron are imported lazily, inside the functions that run in the container):
- ``launch``: run config -> validated job script (train/job.sh) -> run, HF checkpoints published as
  train/checkpoints/step_<N>/, train/status.json. ``launch.run(run_config, run_dir)`` is what
  the engine registry calls; ``launch.resolve_params(engine_params)`` checks a config's engine_params
  (no file access) and ``launch.write_job_script`` is the dry run.
- ``loss``: the ``--custom-loss-function-path`` entry point (the recipe's stabilizer, TIS, KL).
- ``driver``: the constant-lag training loop over slime's Ray actors.
- ``lag``: slime weight version -> trainer version, per lag mode.
- ``metrics``: the hooks that write train/rollouts.jsonl and train/metrics.jsonl.
- ``preflight``: the checks before the first GPU-hour (reward vs prompt format, memory per GPU,
  context, extra_args vs known_flags.txt, which ``refresh_known_flags`` rebuilds from the sources).
- ``retention``: keeps the newest Megatron checkpoints of a run.
The software these target is pinned in envs/slime-container.yaml.
"""
from __future__ import annotations

from pathlib import Path

from engines import Engine, register


def _resolve_params(engine_params: dict) -> dict:
    from .launch import resolve_params

    return resolve_params(engine_params)


def _train(run_config: dict, run_dir: Path) -> str:
    from .launch import run

    return run(run_config, run_dir)


# GPU jobs on a SLURM partition (named `gpu` here; a site renames it with the config's
# `resources: {train: {slurm_partition: ...}}`): the paper trained on 8 x H200 per run
# (shared/reference/methods.md); evaluation serves one checkpoint on one node. Training asks for
# the time-limit warning 15 minutes ahead (a Megatron save of the 30B model with its optimizer
# takes minutes; SLURM may send it up to a minute early); a step takes 15-25 min (docs/cluster.md, Cost).
ENGINE = register(Engine(
    name="slime",
    resolve_params=_resolve_params,
    train=_train,
    eval_backend="server",
    resources={
        "train": {"threads": 32, "mem_mb": 512000, "gpu": 8, "runtime": 4320, "slurm_partition": "gpu",
                  "slurm_extra": "--signal=URG@900"},
        "evaluate": {"threads": 16, "mem_mb": 256000, "gpu": 8, "runtime": 240, "slurm_partition": "gpu"},
        "aggregate": {"threads": 1, "mem_mb": 4000, "runtime": 60},
        "track": {"threads": 1, "mem_mb": 4000, "runtime": 60},
    },
    step_minutes=25,
))
