"""Sync a finished grid into MLflow: the workflow's single MLflow writer (shared/DESIGN.md, "MLflow").

    python -m tracking.sync --config-json JSON --grid-dir <results_dir>/<grid>

Files are the source of truth; MLflow is a view of them that this command can always rebuild.
Layout: an experiment per grid; a parent run (the grid, with the tables and plots as artifacts);
a child run per (recipe, lag, seed) with the run config as params, tags (engine, run_key, git
commit, mlflow.parentRunId) and step metrics for the training curve (every numeric key of
train/metrics.jsonl, as train/<key>) and the evaluation curves (eval/<task>/score, pass_at_k,
maj_at_k, selection task included), plus its per-run numbers (run/fixed, run/best, ...); a summary run per cell
(recipe x lag) with the aggregates of summary.json. Every run carries a ``run_key`` tag (the run
key of harness.grid for runs, ``grid:<grid>`` / ``cell:<grid>:<recipe>:lag<lag>`` otherwise):
a second sync finds runs by that tag and updates them, never duplicates them. Step metrics are
synced incrementally (a tag remembers the last step sent per file), so a re-sync sends only
new steps; summary numbers are re-sent only when they changed.

Training curves are logged at every stride-th step, stride = ceil(steps / max_train_points)
(default 100 points; ``--max-train-points 0`` = every step), plus the first and the last step of
the file (the last: where a diverged run stopped); every step stays in the run's files, whose
folder the ``run_dir`` tag names (not copied: three MLflow calls per run is the budget). Why: MLflow's SQL store costs ~0.1-0.2 ms per metric point on 2 CPU
cores, and a run logs ~20 keys per step (300 steps x 48 runs of the demo grid = ~300k points,
a minute or more); the UI samples long histories for its plots anyway.

Store: $MLFLOW_TRACKING_URI when set (e.g. a server), else sqlite:///<abs results_dir>/mlflow.db
with artifacts under file://<abs results_dir>/mlartifacts. On that sqlite store the connection
runs with ``PRAGMA synchronous=OFF``: each commit would otherwise wait for an fsync (about 13 ms
here, two per call), and the store is rebuildable from the files if an OS crash ever corrupted it.
Writes a marker <grid-dir>/mlflow.json (experiment id, run counts) for the workflow to depend on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from analysis.report import REPORT_FILES
from harness.cli import parse_config, run_stage
from harness.grid import expand, grid_dir, run_dir
from harness.io import read_jsonl, write_json_atomic

KEY = "run_key"
KIND = "stalebench.kind"  # parent | run | cell
SYNCED = "stalebench.synced_step."  # + "train" or "eval.<task>": last step already logged
RUN_NUMBERS = ("fixed", "best", "selected", "auc", "dbar", "dtail", "collapsed", "best_step", "selected_step")
TRAIN_POINTS = 100  # training metrics logged at up to ~this many steps per run (0 = every step)
MAX_METRICS, MAX_PARAMS, MAX_TAGS = 1000, 100, 100  # MLflow's log_batch limits
ROOT = Path(__file__).resolve().parents[1]


def tracking_uri(config: dict) -> tuple[str, str | None]:
    """(tracking URI, artifact location for a new experiment; None = the server's default)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    results = Path(config.get("results_dir", "results")).resolve()
    return f"sqlite:///{results / 'mlflow.db'}", (results / "mlartifacts" / config["grid"]).as_uri()


_PRAGMA_SET = False


def _fast_sqlite_commits() -> None:
    """PRAGMA synchronous=OFF on every sqlite connection of this process (module docstring)."""
    global _PRAGMA_SET
    if _PRAGMA_SET:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _no_fsync(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA synchronous=OFF")

    _PRAGMA_SET = True


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(obj, prefix: str = "") -> dict[str, str]:
    """{"recipe": {"params": {"alpha": 0.9}}} -> {"recipe.params.alpha": "0.9"} (MLflow params)."""
    if isinstance(obj, dict) and obj:
        out = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    text = json.dumps(obj) if isinstance(obj, (list, dict)) or obj is None else str(obj)
    return {prefix: text[:6000]}  # MLflow's param value limit


def _number(value) -> float | None:
    """A JSON number (or bool) as a float for MLflow; anything else None (not logged)."""
    return float(value) if isinstance(value, (bool, int, float)) else None


class Tracker:
    """One sync of one grid into one MLflow store (see the module docstring)."""

    def __init__(self, config: dict, max_train_points: int = TRAIN_POINTS):
        from mlflow.entities import ViewType
        from mlflow.tracking import MlflowClient
        self.config = config
        self.uri, artifact_location = tracking_uri(config)
        if self.uri.startswith("sqlite:"):
            _fast_sqlite_commits()
        self.client = MlflowClient(self.uri)
        experiment = self.client.get_experiment_by_name(config["grid"])
        if experiment is None:
            self.experiment_id = self.client.create_experiment(config["grid"], artifact_location=artifact_location)
        else:
            self.experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":
                self.client.restore_experiment(self.experiment_id)
        self.existing = {}
        token = None
        while True:  # every active run of the experiment, once, keyed by its run_key tag
            page = self.client.search_runs([self.experiment_id], run_view_type=ViewType.ACTIVE_ONLY,
                                           max_results=5000, page_token=token)
            for run in page:
                self.existing.setdefault(run.data.tags.get(KEY), run)
            token = page.token
            if not token:
                break
        self.now = int(time.time() * 1000)
        self.stride = math.ceil(int(config["steps"]) / max_train_points) if max_train_points else 1
        self.tasks = list(config["eval"]["tasks"])  # and the selection task, if it is not among them
        if config["eval"].get("selection_task") not in (None, *self.tasks):
            self.tasks.append(config["eval"]["selection_task"])
        self.commit = git_commit()
        self.created = self.updated = 0

    def _run(self, key: str, kind: str, name: str, tags: dict, start_ms: int | None = None):
        """The run with this key: found (updated) or created (new). Returns (run_id, existing Run|None)."""
        found = self.existing.get(key)
        if found is not None:
            self.updated += 1
            return found.info.run_id, found
        run = self.client.create_run(self.experiment_id, start_time=start_ms or self.now, run_name=name,
                                     tags={KEY: key, KIND: kind, "mlflow.source.git.commit": self.commit,
                                           **tags})
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

    def sync_parent(self, grid_path: Path) -> str:
        run_id, _ = self._run(f"grid:{self.config['grid']}", "parent", self.config["grid"],
                              {"engine": self.config["engine"], "grid": self.config["grid"]})
        self._log(run_id, tags={"n_runs": len(expand(self.config)), "mlflow.source.git.commit": self.commit})
        self.client.log_dict(run_id, self.config, "workflow_config.json")
        for name in REPORT_FILES:
            if (grid_path / name).exists():
                self.client.log_artifact(run_id, str(grid_path / name))  # same path: overwrites
        self.client.set_terminated(run_id)
        return run_id

    def sync_run(self, parent_id: str, recipe: str, lag: int, seed: int, numbers: dict) -> None:
        from mlflow.entities import Metric
        directory = run_dir(self.config, recipe, lag, seed)
        for name in ("config.json", "train/status.json"):
            if not (directory / name).exists():
                raise FileNotFoundError(f"run output missing: {directory / name}")
        run_config = json.loads((directory / "config.json").read_text())
        status = json.loads((directory / "train/status.json").read_text())
        key = run_config.get("run_key")
        if not key:
            raise ValueError(f"{directory / 'config.json'} has no run_key")
        start_ms = int((directory / "config.json").stat().st_mtime * 1000)
        run_id, found = self._run(key, "run", f"{recipe}/lag{lag}/seed{seed}",
                                  {"engine": run_config.get("engine", self.config["engine"]),
                                   "mlflow.parentRunId": parent_id, "recipe": recipe, "lag": lag,
                                   "seed": seed}, start_ms)
        tags = found.data.tags if found is not None else {}
        metrics, new_tags = [], {"status": status.get("status"), "run_dir": str(directory.resolve())}
        sources = [("train", directory / "train" / "metrics.jsonl", "train/", None)]
        sources += [(f"eval.{task}", directory / "eval" / f"{task}.jsonl", f"eval/{task}/",
                     ("score", "pass_at_k", "maj_at_k")) for task in self.tasks]
        for source, path, prefix, keys in sources:
            done = int(tags.get(SYNCED + source, -1))
            every = read_jsonl(path)
            rows = [row for row in every if row["step"] > done]
            if source == "train":  # every stride-th step, the first and the last (module docstring)
                rows = [row for row in rows if row["step"] % self.stride == 0 or row["step"] == 1
                        or row is every[-1]]
            for row in rows:
                for name in keys or row:
                    value = _number(row.get(name))
                    if name != "step" and value is not None:
                        metrics.append(Metric(prefix + name, value, self.now, int(row["step"])))
            if rows:
                new_tags[SYNCED + source] = max(row["step"] for row in rows)
        metrics += self._changed(found, {f"run/{k}": _number(numbers.get(k)) for k in RUN_NUMBERS})
        self._log(run_id, metrics, params=None if found is not None else flatten(run_config), tags=new_tags)
        if found is None or found.info.status != "FINISHED":
            end_ms = int((directory / "train/status.json").stat().st_mtime * 1000)
            self.client.set_terminated(run_id, end_time=max(end_ms, start_ms))

    def sync_cell(self, parent_id: str, cell: dict) -> None:
        recipe, lag = cell["recipe"], cell["lag"]
        run_id, found = self._run(f"cell:{self.config['grid']}:{recipe}:lag{lag}", "cell",
                                  f"summary {recipe}/lag{lag}",
                                  {"mlflow.parentRunId": parent_id, "recipe": recipe, "lag": lag})
        values = {}
        for metric, stat in cell["stats"].items():
            values.update({f"{metric}/mean": stat["estimate"], f"{metric}/low": stat["low"],
                           f"{metric}/high": stat["high"]})
        collapse = cell["collapse"]
        values.update({"collapse/k": collapse["k"], "collapse/n": collapse["n"],
                       "collapse/rate": collapse["estimate"], "collapse/low": collapse["low"],
                       "collapse/high": collapse["high"]})
        for metric, stat in (cell["improvement"] or {}).items():
            values.update({f"p_improve/{metric}": stat["estimate"], f"p_improve/{metric}/low": stat["low"],
                           f"p_improve/{metric}/high": stat["high"], f"p_improve/{metric}/p": stat.get("p"),
                           f"p_improve/{metric}/p_holm": stat.get("p_holm")})
        for key, name in (("vs_baseline", "diff_baseline"), ("staleness_cost", "staleness")):
            for metric, stat in (cell.get(key) or {}).items():
                values.update({f"{name}/{metric}" + ("" if part == "estimate" else f"/{part}"): stat[part]
                               for part in ("estimate", "low", "high", "p", "p_holm", "seeds_needed")})
        for key, name in (("collapse_vs_baseline", "collapse_diff_baseline"),
                          ("collapse_vs_reference_lag", "collapse_diff_reference_lag")):
            if cell.get(key) is not None:
                values.update({name: cell[key]["estimate"], f"{name}/p": cell[key]["p"],
                               f"{name}/p_holm": cell[key]["p_holm"]})
        for key, value in (cell["reference"] or {}).items():
            values[f"paper/{key}"] = _number(value)
        tags = {"seeds": json.dumps(cell["seeds"]),
                "ci_methods": json.dumps({m: s["method"] for m, s in cell["stats"].items()})}
        self._log(run_id, self._changed(found, {k: _number(v) for k, v in values.items()}), tags=tags)
        if found is None:
            self.client.set_terminated(run_id)


def sync(config: dict, grid_path: str | Path, progress: bool = True,
         max_train_points: int = TRAIN_POINTS) -> dict:
    """Sync the grid at ``grid_path`` (aggregated: summary.json present) and write mlflow.json."""
    grid_path = Path(grid_path)
    if grid_path.resolve() != grid_dir(config).resolve():
        raise ValueError(f"--grid-dir {grid_path} is not the config's <results_dir>/<grid> {grid_dir(config)}")
    summary_path = grid_path / "summary.json"
    if not summary_path.exists():
        raise FileNotFoundError(f"{summary_path} missing: run analysis.aggregate first")
    summary = json.loads(summary_path.read_text())
    numbers = {}
    for cell in summary["cells"]:
        for i, seed in enumerate(cell["seeds"]):
            numbers[cell["recipe"], cell["lag"], seed] = {k: v[i] for k, v in cell["per_seed"].items()}
    tracker = Tracker(config, max_train_points=max_train_points)
    parent_id = tracker.sync_parent(grid_path)
    runs = expand(config)
    for recipe, lag, seed in tqdm(runs, desc="track: runs", unit="run", disable=not progress,
                                  file=sys.stderr, mininterval=2):
        tracker.sync_run(parent_id, recipe, lag, seed, numbers.get((recipe, lag, seed), {}))
    for cell in summary["cells"]:
        tracker.sync_cell(parent_id, cell)
    marker = {"tracking_uri": tracker.uri, "experiment": config["grid"],
              "experiment_id": tracker.experiment_id, "parent_run_id": parent_id,
              "runs": len(runs), "cells": len(summary["cells"]),
              "created": tracker.created, "updated": tracker.updated}
    write_json_atomic(grid_path / "mlflow.json", marker)
    return marker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.sync", description=__doc__.split("\n")[0])
    parser.add_argument("--config-json", required=True, help="the workflow config, as JSON")
    parser.add_argument("--grid-dir", required=True, help="<results_dir>/<grid>, already aggregated")
    parser.add_argument("--max-train-points", type=int, default=TRAIN_POINTS,
                        help=f"training steps logged per run, about (default {TRAIN_POINTS}; 0 = every step)")
    args = parser.parse_args(argv)
    config = parse_config(parser, args.config_json)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no network calls from a batch job
    work = lambda: sync(config, args.grid_dir, max_train_points=args.max_train_points)  # noqa: E731
    return run_stage("tracking.sync", work, lambda marker, seconds: (
        f"{marker['runs']} runs + {marker['cells']} cells -> {marker['tracking_uri']} (experiment "
        f"{marker['experiment_id']}; {marker['created']} created, {marker['updated']} updated) in {seconds:.1f} s"))


if __name__ == "__main__":
    sys.exit(main())
