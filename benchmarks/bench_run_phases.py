"""CPU seconds of one demo run, phase by phase: start-up, rollout, update and scoring (issue 35).

    .venv/bin/python -m benchmarks.bench_run_phases [--tree DIR] [--recipe grpo] [--lag 8] [--seed 0]
        [--steps N] [--engine-params JSON] [--env KEY=VALUE ...] [--profile-steps 3] [--out DIR]

The run is config.yaml's (of the checkout at --tree, default this one) cut to one recipe, lag and seed.
Its base model is prepared first (not timed: once per grid). Then two fresh processes, each under
`/usr/bin/time -v`, run what the workflow's jobs run: `engines.train.main` (the train job) and
`eval.score.main` (the evaluate job), with the checkout at --tree first on sys.path. Inside each, the
process's CPU clock (time.process_time, from the process's start) is read around the trainer's
rollouts (Trainer.generate) and updates (Trainer.train_on: recompute, Adam steps, diagnostics) and
before the first checkpoint is scored, so that
  start-up = CPU before the first rollout (interpreter, imports, checks, model and optimizer),
  rollout, update = the sums over the run's steps, train other = the rest (checkpoints, metrics),
  scoring start-up = the evaluate process's CPU before its first lm-eval `evaluate` call,
  scoring = the rest of it.
--profile-steps N: a third process counts, with torch.profiler, the aten ops of N trainer steps
(rollout and update separately) and those whose inputs include bfloat16 (matmuls among them).
--env (e.g. PYTHONPYCACHEPREFIX=DIR, ATEN_CPU_CAPABILITY=avx2) goes to every timed process.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

CPU_AT_START = time.process_time()  # before any heavy import: the child's start-up begins at 0
ROOT = Path(__file__).resolve().parents[1]
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
           "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention")


class PhaseClock:
    """CPU seconds spent inside wrapped methods, and the CPU clock when the first call began."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.first: float | None = None

    def wrap(self, owner, name: str, phase: str) -> None:
        method = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.process_time()
            if self.first is None:
                self.first = start
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.process_time() - start

        setattr(owner, name, timed)


def child_train(run_dir: str, config_json: str, out: Path) -> None:
    from engines import train as train_job
    from engines.tiny.trainer import Trainer

    clock = PhaseClock()
    clock.wrap(Trainer, "generate", "rollout")
    clock.wrap(Trainer, "train_on", "update")
    code = train_job.main(["--run-dir", run_dir, "--config-json", config_json])
    total = time.process_time()
    phases = {"start-up": clock.first, **clock.seconds}
    phases["train other"] = total - sum(phases.values())
    out.write_text(json.dumps({"rc": code, "cpu": total, "phases": phases,
                               "torch._dynamo imported": "torch._dynamo" in sys.modules}))


def child_score(run_dir: str, tasks: list[str], settings_json: str, out: Path) -> None:
    from eval import score

    clock = PhaseClock()
    clock.wrap(score, "score_checkpoint", "scoring calls")
    code = score.main(["--run-dir", run_dir, "--tasks", *tasks, "--settings-json", settings_json])
    total = time.process_time()
    start = clock.first if clock.first is not None else total
    out.write_text(json.dumps({"rc": code, "cpu": total,
                               "phases": {"scoring start-up": start, "scoring": total - start}}))


def child_profile(config_json: str, run_dir: str, steps: int, out: Path) -> None:
    """aten op counts per trainer step (rollout and update apart), from torch.profiler's events."""
    import torch

    from engines.tiny.trainer import Trainer
    from harness.run import RunDir
    from harness.run_config import RunConfig

    run = RunDir(run_dir)
    trainer = Trainer(RunConfig.check(json.loads(config_json), run.grid_dir), run)
    torch.set_num_threads(1)
    batch = trainer.generate(1)
    trainer.train_on(batch)  # the first step's one-off work (lazy imports, allocations) is not counted
    trainer.step = 1
    out.write_text(json.dumps({"steps": steps, "per_step": op_counts(trainer, batch, steps)}))


def op_counts(trainer, batch, steps: int) -> dict[str, dict[str, float]]:
    """aten ops per trainer step of ``steps`` steps from ``trainer.step + 1`` on (rollout and update apart)
    by torch.profiler: all, those called from Python, those with bf16 inputs, bf16 and fp32 matmuls."""
    from torch.profiler import ProfilerActivity, profile

    counts = {"rollout": {}, "update": {}}
    first = trainer.step + 1
    for step in range(first, first + steps):
        for phase in ("rollout", "update"):
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                if phase == "rollout":
                    next_batch = trainer.generate(step + 1)
                else:
                    trainer.train_on(batch)
            tally = counts[phase]
            for event in prof.events():
                if not event.name.startswith("aten::"):
                    continue
                bf16 = "c10::BFloat16" in (event.input_dtypes or [])
                top = event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::")
                for key, hit in (("aten ops (all levels)", True), ("aten ops called from Python", top),
                                 ("ops with bf16 inputs", bf16), ("bf16 matmuls", bf16 and event.name in MATMULS),
                                 ("fp32 matmuls", not bf16 and event.name in MATMULS)):
                    tally[key] = tally.get(key, 0) + int(hit)
        batch = next_batch
        trainer.step = step
    return {phase: {k: v / steps for k, v in tally.items()} for phase, tally in counts.items()}


