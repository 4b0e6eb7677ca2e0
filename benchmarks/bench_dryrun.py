"""How long `snakemake -n` takes to plan a 1,000-run grid (target: within 5 s).

    .venv/bin/python benchmarks/bench_dryrun.py [--repeats 3] [--seeds 50]

The grid is the demo config with 10 recipes x 2 lags x 50 seeds (config overrides; the demo's
claims kept: they name recipes this grid leaves out, which the config check lets pass; no seed schedule, or
only the first look's seeds would be planned), i.e. 1,000 training jobs and their scoring jobs. Prints the wall time of each
`snakemake -n` (process start to exit: Python imports, config checks, resolving 1,000 run configs,
building the DAG, printing every job; torch is not imported) and of `snakemake -n -q` (no job
listing), with the process's CPU time, which a busy machine inflates less than the wall time.

Bytecode: every timed run reads the modules' compiled bytecode, as any run after the first does
(and the first too in a venv that `make setup` compiled). A process that finds no compiled file
compiles the module's source, ~1,100 modules here (about 4 s on the 2-core dev box), and writes
the result unless PYTHONDONTWRITEBYTECODE is set, in which case every run compiles them all again.
So the runs here use a bytecode cache of their own (PYTHONPYCACHEPREFIX, a temporary folder: the
venv is not written), filled by one untimed run first, whose time is printed as "first run".
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["grpo", "gspo", "dppo", "sat_grpo", "sat_gspo", "grpo_mu", "grpo_dualclip", "grpo_r3", "gspo_r3",
           "sat_gspo_r3"]


def dry_run(results_dir: str, seeds: int, pycache: str, *flags: str) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout+stderr) of one `snakemake -n [flags]` on the large grid, its bytecode
    cached under ``pycache``."""
    command = [str(Path(sys.executable).with_name("snakemake")), "-n", *flags, "-C", f"results_dir={results_dir}",
               f"recipes=[{','.join(RECIPES)}]", "lags=[1,8]", f"seeds=[{','.join(map(str, range(seeds)))}]",
               "seeding=null"]  # a fixed design: the demo's seed schedule would plan its first look's 3 seeds only
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**env, "PYTHONPYCACHEPREFIX": pycache})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode:
        sys.exit(f"snakemake -n failed:\n{result.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.stdout + result.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args()
    runs = len(RECIPES) * 2 * args.seeds
    with tempfile.TemporaryDirectory() as pycache, tempfile.TemporaryDirectory() as results_dir:
        first = dry_run(results_dir, args.seeds, pycache, "-q")
        print(f"first run (compiles every module into an empty bytecode cache): wall {first[0]:5.2f} s   "
              f"cpu {first[1]:5.2f} s")
        for flags in ((), ("-q",)):
            report(flags, runs, [dry_run(results_dir, args.seeds, pycache, *flags) for _ in range(args.repeats)])


def report(flags: tuple[str, ...], runs: int, timings: list[tuple[float, float, str]]) -> None:
    output = timings[-1][2]
    jobs = output.split("Job stats:", 1)[1].split("total", 1)[1].split()[0] if "Job stats:" in output else "?"
    print(f"snakemake -n {' '.join(flags)}: {runs}-run grid, {jobs} jobs in all")
    for wall, cpu, _ in timings:
        print(f"  wall {wall:5.2f} s   cpu {cpu:5.2f} s")
    median = statistics.median(wall for wall, _, _ in timings)
    print(f"  median wall {median:.2f} s (target <= 5 s: {'ok' if median <= 5 else 'MISSED'}), "
          f"median cpu {statistics.median(cpu for _, cpu, _ in timings):.2f} s")


if __name__ == "__main__":
    main()
