"""A reduced grid end to end through the real `snakemake` (tiny engine, lm-eval scoring, statistics,
MLflow): the outputs' content, a second sync that adds nothing, and resume after losing a run."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from grid.config import load
from grid.expand import expand, grid_dir
from grid.folder import GridDir
from harness.io import read_jsonl
from tests.support.pristine import Pristine
from tests.support.untimed import untimed_rows
from tests.support.waiting import wait_until
from tests.support.workflow_cli import ROOT, SNAKEMAKE, job_counts, planned_jobs, planned_outputs, snakemake
from tracking.runs import COMPARISON_SUFFIX, SUMMARY_SUFFIX
from tracking.store import local_artifact_dir

pytestmark = pytest.mark.slow  # grids run by Snakemake

RECIPES, LAGS, SEEDS = ["grpo", "grpo_dualclip"], [1, 4], [0, 1]
OVERRIDES = {
    "grid": "ci", "steps": 12, "eval_every": 4, "recipes": RECIPES, "lags": LAGS, "seeds": SEEDS, "claims": [],
    "baseline": "grpo", "engine_params": {"preset": "demo", "warmstart_steps": 60},
    # No selection task: it would double the scoring time (test_workflow.py checks it is planned).
    "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 4, "problems": {"tiny_test": 48}},
}
METRICS = ("fixed", "best", "auc", "dbar", "dtail")


def cli_overrides(results_dir: Path) -> list[str]:
    return ["-C", f"results_dir={results_dir}", *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]


@pytest.fixture(scope="module")
def completed_grid():
    """Run the reduced grid once; yields ((config, env, snakemake arguments), a copy of it as it was)."""
    with tempfile.TemporaryDirectory(prefix="stalebench-e2e-") as folder:  # see conftest.scratch
        results = Path(folder) / "results"
        yield run_grid(results), Pristine(results)


@pytest.fixture
def grid(completed_grid):
    """The completed grid, for a test that only reads it."""
    return completed_grid[0]


@pytest.fixture
def grid_to_change(completed_grid):
    """The completed grid, put back as it was after the test: the next test sees it completed, in any order."""
    grid, pristine = completed_grid
    yield grid
    pristine.restore()


def run_grid(results: Path):
    """Run the reduced grid with snakemake -c2 into ``results``; returns (config, env, snakemake arguments)."""
    env = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}  # the default store
    args = cli_overrides(results)
    result = snakemake("-c2", *args, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cells = len(RECIPES) * len(LAGS)  # a job per cell: the tiny engine packs its seeds (grid.jobs.run_packs)
    assert job_counts(result.stdout + result.stderr) == {"grid_config": 1, "prepare": 1, "null_check": 1, "train": cells,
                                                         "evaluate": cells, "aggregate": 1, "track": 1, "all": 1}
    config = load(ROOT / "config.yaml", {"results_dir": str(results), **OVERRIDES})
    return config, env, args


def table_rows(config) -> dict[str, dict]:
    with open(grid_dir(config) / "table.csv") as handle:
        return {row["recipe"]: row for row in csv.DictReader(handle)}


def test_every_cell_is_in_the_table_with_every_seed(grid):
    config, _, _ = grid
    rows = table_rows(config)
    assert list(rows) == RECIPES
    for recipe in RECIPES:
        for lag in LAGS:
            for metric in METRICS:
                assert rows[recipe][f"{metric}_lag{lag}_estimate"] != ""
                assert len(rows[recipe][f"{metric}_lag{lag}_per_seed"].split(";")) == len(SEEDS)
            assert int(rows[recipe][f"collapse_lag{lag}_n"]) == len(SEEDS)
    summary = json.loads((grid_dir(config) / "summary.json").read_text())
    assert sorted((c["recipe"], c["lag"]) for c in summary["cells"]) == sorted((r, lag) for r in RECIPES for lag in LAGS)
    markdown = (grid_dir(config) / "table.md").read_text()
    assert all(f"| {recipe} |" in markdown for recipe in RECIPES)


def test_per_seed_values_come_from_the_runs_files(grid):
    """The table's per-seed scores are those of each run's eval file (fixed = last step, best = max)."""
    config, _, _ = grid
    summary = json.loads((grid_dir(config) / "summary.json").read_text())
    for cell in summary["cells"]:
        for i, seed in enumerate(cell["seeds"]):
            folder = GridDir.of(config).run(cell["recipe"], cell["lag"], seed).path
            scores = {row["step"]: row["score"] for row in read_jsonl(folder / "eval" / "tiny_test.jsonl")}
            assert sorted(scores) == list(range(4, 13, 4))
            assert cell["per_seed"]["fixed"][i] == pytest.approx(scores[12])
            assert cell["per_seed"]["best"][i] == pytest.approx(max(scores.values()))
            assert json.loads((folder / "train" / "status.json").read_text())["status"] == "completed"
            assert len(read_jsonl(folder / "train" / "metrics.jsonl")) == 12


def test_intervals_are_the_t_and_wilson_intervals_of_the_per_seed_values(grid):
    """Each cell's interval recomputed from its per-seed values with statsmodels (analysis.statistics.intervals
    uses scipy): mean +- t(0.975, n - 1) s / sqrt(n) over seeds, and Wilson's for k of n collapsed."""
    config, _, _ = grid
    summary = json.loads((grid_dir(config) / "summary.json").read_text())
    methods = set()
    for cell in summary["cells"]:
        for metric in METRICS:
            stat, values = cell["stats"][metric], [v for v in cell["per_seed"][metric] if v is not None]
            values = [v for v in values if np.isfinite(v)]
            where = (cell["recipe"], cell["lag"], metric, stat)
            assert stat["estimate"] == pytest.approx(np.mean(values)) and stat["n"] == len(values), where
            methods.add(stat["method"])
            if stat["method"] == "student-t":
                assert (stat["low"], stat["high"]) == pytest.approx(
                    DescrStatsW(values).tconfint_mean(alpha=0.05), rel=1e-9, abs=1e-12), where
            else:  # every seed gave the same value
                assert stat["method"] == "degenerate" and stat["low"] == stat["high"] == values[0], where
        collapse = cell["collapse"]
        wilson = proportion_confint(collapse["k"], collapse["n"], alpha=0.05, method="wilson")
        assert (collapse["low"], collapse["high"]) == pytest.approx(wilson, rel=1e-9, abs=1e-12)
        for metric in ("fixed", "best", "auc"):
            stat = cell["improvement"][metric]
            assert 0 <= stat["estimate"] <= 1 and 0 < stat["p"] <= 1
            if stat["low"] is not None:  # an interval only from 10 seeds per arm (analysis.statistics.intervals)
                assert stat["low"] - 1e-12 <= stat["estimate"] <= stat["high"] + 1e-12
    assert "student-t" in methods  # some seeds differ: not every interval is a point


