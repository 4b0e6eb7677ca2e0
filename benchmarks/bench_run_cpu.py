"""CPU seconds per demo run, train and evaluate, from Snakemake's benchmark files (issue 15: halve them).

    .venv/bin/python -m benchmarks.bench_run_cpu [--tree DIR] [--recipes grpo sat_grpo] [--lags 1 8]
        [--seeds 0] [--cores 1] [--engine-params JSON]

Runs `snakemake --until evaluate` (every train and evaluate job, no aggregate or track) on a sub-grid
of the demo config in a fresh results folder, with the checkout at --tree (default: this one; give
an older checkout, e.g. a `git worktree`, to compare builds back to back on one machine with one
venv), then sums each rule's cpu_time column over its jobs and divides by the number of runs.
One core by default, so that jobs do not compete with each other for the CPU. The cpu_time column
is Snakemake's sampled figure, a lower bound (see analysis.report.machines.compute_lines); for exact CPU
seconds time the jobs' commands with /usr/bin/time.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grid.folder import GridDir

ROOT = Path(__file__).resolve().parents[1]


def rule_seconds(benchmarks: Path, rule: str) -> tuple[int, float, float]:
    """(jobs, CPU seconds, wall seconds) summed over the rule's benchmark files."""
    jobs, cpu, wall = 0, 0.0, 0.0
    for path in sorted([*benchmarks.glob(f"{rule}.tsv"), *(benchmarks / rule).rglob("*.tsv")]):
        with path.open() as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                jobs, cpu, wall = jobs + 1, cpu + float(row["cpu_time"]), wall + float(row["s"])
    return jobs, cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--recipes", nargs="+", default=["grpo", "sat_grpo"])
    parser.add_argument("--lags", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--engine-params", help="the grid's engine_params instead of config.yaml's, JSON "
                                                "(e.g. '{\"preset\": \"stress\", \"version\": 2}')")
    args = parser.parse_args()
    runs = len(args.recipes) * len(args.lags) * len(args.seeds)
    with tempfile.TemporaryDirectory() as results:
        command = [str(Path(sys.executable).with_name("snakemake")), f"-c{args.cores}", "--until", "evaluate",
                   "-C", f"results_dir={results}", "grid=bench",
                   f"recipes=[{','.join(args.recipes)}]", f"lags=[{','.join(map(str, args.lags))}]",
                   f"seeds=[{','.join(map(str, args.seeds))}]"]
        if args.engine_params:
            command.append(f"engine_params={json.dumps(json.loads(args.engine_params))}")
        start = time.perf_counter()
        subprocess.run(command, cwd=args.tree, check=True, capture_output=True)
        elapsed = time.perf_counter() - start
        benchmarks = GridDir(Path(results) / "bench").benchmarks_dir
        print(f"{args.tree} ({runs} demo runs, -c{args.cores}, engine_params {args.engine_params or 'of config.yaml'}, "
              f"{elapsed:.0f} s wall in all)")
        jobs, cpu, wall = rule_seconds(benchmarks, "prepare")
        print(f"  prepare   {jobs:>3} jobs  cpu {cpu:7.1f} s  wall {wall:7.1f} s  (once per grid)")
        total = 0.0
        for rule in ("train", "evaluate"):
            jobs, cpu, wall = rule_seconds(benchmarks, rule)
            total += cpu / runs
            print(f"  {rule:<9} {jobs:>3} jobs  cpu {cpu:7.1f} s  wall {wall:7.1f} s  per run cpu {cpu / runs:6.1f} s")
        print(f"  train + evaluate per run: {total:.1f} CPU s")


if __name__ == "__main__":
    main()
