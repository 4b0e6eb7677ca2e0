"""The tiny engine's lag-0 null check: with identical weights, does the engine's importance ratio
behave as it must before any run of the grid trains?

At lag 0 the rollout engine and the trainer hold the same weights (the base model, version 0), so
the ratio r = pi / mu on the sampled tokens measures only the engine's own mismatch. Whatever mu
the engine records, E_{x ~ sampler}[pi(x) / mu(x)] = 1 when mu is the distribution the tokens
were sampled from and pi has no mass outside its support; a sampler that truncates (top-p, top-k)
while the trainer scores the whole vocabulary gives a mean ratio equal to the kept mass instead
(TRL issue #6789: 0.896 and 51.8% of tokens outside [0.9, 1.1] at top_p 0.8). Three statistics,
each against a declared level (config key ``null_check``):

- ratio mean: |mean(r) - 1| <= max_mean_deviation;
- tail: the fraction of tokens with r outside [1 - band, 1 + band] <= max_outside_fraction (the
  engine's numerical mismatch: bf16 vs fp32, routing flips without R3);
- calibration: a sampler that truncates but records the untruncated mu has r = 1 at lag 0 and so
  passes both, yet its tokens are too probable under the recorded mu. With p_t the recorded
  distribution at position t, E[p_t(x_t)] = sum_v p_t(v)^2 given the prefix, so
  z = sum_t (p_t(x_t) - sum_v p_t(v)^2) / sqrt(sum_t Var_t) is a martingale sum, about N(0, 1)
  when mu is the sampling distribution; |z| <= max_calibration_z. (The cluster engine records only
  the sampled token's mu; this one records the whole distribution, so it can check this.)

The check runs the trainer's own code (Trainer.recompute, RolloutEngine.rollout), once per
distinct (engine settings, routing replay) of the grid's recipes, on ``rollouts`` batches.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch

from harness.run import RunDir
from harness.run_config import RunConfig

from . import task
from .batch import step_seed


class NullCheckFailed(ValueError):
    """The lag-0 null check refused the grid; the message holds the numbers."""


def _run_config(engine_params: dict, routing_replay, base_dir: Path) -> dict:
    """A lag-0 run config of the trainer the check drives (its loss never runs)."""
    recipe = {"name": "null_check", "loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2, "ratio_against": "old",
                                                                "aggregation": "token_mean"}}
    if routing_replay:
        recipe["routing_replay"] = routing_replay
    return {"grid": "null_check", "engine": "tiny", "recipe": recipe, "lag": 0, "lag_mode": "constant",
            "seed": 0, "steps": 1, "eval_every": 1, "engine_params": dict(engine_params),
            "base_model": str(base_dir)}


def measure(engine_params: dict, routing_replay, base_dir: Path, rollouts: int, seed: int, band: float) -> dict:
    """The three statistics of one (engine settings, routing replay) on ``rollouts`` lag-0 batches."""
    from .trainer import Trainer

    torch.set_num_threads(1)
    # the trainer is only driven (recompute), never run: its run folder, this process's own, stays empty
    with tempfile.TemporaryDirectory(prefix="stalebench-null-check-") as scratch:
        trainer = Trainer(RunConfig.check(_run_config(engine_params, routing_replay, base_dir)), RunDir(scratch))
    params = trainer.params
    trainer.engine.broadcast(trainer.snapshots[0], 0)  # identical weights on both sides
    ratios, excess, variance = [], 0.0, 0.0
    for index in range(rollouts):
        problems = task.problems("train", params["prompts_per_step"], seed=step_seed(seed, index, 5))
        batch = trainer.engine.rollout(0, problems, params["samples_per_step"], params["reward"],
                                       seed=step_seed(seed, index, 6))
        recomputed = trainer.recompute(batch)
        active = batch.mask.bool()
        ratios.append((recomputed.old_logp - recomputed.logmu).double().exp()[active])
        probs = batch.logmu_full.double().exp()  # the recorded sampling distribution, per position
        sampled = probs.gather(-1, recomputed.response[..., None])[..., 0]
        square, cube = (probs ** 2).sum(-1), (probs ** 3).sum(-1)
        excess += float((sampled - square)[active].sum())
        variance += float((cube - square ** 2)[active].sum())
    ratio = torch.cat(ratios)
    return {"rollout_dtype": params["rollout_dtype"], "routing_replay": routing_replay,
            "temperature": params["temperature"], "tokens": int(ratio.numel()),
            "ratio_mean": float(ratio.mean()), "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
            "outside_fraction": float(((ratio < 1 - band) | (ratio > 1 + band)).double().mean()),
            "calibration_z": excess / math.sqrt(variance) if variance > 0 else 0.0}


def failures(measured: dict, settings: dict) -> list[str]:
    """Each statistic past its declared level, in words with its numbers."""
    out = []
    if abs(measured["ratio_mean"] - 1) > settings["max_mean_deviation"]:
        out.append(f"mean ratio {measured['ratio_mean']:.4f} is more than {settings['max_mean_deviation']} from 1")
    if measured["outside_fraction"] > settings["max_outside_fraction"]:
        out.append(f"{100 * measured['outside_fraction']:.1f}% of tokens outside [{1 - settings['band']:g}, "
                   f"{1 + settings['band']:g}] (declared level {100 * settings['max_outside_fraction']:g}%)")
    if abs(measured["calibration_z"]) > settings["max_calibration_z"]:
        out.append(f"calibration z {measured['calibration_z']:+.1f}: the sampled tokens are not distributed as the "
                   f"recorded mu (declared level |z| <= {settings['max_calibration_z']:g})")
    return out


def null_check(params: dict, base_dir: Path) -> dict:
    """The engine's null_check: ``params`` = {settings, cases: [{engine_params, routing_replay}]}
    (grid.settings.Config.null_check_params). Returns the report; NullCheckFailed with the numbers
    of every failing case."""
    settings, report = params["settings"], {"settings": params["settings"], "cases": []}
    for case in params["cases"]:
        measured = measure(case["engine_params"], case["routing_replay"], Path(base_dir), settings["rollouts"],
                           settings["seed"], settings["band"])
        report["cases"].append({**measured, "failures": failures(measured, settings)})
    refused = [case for case in report["cases"] if case["failures"]]
    if refused:
        lines = [f"rollout_dtype {c['rollout_dtype']}, routing_replay {c['routing_replay']}, {c['tokens']} tokens: "
                 + "; ".join(c["failures"]) for c in refused]
        raise NullCheckFailed("the lag-0 null check refuses the grid (config key 'null_check'):\n  " + "\n  ".join(lines))
    return report
