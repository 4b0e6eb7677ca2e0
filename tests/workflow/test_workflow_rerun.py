"""Snakemake redoes only what a config or code change affects: dry-run job counts (`snakemake -n`)
on a completed small grid, and reruns of evaluate jobs (one per run, scoring all its tasks) that keep
the scores already computed.

The grid runs in a copy of the checkout (its own .snakemake metadata, and a stabilizer default
can be edited there without touching this one)."""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from harness.io import read_jsonl
from tests.support.pristine import Pristine
from tests.support.workflow_cli import SNAKEMAKE, copy_checkout, job_counts, planned_outputs

pytestmark = pytest.mark.slow  # a grid run by Snakemake, then dry runs

EVAL = {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 8}}
OVERRIDES = {"grid": "rerun", "recipes": ["grpo", "grpo_dualclip"], "baseline": "grpo", "lags": [1], "seeds": [0], "claims": [],
             "steps": 4, "eval_every": 2, "engine_params": {"preset": "demo", "warmstart_steps": 10}, "eval": EVAL}
RUNS = ("grpo/lag1/seed0", "grpo_dualclip/lag1/seed0")
DOWNSTREAM = {"aggregate": 1, "track": 1, "all": 1}
CHANGED = {"grid_config": 1, **DOWNSTREAM}  # a changed config rewrites <grid>/config.json, aggregate's input


class Grid:
    def __init__(self, folder: Path):
        self.code = copy_checkout(folder / "code")
        self.results = folder / "results"

    def snakemake(self, *args: str, timeout: float = 900, **changes) -> subprocess.CompletedProcess:
        overrides = {**OVERRIDES, **changes}
        command = [SNAKEMAKE, *args, "-C", f"results_dir={self.results}",
                   *(f"{key}={json.dumps(value)}" for key, value in overrides.items())]
        return subprocess.run(command, cwd=self.code, capture_output=True, text=True, timeout=timeout)

    def plan(self, **changes) -> tuple[Counter, str]:
        """Jobs per rule of a dry run, and what it printed (for planned_jobs, planned_outputs)."""
        result = self.snakemake("-n", **changes)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        if "Nothing to be done" in result.stdout + result.stderr:
            return Counter(), ""
        return job_counts(result.stdout), result.stdout

    def run_dir(self, run: str) -> Path:
        return self.results / "rerun" / "runs" / run


@pytest.fixture(scope="module")
def completed_grid():
    """The small grid, run to completion once, and a copy of it as it was then."""
    with tempfile.TemporaryDirectory(prefix="stalebench-rerun-") as folder:
        grid = Grid(Path(folder) / "grid")
        done = grid.snakemake("-c2")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert grid.plan() == (Counter(), "")
        yield grid, Pristine(Path(folder) / "grid")


@pytest.fixture
def grid(completed_grid):
    """The completed grid, put back as it was after each test: every test starts from it, in any order."""
    grid, pristine = completed_grid
    yield grid
    pristine.restore()


@pytest.mark.parametrize("change", [
    {"collapse": {"fraction": 0.3}},
    {"baseline": "grpo_dualclip"},
    {"eval": {**EVAL, "fixed_step": 2}},
])
def test_an_aggregation_key_reruns_no_train_and_no_evaluate_job(grid, change):
    assert grid.plan(**change)[0] == CHANGED


def test_a_scoring_setting_reruns_the_evaluate_jobs_only(grid):
    assert grid.plan(eval={**EVAL, "k": 3})[0] == {"evaluate": 2, **CHANGED}  # one per run


def test_a_new_task_reruns_each_runs_evaluate_job_for_all_its_tasks(grid):
    counts, printed = grid.plan(eval={**EVAL, "tasks": ["tiny_test", "tiny_val"],
                                      "problems": {"tiny_test": 8, "tiny_val": 8}})
    assert counts == {"evaluate": 2, **CHANGED}
    # (which then scores only tiny_val: test_a_new_or_changed_task_is_the_only_one_scored)
    assert sorted(planned_outputs(printed, "evaluate")) == [
        [str(grid.run_dir(run) / "eval" / f"{task}.jsonl") for task in ("tiny_test", "tiny_val")] for run in RUNS]


def grid_files(grid: Grid) -> dict[str, tuple[int, bytes]]:
    """Every file of the results folder: its modification time and content."""
    return {str(path.relative_to(grid.results)): (path.stat().st_mtime_ns, path.read_bytes())
            for path in sorted(grid.results.rglob("*")) if path.is_file()}


def test_a_changed_training_setting_is_refused_before_any_job_and_deletes_nothing(grid):
    """With Snakemake's metadata there (its params trigger would rerun every train job, deleting each
    finished run's status.json before the job refuses the folder): refused at DAG time, naming each
    run and the change, and the command leaves every file as it found it."""
    before = grid_files(grid)
    result = grid.snakemake("-c2", engine_params={**OVERRIDES["engine_params"], "lr": 1e-4})
    printed = result.stdout + result.stderr
    assert result.returncode != 0
    for run in RUNS:
        assert f"{grid.run_dir(run)} (completed at step 4) holds a run with a different config" in printed
    assert "engine_params.lr: 0.0003 -> 0.0001" in printed and "Job stats" not in printed
    assert grid_files(grid) == before


