"""Whether two tiny-engine runs have the same numbers: every metrics row but its ``time`` (the wall
clock, unix s), and every evaluation line but its ``eval_key`` (it hashes the run key, which differs
between grids); prints the first difference.

    .venv/bin/python -m benchmarks.compare_runs RUN_A RUN_B
"""
from __future__ import annotations

import sys

from harness.run import RunDir


def main(a: str, b: str) -> int:
    runs = RunDir(a), RunDir(b)
    rows = [[{k: v for k, v in row.items() if k != "time"} for row in run.read_metrics()] for run in runs]
    if len(rows[0]) != len(rows[1]):
        print(f"metrics: {len(rows[0])} rows against {len(rows[1])}")
        return 1
    for left, right in zip(*rows):
        if left != right:
            keys = sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))
            print(f"metrics differ from step {left.get('step')}: {keys[:8]}")
            return 1
    tasks = sorted(path.stem for path in (runs[0].path / "eval").glob("[!.]*.jsonl"))
    for task in tasks:
        lines = [[{k: v for k, v in row.items() if k != "eval_key"} for row in run.read_eval(task)] for run in runs]
        if not lines[0] or lines[0] != lines[1]:
            print(f"eval/{task}.jsonl differs (or is empty)")
            return 1
    print(f"identical: {len(rows[0])} metrics rows (all keys but time) and the eval lines of {tasks}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
