"""One tiny-engine trainer step against its FLOP floor, phase by phase, at both CPU kernel levels (issue 48).

    .venv/bin/python -m benchmarks.bench_step [--tree DIR ...] [--steps 24] [--warmup 4] [--repeats 2]
        [--levels native avx2] [--recipe grpo] [--lag 8] [--engine-params JSON ...] [--out DIR]

A run of config.yaml's grid cut to one recipe, lag and seed (its base model prepared first, not timed)
is trained for --steps steps in a fresh process per (checkout, kernel level), one thread, the checkout
first on sys.path; the first --warmup steps are not counted. Each step's CPU time (time.process_time)
is split by wrapping the engine's code:
  generation  = the rollout engine sampling the batch (engines.tiny.rollout.generate),
  sampler     = the float32 pass of the sampling version over the batch (pi_l, for d/lag and d/impl),
  rollout other = the rest of Trainer.generate (broadcasts, rewards),
  recompute   = Trainer.recompute (old_logp), update = Trainer.update (forwards, backward, Adam),
  metrics     = the rest of Trainer.train_on (the metrics row).
A phase a checkout does not have reads 0. GFLOP per step is counted from the model's shapes (matmuls
and attention: the rollout's forward, the sampler pass, the recompute, the update's forward and its
backward at twice a forward; the base model's forward with the KL term). The floor is those FLOPs at
the float32 matmul rate reached on the model's own shapes (measured in each process; the best of a kernel
level's processes, so one floor for every case at that level); the ratio is the median step over the floor. Then torch.profiler counts 2 steps' aten ops and the
matmuls with bf16 inputs (none should be left on a CPU without AVX512-BF16).
Levels: native (the CPU's own kernels) and avx2 (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`:
on an AVX512 box, an AVX2-only CPU's kernels, bf16 matmuls included; either setting alone is not).
Checkouts, levels and repeats are interleaved, so that a drifting load spreads over all of them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVELS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
PHASES = ("generation", "sampler", "rollout other", "recompute", "update", "metrics")


def step_gflop(model, params: dict, prompt: int, response: int) -> float:
    """GFLOP of one trainer step from the shapes (multiply-add = 2 FLOPs): per token and layer the
    attention's projections and its causal score and value products, the router and top_k experts;
    the head. Forward passes: rollout, sampler, recompute, update (+ the base model's with the KL
    term); the backward twice the update's forward."""
    w, h, e, k, v = model.width, model.expert_hidden, model.experts, model.top_k, model.vocab
    length = prompt + response - 1  # positions fed forward per sequence
    context = (length + 1) / 2  # mean causal context
    per_token = model.layers * (2 * w * 3 * w + 2 * w * w + 2 * 2 * context * w + 2 * w * e + k * 4 * w * h) + 2 * w * v
    forwards = 4 + (params["kl_coef"] > 0) + 2  # + the backward
    rows = params["prompts_per_step"] * params["samples_per_step"]
    return forwards * rows * length * per_token / 1e9


