"""The GPU-hours of a slime grid before anything is submitted:
``python -m engines.slime.launch --plan CONFIG``.

Per job (recipe x lag x seed) and for the grid: training GPU-hours (steps x minutes per step x the
train job's GPUs), evaluation GPU-hours (checkpoints x minutes per checkpoint x the evaluate job's
GPUs), the time-limit stops expected at the train job's runtime, the retries the workflow gives the
train rule (harness.jobs.train_retries) and the evaluation's concurrency. The times are a low-high
range: the user's own (``--timings FILE``, a YAML ``{step_minutes: [low, high], checkpoint_minutes:
[low, high]}`` once one run has measured them), else ESTIMATES (derived, not measured; their source
printed).
"""
from __future__ import annotations

import math

from harness.grid import expand
from harness.jobs import rule_resources, train_retries

# Derived in docs/cluster.md ("Cost"): ~17 min of generation (20M tokens at ~20k tokens/s on one
# 4-GPU SGLang engine) overlapped with ~13 min of training (FLOPs at ~25% MFU on 4 GPUs).
STEP_MINUTES = (15.0, 25.0)
# One checkpoint of AIME24: the weight swap (1-3 min, a 60 GB HF save read from the shared file
# system) plus 30 problems x k responses of ~5k-15k tokens, at the ~20k tokens/s of one 4-GPU engine
# (docs/cluster.md) once SATURATION requests are in flight, proportionally less with fewer.
SWAP_MINUTES = (1.0, 3.0)
RESPONSE_TOKENS = (5_000, 15_000)
TOKENS_PER_SECOND = 20_000
SATURATION = 64
AIME_PROBLEMS = 30


def _pair(value, key: str) -> tuple[float, float]:
    low, high = (value, value) if isinstance(value, (int, float)) else value
    if not 0 < low <= high:
        raise ValueError(f"--timings {key} must be minutes > 0 or [low, high] with low <= high, got {value!r}")
    return float(low), float(high)


def timings(config: dict, given: dict | None = None) -> dict:
    """Minutes per step and per checkpoint (low, high) and where each comes from (``given``: the user's)."""
    given = given or {}
    k = config["eval"]["k"]
    concurrency = int(config["eval"].get("server", {}).get("concurrency", 1))
    in_flight = min(concurrency, AIME_PROBLEMS * k, SATURATION)
    rate = TOKENS_PER_SECOND * in_flight / SATURATION
    estimate = tuple(swap + AIME_PROBLEMS * k * tokens / rate / 60 for swap, tokens in zip(SWAP_MINUTES, RESPONSE_TOKENS))
    return {
        "step": _pair(given["step_minutes"], "step_minutes") if "step_minutes" in given else STEP_MINUTES,
        "step_source": "--timings step_minutes (measured by the user)" if "step_minutes" in given
        else "estimate, docs/cluster.md Cost (not measured)",
        "checkpoint": _pair(given["checkpoint_minutes"], "checkpoint_minutes") if "checkpoint_minutes" in given
        else estimate,
        "checkpoint_source": "--timings checkpoint_minutes (measured by the user)" if "checkpoint_minutes" in given
        else "estimate, engines/slime/plan.py (not measured)",
        "concurrency": concurrency,
    }


def plan(config: dict, given: dict | None = None) -> dict:
    """The grid's jobs with their GPU-hours (low, high), stops and retries, and the totals."""
    times = timings(config, given)
    train, evaluate = rule_resources(config, "train"), rule_resources(config, "evaluate")
    checkpoints = config["steps"] // config["eval_every"]
    runtime = train.get("runtime")
    jobs = []
    for recipe, lag, seed in expand(config):
        train_minutes = [config["steps"] * m for m in times["step"]]
        jobs.append({
            "recipe": recipe, "lag": lag, "seed": seed,
            "train_gpu_hours": [m / 60 * train["gpu"] for m in train_minutes],
            "eval_gpu_hours": [checkpoints * m / 60 * evaluate["gpu"] for m in times["checkpoint"]],
            "stops": [math.ceil(m / runtime) - 1 if runtime else 0 for m in train_minutes],
        })
    total = {key: [sum(job[key][i] for job in jobs) for i in (0, 1)] for key in ("train_gpu_hours", "eval_gpu_hours")}
    return {"jobs": jobs, "total": total, "timings": times, "checkpoints": checkpoints, "runtime": runtime,
            "retries": train_retries(config), "train_gpus": train["gpu"], "eval_gpus": evaluate["gpu"]}


def report(config: dict, given: dict | None = None) -> str:
    p = plan(config, given)
    t = p["timings"]

    def span(pair, digits=0):
        return f"{pair[0]:,.{digits}f}-{pair[1]:,.{digits}f}"

    lines = [f"plan: {len(p['jobs'])} training jobs x {config['steps']} steps on {p['train_gpus']} GPUs, "
             f"{p['checkpoints']} checkpoints each scored on {p['eval_gpus']} GPUs",
             f"  minutes per step {span(t['step'], 1)} ({t['step_source']})",
             f"  minutes per checkpoint {span(t['checkpoint'], 1)} at concurrency {t['concurrency']}, k = "
             f"{config['eval']['k']} ({t['checkpoint_source']})",
             f"  train runtime {p['runtime']} min: retries {p['retries']} (harness.jobs.train_retries)",
             "recipe lag seed | train GPU-h | eval GPU-h | time-limit stops"]
    lines += [f"{job['recipe']} {job['lag']} {job['seed']} | {span(job['train_gpu_hours'])} | "
              f"{span(job['eval_gpu_hours'])} | {job['stops'][0]}-{job['stops'][1]}" for job in p["jobs"]]
    total = [a + b for a, b in zip(p["total"]["train_gpu_hours"], p["total"]["eval_gpu_hours"])]
    lines.append(f"grid: training {span(p['total']['train_gpu_hours'])} GPU-h + evaluation "
                 f"{span(p['total']['eval_gpu_hours'])} GPU-h = {span(total)} GPU-h")
    return "\n".join(lines)