def _mlflow_runs(config, experiment: str = ""):
    """The runs of the grid's experiment (or of ``config['grid'] + experiment``, e.g. " summary")."""
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{Path(config['results_dir']).resolve()}/mlflow.db")
    experiment = client.get_experiment_by_name(config["grid"] + experiment)
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


def test_mlflow_holds_each_run_once_under_the_parent(grid_to_change):
    config, env, _ = grid_to_change
    client, runs = _mlflow_runs(config)
    by_kind = {}
    for run in runs:
        by_kind.setdefault(run.data.tags.get("stalebench.kind"), []).append(run)
    assert {kind: len(found) for kind, found in by_kind.items()} == {"parent": 1, "run": len(expand(config))}
    parent = by_kind["parent"][0].info.run_id
    assert all(run.data.tags["mlflow.parentRunId"] == parent for run in by_kind["run"])
    cells = _mlflow_runs(config, SUMMARY_SUFFIX)[1]  # the summary runs: their own experiment, no band run
    assert [r.data.tags["stalebench.kind"] for r in cells] == ["cell"] * len(RECIPES) * len(LAGS)
    drawn = _mlflow_runs(config, COMPARISON_SUFFIX)[1]  # what the comparisons draw: a mean, a low, a high a cell,
    kinds = sorted(r.data.tags["stalebench.kind"] for r in drawn)  # and the intervals' charts (one figure run)
    assert kinds == ["drawn"] * 3 * len(RECIPES) * len(LAGS) + ["figure"]
    assert all(r.data.tags["stalebench.grid_run"] == parent for r in cells)
    keys = {json.loads((GridDir.of(config).run(*r).path / "config.json").read_text())["run_key"] for r in expand(config)}
    assert {run.data.tags["run_key"] for run in by_kind["run"]} == keys
    history = client.get_metric_history(by_kind["run"][0].info.run_id, "eval/tiny_test/score")
    assert sorted(m.step for m in history) == [4, 8, 12]
    artifacts = local_artifact_dir(config["results_dir"], by_kind["parent"][0].info.artifact_uri)  # what `make ui` serves
    assert {"table.md", "curves.png"} <= {path.name for path in artifacts.iterdir()}

    # A second sync (the track rule again) updates in place and adds no run.
    second = subprocess.run([sys.executable, "-m", "tracking.sync", "--grid", str(grid_dir(config))], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert json.loads((grid_dir(config) / "mlflow.json").read_text())["created"] == 0
    assert sorted(run.info.run_id for run in _mlflow_runs(config)[1]) == sorted(run.info.run_id for run in runs)


def test_a_finished_grid_has_nothing_to_do(grid):
    _, env, args = grid
    result = snakemake("-n", *args, env=env)
    assert result.returncode == 0 and "Nothing to be done" in result.stdout + result.stderr


def test_resume_redoes_only_the_lost_run_and_gives_the_same_table(grid_to_change):
    config, env, args = grid_to_change
    before = (grid_dir(config) / "table.csv").read_text()
    lost = GridDir.of(config).run("grpo_dualclip", 4, 1).path
    kept = GridDir.of(config).run("grpo", 4, 1).path / "train" / "status.json"
    kept_mtime = kept.stat().st_mtime_ns
    subprocess.run(["rm", "-r", str(lost)], check=True)

    plan = snakemake("-n", *args, env=env)
    assert plan.returncode == 0, plan.stderr
    assert "train" in plan.stdout, plan.stdout + plan.stderr
    grid_path = str(grid_dir(config))
    # the lost run's cell: its pack's jobs, whose finished run resumes at its last step and keeps its files
    cell = [GridDir.of(config).run("grpo_dualclip", 4, seed).path for seed in SEEDS]
    assert sorted(planned_jobs(plan.stdout)) == sorted([
        ("train", f"{cell[0]}/train/status.json"),
        ("evaluate", f"{cell[0]}/eval/tiny_test.jsonl"),
        ("aggregate", f"{grid_path}/table.md"),
        ("track", f"{grid_path}/mlflow.json"),
    ])
    assert planned_outputs(plan.stdout, "train") == [[f"{folder}/train/status.json" for folder in cell]]
    again = snakemake("-c2", *args, env=env, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (grid_dir(config) / "table.csv").read_text() == before, "CPU runs are bit-reproducible"
    assert kept.stat().st_mtime_ns == kept_mtime
    assert json.loads((grid_dir(config) / "mlflow.json").read_text())["created"] == 0


def test_snakemake_report_holds_the_tables_and_plots(grid_to_change):
    config, env, args = grid_to_change
    report = grid_dir(config) / "report.html"
    result = snakemake("--report", str(report), *args, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    html = report.read_text(errors="replace")
    assert all(name in html for name in ("table.md", "table.csv", "curves.png", "mismatch.png", "collapse.png"))


def test_killed_workflow_resumes_where_it_stopped(scratch):
    """snakemake and its jobs killed (SIGKILL: a crash, a lost node) mid-training, then run again:
    the run continues from its checkpoint, and its metrics equal an uninterrupted
    run's byte for byte."""
    overrides = {"grid": "kill", "recipes": ["grpo"], "lags": [2], "seeds": [0], "baseline": "grpo", "steps": 40,
                 "claims": [],
                 "eval_every": 4, "engine_params": {"preset": "demo", "warmstart_steps": 20},
                 "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 16}}}
    args = ["-c1", "-C", f"results_dir={scratch}", *(f"{key}={json.dumps(value)}" for key, value in overrides.items())]
    config = load(ROOT / "config.yaml", {"results_dir": str(scratch), **overrides})
    train = GridDir.of(config).run("grpo", 2, 0).path / "train"
    # A session of its own: the kill reaches snakemake and the jobs it started, and nothing else.
    work = scratch / "snakemake"  # its .snakemake/ (the lock the kill leaves): never the checkout's
    process = subprocess.Popen([SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "-d", str(work), *args], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        wait_until((train / "checkpoints" / "step_8").exists, "the checkpoint of step 8", process, poll_s=0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    time.sleep(1)
    assert not (train / "status.json").exists(), "killed before the run finished"
    assert 8 <= len(read_jsonl(train / "metrics.jsonl")) < 40

    # A killed snakemake leaves its lock: `--unlock` (the command its error message names), then run
    # again as `make demo` would; no --rerun-incomplete needed, status.json is the engine's last write.
    assert snakemake("--unlock", *args, workdir=work).returncode == 0
    again = snakemake(*args, timeout=600, workdir=work)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert json.loads((train / "status.json").read_text())["status"] == "completed"
    assert (grid_dir(config) / "mlflow.json").exists()

    # The same run, uninterrupted, through the engine's CLI.
    # Its run folder is laid out as a grid's, the grid's base model beside it (a run config names it
    # relative to its grid folder).
    reference = scratch / "uninterrupted" / train.parent.relative_to(grid_dir(config))
    reference.parents[3].mkdir(parents=True)
    (reference.parents[3] / "base").symlink_to(grid_dir(config) / "base")
    subprocess.run([sys.executable, "-m", "engines.train", "--run-dir", str(reference), "--config-json",
                    (train.parent / "config.json").read_text()], cwd=ROOT, check=True, capture_output=True,
                   timeout=600)
    assert untimed_rows(train / "metrics.jsonl") == untimed_rows(reference / "train" / "metrics.jsonl")
