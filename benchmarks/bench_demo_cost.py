"""The demo's cost at every outcome of its seed schedule: `make demo` timed from a fresh clone (issue 66).

    .venv/bin/python -m benchmarks.bench_demo_cost --dir NEW_FOLDER [--ref HEAD] [--levels native avx2]
        [--engine-params JSON] [--set KEY=YAML ...] [--cores 2]

Clones this repository at --ref into --dir and runs `make setup` there (timed, reported apart), then, per
kernel level (native; avx2 = `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`), `make demo` on
config.yaml with --engine-params over its engine_params and each --set KEY=YAML over its keys (a key set
to null is removed: its default), results in a folder of the level's own, under /usr/bin/time. The demo's
runs are counted by their status files; the per-run cost is the workflow's wall time over its runs
(every job the grid runs, the prepare, null check, evaluation and report included, spread over the runs),
and the wall time at 40 (every claim final at the first look), 64 (the schedule's expectation) and 96 runs
(its most) is that cost times the runs, plus the setup's wall for a fresh clone. Box load: printed beside.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LEVELS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
OUTCOMES = {40: "every claim final at look 1", 64: "expected", 96: "most"}


def timed(command: list[str], cwd: Path, env: dict, log: Path) -> tuple[int, float, str]:
    """Exit status, wall seconds and /usr/bin/time's line (wall, user, sys, max RSS) of ``command``."""
    start = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.run(["/usr/bin/time", "-f", "time: wall %e s, user %U s, sys %S s, max RSS %M KB",
                                 *command], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    lines = log.read_text().splitlines()
    return status, time.monotonic() - start, next((line for line in reversed(lines) if line.startswith("time: ")), "")


def demo_config(clone: Path, level: str, engine_params: dict, settings: list[str]) -> Path:
    """config.yaml with the overrides, its results in a folder of the level's own; written in the clone."""
    config = yaml.safe_load((clone / "config.yaml").read_text())
    config["engine_params"] = {**config["engine_params"], **engine_params}
    config["results_dir"] = f"results_{level}"
    for setting in settings:
        key, _, value = setting.partition("=")
        if not key or not _:
            raise SystemExit(f"--set {setting!r}: expected KEY=YAML")
        parsed = yaml.safe_load(value)
        if parsed is None:
            config.pop(key, None)
        else:
            config[key] = parsed
    path = clone / f"bench_demo_{level}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def completed_runs(results: Path) -> int:
    from harness.run import STATUS_PATTERN, RunDir

    folders = (path.parents[1] for path in results.glob(f"*/runs/*/*/*/{STATUS_PATTERN}"))
    return sum((RunDir(folder).read_status() or {}).get("status") == "completed" for folder in folders)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a new folder for the clone")
    parser.add_argument("--ref", default="HEAD", help="the commit to clone")
    parser.add_argument("--levels", nargs="+", default=list(LEVELS), choices=list(LEVELS))
    parser.add_argument("--engine-params", default="{}", help="JSON over config.yaml's engine_params")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=YAML", help="over config.yaml's keys")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    if args.dir.exists():
        parser.error(f"--dir {args.dir} exists: give a new folder (a fresh clone)")
    clone = args.dir / "clone"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
    if (ROOT.parent / "shared").is_dir() and not (clone.parent / "shared").exists():
        (clone.parent / "shared").symlink_to(ROOT.parent / "shared")  # what a checkout finds beside itself
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("PYTHONPATH", None)
    status, setup_wall, line = timed(["make", "setup"], clone, env, args.dir / "setup.log")
    print(f"{args.ref} ({commit[:12]}) in {clone}; load average before the workflows {os.getloadavg()[0]:.1f}\n"
          f"make setup: exit status {status}, {line[6:]}")
    if status:
        return status
    for level in args.levels:
        config = demo_config(clone, level, json.loads(args.engine_params), args.set)
        status, wall, line = timed(["make", "demo", f"CONFIG={config.name}", f"CORES={args.cores}"], clone,
                                   {**env, **LEVELS[level]}, args.dir / f"demo_{level}.log")
        runs = completed_runs(clone / f"results_{level}")
        print(f"[{level}] make demo: exit status {status}, {line[6:]}; {runs} runs completed; load average "
              f"{os.getloadavg()[0]:.1f} after")
        if status or not runs:
            print(f"  see {args.dir / f'demo_{level}.log'}")
            return status or 1
        per_run = wall / runs
        print(f"  per run {per_run:.1f} s wall; projected (runs x per run, + setup {setup_wall:.0f} s for a fresh clone):")
        for count, outcome in OUTCOMES.items():
            total = count * per_run
            print(f"  {count} runs ({outcome}): workflow {total / 60:.1f} min, from a fresh clone "
                  f"{(total + setup_wall) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
