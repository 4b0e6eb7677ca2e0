"""Speed and behaviour of the tiny engine (figures for benchmarks/README.md; timings on a shared machine are noisy).

    python benchmarks/bench_tiny.py                       # one default run: wall time + per-step split
    python benchmarks/bench_tiny.py --grid --recipes grpo --lags 1 8 --seeds 0 1 2 --jobs 2
        # a small study: greedy validation exact match at every checkpoint, collapse, mean |d|, SAT's q

Runs go to --out (default results/bench_tiny/<preset>), through the same code as the workflow
(engines.tiny.warmstart.build_base, grid.expand.resolve_run_config, engines.train.run).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engines.tiny.checkpoint import load_model  # noqa: E402
from engines.tiny.warmstart import build_base, exact_match  # noqa: E402
from engines.train import run  # noqa: E402
from grid.expand import resolve_run_config  # noqa: E402
from grid.folder import GridDir  # noqa: E402


def grid_config(args, recipes, lags, seeds) -> dict:
    return {"grid": f"bench_{args.preset}", "results_dir": str(args.out), "engine": "tiny",
            "recipes": recipes, "lags": lags, "seeds": seeds, "lag_mode": args.lag_mode,
            "steps": args.steps, "eval_every": args.eval_every,
            "engine_params": {"preset": args.preset, **json.loads(args.overrides)}}


def one_run(job) -> dict:
    config, recipe, lag, seed = job
    torch.set_num_threads(1)
    folder = GridDir.of(config).run(recipe, lag, seed)
    start, cpu = time.perf_counter(), time.process_time()
    status = run(resolve_run_config(config, recipe, lag, seed), folder.path)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows = folder.read_metrics()
    scores = {step: exact_match(load_model(ckpt), "validation", 256) for step, ckpt in folder.checkpoints().items()}
    last = rows[-20:]
    return {"recipe": recipe, "lag": lag, "seed": seed, "status": status, "wall_s": wall, "cpu_s": cpu,
            "seconds": folder.read_status().get("seconds"),
            "scores": scores, "d_mean_abs": statistics.fmean(r.get("d/mean_abs", float("nan")) for r in rows),
            "d_p99": statistics.fmean(r.get("d/p99", float("nan")) for r in rows),
            "sat_q": statistics.fmean(r["sat/q"] for r in rows) if "sat/q" in rows[0] else None,
            "tv": statistics.fmean(r.get("tv/mean", float("nan")) for r in rows),
            "entropy": statistics.fmean(r.get("entropy", float("nan")) for r in rows),
            "reward_last20": statistics.fmean(r.get("reward", float("nan")) for r in last)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--overrides", default="{}", help="engine_params overrides as JSON")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--lag-mode", default="interval")
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--recipes", nargs="+", default=["grpo"])
    parser.add_argument("--lags", nargs="+", type=int, default=[1])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/bench_tiny"))
    args = parser.parse_args()
    torch.set_num_threads(1)

    config = grid_config(args, args.recipes, args.lags, args.seeds)
    start = time.perf_counter()
    base = build_base(config["engine_params"], Path(args.out) / config["grid"] / "base")
    print(f"base: greedy exact match {base['validation_greedy_exact_match']:.3f} "
          f"(warm start {time.perf_counter() - start:.1f}s incl. any cache hit)")
    jobs = [(config, r, lag, s) for r in args.recipes for lag in args.lags for s in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs))
    for r in results:
        steps = args.steps
        sec = r["seconds"] or {}
        print(f"{r['recipe']:>14} lag {r['lag']} seed {r['seed']}: {r['status']:9} wall {r['wall_s']:.1f}s "
              f"cpu {r['cpu_s']:.1f}s | per step generate {1000 * sec.get('generate', 0) / steps:.0f} ms, "
              f"train {1000 * sec.get('train', 0) / steps:.0f} ms")
    if not args.grid:
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (this process)")
    print("\nrecipe lag | greedy val exact match: final (mean ± sd over seeds), peak, collapses (final < 0.5 peak)"
          " | mean |d|, p99 |d|, TV, entropy, SAT q")
    cells = {}
    for r in results:
        cells.setdefault((r["recipe"], r["lag"]), []).append(r)
    for (recipe, lag), rs in cells.items():
        finals = [r["scores"][max(r["scores"])] for r in rs]
        peaks = [max(r["scores"].values()) for r in rs]
        collapses = sum(f < 0.5 * p for f, p in zip(finals, peaks))
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        q = [r["sat_q"] for r in rs if r["sat_q"] is not None]
        print(f"{recipe:>14} {lag:>2} | final {statistics.fmean(finals):.3f} ± {sd:.3f} "
              f"[{' '.join(f'{f:.2f}' for f in finals)}] peak {statistics.fmean(peaks):.3f} "
              f"collapse {collapses}/{len(rs)} | |d| {statistics.fmean(r['d_mean_abs'] for r in rs):.4f} "
              f"p99 {statistics.fmean(r['d_p99'] for r in rs):.3f} TV {statistics.fmean(r['tv'] for r in rs):.4f} "
              f"H {statistics.fmean(r['entropy'] for r in rs):.3f}"
              + (f" q {statistics.fmean(q):.3f}" if q else ""))


if __name__ == "__main__":
    main()
