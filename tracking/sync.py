"""Sync a grid into MLflow: the workflow's single MLflow writer (docs/design.md, "MLflow").

    python -m tracking.sync --grid <results_dir>/<grid>                            # final (the track rule)
    python -m tracking.sync --config config.yaml --live                            # a running grid, once
    python -m tracking.sync --config config.yaml --follow 300                      # ... every 300 s

Files are the source of truth; MLflow is a view of them that this command can always rebuild.
Layout: an experiment per grid with a parent run (the grid: the tables and plots as artifacts) and a
child run per (recipe, lag, seed): flat params to filter on and metric names/units as
tracking.layout says, identity hashes and provenance.json's fields (``prov.*``) as tags, step metrics
for the training curve (every numeric key of the run's training metrics, as train/<key>) and the
evaluation curves (eval/<task>/score, pass_at_k, maj_at_k, in percent, selection task included),
each point stamped with the time its training step was produced; its per-run numbers (fixed, best,
selected, auc, dbar, ...). The summary runs, one per cell (recipe x lag) with every number of
summary.json, live in their own experiment "<grid> summary", so that they never crowd the seed runs out
of the grid's default runs and chart views; what the cell comparisons draw (per cell its mean curve and
the two bounds of its 95% interval, drawn as its band) lives in the experiment "<grid> comparison", so
that no run list, Compare or search of results returns a band as a run. With an equal tuning budget (config ``tuning``) the
seed runs are the confirmation runs of the picked values, and the candidates' runs on the tuning
seeds live in the experiment "<grid> tuning" (params tuning.recipe, tuning.param, tuning.value;
tags ``tuning = candidate``, ``picked`` from the pick file tuning.json), never among the grid's runs: a
tuning score is the pick's input, not a result; the parent run carries the pick (tags
``tuning.picked.<recipe>``, tuning.md). The views the UI's links open are stored on the
experiments as shared views (tracking.layout); the claims' verdicts are the parent run's verdicts.md. Run status: RUNNING while training,
FINISHED when completed, FAILED with the reason (``status_reason`` tag) when diverged or failed;
``collapsed`` tags a collapsed run.

Every run carries a ``run_key`` tag (the run key of grid.expand for runs, ``grid:<grid>`` /
``cell:<grid>:<recipe>:lag<lag>`` otherwise): a second sync finds runs by that tag and updates them,
never duplicates them. Step metrics are synced incrementally (a tag remembers the last step sent
per file), so a re-sync sends only new steps; summary numbers are re-sent only when they changed.

Live (``--live``, ``--follow``): runs that have started are created RUNNING with their curves so far
and evaluations as they land; no summary runs, artifacts or marker (the grid is not aggregated).
``--follow`` repeats every INTERVAL seconds and stops once the grid is aggregated (summary.json
newer than every run's status); the final sync (the track rule) then finishes the same runs.
One writer per grid: <grid>/tracking.lock (harness.lock.writer_lock) refuses a second one; the
track rule waits for a live sync to stop (``--wait-lock``). One writer per store: each pass holds the
store's lock (tracking.store.store_lock), which another grid's sync into the same store waits for, so
that grids in one results folder run at once. Modules: tracking.runs (what each run
gets), tracking.writer (the MLflow calls), tracking.layout (names and units), tracking.store.

Training curves are logged at every stride-th step, stride = ceil(steps / max_train_points)
(default 100 points; ``--max-train-points 0`` = every step), plus the first and the last step sent
(the last: where a diverged run stopped); every step stays in the run's files, whose folder the
``run_dir`` tag names relative to the results directory (not copied: few MLflow calls per run is
the budget). Why: MLflow's SQL store costs ~0.1-0.2 ms per metric point on 2 CPU cores, and a run
logs ~20 keys per step; the UI samples long histories for its plots anyway.

Store: tracking.store (sqlite under the results directory, relocatable; or $MLFLOW_TRACKING_URI).
The final sync writes a marker <grid-dir>/mlflow.json (experiment ids, run counts) for the
workflow to depend on, and prints the command and link that open the UI at the runs view.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

from analysis.claims.summary_file import Summary, read_summary
from analysis.statistics.cell_table import CellTable
from grid.folder import GridDir
from grid.loader import load_grid
from grid.settings import Config
from harness.cli import run_stage
from harness.io import write_json_atomic
from harness.lock import writer_lock
from tracking.runs import Tracker
from tracking.store import check_reachable, store_lock, tracking_uri, ui_link

TRAIN_POINTS = 100  # training metrics logged at up to ~this many steps per run (0 = every step)


def summarized_runs(summary: Summary) -> list[tuple[str, int, int]]:
    """The runs the aggregate read (a seed schedule runs only some of the grid's), cell by cell."""
    return CellTable.of_cells(summary.cells).runs()


def grid_complete(config: Config) -> bool:
    """Aggregated: summary.json exists and is newer than the status (RunDir.status_path) of every run
    it read."""
    grid = config.folder
    if not grid.summary_path.exists():
        return False
    newest = grid.summary_path.stat().st_mtime
    for recipe, lag, seed in summarized_runs(read_summary(grid.summary_path)):
        status = grid.run(recipe, lag, seed).status_path
        if not status.exists() or status.stat().st_mtime > newest:
            return False
    return True


def read_pick(config: Config, grid_path: Path, final: bool) -> dict | None:
    """A tuning grid's pick (tuning.json, the tuning checkpoint's), None without a tuning section or,
    live, before the checkpoint wrote it; a final sync of a tuning grid needs it."""
    grid = GridDir(grid_path)
    if config.tuning is None or not (final or grid.tuning_path.exists()):
        return None
    pick = grid.read_tuning()
    missing = [recipe for recipe in config.tuning.candidates if recipe not in pick.get("recipes", {})]
    if missing:
        raise ValueError(f"{grid.tuning_path} has no pick for {missing}: rerun analysis.schedule.tune (the tune rule)")
    return pick


def live_runs(config: Config, pick: dict | None) -> list[tuple[str, int, int]]:
    """The grid's runs a live sync looks for: every run; with a tuning section the confirmation runs
    the pick named (none before it), its candidates' runs being the tuning experiment's."""
    if config.tuning is None:
        return list(config.grid_runs)
    return [tuple(run) for run in pick["confirmation_runs"]] if pick is not None else []


def check_grid(config: Config, final: bool) -> Path:
    """The grid folder, checked before any store or lock is touched."""
    if final and not config.folder.summary_path.exists():
        raise FileNotFoundError(f"{config.folder.summary_path} missing: run analysis.aggregate first "
                                "(or sync a running grid: --live)")
    return config.grid_dir


def sync(config: Config, progress: bool = True,
         max_train_points: int = TRAIN_POINTS, final: bool = True) -> dict:
    """One pass over the grid. Final (default): the grid is aggregated (summary.json), every run
    ends FINISHED/FAILED, summary runs and artifacts are synced and mlflow.json is written. Live:
    whatever has started, runs still training stay RUNNING. The caller holds the grid's writer lock
    and the store's (tracking.store.store_lock)."""
    grid_path = check_grid(config, final)
    summary, numbers = None, {}
    if final:
        summary = read_summary(GridDir(grid_path).summary_path)
        table = CellTable.of_cells(summary.cells)
        numbers = {run: table.run(*run) for run in table.runs()}
    pick = read_pick(config, grid_path, final)
    tracker = Tracker(config, stride=math.ceil(config.steps / max_train_points) if max_train_points else 1)
    grid_runs = summarized_runs(summary) if final else live_runs(config, pick)
    # the runs there are (a seed schedule trains only some of the grid's; live, those started), not the planned count
    parent_id = tracker.sync_parent(grid_path, summary, pick,
                                    sum(config.folder.run(*run).config_path.exists() for run in grid_runs))
    runs = [(*run, numbers.get(run, {}) if final else None, None) for run in grid_runs]
    if tracker.tuning is not None:
        runs += tracker.candidate_runs(pick, final)
    synced = {"runs": 0, "tuning_runs": 0}
    for recipe, lag, seed, run_numbers, candidate in tqdm(runs, desc="track: runs", unit="run", disable=not progress,
                                                          file=sys.stderr, mininterval=2):
        synced["runs" if candidate is None else "tuning_runs"] += tracker.sync_run(
            parent_id, recipe, lag, seed, run_numbers, candidate)
    tracker.share_dynamics()
    for cell in summary.cells if final else []:
        tracker.sync_cell(parent_id, cell, summary)
    if final:
        tracker.sync_report(parent_id, summary, tracker.sync_intervals(parent_id, summary))
    marker = {"tracking_uri": tracker.writer.uri, "experiment": config.grid,
              "experiment_id": tracker.experiment_id, "summary_experiment_id": tracker.summary_experiment_id,
              "comparison_experiment_id": tracker.comparison_experiment_id,
              "tuning_experiment_id": tracker.tuning_experiment_id,
              "parent_run_id": parent_id, **synced, "cells": len(summary.cells) if final else 0,
              "created": tracker.writer.created, "updated": tracker.writer.updated}
    if final:
        write_json_atomic(GridDir(grid_path).mlflow_path, marker)
    return marker


def follow(config: Config, interval: float, progress: bool = False, max_train_points: int = TRAIN_POINTS,
           passes: int | None = None) -> dict:
    """Live passes every ``interval`` seconds until the grid is aggregated (or ``passes`` passes);
    returns the last pass's marker. The caller holds the grid's writer lock for the whole loop; each
    pass holds the store's, which another grid's sync waits for meanwhile."""
    count = 0
    while True:
        with store_lock(tracking_uri(config.results_dir)[0], f"MLflow writer of grid {config.grid}, follow"):
            marker = sync(config, progress=progress, max_train_points=max_train_points, final=False)
        count += 1
        print(f"tracking.sync: live pass {count}: {marker['runs']} runs ({marker['created']} new) "
              f"at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)
        if grid_complete(config) or (passes is not None and count >= passes):
            return marker
        deadline = time.monotonic() + interval
        while time.monotonic() < deadline and not grid_complete(config):
            time.sleep(min(5.0, interval))


def ui_hint(marker: dict, lag: int) -> str:
    """The last line of the final sync: how to open the UI at the grid's seed runs of ``lag``."""
    if marker["tracking_uri"].startswith(("http://", "https://")):
        return f"open {ui_link(marker['tracking_uri'], marker['experiment_id'], lag)}"
    return f"open the UI: make ui  (then {ui_link('http://127.0.0.1:5000', marker['experiment_id'], lag)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.sync", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--grid", help="the grid folder, <results_dir>/<grid> (its config.json; what the track rule passes)")
    source.add_argument("--config", help="a workflow config YAML file, e.g. config.yaml (a grid still running: --live)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--live", action="store_true", help="one live pass over a grid that is still running")
    mode.add_argument("--follow", type=float, metavar="INTERVAL",
                      help="live passes every INTERVAL seconds until the grid is aggregated")
    parser.add_argument("--wait-lock", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long for another writer of the grid to finish (default: refuse at once)")
    parser.add_argument("--max-train-points", type=int, default=TRAIN_POINTS,
                        help=f"training steps logged per run, about (default {TRAIN_POINTS}; 0 = every step)")
    args = parser.parse_args(argv)
    if args.follow is not None and args.follow <= 0:
        parser.error("--follow INTERVAL must be > 0 seconds")
    if args.grid is not None:
        config = load_grid(parser, args.grid)
    else:
        from grid.config import ConfigError, load
        try:
            config = Config.build(load(args.config))
        except ConfigError as error:
            parser.error(str(error))
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no network calls from a batch job
    live = args.live or args.follow is not None

    def work():
        check_grid(config, final=not live)
        check_reachable(tracking_uri(config.results_dir)[0])  # a server that is not there: seconds, no lock taken
        mode = "follow" if args.follow else "live" if live else "final"
        with writer_lock(config.folder.tracking_lock_path, f"MLflow writer, {mode}", args.wait_lock):
            if args.follow is not None:
                return follow(config, args.follow, max_train_points=args.max_train_points)
            with store_lock(tracking_uri(config.results_dir)[0], f"MLflow writer of grid {config.grid}, {mode}"):
                return sync(config, progress=not live, max_train_points=args.max_train_points, final=not live)

    return run_stage("tracking.sync", work, lambda marker, seconds: (
        f"{marker['runs']} runs + {marker['cells']} cells"
        + (f" + {marker['tuning_runs']} tuning runs" if marker["tuning_experiment_id"] else "")
        + f" -> {marker['tracking_uri']} (experiment "
        f"{marker['experiment_id']}; {marker['created']} created, {marker['updated']} updated) "
        f"in {seconds:.1f} s" + ("" if live else "\n" + ui_hint(marker, min(config.lags)))))


if __name__ == "__main__":
    sys.exit(main())