def timed_child(args, mode: list[str], out: Path) -> dict:
    env = {**os.environ, **dict(item.split("=", 1) for item in args.env), "PYTHONPATH": str(args.tree),
           "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    command = ["/usr/bin/time", "-v", sys.executable, str(Path(__file__).resolve()), "--child", *mode, str(out)]
    done = subprocess.run(command, cwd=args.tree, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not out.is_file():
        raise SystemExit(f"{' '.join(mode[:1])} child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(out.read_text())
    usage = dict(re.findall(r"^\s*(User time \(seconds\)|System time \(seconds\)|Maximum resident set size "
                            r"\(kbytes\)|Elapsed \(wall clock\) time[^:]*): (\S+)", done.stderr, re.M))
    result["time -v"] = {"user+sys s": float(usage["User time (seconds)"]) + float(usage["System time (seconds)"]),
                         "max RSS MiB": int(usage["Maximum resident set size (kbytes)"]) / 1024}
    # what the process's clock cannot see: interpreter shutdown after main returned
    if "phases" in result:
        result["phases"]["exit"] = result["time -v"]["user+sys s"] - result["cpu"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code is measured")
    parser.add_argument("--recipe", default="grpo")
    parser.add_argument("--lag", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, help="default: config.yaml's")
    parser.add_argument("--engine-params", default="{}", help="overrides of config.yaml's engine_params, JSON")
    parser.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--profile-steps", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results/bench_phases"))
    args = parser.parse_args()
    args.tree = args.tree.resolve()
    sys.path.insert(0, str(args.tree))
    import yaml

    from grid.config import validate
    from grid.settings import Config

    config = yaml.safe_load((args.tree / "config.yaml").read_text())
    label = time.strftime("%Y%m%dT%H%M%S")
    config.update(grid=f"phases_{label}", results_dir=str(args.out.resolve()), recipes=[args.recipe],
                  lags=[args.lag], seeds=[args.seed], claims=[], steps=args.steps or config["steps"],
                  eval_every=min(config["eval_every"], args.steps or config["steps"]),
                  engine_params={**config["engine_params"], **json.loads(args.engine_params)})
    model = Config.build(validate(config))
    run = model.runs[0]
    run_config = json.dumps(model.run_config(run), sort_keys=True)
    grid_dir = Path(model.grid_dir)
    run_dir = grid_dir / "runs" / args.recipe / f"lag{args.lag}" / f"seed{args.seed}"
    base_dir = grid_dir / json.loads(run_config)["base_model"]
    subprocess.run([sys.executable, "-m", "engines.prepare", "--engine", model.engine.name, "--engine-params-json",
                    json.dumps(model.prepare_params()), "--out", str(base_dir)], cwd=args.tree, check=True,
                   env={**os.environ, "PYTHONPATH": str(args.tree), "OMP_NUM_THREADS": "1"}, capture_output=True)
    result = {"tree": str(args.tree), "run": str(run_dir), "env": args.env, "steps": config["steps"]}
    result["train"] = timed_child(args, ["train", str(run_dir), run_config], grid_dir / "train.json")
    result["score"] = timed_child(args, ["score", str(run_dir), ",".join(model.eval.scored_tasks),
                                         json.dumps(model.eval.job_settings())], grid_dir / "score.json")
    if args.profile_steps:
        result["profile"] = timed_child(args, ["profile", run_config, str(grid_dir / "runs" / "profiled" / "lag0" / "seed0"),
                                               str(args.profile_steps)], grid_dir / "profile.json")
    (grid_dir / "phases.json").write_text(json.dumps(result, indent=2))
    train, score = dict(result["train"]["phases"]), dict(result["score"]["phases"])
    train_exit, score_exit = train.pop("exit"), score.pop("exit")
    phases = {**train, "train exit": train_exit, **score, "scoring exit": score_exit}
    print(f"{args.tree}: {args.recipe} lag {args.lag} seed {args.seed}, {config['steps']} steps, env {args.env}")
    for name, seconds in phases.items():
        print(f"  {name:<18} {seconds:7.2f} CPU s")
    print(f"  train process      {result['train']['time -v']['user+sys s']:7.2f} user+sys s (time -v), "
          f"evaluate process {result['score']['time -v']['user+sys s']:.2f}; sum {sum(phases.values()):.2f}; "
          f"torch._dynamo imported by the train job: {result['train']['torch._dynamo imported']}")
    if args.profile_steps:
        for phase, tally in result["profile"]["per_step"].items():
            print(f"  per {phase} step: " + ", ".join(f"{k} {v:.0f}" for k, v in tally.items()))
    print(f"  -> {grid_dir / 'phases.json'}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        mode, *rest, out = sys.argv[2:]
        sys.path.insert(0, os.environ["PYTHONPATH"])
        if mode == "train":
            child_train(rest[0], rest[1], Path(out))
        elif mode == "score":
            child_score(rest[0], rest[1].split(","), rest[2], Path(out))
        else:
            child_profile(rest[0], rest[1], int(rest[2]), Path(out))
    else:
        main()
