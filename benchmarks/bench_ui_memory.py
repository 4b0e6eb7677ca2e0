"""Peak memory of `make ui`: the resident set of tracking.ui's whole process tree (the MLflow server and
every worker it starts), sampled every 0.5 s for a minute after the server answers.

    .venv/bin/python benchmarks/bench_ui_memory.py                       # the reduced test grid's store
    .venv/bin/python benchmarks/bench_ui_memory.py --config config.yaml  # your grid's store

Without --config it syncs the reduced test grid (tests/support/ui_check.py) into a temporary store.
Prints the peak summed RSS, the process count at that peak and the largest processes.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tests.support.ui_check import running_ui, synced_grid  # noqa: E402


def tree_rss(root: psutil.Process) -> list[tuple[int, str]]:
    """(RSS in bytes, command) of ``root`` and every descendant still alive."""
    sizes = []
    for process in [root] + root.children(recursive=True):
        try:
            sizes.append((process.memory_info().rss, " ".join(process.cmdline())[:90]))
        except psutil.NoSuchProcess:
            pass
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="a workflow config whose grid is synced (default: the reduced test grid)")
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ui_memory_") as tmp:
        config_path = Path(args.config) if args.config else synced_grid(Path(tmp))
        with running_ui(config_path) as (ui, links):
            root = psutil.Process(ui.pid)
            peak: list[tuple[int, str]] = []
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                sizes = tree_rss(root)
                if sum(size for size, _ in sizes) > sum(size for size, _ in peak):
                    peak = sizes
                time.sleep(0.5)
    print(f"links: {' '.join(links)}\npeak RSS of the process tree over {args.seconds:.0f} s: "
          f"{sum(size for size, _ in peak) / 2**20:.0f} MiB in {len(peak)} processes; largest:")
    for size, command in sorted(peak, reverse=True)[:4]:
        print(f"  {size / 2**20:6.0f} MiB  {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
