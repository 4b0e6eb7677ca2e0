"""An MLflow sync killed half way (kill -9 just before a store write: tests/support/mlflow_kill.py)
and run again leaves the store as one uninterrupted sync leaves it: the same runs (none twice),
params, tags and every metric point once. One run has more metric points than one log_batch takes
(MLflow's 1,000), so a kill can fall between two batches of one run."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from analysis.cells.summary import collect
from analysis.claims.summary_file import write_summary
from analysis.report.write import summarize
from grid.folder import GridDir
from grid.settings import Config
from harness.io import write_json_atomic
from tests.support.grid_fixture import START_TIME, STEPS, make_grid
from tests.support.mlflow_kill import counted
from tests.support.workflow_cli import ROOT
from tracking.store import KIND, tracking_uri
from tracking.sync import main

pytestmark = pytest.mark.slow  # MLflow stores written by several syncs

LONG_RUN = ("sat_grpo", 8, 1)  # gets steps up to LONG_STEPS: more points than one log_batch holds
LONG_STEPS = 120
ID_TAGS = ("mlflow.parentRunId", "stalebench.grid_run")  # run ids: each store draws its own


def arguments(config: dict) -> list[str]:
    return ["--grid", str(GridDir.of(config).path), "--max-train-points", "0"]


def store_state(config: dict) -> dict:
    """Every run of the grid's two experiments by run_key: status, params, tags (but run ids), and
    each metric's history as (step, value, timestamp) points; the timestamp only where the files
    give it (a seed run's train/ and eval/ curves), not where the sync's clock does."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri(config["results_dir"])[0])
    state = {}
    for name in (config["grid"], config["grid"] + " summary"):
        experiment = client.get_experiment_by_name(name)
        for run in client.search_runs([experiment.experiment_id], max_results=10000):
            key = run.data.tags["run_key"]
            assert key not in state, f"run {key} twice in the store"
            histories = {}
            for metric in run.data.metrics:
                points = client.get_metric_history(run.info.run_id, metric)
                from_files = run.data.tags.get(KIND) == "run" and metric.startswith(("train/", "eval/"))
                histories[metric] = sorted((p.step, "nan" if math.isnan(p.value) else p.value,
                                            p.timestamp if from_files else "clock") for p in points)
            state[key] = {"status": run.info.status, "params": run.data.params, "metrics": histories,
                          "tags": {k: v for k, v in run.data.tags.items() if k not in ID_TAGS}}
    return state


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    """Two copies of one fabricated, aggregated grid (each with its own store under its results
    folder), and the write calls of an uninterrupted sync of the first, whose store is the reference."""
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        config = make_grid(tmp_path_factory.mktemp("sync") / "results")
        long_run = GridDir.of(config).run(*LONG_RUN)
        long_run.append_metrics([{"step": step, "time": START_TIME + 2.0 * step, "reward": 0.1, "entropy": 1.0,
                                  "grad_norm": 1.0, "loss": -0.1, "d/mean_abs": 0.01, "d/p50": 0.005,
                                  "d/p90": 0.02, "d/p99": 0.04, "d/max": 0.08}
                                 for step in range(STEPS + 1, LONG_STEPS + 1)])
        write_json_atomic(GridDir.of(config).config_path, config)
        typed = Config.build(config)
        write_summary(GridDir.of(config).summary_path, summarize(typed, collect(typed, progress=False)))
        other = tmp_path_factory.mktemp("sync_killed") / "results"
        shutil.copytree(config["results_dir"], other)
        killed = {**config, "results_dir": str(other)}
        write_json_atomic(GridDir.of(killed).config_path, killed)
        with counted() as writes:
            assert main(arguments(config)) == 0
        yield config, killed, writes
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def killed_sync(config: dict, kill_at: int) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.support.mlflow_kill", str(kill_at), "--", *arguments(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"})
    assert done.returncode == -9, f"not killed at write {kill_at}: {done.stderr[-2000:]}"


def test_a_sync_killed_between_writes_and_run_again_ends_as_an_uninterrupted_sync(grids):
    from mlflow.tracking import MlflowClient
    config, killed, writes = grids
    reference = store_state(config)
    long_key = json.loads(GridDir.of(config).run(*LONG_RUN).config_path.read_text())["run_key"]
    assert len(reference[long_key]["metrics"]["train/reward"]) == LONG_STEPS
    client = MlflowClient(tracking_uri(config["results_dir"])[0])
    long_id = client.search_runs(
        [client.get_experiment_by_name(config["grid"]).experiment_id],
        filter_string=f"tags.run_key = '{long_key}'")[0].info.run_id
    long_batches = [i for i, (name, run_id) in enumerate(writes, start=1) if name == "log_batch" and run_id == long_id]
    assert len(long_batches) >= 2, long_batches
    # a fresh store makes the reference's writes: the first kill falls between the long run's first two
    # batches; the second pass (a store half filled) is killed half way through the writes it would make
    for kill_at in (long_batches[1], len(writes) // 2):
        killed_sync(killed, kill_at)
    assert main(arguments(killed)) == 0
    assert store_state(killed) == reference