def test_a_stabilizer_default_is_refused_in_the_runs_that_use_it(grid):
    source = grid.code / "stabilizers" / "grpo.py"
    original = source.read_text()
    default = "    dual_clip_c: float | None = None,\n"
    assert default in original
    source.write_text(original.replace(default, default.replace("None,", "5.0,")))
    try:
        result = grid.snakemake("-n")
    finally:
        source.write_text(original)
    # grpo_dualclip sets dual_clip_c itself: only the plain grpo run changed.
    printed = result.stdout + result.stderr  # (a dry run prints Snakemake's error on stdout)
    assert result.returncode != 0 and "1 run folder(s) of this grid hold runs of another config" in printed
    assert f"{grid.run_dir('grpo/lag1/seed0')} (completed at step 4)" in printed
    assert "recipe.params.dual_clip_c: None -> 5.0" in printed


def _scored(grid: Grid, run: str) -> dict[str, int]:
    """task -> how many checkpoints of the run its cell's last evaluate job scored on it (eval.score's log
    lines; the job packs the cell's seeds, here seed 0 alone: grid.jobs.run_packs)."""
    cell = run.rsplit("/", 1)[0]
    log = (grid.results / "rerun" / "logs" / "evaluate" / cell / "seeds0.log").read_text()
    return {task: int(n) for n, task in re.findall(
        rf"^eval\.score: (\d+) checkpoint\(s\) of \S*{re.escape(run)} scored on (\S+)$", log, re.MULTILINE)}


def test_a_killed_evaluate_job_rescores_only_the_checkpoints_it_had_not_finished(grid):
    run = grid.run_dir("grpo/lag1/seed0")
    out, scores = run / "eval" / "tiny_test.jsonl", run / "eval" / ".tiny_test.scores.jsonl"
    before = out.read_text()
    # What a job killed after its first checkpoint leaves: one score kept, no declared output.
    first = scores.read_text().splitlines()[0]
    scores.write_text(first + "\n")
    out.unlink()
    assert grid.plan()[0] == {"evaluate": 1, **DOWNSTREAM}
    result = grid.snakemake("-c2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert _scored(grid, "grpo/lag1/seed0") == {"tiny_test": 1}  # of 2: step 2 only
    assert out.read_text() == before  # the same numbers as the uninterrupted job


def test_an_evaluate_job_rerun_by_snakemake_keeps_its_scores(grid):
    # Snakemake deletes a job's output before rerunning it; the scores live outside it.
    outputs = {run: grid.run_dir(run) / "eval" / "tiny_test.jsonl" for run in RUNS}
    before = {run: path.read_text() for run, path in outputs.items()}
    result = grid.snakemake("-c2", "--forcerun", "evaluate")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert job_counts(result.stdout + result.stderr)["evaluate"] == 2
    for run, path in outputs.items():
        assert _scored(grid, run) == {"tiny_test": 0}
        assert path.read_text() == before[run]
        assert [row["step"] for row in read_jsonl(path)] == [2, 4]


def test_every_rule_has_a_benchmark_file_and_the_report_tabulates_them(grid):
    benchmarks = grid.results / "rerun" / "logs" / "benchmarks"
    assert (benchmarks / "prepare.tsv").is_file() and (benchmarks / "aggregate.tsv").is_file()
    assert (benchmarks / "track.tsv").is_file()
    assert len(list((benchmarks / "train").glob("**/*.tsv"))) == 2
    evaluate = benchmarks / "evaluate"  # one job per pack of a cell's seeds (grid.jobs.run_packs), here seed 0
    assert sorted(str(path.relative_to(evaluate)) for path in evaluate.glob("**/*.tsv")) == [
        f"{run.rsplit('/', 1)[0]}/seeds0.tsv" for run in RUNS]
    table = (grid.results / "rerun" / "table.md").read_text()
    assert "## Compute per rule" in table and "| train | 2 |" in table and "| evaluate | 2 |" in table
    assert "All runs on one commit" in table and "All runs on one machine" in table
    for run in RUNS:
        attempts = json.loads((grid.run_dir(run) / "provenance.json").read_text())["attempts"]
        assert attempts[-1]["status"] == "completed" and attempts[-1]["finished"] >= attempts[-1]["started"]


def test_a_new_or_changed_task_is_the_only_one_scored(grid):
    outputs = {run: grid.run_dir(run) / "eval" / "tiny_test.jsonl" for run in RUNS}
    before = {run: path.read_text() for run, path in outputs.items()}
    two = {**EVAL, "tasks": ["tiny_test", "tiny_val"], "problems": {"tiny_test": 8, "tiny_val": 8}}
    changed = {**two, "problems": {"tiny_test": 8, "tiny_val": 6}}
    for settings in (two, changed):  # tiny_val added, then its problem count changed
        assert grid.plan(eval=settings)[0] == {"evaluate": 2, **CHANGED}
        result = grid.snakemake("-c2", eval=settings)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        for run in RUNS:
            assert _scored(grid, run) == {"tiny_test": 0, "tiny_val": 2}  # tiny_test's scores from its cache
            assert outputs[run].read_text() == before[run]
            scored = read_jsonl(grid.run_dir(run) / "eval" / "tiny_val.jsonl")
            assert [(row["step"], row["n_problems"]) for row in scored] == [
                (2, settings["problems"]["tiny_val"]), (4, settings["problems"]["tiny_val"])]
