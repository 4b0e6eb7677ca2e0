"""The cluster engine: THUDM/slime (SGLang rollout + Megatron-core training) driven by the harness.

Modules (slime and megatron are imported lazily, inside the functions that run in the container):
- ``params``: engine_params with their defaults, the container pin, the model's shape.
  ``params.resolve_params(engine_params)`` checks a config's engine_params (no file access).
- ``flags``: every slime / Megatron flag of a run, and the flags the launcher owns.
- ``job_script``: checked run config -> validated job script; ``job_script.write_job_script`` is
  the dry run.
- ``launch``: runs the job script, publishes HF checkpoints where the evaluation finds them, writes
  the run's status. ``launch.run(run_config, run)`` (a checked harness.run_config.RunConfig and its
  harness.run.RunDir, which names every file of the run) is what the engine registry calls.
- ``loss``: the ``--custom-loss-function-path`` entry point (the recipe's stabilizer, TIS, KL).
- ``driver``: the training loop of every lag mode over slime's Ray actors.
- ``lag``: the harness's lag schedule as the driver runs it; slime weight version -> trainer version.
- ``metrics``: the hooks that write the run's rollout log and training metrics (RunDir).
- ``preflight``: the checks before the first GPU-hour (reward vs prompt format, memory per GPU,
  context, extra_args vs known_flags.txt, which ``refresh_known_flags`` rebuilds from the sources).
- ``reward_model``: the dry run's model of slime's rule-based rewards, held to slime's own scores on
  reward_agreement.jsonl.
- ``retention``: keeps the newest Megatron checkpoints of a run.
- ``footprint``: a run's disk and a training job's host memory (estimates), for ``plan`` and ``preflight``.
- ``plan``: the GPU-hours, the time-limit stop's budget, disk and host memory of a grid (``launch --plan``).
- ``canary``: the grid's heaviest run alone through two pushes, the lag, a save, a stop and a resume, checked,
  before the other train jobs (engines.canary then scores one problem on its HF saves).
- ``resume_check``: the GPU resume check's Adam reader (saved vs loaded) and noise-floor verdicts.
- ``check_pin``: checks slime / Megatron-LM checkouts for every flag, symbol and file the adapter uses.
The software these target is pinned in envs/slime-container.yaml.
"""
from __future__ import annotations

from harness.engine import Engine, register


def _resolve_params(engine_params: dict) -> dict:
    from .params import resolve_params

    return resolve_params(engine_params)


def _check_run(run_config) -> None:
    """What slime cannot run, refused when the run config is checked (harness.run_config.RunConfig.check)."""
    from .loss import aggregation_of

    if run_config.lag_mode == "queue":  # slime's rollout carries one weight version per batch
        raise ValueError("run config 'lag_mode': queue (a lag per group) is realized by the tiny engine only")
    aggregation_of(run_config.recipe)  # a loss slime has no normalisation for


def _canary(run_config, run_dir) -> dict:
    from .canary import canary

    return canary(run_config, run_dir)


def _train(run_config, run_dir) -> str:
    """``run_config``: a checked harness.run_config.RunConfig; ``run_dir``: its harness.run.RunDir."""
    from .launch import run

    return run(run_config, run_dir)


# GPU jobs on a SLURM partition (named `gpu` here; a site renames it with the config's
# `resources: {train: {slurm_partition: ...}}`): the paper trained on 8 x H200 per run
# (the SAT paper, arXiv 2607.18722); evaluation serves one checkpoint on one node. Training asks for
# the time-limit warning as early as a stop can take: the lead is the stop budget that
# `python -m engines.slime.launch --plan` computes for Qwen3-30B-A3B from its estimated timings (one
# step of drain + a periodic Megatron + HF save on the slowest published write speed: engines.slime.plan),
# and the plan refuses a shorter one; a step takes 15-39 min (engines.slime.plan: the docs' derivation and
# NeMo-RL's published rate for this model, docs/cluster.md Cost), its high end is step_minutes.
ENGINE = register(Engine(
    name="slime",
    resolve_params=_resolve_params,
    check_run=_check_run,
    train=_train,
    canary=_canary,
    canary_by_default=True,  # a failure common to its 84 jobs would cost thousands of GPU-hours
    eval_backend="server",
    resources={
        "train": {"threads": 32, "mem_mb": 512000, "gpu": 8, "runtime": 4320, "slurm_partition": "gpu",
                  "slurm_extra": "--signal=URG@7249"},
        "evaluate": {"threads": 16, "mem_mb": 256000, "gpu": 8, "runtime": 240, "slurm_partition": "gpu"},
        "aggregate": {"threads": 1, "mem_mb": 4000, "runtime": 60},
        "track": {"threads": 1, "mem_mb": 4000, "runtime": 60},
    },
    step_minutes=39,
    # Score Centering needs the sampler's log-probs over the vocabulary (SGLang returns a top-k head with
    # top_logprobs_num) and ESTR the sampler's entropy; the pin carries neither to the trainer. The
    # trainer-side entropy slime computes is the current policy's, not mu's: no proxy is taken for it.
    supplies=(),
    supplies_note="the pinned slime records only the sampled token's log-prob from SGLang "
                  "(Sample.rollout_log_probs); it requests no top-k log-probs and records no rollout entropy",
))
