"""Aggregate a finished grid: the claims' verdicts, tables, plots and summary.json (analysis.report.write) in <results_dir>/<grid>.

    python -m analysis.aggregate --grid <results_dir>/<grid> [--out FOLDER]
"""
from __future__ import annotations

import argparse
import sys

from grid.design import pin_design
from grid.folder import GridDir
from grid.loader import load_grid
from harness.cli import run_stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.aggregate", description=__doc__.split("\n")[0])
    parser.add_argument("--grid", required=True, help="the grid folder, <results_dir>/<grid> (its config.json)")
    parser.add_argument("--out", help="the folder the reports are written to (default: the grid folder)")
    args = parser.parse_args(argv)
    config = load_grid(parser, args.grid)
    out = GridDir(args.out or args.grid)
    from analysis.report.compare import load_beside
    from analysis.report.write import write_reports  # after validation: matplotlib/scipy load only for real work
    from analysis.statistics.intervals import ALPHA

    def work() -> dict:
        load_beside(config)  # a grid to show beside this one that is not there fails before anything is written
        pin_design(config, ALPHA)  # the first reading pins the design; a later one that differs is refused
        return write_reports(config, out)

    return run_stage("analysis.aggregate", work, lambda summary, seconds: (
        f"{len(summary.cells)} cells from {sum(len(c.seeds) for c in summary.cells)} runs "
        f"-> {out.path} in {seconds:.1f} s"))


if __name__ == "__main__":
    sys.exit(main())
