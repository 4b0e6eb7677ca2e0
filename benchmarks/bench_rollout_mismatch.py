"""The mismatch of two rollout engines on identical weights, per step over a run (issue 35).

    .venv/bin/python -m benchmarks.bench_rollout_mismatch --run RUN_DIR [--rollouts 16]
        [--engines bfloat16 bfloat16_emulated] [--stale] [--out FILE.json]

For each checkpoint of a finished tiny-engine run (step s, every eval_every steps) the rollout engines
get its weights (with --stale: the weights of the checkpoint before it, step s - eval_every, the base
model before the first): each samples --rollouts batches of the run's shape (prompts_per_step x samples_per_step, the problems
and the sampling seed of rollout i the same for every engine), and each batch is scored against the
weights of step s as the trainer scores a batch (eval_every versions old with --stale), with the trainer's
definitions (engines/tiny/trainer.py, Trainer.diagnostics) over the batch's active tokens:
  |d|     mean |log pi_s - log mu|, pi_s the float32 policy of step s on the sampled tokens (without
          --stale the engine's own version: |d| = d_impl, the implementation mismatch alone),
  d_impl  mean |log pi_old - log mu|, pi_old the float32 policy of the engine's own version,
  TV      mean full-vocabulary total variation between pi_s and mu.
Each figure is a mean +- 2 SE over the rollouts, per step and pooled over the run's steps, and the
ratio of each engine's mean to the first engine's with the interval of the paired differences.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.tiny import task  # noqa: E402
from engines.tiny.batch import step_seed  # noqa: E402
from engines.tiny.checkpoint import load_model  # noqa: E402
from engines.tiny.rollout import RolloutEngine  # noqa: E402
from harness.run import RunDir  # noqa: E402

FIGURES = ("|d|", "d_impl", "TV")


@torch.no_grad()
def figures(engine: RolloutEngine, trainer, params: dict, index: int, seed: int) -> dict[str, float]:
    problems = task.problems("train", params["prompts_per_step"], seed=step_seed(seed, index, 0))
    batch = engine.rollout(0, problems, params["samples_per_step"], params["reward"], seed=step_seed(seed, index, 1))
    plen = batch.tokens.shape[1] - batch.mask.shape[1]
    response, active = batch.tokens[:, plen:], batch.mask.bool()
    logp_full = (trainer(batch.tokens[:, :-1]).logits[:, plen - 1:] / params["temperature"]).log_softmax(-1)
    logmu = batch.logmu_full.gather(-1, response[..., None])[..., 0]
    logp = logp_full.gather(-1, response[..., None])[..., 0]
    tv = 0.5 * (logp_full.exp() - batch.logmu_full.exp()).abs().sum(-1)
    return {"|d|": float((logp - logmu)[active].abs().mean()),
            "d_impl": float((batch.logp_sampler - logmu)[active].abs().mean()), "TV": float(tv[active].mean())}


def mean_2se(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), 2 * statistics.stdev(values) / math.sqrt(len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished tiny-engine run directory")
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--engines", nargs="+", default=["bfloat16", "bfloat16_emulated"])
    parser.add_argument("--seed", type=int, default=12345, help="of the rollouts' problems and sampling")
    parser.add_argument("--stale", action="store_true", help="rollouts by the previous checkpoint's weights")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = RunDir(args.run)
    config = run.read_config()
    params = config["engine_params"]
    base = run.grid_dir / config["base_model"]
    checkpoints = run.checkpoints()
    steps = sorted(checkpoints)
    rows, pooled, seconds = [], {e: {f: [] for f in FIGURES} for e in args.engines}, dict.fromkeys(args.engines, 0.0)
    for position, step in enumerate(steps):
        older = load_model(checkpoints[step] if not args.stale else checkpoints[steps[position - 1]] if position else base)
        trainer = load_model(checkpoints[step]).eval()
        state = {k: v.detach().clone() for k, v in older.state_dict().items()}
        per_engine = {}
        for name in args.engines:
            engine = RolloutEngine(trainer.config, name, params["temperature"])
            engine.broadcast(state, 0)
            start = time.process_time()
            per_engine[name] = [figures(engine, trainer, params, i, args.seed + step) for i in range(args.rollouts)]
            seconds[name] += time.process_time() - start
        row = {"step": step, "weights of": step if not args.stale else steps[position - 1] if position else 0}
        for name, values in per_engine.items():
            for figure in FIGURES:
                series = [v[figure] for v in values]
                pooled[name][figure].extend(series)
                row[f"{name} {figure}"] = mean_2se(series)
        rows.append(row)
        print(f"step {step:>4} (rollout weights of step {row['weights of']}): " + "; ".join(
            f"{name} " + " ".join(f"{f} {row[f'{name} {f}'][0]:.4f}±{row[f'{name} {f}'][1]:.4f}" for f in FIGURES)
            for name in args.engines), flush=True)
    reference = args.engines[0]
    summary = {}
    for name in args.engines:
        for figure in FIGURES:
            mean, se2 = mean_2se(pooled[name][figure])
            base_mean = statistics.fmean(pooled[reference][figure])
            ratio, ratio_2se = mean_2se([a / base_mean for a in pooled[name][figure]]) if name == reference else \
                mean_2se([1 + (a - b) / base_mean for a, b in zip(pooled[name][figure], pooled[reference][figure])])
            summary[f"{name} {figure}"] = {"mean": mean, "2se": se2, "ratio": ratio, "ratio_2se": ratio_2se}
    n = len(pooled[reference]["TV"])
    print(f"\npooled over {len(steps)} steps x {args.rollouts} rollouts (n = {n}); ratio to {reference}: "
          "1 + mean paired difference / its mean, +- 2 SE")
    for name in args.engines:
        print(f"  {name:<18} " + "  ".join(
            f"{f} {summary[f'{name} {f}']['mean']:.5f}±{summary[f'{name} {f}']['2se']:.5f} "
            f"(x{summary[f'{name} {f}']['ratio']:.3f}±{summary[f'{name} {f}']['ratio_2se']:.3f})" for f in FIGURES)
            + f"  rollout CPU {1000 * seconds[name] / n:.0f} ms per batch incl. scoring")
    if args.out:
        args.out.write_text(json.dumps({"run": str(args.run), "rollouts": args.rollouts, "rows": rows,
                                        "summary": summary, "cpu_s": seconds}, indent=2))


if __name__ == "__main__":
    main()