def matmul_gflops(model, rows: int) -> float:
    """The float32 matmul rate (GFLOP/s, one thread) on the model's shapes: the attention and head
    projections over all rows, each expert's two products over its share of them."""
    import torch

    w, h = model.width, model.expert_hidden
    shapes = [(rows, w, 3 * w), (rows, w, w), (rows // model.experts, w, h), (rows // model.experts, h, w),
              (rows, w, model.vocab)]
    pairs = [(torch.randn(m, n), torch.randn(n, p)) for m, n, p in shapes]
    flops = sum(2 * m * n * p for m, n, p in shapes)
    best = float("inf")
    for _ in range(30):
        start = time.process_time()
        for _ in range(10):
            for a, b in pairs:
                a @ b
        best = min(best, (time.process_time() - start) / 10)
    return flops / best / 1e9


def child(config_json: str, run_dir: str, warmup: int, out: Path) -> None:
    import importlib.util

    import torch

    from engines.tiny import rollout as rollout_module
    from engines.tiny import task
    from engines.tiny.trainer import Trainer
    from harness.run import RunDir
    from harness.run_config import RunConfig

    # this checkout's op counter, whichever checkout is first on sys.path
    spec = importlib.util.spec_from_file_location("bench_run_phases", Path(__file__).with_name("bench_run_phases.py"))
    phases_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phases_module)
    run = RunDir(run_dir)
    trainer = Trainer(RunConfig.check(json.loads(config_json), run.grid_dir), run)
    torch.set_num_threads(1)
    calls: dict[str, list[float]] = {}

    def timed(owner, name: str, phase: str) -> None:
        method = getattr(owner, name, None)
        if method is None:  # a phase this checkout does not have
            return

        def wrapper(*args, **kwargs):
            start = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                calls.setdefault(phase, []).append(time.process_time() - start)
                if phase == "rollout":  # the sampler passes of this rollout (none where a version skips it)
                    calls.setdefault("sampler", []).append(sum(calls.pop("sampler call", [])))

        setattr(owner, name, wrapper)

    timed(rollout_module, "generate", "generation")
    sampler = getattr(trainer.engine, "sampler_fp32", None)
    if sampler is not None:
        timed(sampler, "forward", "sampler call")
    timed(trainer, "generate", "rollout")
    timed(trainer, "recompute", "recompute")
    timed(trainer, "update", "update")
    timed(trainer, "train_on", "train_on")
    trainer.run()
    # one rollout per step (the first, of batch 1, before step 1: its one-off costs are in the warm-up)
    steps = len(calls["train_on"])

    def per_step(phase: str) -> list[float]:
        return calls.get(phase, [0.0] * steps)

    phases = {name: per_step(name) for name in ("generation", "sampler", "recompute", "update")}
    phases["rollout other"] = [r - g - s for r, g, s in zip(per_step("rollout"), phases["generation"], phases["sampler"])]
    phases["metrics"] = [t - r - u for t, r, u in zip(calls["train_on"], phases["recompute"], phases["update"])]
    phases = {name: [1000 * v for v in phases[name][warmup:]] for name in PHASES}
    params, model = trainer.params, trainer.model.config
    plen = len(task.problems("train", 1, seed=0)[0]["prompt"].split()) + 2
    trainer.step = trainer.steps  # op counts of two more steps, past the run
    counts = phases_module.op_counts(trainer, trainer.in_flight, 2)
    rows = params["prompts_per_step"] * params["samples_per_step"] * (plen + task.DIGITS)
    out.write_text(json.dumps({
        "phases ms": phases, "gflop": step_gflop(model, params, plen, task.DIGITS + 1),
        "matmul gflops": matmul_gflops(model, rows), "ops": counts}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, nargs="+", default=[ROOT], help="the checkouts whose code is measured")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--levels", nargs="+", default=list(LEVELS), choices=list(LEVELS))
    parser.add_argument("--recipe", default="grpo")
    parser.add_argument("--lag", type=int, default=8)
    parser.add_argument("--engine-params", nargs="+", default=["{}"],
                        help="overrides of config.yaml's engine_params, JSON; several: each measured, interleaved "
                             "(e.g. '{}' '{\"version\": 2}': the engine's versions)")
    parser.add_argument("--out", type=Path, default=Path("results/bench_step"))
    args = parser.parse_args()
    if args.warmup >= args.steps:
        parser.error("--warmup must be below --steps")
    trees = [tree.resolve() for tree in args.tree]
    import yaml

    from grid.config import validate
    from grid.settings import Config

    label = time.strftime("%Y%m%dT%H%M%S")
    jobs = []
    cases = [(tree, overrides) for tree in trees for overrides in args.engine_params]
    for index, (tree, overrides) in enumerate(cases):  # each checkout's own config, grid and base model
        config = yaml.safe_load((tree / "config.yaml").read_text())
        config.update(grid=f"step_{label}_{index}", results_dir=str(args.out.resolve()), recipes=[args.recipe],
                      lags=[args.lag], seeds=[0], claims=[], baseline=args.recipe, steps=args.steps,
                      eval_every=args.steps, engine_params={**config["engine_params"], **json.loads(overrides)})
        config.pop("seeding", None)
        model = Config.build(validate(config))
        run_config = model.run_config(model.runs[0])
        grid = Path(model.grid_dir)
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-m", "engines.prepare", "--engine", model.engine.name, "--engine-params-json",
                        json.dumps(model.prepare_params()), "--out", str(grid / run_config["base_model"])],
                       cwd=tree, check=True, env=env, capture_output=True)
        jobs.append((f"{tree} {overrides}", tree, grid, json.dumps(run_config, sort_keys=True)))
    results: dict[tuple[str, str], list[dict]] = {}
    for repeat in range(args.repeats):
        for level in args.levels:
            for name, tree, grid, run_config in jobs:
                out = grid / f"{level}_{repeat}.json"
                env = {**os.environ, **LEVELS[level], "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
                run_dir = grid / "runs" / f"{level}{repeat}" / "lag0" / "seed0"  # a run folder in the grid's layout
                done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", run_config,
                                       str(run_dir), str(args.warmup), str(out)], cwd=tree, env=env,
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{name} at {level} failed ({done.returncode}):\n{done.stderr[-3000:]}")
                results.setdefault((name, level), []).append(json.loads(out.read_text()))
    print(f"{args.recipe} lag {args.lag}, {args.steps - args.warmup} steps counted x {args.repeats} processes, one "
          f"thread, CPU ms per step (min / median)")
    columns = {}  # (case, level) -> the table's column: median ms per phase, the step, the floor, the ratio
    for (name, level), found in results.items():
        phases = {name: [v for r in found for v in r["phases ms"][name]] for name in PHASES}
        totals = [sum(values) for r in found for values in zip(*(r["phases ms"][name] for name in PHASES))]
        # the machine's rate at this level: the best any of its processes reached (one floor for every case)
        gflop = found[0]["gflop"]
        rate = max(r["matmul gflops"] for (_, other), runs in results.items() if other == level for r in runs)
        floor = 1000 * gflop / rate
        ops = found[0]["ops"]
        print(f"{name} [{level}]")
        print("  " + ", ".join(f"{name} {min(v):.1f}/{statistics.median(v):.1f}" for name, v in phases.items()))
        print(f"  step {min(totals):.1f}/{statistics.median(totals):.1f} ms; {gflop:.3f} GFLOP per step; fp32 matmuls "
              f"{rate:.1f} GFLOP/s on the model's shapes -> floor {floor:.1f} ms; median / floor "
              f"{statistics.median(totals) / floor:.2f}x")
        columns[f"{name if len(trees) > 1 else name.split(' ', 1)[1]} [{level}]"] = [statistics.median(v) for v in phases.values()] + [
            statistics.median(totals), floor, statistics.median(totals) / floor]
        print("  per step: " + "; ".join(
            f"{phase}: aten ops {tally.get('aten ops called from Python', 0):.0f} from Python "
            f"({tally.get('aten ops (all levels)', 0):.0f} all levels), bf16 matmuls {tally.get('bf16 matmuls', 0):.0f}"
            for phase, tally in ops.items()))

    print_table(columns)


def print_table(columns: dict[str, list[float]]) -> None:
    """The cases side by side, a column per (engine params, level), the checkout named where there are
    several: median ms per phase and step, the floor and the ratio."""
    rows = [*(f"{phase} (median ms)" for phase in PHASES), "step (median ms)", "floor (ms)", "median / floor"]
    print("\n| | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for index, row in enumerate(rows):
        cells = (f"{values[index]:.2f}x" if row == "median / floor" else f"{values[index]:.1f}" for values in columns.values())
        print(f"| {row} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        config_json, run_dir, warmup, out = sys.argv[2:]
        child(config_json, run_dir, int(warmup), Path(out))
    else:
        main()
