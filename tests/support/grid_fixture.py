"""Fabricate a small finished grid on disk in the documented run layout (docs/design.md), with
known cases: a collapse, a diverged run, a cell whose seeds are all equal, a selection task."""
from __future__ import annotations

import json
import math

import numpy as np

from grid.config import validate
from grid.expand import expand, resolve_run_config
from grid.folder import GridDir
from harness.io import write_json_atomic
from harness.run_config import recipe_fingerprint

STEPS, EVAL_EVERY = 20, 5
COLLAPSED = ("grpo", 8, 0)  # peaks then falls below half its peak and stays there
DIVERGED = ("grpo", 8, 1)  # non-finite at step 12: training stops, status "diverged"
DIVERGE_STEP = 12
EARLY_DIVERGED = ("grpo_r3", 8, 0)  # non-finite at step 3, before its first checkpoint: empty eval files
EQUAL_CELL = ("sat_grpo", 1)  # every seed has the same curve: a point interval
# claims of each kind on this grid (tests/analysis/test_claims.py checks their verdicts)
CLAIMS = [
    {"name": "grpo_cost", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less",
     "smallest_effect": 0.05},
    {"name": "sat_cost_below_grpo", "kind": "cost_difference", "recipe": "sat_grpo", "versus": "grpo", "lag": 8,
     "expect": "greater", "smallest_effect": 0.05},
    {"name": "r3_beats_grpo_lag1", "kind": "recipes", "recipe": "grpo_r3", "versus": "grpo", "lag": 1,
     "metric": "fixed", "expect": "greater", "smallest_effect": 0.02},
    {"name": "sat_no_cost", "kind": "staleness_cost", "recipe": "sat_grpo", "lag": 8, "expect": "equivalent",
     "smallest_effect": 0.1},
    {"name": "grpo_collapses_at_lag8", "kind": "collapse", "recipe": "grpo", "lag": 8, "versus": "grpo",
     "versus_lag": 1, "expect": "greater", "smallest_effect": 0.5}]
START_TIME = 1.8e9  # unix seconds of step 0; a step takes 2 s (the rows' ``time`` field)
# lag mode queue (make_grid(lag_mode="queue")): workflow/presets/queue_pareto.yaml's system
QUEUE = {"utilization": 1.0, "concurrency": 16, "capacity": 16, "length_sigma": 1.0}


def make_config(results_dir, grid: str = "demo", seeds=(0, 1, 2), lag_mode: str = "interval",
                recipes=("grpo", "sat_grpo", "grpo_r3"), lags=(1, 8)) -> dict:
    """The grid's workflow config, checked and completed with the schema's defaults (as every stage
    gets it); in lag mode queue with the system QUEUE. Fewer recipes or lags: a smaller grid (the
    known cases outside it are not in it)."""
    queue = {"lag_queue": QUEUE} if lag_mode == "queue" else {}
    return validate({"grid": grid, "results_dir": str(results_dir), "engine": "tiny",
            "recipes": list(recipes), "extra_recipes": {}, "lags": list(lags),
            "lag_mode": lag_mode, **queue, "seeds": list(seeds), "steps": STEPS, "eval_every": EVAL_EVERY,
            "engine_params": {"preset": "demo"},
            "eval": {"tasks": ["tiny_val", "tiny_test"], "selection_task": "tiny_val", "k": 8,
                     "temperature": 1.0, "top_p": 1.0, "max_gen_toks": 16, "fixed_step": None,
                     "seed": 0, "backend": "tiny"},
            "collapse": {"fraction": 0.5, "confirm": 1}, "baseline": "grpo"})


def scores_of(recipe: str, lag: int, seed: int) -> list[float]:
    """Scores at steps 5, 10, 15, 20 (before any divergence cut)."""
    if (recipe, lag, seed) == COLLAPSED:
        return [0.40, 0.50, 0.20, 0.10]
    if (recipe, lag) == EQUAL_CELL:
        return [0.30, 0.35, 0.40, 0.45]
    rng = np.random.default_rng([len(recipe), lag, seed])
    base = {"grpo": 0.30, "sat_grpo": 0.30, "grpo_r3": 0.35}[recipe]
    return [round(float(base + 0.02 * i + rng.uniform(0, 0.05)), 4) for i in range(4)]


