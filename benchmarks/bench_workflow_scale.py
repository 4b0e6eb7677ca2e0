"""Workflow scale figures (issue: the harness). Prints each figure; no assertion.

    .venv/bin/python benchmarks/bench_workflow_scale.py [--runs 1000] [--steps 500] [--train-keys 1]

Part "mlflow": fabricate a finished grid of --runs runs x --steps training steps on disk (the
documented run layout; --train-keys numeric keys per training line, evaluation every
--eval-every steps on two tasks), aggregate it (not timed), then time tracking.sync's sync into a
fresh sqlite store, and a second, no-op sync. Target: 1,000 runs x 500 steps within 60 s.
Hook: the workflow's `snakemake -n` figure is a second part; add it to PARTS.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grid.config import validate  # noqa: E402
from grid.expand import expand, resolve_run_config  # noqa: E402
from grid.folder import GridDir  # noqa: E402
from harness.run_config import recipe_fingerprint  # noqa: E402
from stabilizers import load_recipes  # noqa: E402
from tracking.sync import TRAIN_POINTS  # noqa: E402

TRAIN_KEYS = ["reward", "entropy", "grad_norm", "loss", "realized_lag", "d/mean_abs", "d/p50", "d/p90",
              "d/p99", "d/max", "d/lag_mean_abs", "d/impl_mean_abs", "tv/mean", "tv/p90",
              "routing/mismatch_rate", "clip/frac_upper", "clip/frac_lower", "sat/q", "sat/gate_rate",
              "policy_version"]


def fabricate(results: Path, runs: int, steps: int, eval_every: int, train_keys: int) -> dict:
    recipes, lags = list(load_recipes())[:10], [1, 8]
    seeds = list(range(max(1, runs // 20)))  # 10 recipes x 2 lags x runs/20 seeds
    config = validate({"grid": "scale", "results_dir": str(results), "engine": "tiny", "recipes": recipes,
              "extra_recipes": {}, "lags": lags, "lag_mode": "interval", "seeds": seeds, "steps": steps,
              "eval_every": eval_every, "engine_params": {},
              "eval": {"tasks": ["tiny_val", "tiny_test"], "selection_task": "tiny_val", "fixed_step": None},
              "collapse": {"fraction": 0.5, "confirm": 1}, "baseline": "grpo"})  # defaults filled, as every stage gets it
    keys = TRAIN_KEYS[:train_keys]
    for i, (recipe, lag, seed) in enumerate(expand(config)):
        run = GridDir.of(config).run(recipe, lag, seed)
        run_config = resolve_run_config(config, recipe, lag, seed)
        run.pin_config(run_config)
        # the fingerprint a train job records: aggregate refuses a run without it (RunDir.check_fingerprint)
        run.write_fingerprint(recipe_fingerprint(json.dumps(run_config["recipe"], sort_keys=True)))
        run.write_status("completed", steps, "")
        run.append_metrics([{"step": s, **{k: (i + s + j) * 1e-3 for j, k in enumerate(keys)}}
                            for s in range(1, steps + 1)])
        for task in config["eval"]["tasks"]:
            run.write_eval(task, [{"step": s, "score": ((i * 7 + s) % 97) / 97, "k": 8, "pass_at_k": 0.5,
                                   "maj_at_k": 0.5} for s in range(eval_every, steps + 1, eval_every)])
    return config


def bench_mlflow(args) -> None:
    from analysis.cells.summary import collect
    from analysis.claims.summary_file import write_summary
    from analysis.report.write import summarize
    from grid.settings import Config
    from tracking.sync import sync
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        start = time.perf_counter()
        config = fabricate(Path(tmp), args.runs, args.steps, args.eval_every, args.train_keys)
        n_runs = len(expand(config))
        print(f"fabricated {n_runs} runs x {args.steps} steps ({args.train_keys} training key(s)/step) "
              f"in {time.perf_counter() - start:.1f} s", flush=True)
        start = time.perf_counter()
        grid = GridDir.of(config)
        typed = Config.build(config)
        write_summary(grid.summary_path, summarize(typed, collect(typed, progress=False)))
        print(f"aggregated (statistics only) in {time.perf_counter() - start:.1f} s", flush=True)
        logged_steps = min(args.steps, args.max_train_points or args.steps)
        n_metrics = n_runs * (logged_steps * args.train_keys + 2 * 3 * (args.steps // args.eval_every))
        start = time.perf_counter()
        sync(typed, progress=True, max_train_points=args.max_train_points)
        first = time.perf_counter() - start
        start = time.perf_counter()
        sync(typed, progress=False, max_train_points=args.max_train_points)
        second = time.perf_counter() - start
    print(f"mlflow sync: {n_runs} runs x {args.steps} steps (training curves at ~{logged_steps} steps: "
          f"--max-train-points), {n_metrics:,} step metrics: {first:.1f} s "
          f"(target 60 s; {n_metrics / first:,.0f} metrics/s); re-sync (nothing new): {second:.1f} s")


PARTS = {"mlflow": bench_mlflow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=sorted(PARTS), action="append")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--max-train-points", type=int, default=TRAIN_POINTS, help="as tracking.sync's (0 = all)")
    parser.add_argument("--train-keys", type=int, default=1, choices=range(1, len(TRAIN_KEYS) + 1),
                        metavar=f"1..{len(TRAIN_KEYS)}")
    args = parser.parse_args()
    print("timings on a shared machine are noisy", flush=True)
    for part in args.part or sorted(PARTS):
        PARTS[part](args)


if __name__ == "__main__":
    main()
