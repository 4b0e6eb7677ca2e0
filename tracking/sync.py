"""Sync a grid into MLflow: the workflow's single MLflow writer (shared/DESIGN.md, "MLflow").

    python -m tracking.sync --config-json JSON [--grid-dir <results_dir>/<grid>]   # final (the track rule)
    python -m tracking.sync --config config.yaml --live                            # a running grid, once
    python -m tracking.sync --config config.yaml --follow 300                      # ... every 300 s

Files are the source of truth; MLflow is a view of them that this command can always rebuild.
Layout: an experiment per grid with a parent run (the grid: the tables and plots as artifacts) and a
child run per (recipe, lag, seed): flat params to filter on and metric names/units as
tracking.layout says, identity hashes and provenance.json's fields (``prov.*``) as tags, step metrics
for the training curve (every numeric key of train/metrics.jsonl, as train/<key>) and the
evaluation curves (eval/<task>/score, pass_at_k, maj_at_k, in percent, selection task included),
each point stamped with the time its training step was produced; its per-run numbers (fixed, best,
selected, auc, dbar, ...). The summary runs, one per cell (recipe x lag) with every number of
summary.json, live in their own experiment "<grid> summary", so that they never crowd the seed
runs out of the grid's default runs and chart views. Run status: RUNNING while training,
FINISHED when completed, FAILED with the reason (``status_reason`` tag) when diverged or failed;
``collapsed`` tags a collapsed run.

Every run carries a ``run_key`` tag (the run key of harness.grid for runs, ``grid:<grid>`` /
``cell:<grid>:<recipe>:lag<lag>`` otherwise): a second sync finds runs by that tag and updates them,
never duplicates them. Step metrics are synced incrementally (a tag remembers the last step sent
per file), so a re-sync sends only new steps; summary numbers are re-sent only when they changed.

Live (``--live``, ``--follow``): runs that have started are created RUNNING with their curves so far
and evaluations as they land; no summary runs, artifacts or marker (the grid is not aggregated).
``--follow`` repeats every INTERVAL seconds and stops once the grid is aggregated (summary.json
newer than every run's status); the final sync (the track rule) then finishes the same runs.
One writer per grid: <grid>/tracking.lock (tracking.store.writer_lock) refuses a second one; the
track rule waits for a live sync to stop (``--wait-lock``).

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
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from analysis.report import REPORT_FILES
from harness.cli import parse_config, run_stage
from harness.grid import expand, grid_dir, run_dir
from harness.io import read_jsonl, write_json_atomic
from tracking import layout
from tracking.store import (
    KIND,
    LockHeld,
    create_local_store,
    fast_sqlite_commits,
    local_artifact_dir,
    results_root,
    tracking_uri,
    ui_link,
    writer_lock,
)

KEY = "run_key"
SYNCED = "stalebench.synced_step."  # + "train" or "eval.<task>": last step already logged
SUMMARY_SUFFIX = " summary"  # the summary runs' experiment: "<grid> summary"
TRAIN_POINTS = 100  # training metrics logged at up to ~this many steps per run (0 = every step)
MAX_METRICS, MAX_PARAMS, MAX_TAGS = 1000, 100, 100  # MLflow's log_batch limits
MLFLOW_STATUS = {"completed": "FINISHED", "diverged": "FAILED", "failed": "FAILED"}
ROOT = Path(__file__).resolve().parents[1]
SCORE_UNITS = ("Scores (eval/TASK/score, fixed, best, selected, auc and their intervals) are in percent "
               "(avg@k x 100), as in table.md.")
UNITS_NOTE = SCORE_UNITS + " Seed runs are here; the per-cell summaries are in the experiment '{grid}" + \
    SUMMARY_SUFFIX + "'."


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class Tracker:
    """One pass of one grid into one MLflow store (see the module docstring)."""

    def __init__(self, config: dict, max_train_points: int = TRAIN_POINTS):
        from mlflow.tracking import MlflowClient
        self.config = config
        self.uri, self.artifact_root = tracking_uri(config)
        if self.uri.startswith("sqlite:"):
            create_local_store(self.uri)
            fast_sqlite_commits()
        self.client = MlflowClient(self.uri)
        self.experiment_id = self._experiment(config["grid"], UNITS_NOTE.format(grid=config["grid"]))
        self.summary_experiment_id, self.cells = None, {}  # the summary experiment: final sync only
        self.existing = self._existing(self.experiment_id)
        self.now = int(time.time() * 1000)
        self.stride = math.ceil(int(config["steps"]) / max_train_points) if max_train_points else 1
        self.tasks = list(config["eval"]["tasks"])  # and the selection task, if it is not among them
        if config["eval"].get("selection_task") not in (None, *self.tasks):
            self.tasks.append(config["eval"]["selection_task"])
        self.commit = git_commit()
        self.created = self.updated = 0

    def _experiment(self, name: str, note: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            location = None if self.artifact_root is None else f"{self.artifact_root}/{name.replace(' ', '_')}"
            experiment_id = self.client.create_experiment(name, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":
                self.client.restore_experiment(experiment_id)
        self.client.set_experiment_tag(experiment_id, "mlflow.note.content", note)  # the UI's description
        return experiment_id

    def _existing(self, experiment_id: str) -> dict:
        """Every active run of the experiment, once, keyed by its run_key tag."""
        from mlflow.entities import ViewType
        existing, token = {}, None
        while True:
            page = self.client.search_runs([experiment_id], run_view_type=ViewType.ACTIVE_ONLY,
                                           max_results=5000, page_token=token)
            for run in page:
                existing.setdefault(run.data.tags.get(KEY), run)
            token = page.token
            if not token:
                return existing

    def _run(self, key: str, kind: str, name: str, tags: dict, start_ms: int | None = None,
             experiment_id: str | None = None, existing: dict | None = None):
        """The run with this key among ``existing`` (default: the grid experiment's): found (updated)
        or created (new). Returns (run_id, existing Run|None)."""
        found = (self.existing if existing is None else existing).get(key)
        if found is not None:
            self.updated += 1
            return found.info.run_id, found
        run = self.client.create_run(experiment_id or self.experiment_id, start_time=start_ms or self.now,
                                     run_name=name, tags={KEY: key, KIND: kind,
                                                          "mlflow.source.git.commit": self.commit, **tags})
        self.created += 1
        return run.info.run_id, None

    def _log(self, run_id: str, metrics=(), params: dict | None = None, tags: dict | None = None) -> None:
        """log_batch in chunks within MLflow's limits (<= 1000 metrics, 100 params, 100 tags per call)."""
        from mlflow.entities import Param, RunTag
        metrics = list(metrics)
        params = [Param(k, v) for k, v in (params or {}).items()]
        tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        while metrics or params or tags:
            batch_params, params = params[:MAX_PARAMS], params[MAX_PARAMS:]
            batch_tags, tags = tags[:MAX_TAGS], tags[MAX_TAGS:]
            room = MAX_METRICS - len(batch_params) - len(batch_tags)
            batch_metrics, metrics = metrics[:room], metrics[room:]
            self.client.log_batch(run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags)

    def _changed(self, found, values: dict[str, float | None]):
        """Step-0 metrics whose value differs from the run's latest (all of them for a new run)."""
        from mlflow.entities import Metric
        latest = found.data.metrics if found is not None else {}
        out = []
        for key, value in values.items():
            if value is None:
                continue
            old = latest.get(key)
            if old is None or not (old == value or (math.isnan(old) and math.isnan(value))):
                out.append(Metric(key, value, self.now, 0))
        return out

    def _set_status(self, run_id: str, found, status: str, end_ms: int | None = None) -> None:
        """Move the run to ``status`` (RUNNING, FINISHED or FAILED) unless it is there already."""
        if found is not None and found.info.status == status:
            return
        if status == "RUNNING":
            if found is not None:
                self.client.update_run(run_id, status="RUNNING")
        else:
            self.client.set_terminated(run_id, status=status, end_time=end_ms)

    def _log_artifacts(self, run_id: str, paths: list[Path]) -> None:
        """Same artifact paths each sync: overwrites. A local store's proxied artifacts go straight
        into the folder its UI server serves them from (tracking.store)."""
        local = local_artifact_dir(self.config, self.client.get_run(run_id).info.artifact_uri)
        if local is not None:
            from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
            repository = LocalArtifactRepository(str(local))
        for path in paths:
            if local is None:
                self.client.log_artifact(run_id, str(path))
            else:
                repository.log_artifact(str(path))

    def sync_parent(self, grid_path: Path, final: bool) -> str:
        run_id, found = self._run(f"grid:{self.config['grid']}", "parent", self.config["grid"],
                                  {"engine": self.config["engine"], "grid": self.config["grid"]})
        self._log(run_id, tags={"n_runs": len(expand(self.config)), "mlflow.source.git.commit": self.commit})
        if final:
            with tempfile.TemporaryDirectory(prefix="track_") as tmp:
                write_json_atomic(Path(tmp) / "workflow_config.json", self.config)
                self._log_artifacts(run_id, [Path(tmp) / "workflow_config.json"] + [
                    grid_path / name for name in REPORT_FILES if (grid_path / name).exists()])
        self._set_status(run_id, found, "FINISHED" if final else "RUNNING")
        return run_id

    def sync_run(self, parent_id: str, recipe: str, lag: int, seed: int, numbers: dict | None) -> bool:
        """Sync one seed run; ``numbers`` = its per-seed numbers (final sync) or None (live).
        Returns False for a run that has not started (live sync only)."""
        from mlflow.entities import Metric
        directory = run_dir(self.config, recipe, lag, seed)
        config_path, status_path = directory / "config.json", directory / "train" / "status.json"
        for path in (config_path, status_path):
            if not path.exists() and numbers is not None:
                raise FileNotFoundError(f"run output missing: {path}")
        if not config_path.exists():
            return False
        run_config = json.loads(config_path.read_text())
        status = json.loads(status_path.read_text()) if status_path.exists() else None
        key = run_config.get("run_key")
        if not key:
            raise ValueError(f"{config_path} has no run_key")
        start_ms = int(config_path.stat().st_mtime * 1000)
        run_id, found = self._run(key, "run", f"{recipe}/lag{lag}/seed{seed}",
                                  {"mlflow.parentRunId": parent_id}, start_ms)
        tags = found.data.tags if found is not None else {}
        train_rows = read_jsonl(directory / "train" / "metrics.jsonl")
        times = layout.step_times_ms(train_rows, start_ms)
        metrics, problems = [], {}
        new_tags = {**layout.identity_tags(run_config),
                    "run_dir": os.path.relpath(directory.resolve(), results_root(self.config))}
        if (directory / "provenance.json").exists():
            new_tags.update(layout.provenance_tags(json.loads((directory / "provenance.json").read_text())))
        done = int(tags.get(SYNCED + "train", -1))
        rows = [row for row in train_rows if row["step"] > done and (
            row["step"] % self.stride == 0 or row["step"] == 1 or row is train_rows[-1])]
        for row in rows:  # every stride-th step, the first and the last (module docstring)
            for name, value in row.items():
                if name not in ("step", "time") and layout.number(value) is not None:
                    metrics.append(Metric("train/" + name, layout.number(value), times[row["step"]], row["step"]))
        if rows:
            new_tags[SYNCED + "train"] = rows[-1]["step"]
        for task in self.tasks:
            every = read_jsonl(directory / "eval" / f"{task}.jsonl")
            if every and layout.number(every[-1].get("n_problems")) is not None:
                problems[task] = int(every[-1]["n_problems"])
            done = int(tags.get(SYNCED + f"eval.{task}", -1))
            points = [p for p in layout.eval_metrics(every) if p[0] > done]
            metrics += [Metric(f"eval/{task}/{name}", value, times.get(step, start_ms + step), step)
                        for step, name, value in points]
            if points:
                new_tags[SYNCED + f"eval.{task}"] = max(p[0] for p in points)
        if status is not None:
            new_tags.update({"status": status.get("status"), "status_step": status.get("step")})
            if MLFLOW_STATUS.get(status.get("status")) != "FINISHED":  # the reason, also as the run's description
                new_tags["status_reason"] = new_tags["mlflow.note.content"] = status.get("message") or status.get("status")
        if numbers is not None:
            metrics += self._changed(found, layout.seed_values(numbers))
            if "collapsed" in numbers:
                new_tags["collapsed"] = str(bool(numbers["collapsed"])).lower()
        have = found.data.params if found is not None else {}
        params = {k: v for k, v in layout.run_params(run_config, self.config["eval"], problems).items()
                  if k not in have}
        self._log(run_id, metrics, params=params, tags=new_tags)
        if status is None:
            self._set_status(run_id, found, "RUNNING")
        else:
            end_ms = int(status_path.stat().st_mtime * 1000)
            self._set_status(run_id, found, MLFLOW_STATUS.get(status.get("status"), "FAILED"),
                             max(end_ms, start_ms))
        return True

    def sync_cell(self, parent_id: str, cell: dict) -> None:
        """A summary run in the "<grid> summary" experiment: every number of the cell (layout.cell_values)."""
        if self.summary_experiment_id is None:
            name = self.config["grid"] + SUMMARY_SUFFIX
            self.summary_experiment_id = self._experiment(
                name, f"One run per cell (recipe x lag) of grid '{self.config['grid']}': means over seeds "
                      "with their intervals and tests. " + SCORE_UNITS)
            self.cells = self._existing(self.summary_experiment_id)
        recipe, lag = cell["recipe"], cell["lag"]
        run_id, found = self._run(f"cell:{self.config['grid']}:{recipe}:lag{lag}", "cell",
                                  f"summary {recipe}/lag{lag}", {"stalebench.grid_run": parent_id},
                                  experiment_id=self.summary_experiment_id, existing=self.cells)
        values, tags = layout.cell_values(cell)
        tags.update({"seeds": json.dumps(cell["seeds"]), "run_keys": json.dumps(cell.get("run_keys", []))})
        params = {}
        if found is None:  # the params its seeds share (from the first seed's config)
            first = run_dir(self.config, recipe, lag, cell["seeds"][0]) if cell["seeds"] else None
            if first is not None and (first / "config.json").exists():
                params = layout.cell_params(json.loads((first / "config.json").read_text()))
            params.update({"recipe": recipe, "lag": str(lag)})
        self._log(run_id, self._changed(found, values), params=params, tags=tags)
        self._set_status(run_id, found, "FINISHED")


def grid_complete(config: dict) -> bool:
    """Aggregated: summary.json exists and is newer than every run's train/status.json."""
    summary = grid_dir(config) / "summary.json"
    if not summary.exists():
        return False
    newest = summary.stat().st_mtime
    for recipe, lag, seed in expand(config):
        status = run_dir(config, recipe, lag, seed) / "train" / "status.json"
        if not status.exists() or status.stat().st_mtime > newest:
            return False
    return True


def check_grid(config: dict, grid_path: str | Path | None, final: bool) -> Path:
    """The grid folder (default: the config's), checked before any store or lock is touched."""
    grid_path = Path(grid_path) if grid_path is not None else grid_dir(config)
    if grid_path.resolve() != grid_dir(config).resolve():
        raise ValueError(f"--grid-dir {grid_path} is not the config's <results_dir>/<grid> {grid_dir(config)}")
    if final and not (grid_path / "summary.json").exists():
        raise FileNotFoundError(f"{grid_path / 'summary.json'} missing: run analysis.aggregate first "
                                "(or sync a running grid: --live)")
    return grid_path


def sync(config: dict, grid_path: str | Path | None = None, progress: bool = True,
         max_train_points: int = TRAIN_POINTS, final: bool = True) -> dict:
    """One pass over the grid. Final (default): the grid is aggregated (summary.json), every run
    ends FINISHED/FAILED, summary runs and artifacts are synced and mlflow.json is written. Live:
    whatever has started, runs still training stay RUNNING. The caller holds the writer lock."""
    grid_path = check_grid(config, grid_path, final)
    summary, numbers = None, {}
    if final:
        summary = json.loads((grid_path / "summary.json").read_text())
        for cell in summary["cells"]:
            for i, seed in enumerate(cell["seeds"]):
                numbers[cell["recipe"], cell["lag"], seed] = {k: v[i] for k, v in cell["per_seed"].items()}
    tracker = Tracker(config, max_train_points=max_train_points)
    parent_id = tracker.sync_parent(grid_path, final)
    runs = expand(config)
    synced = 0
    for recipe, lag, seed in tqdm(runs, desc="track: runs", unit="run", disable=not progress,
                                  file=sys.stderr, mininterval=2):
        synced += tracker.sync_run(parent_id, recipe, lag, seed, numbers.get((recipe, lag, seed), {})
                                   if final else None)
    for cell in summary["cells"] if final else []:
        tracker.sync_cell(parent_id, cell)
    marker = {"tracking_uri": tracker.uri, "experiment": config["grid"],
              "experiment_id": tracker.experiment_id, "summary_experiment_id": tracker.summary_experiment_id,
              "parent_run_id": parent_id, "runs": synced, "cells": len(summary["cells"]) if final else 0,
              "created": tracker.created, "updated": tracker.updated}
    if final:
        write_json_atomic(grid_path / "mlflow.json", marker)
    return marker


def follow(config: dict, interval: float, progress: bool = False, max_train_points: int = TRAIN_POINTS,
           passes: int | None = None) -> dict:
    """Live passes every ``interval`` seconds until the grid is aggregated (or ``passes`` passes);
    returns the last pass's marker. The caller holds the writer lock for the whole loop."""
    count = 0
    while True:
        marker = sync(config, progress=progress, max_train_points=max_train_points, final=False)
        count += 1
        print(f"tracking.sync: live pass {count}: {marker['runs']} runs ({marker['created']} new) "
              f"at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)
        if grid_complete(config) or (passes is not None and count >= passes):
            return marker
        deadline = time.monotonic() + interval
        while time.monotonic() < deadline and not grid_complete(config):
            time.sleep(min(5.0, interval))


def ui_hint(marker: dict) -> str:
    """The last line of the final sync: how to open the UI at the grid's runs view."""
    if marker["tracking_uri"].startswith(("http://", "https://")):
        return f"open {ui_link(marker['tracking_uri'], marker['experiment_id'])}"
    return f"open the UI: make ui  (then {ui_link('http://127.0.0.1:5000', marker['experiment_id'])})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.sync", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config-json", help="the workflow config, as JSON (what the track rule passes)")
    source.add_argument("--config", help="a workflow config YAML file, e.g. config.yaml")
    parser.add_argument("--grid-dir", help="<results_dir>/<grid> (default: the config's)")
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
    if args.config_json is not None:
        config = parse_config(parser, args.config_json)
    else:
        from harness.config import ConfigError, load
        try:
            config = load(args.config)
        except ConfigError as error:
            parser.error(str(error))
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no network calls from a batch job
    live = args.live or args.follow is not None

    def work():
        grid_path = check_grid(config, args.grid_dir, final=not live)
        with writer_lock(grid_path, "follow" if args.follow else "live" if live else "final", args.wait_lock):
            if args.follow is not None:
                return follow(config, args.follow, max_train_points=args.max_train_points)
            return sync(config, grid_path, progress=not live, max_train_points=args.max_train_points,
                        final=not live)

    try:
        code = run_stage("tracking.sync", work, lambda marker, seconds: (
            f"{marker['runs']} runs + {marker['cells']} cells -> {marker['tracking_uri']} (experiment "
            f"{marker['experiment_id']}; {marker['created']} created, {marker['updated']} updated) "
            f"in {seconds:.1f} s" + ("" if live else "\n" + ui_hint(marker))))
    except LockHeld as error:
        print(f"tracking.sync: error: {error}", file=sys.stderr)
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