def queue_columns(lag: int, rng) -> dict:
    """A queue-mode step's per-group columns (engines/tiny/queue_rollout.group_record): 16 groups,
    lognormal lengths (mean 1), the lag growing with the length within the bound."""
    lengths = np.exp(rng.normal(-0.5, 1.0, 16))
    lags = [min(lag, int(length + 0.5 + rng.uniform())) for length in lengths]
    return {"queue/lags": lags, "queue/lengths": [round(float(x), 6) for x in lengths],
            "queue/lag_mean": sum(lags) / len(lags)}


def make_grid(results_dir, **kwargs) -> dict:
    """Write every run of the grid; returns the workflow config."""
    config = make_config(results_dir, **kwargs)
    for recipe, lag, seed in expand(config):
        run = GridDir.of(config).run(recipe, lag, seed)
        run_config = run.pin_config(resolve_run_config(config, recipe, lag, seed))
        run.write_fingerprint(recipe_fingerprint(json.dumps(run_config["recipe"], sort_keys=True)))
        diverged = (recipe, lag, seed) in (DIVERGED, EARLY_DIVERGED)
        last = {DIVERGED: DIVERGE_STEP, EARLY_DIVERGED: 3}.get((recipe, lag, seed), STEPS)
        rng = np.random.default_rng([lag, seed, 7])
        rows = []
        for step in range(1, last + 1):
            d = 0.01 * lag * (1 + 0.1 * rng.uniform())
            nan = diverged and step == last
            rows.append({"step": step, "time": START_TIME + 2.0 * step, "realized_lag": 1 + (step - 1) % lag if lag else 0, "policy_version": step - 1,
                         "reward": math.nan if nan else 0.1 + 0.01 * step, "entropy": 1.0,
                         "grad_norm": math.nan if nan else 1.0, "loss": math.nan if nan else -0.1,
                         "d/mean_abs": math.nan if nan else d, "d/p50": d / 2, "d/p90": 2 * d,
                         "d/p99": math.nan if nan else 4 * d, "d/max": 8 * d,
                         **(queue_columns(lag, rng) if config["lag_mode"] == "queue" else {})})
        run.append_metrics(rows)
        run.write_status("diverged" if diverged else "completed", last, "non-finite loss" if diverged else "")
        scores = scores_of(recipe, lag, seed)
        eval_steps = [s for s in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY) if s < last or not diverged]
        for task, shift in (("tiny_test", 0.0), ("tiny_val", 0.01)):
            # the validation curve peaks one checkpoint earlier than the test curve on purpose
            val = scores[1:] + scores[-1:] if task == "tiny_val" else scores
            run.write_eval(task, [
                {"step": s, "score": round(v + shift, 4), "k": 8, "per_problem": [], "n_problems": 0,
                 "pass_at_k": v, "maj_at_k": v, "seed": 0, "task": task, "task_version": 1}
                for s, v in zip(eval_steps, val)])
    return config


def written_grid(config: dict) -> str:
    """The grid folder of a checked ``config`` with its config.json written there (what the workflow's
    grid_config rule does), as a stage's --grid argument."""
    folder = GridDir.of(config)
    write_json_atomic(folder.config_path, config)
    return str(folder.path)


def write_samples(config: dict, run: tuple[str, int, int] = COLLAPSED) -> list[dict]:
    """A samples file (RunDir.samples_path, as engines/tiny/samples.py writes one) for ``run``: two completions per
    evaluation step; returns its rows."""
    rows = [{"step": step, "policy_version": max(step - 1 - run[1], 0), "prompt": "3 1 4 1 5 9", "completion": completion,
             "reward": reward, "length": len(completion.split()) + 1, "log_ratio_behaviour_target": 0.01 * step}
            for step in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)
            for completion, reward in (("1 1 3 4 5 9", 1.0), ("1 1 1 1", 0.5 if step < 15 else 0.0))]
    GridDir.of(config).run(*run).write_samples(rows)
    return rows
