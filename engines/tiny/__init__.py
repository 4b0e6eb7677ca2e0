"""The embedded CPU engine: a tiny mixture-of-experts LM trained with RL on a verifiable task
(engines/tiny/README.md). Registered as ``tiny``; its modules load torch only when called."""
from __future__ import annotations

from pathlib import Path

from harness.engine import Engine, register

from .params import MODEL_KNOBS, NULL_CHECK_KNOBS, WARMSTART_KNOBS, arithmetic_version, resolve_engine_params


def _train(run_config, run_dir) -> str:
    """``run_config``: a checked harness.run_config.RunConfig; ``run_dir``: its harness.run.RunDir."""
    from .trainer import Trainer

    return Trainer(run_config, run_dir).run()


def _check_run(run_config) -> None:
    from .warmstart import check_base_model

    check_base_model(run_config)


def _prepare(engine_params: dict, out_dir: Path):
    from .warmstart import build_base

    return build_base(engine_params, out_dir)


def _canary(run_config, run_dir) -> dict:
    from .canary import canary

    return canary(run_config, run_dir)


def _null_check(params: dict, base_dir: Path | None) -> dict:
    from .null_ratios import null_check

    return null_check(params, base_dir)


# Single-threaded CPU jobs: these small matmuls run fastest one per core. No partition: the
# profile's default (CPU) one. A step takes ~0.1 s, so a minute's warning before the time limit
# (harness.engine.TIME_LIMIT_SIGNAL; SLURM may send it up to a minute early) leaves ample time to save.
ENGINE = register(Engine(
    name="tiny",
    resolve_params=resolve_engine_params,
    train=_train,
    eval_backend="tiny",
    check_run=_check_run,
    prepare=_prepare,
    prepare_outputs=("model.safetensors", "config.json"),
    prepare_keys=MODEL_KNOBS + WARMSTART_KNOBS,  # what makes the base model (params.warmstart_knobs)
    null_check=_null_check,
    canary=_canary,  # not by default (canary_by_default): a laptop's first day turns it on (config key canary)
    null_check_keys=MODEL_KNOBS + WARMSTART_KNOBS + NULL_CHECK_KNOBS,  # the base model and the sampler
    resources={
        "prepare": {"threads": 1, "mem_mb": 1000},
        "train": {"threads": 1, "mem_mb": 1000, "slurm_extra": "--signal=URG@60"},
        "evaluate": {"threads": 1, "mem_mb": 1000},
        "aggregate": {"threads": 1, "mem_mb": 2000},
        "track": {"threads": 1, "mem_mb": 2000},
    },
    step_minutes=0.01,
    supplies=("sampler_logp", "sampler_entropy"),  # the rollout keeps the sampler's full log-probs (logmu_full)
    arithmetic_version=arithmetic_version,  # params.py: version 1 is the absence of the key (run keys unchanged)
    packs_runs=True,  # runs of seconds: a process per run would spend ~15% of its CPU starting up
))
