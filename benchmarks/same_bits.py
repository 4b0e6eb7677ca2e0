"""Whether two checkouts train the same bits: short tiny-engine runs of each, compared file by file.

    .venv/bin/python -m benchmarks.same_bits --before OLD_CHECKOUT [--after CHECKOUT] [--cases NAME ...]
        [--steps N] [--packed] [--engine-params JSON] [--out DIR]

For a change meant to keep every number (issue 35's per-step op reductions): each case is a short run
of config.yaml's stress preset cut to one recipe, lag and seed, prepared, trained and (where marked)
scored by each checkout's own code in fresh processes (`engines.prepare`, `engines.train`,
`eval.score`, the checkout first on PYTHONPATH, one thread). Compared, as sha256 digests: the base
model, every checkpoint and the resume state (weights, Adam moments, snapshots, the batch in
flight) byte for byte, the metrics rows but their `time`, the eval lines but their `eval_key`.
The cases cover both bf16 rollouts, a SAT recipe, R3 replay with top_k 2, the KL term, VCPO's lr and
gradient clipping, and R2 with top_k 2. Prints one line per case, "identical" or the files that differ.
--packed: the after side trains all cases one after another in one `engines.train` process and scores
the scored ones in one `eval.score` process, as a packed job does (grid.jobs.run_packs).
--engine-params: over every case's (e.g. '{"version": 3}' with --before . --packed: an engine version's bits
across two processes, alone and packed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name -> (recipe, lag, steps, engine_params over the stress preset, scored)
CASES = {
    "grpo_bf16": ("grpo", 8, 30, {"rollout_dtype": "bfloat16"}, True),
    "grpo_emulated": ("grpo", 8, 30, {"rollout_dtype": "bfloat16_emulated"}, True),
    "sat_gspo_emulated": ("sat_gspo", 8, 20, {"rollout_dtype": "bfloat16_emulated"}, False),
    "r3_top2_kl_vcpo_clip_emulated": ("grpo_r3", 1, 12, {
        "rollout_dtype": "bfloat16_emulated", "top_k": 2, "kl_coef": 0.01, "vcpo_ess_lr": True,
        "max_grad_norm": 1.0, "warmstart_steps": 20}, False),
    "r2_top2_bf16": ("grpo", 2, 12, {"rollout_dtype": "bfloat16", "top_k": 2, "warmstart_steps": 20}, False),
}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan_case(tree: Path, out: Path, name: str, steps: int | None, overrides: dict) -> dict:
    """The case's prepare command, run folder, train arguments and scoring arguments (None: not scored),
    as the checkout at ``tree`` (on sys.path) resolves them."""
    import yaml

    from grid.config import validate
    try:
        from grid.settings import Config
    except ImportError:  # a checkout from before the typed config's file was renamed (harness/model.py)
        from harness.model import Config

    recipe, lag, default_steps, params, scored = CASES[name]
    steps = steps or default_steps
    config = yaml.safe_load((tree / "config.yaml").read_text())
    config.update(grid=f"bits_{name}", results_dir=str(out), recipes=[recipe], lags=[lag], seeds=[0], claims=[],
                  baseline=recipe, steps=steps, eval_every=min(10, steps),
                  engine_params={**config["engine_params"], "preset": "stress", **params, **overrides})
    model = Config.build(validate(config))
    run_config = model.run_config(model.runs[0])
    grid = Path(model.grid_dir)
    run_dir, base = grid / "runs" / recipe / f"lag{lag}" / "seed0", grid / run_config["base_model"]
    return {"prepare": ["engines.prepare", "--engine", model.engine.name, "--engine-params-json",
                        json.dumps(model.prepare_params()), "--out", str(base)],
            "run_dir": run_dir, "base": base, "train": ["--run-dir", str(run_dir), "--config-json", json.dumps(run_config)],
            "score": ["--tasks", *model.eval.scored_tasks, "--settings-json", json.dumps(model.eval.job_settings())]
            if scored else None}


def run_cases(tree: Path, out: Path, names: list[str], steps: int | None, packed: bool,
              overrides: dict) -> dict[str, dict[str, str]]:
    """The cases trained (and scored) by the checkout at ``tree``, each in processes of its own, or
    (``packed``) all trained in one `engines.train` process and scored in one `eval.score` process, as a
    packed job does (grid.jobs.run_packs); each case's files' digests."""
    from harness.run import RunDir

    plans = {name: plan_case(tree, out, name, steps, overrides) for name in names}
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1"}
    commands = [plan["prepare"] for plan in plans.values()]
    scored = [plan for plan in plans.values() if plan["score"] is not None]
    if packed:
        commands.append(["engines.train", *(arg for plan in plans.values() for arg in plan["train"])])
        if scored:
            commands.append(["eval.score", "--run-dir", *(str(plan["run_dir"]) for plan in scored), *scored[0]["score"]])
    else:
        commands += [["engines.train", *plan["train"]] for plan in plans.values()]
        commands += [["eval.score", "--run-dir", str(plan["run_dir"]), *plan["score"]] for plan in scored]
    for command in commands:
        done = subprocess.run([sys.executable, "-m", *command], cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{tree}: {command[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    found = {}
    for name, plan in plans.items():
        run_dir, base = plan["run_dir"], plan["base"]
        run = RunDir(run_dir)
        rows = [{k: v for k, v in row.items() if k != "time"} for row in run.read_metrics()]
        digests = {"metrics rows": digest(json.dumps(rows, sort_keys=True).encode()), "base model": digest(
            (base / "model.safetensors").read_bytes())}
        for path in sorted(run_dir.rglob("*.safetensors")):
            digests[str(path.relative_to(run_dir))] = digest(path.read_bytes())
        for task in sorted(path.stem for path in (run_dir / "eval").glob("[!.]*.jsonl")):
            lines = [{k: v for k, v in row.items() if k != "eval_key"} for row in run.read_eval(task)]
            digests[f"eval lines of {task}"] = digest(json.dumps(lines, sort_keys=True).encode())
        found[name] = digests
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--steps", type=int, help="steps of every case (default: each case's own)")
    parser.add_argument("--out", type=Path, default=Path("results/same_bits"))
    parser.add_argument("--packed", action="store_true",
                        help="the after side trains every case in one engines.train process and scores them in one "
                             "eval.score process (a packed job), the before side each alone")
    parser.add_argument("--engine-params", default="{}", help="JSON over every case's engine_params")
    args = parser.parse_args()
    found = {}
    for side in ("before", "after"):
        tree, out = getattr(args, side).resolve(), (args.out / side).resolve()
        packed = "packed" if args.packed and side == "after" else "alone"
        command = [sys.executable, str(Path(__file__).resolve()), "--child", str(tree), str(out),
                   str(args.steps or 0), packed, args.engine_params, *args.cases]
        done = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{side} ({tree}) failed:\n{done.stderr[-3000:]}")
        found[side] = json.loads((out / "digests.json").read_text())
    differing = 0
    for name in args.cases:
        before, after = found["before"][name], found["after"][name]
        keys = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        differing += bool(keys)
        print(f"{name}: " + (f"differs in {keys}" if keys else f"identical ({len(before)} digests: {sorted(before)})"))
    return 1 if differing else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        tree, out, steps, packed, overrides, *names = sys.argv[2:]
        sys.path.insert(0, tree)
        Path(out).mkdir(parents=True, exist_ok=True)
        result = run_cases(Path(tree), Path(out), names, int(steps) or None, packed == "packed", json.loads(overrides))
        (Path(out) / "digests.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    else:
        sys.exit(main())
