"""Lag vs response length in a queue-lag run (lag_mode queue, harness.queue_lag): one tiny-engine run
whose every group's realized lag and modelled length are plotted against the model's D(X), above
the realized lag distribution against the model's.

    python benchmarks/bench_queue_lag.py                  # the demo preset, lag 8, 200 steps
    python benchmarks/bench_queue_lag.py --steps 60 --lag 6 --utilization 1.5 --concurrency 16 --capacity 16

The run goes to --out (default results/bench_queue_lag), through the workflow's code (build_base,
resolve_run_config, engines.train.run); the figure (analysis.report.plots.plot_lag_vs_length, as a queue grid's
report draws it: the bench's --out is its grid folder) to <out>/lag_vs_length.png and the numbers
(Spearman's rho of length and lag, the chi-square fit of the lags to the model) to <out>/queue_lag.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from analysis.report.plots import plot_lag_vs_length  # noqa: E402
from engines.tiny.warmstart import build_base  # noqa: E402
from engines.train import run  # noqa: E402
from grid.expand import resolve_run_config  # noqa: E402
from grid.folder import GridDir  # noqa: E402
from harness.io import write_json_atomic  # noqa: E402
from harness.queue_lag import queue_model  # noqa: E402
from harness.run import RunDir  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/bench_queue_lag"))
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lag", type=int, default=8, help="the staleness filter's bound")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--utilization", type=float, default=1.5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--length-sigma", type=float, default=1.0)
    args = parser.parse_args(argv)
    queue = {"utilization": args.utilization, "concurrency": args.concurrency, "capacity": args.capacity,
             "length_sigma": args.length_sigma}
    config = {"grid": args.out.name, "results_dir": str(args.out.parent), "engine": "tiny", "recipes": ["grpo"],
              "lags": [args.lag], "seeds": [args.seed], "lag_mode": "queue", "lag_queue": queue,
              "steps": args.steps, "eval_every": args.steps, "engine_params": {"preset": args.preset}}
    run_config = resolve_run_config(config, "grpo", args.lag, args.seed)
    build_base(run_config["engine_params"], args.out / "base")
    directory = GridDir.of(config).run("grpo", args.lag, args.seed).path
    assert run(run_config, directory) in ("completed", "diverged")
    rows = [row for row in RunDir(directory).read_metrics() if "queue/lags" in row]
    lags = np.array([lag for row in rows for lag in row["queue/lags"]])
    lengths = np.array([length for row in rows for length in row["queue/lengths"]])
    model = queue_model(queue, run_config["engine_params"]["prompts_per_step"], args.lag)
    spearman = stats.spearmanr(lengths, lags)
    observed = np.bincount(lags, minlength=args.lag + 1)
    numbers = {"groups": int(lags.size), "steps": len(rows), "spearman_rho": float(spearman.statistic),
               "spearman_p": float(spearman.pvalue), "model_pmf": model.pmf(), "model_drop_rate": model.drop_rate(),
               "observed_counts": observed.tolist(), "mean_lag": float(lags.mean()),
               "model_mean_lag": float(sum(k * p for k, p in enumerate(model.pmf()))), "queue": queue}
    write_json_atomic(args.out / "queue_lag.json", numbers)
    matplotlib.use("Agg")  # a file only
    plot_lag_vs_length([(f"grpo, bound {args.lag}", lags, lengths, model)], GridDir(args.out).plot_path("lag_vs_length"))
    print(json.dumps({k: v for k, v in numbers.items() if k != "model_pmf"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
