"""The declared seed schedule (config ``seeding``; analysis.claims.verdicts): which runs each look needs.

Look 1 runs every cell at seeds[:n_1]. After look k the claims are read (analysis.claims.verdicts.open_cells)
and only the cells of a claim whose outcome is not final get seeds[n_k:n_(k+1)]. The workflow runs
one interim job per look (``python -m analysis.schedule.looks``, a Snakemake checkpoint: the DAG grows from
its output; with a tuning section, on the picked values' grid: analysis.schedule.tune.confirmation_view)
and the aggregate replays the same schedule from the runs (:func:`scheduled_runs`), so
the runs it reads are the ones the schedule asked for, whoever ran them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.cells.summary import build_cells, collect
from analysis.claims.verdicts import open_cells
from analysis.schedule.tune import confirmation_view
from analysis.statistics.intervals import ALPHA
from grid.design import pin_design
from grid.loader import load_grid
from grid.settings import Config, Run
from harness.cli import run_stage
from harness.io import write_json_atomic


def look_runs(config: Config, cells: list[tuple[str, int]], look: int) -> list[Run]:
    """The runs the ``look``-th look (1-based) adds to ``cells``: their seeds from the previous look's
    count up to this look's."""
    looks, seeds = config.seeding.looks, config.seeds
    new = set(seeds[(looks[look - 2] if look > 1 else 0):looks[look - 1]])
    return [run for run in config.grid_runs if run[:2] in set(cells) and run[2] in new]


def after_look(config: Config, planned: list[Run], look: int) -> list[tuple[str, int]]:
    """The cells still open after reading ``look`` on the runs ``planned`` (all runs through it)."""
    cells = build_cells(config, collect(config, progress=False, which=planned))
    return open_cells(config.family, cells, look)


def scheduled_runs(config: Config, through: int | None = None) -> list[Run]:
    """Every run the schedule asks for through its ``through``-th look (default: the last), given the
    runs read at each look before; a fixed design: the whole grid."""
    seeding = config.seeding
    if seeding is None:
        return list(config.grid_runs)
    planned = look_runs(config, list(dict.fromkeys(run[:2] for run in config.grid_runs)), 1)
    for look in range(2, (through or len(seeding.looks)) + 1):
        planned += look_runs(config, after_look(config, planned, look - 1), look)
    order = {run: i for i, run in enumerate(config.grid_runs)}
    return sorted(planned, key=order.__getitem__)


def interim(config: Config, look: int) -> dict:
    """What look ``look`` decided: the cells still open and the runs the next look adds to them."""
    cells = after_look(config, scheduled_runs(config, through=look), look)
    return {"look": look, "open_cells": [list(cell) for cell in cells],
            "next_runs": [list(run) for run in look_runs(config, cells, look + 1)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.schedule.looks", description=__doc__.split("\n")[0])
    parser.add_argument("--grid", required=True, help="the grid folder, <results_dir>/<grid> (its config.json)")
    parser.add_argument("--look", type=int, required=True, help="the look just run (1-based, before the last)")
    parser.add_argument("--out", required=True, help="the JSON file to write: the next look's runs")
    args = parser.parse_args(argv)
    declared = load_grid(parser, args.grid)
    config, _ = confirmation_view(declared)  # with a tuning section: the picked values' grid
    seeding = config.seeding
    if seeding is None or not 1 <= args.look < len(seeding.looks):
        parser.error(f"--look {args.look}: the config's seeding has no later look to plan")

    def work() -> dict:
        pin_design(declared, ALPHA)  # the first look pins the design the later ones and the aggregate read
        result = interim(config, args.look)
        write_json_atomic(Path(args.out), result)
        return result

    return run_stage("analysis.schedule.looks", work, lambda result, seconds: (
        f"look {args.look}: {len(result['open_cells'])} cells still open, {len(result['next_runs'])} runs next "
        f"({seconds:.1f} s)"))


if __name__ == "__main__":
    sys.exit(main())
