"""Run and eval keys do not depend on where results/ or the checkout lives: a completed grid moved with
`mv` (its checkout too, both to paths with spaces) plans no train and no evaluate job, resolves the
run keys its folders hold, and a train job forced there resumes (the same run key) and its
evaluation reuses every score (the same eval keys).

The grid runs in a copy of the checkout (its own .snakemake metadata). Snakemake keeps its metadata
per output path: at the new paths it has none, so its params and code triggers say nothing, and `mv`
keeps the mtimes its mtime trigger compares."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from grid.config import load
from grid.folder import GridDir
from grid.settings import Config
from harness.io import read_jsonl
from tests.support.workflow_cli import SNAKEMAKE, copy_checkout, job_counts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]  # a grid run by Snakemake, then three more calls

OVERRIDES = {"grid": "moved", "recipes": ["grpo"], "baseline": "grpo", "lags": [1], "seeds": [0], "claims": [],
             "steps": 4, "eval_every": 2, "engine_params": {"preset": "demo", "warmstart_steps": 10},
             "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 8}}}


def snakemake(code: Path, results: Path, *args: str) -> subprocess.CompletedProcess:
    command = [SNAKEMAKE, *args, "-C", f"results_dir={results}",
               *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]
    done = subprocess.run(command, cwd=code, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def planned(code: Path, results: Path) -> Counter:
    printed = snakemake(code, results, "-n").stdout
    return Counter() if "Job stats:" not in printed else job_counts(printed)


def test_a_moved_grid_plans_no_train_or_evaluate_job_and_keeps_its_keys():
    """Results and checkout both moved (the checkout with its .snakemake/), into paths with spaces."""
    with tempfile.TemporaryDirectory(prefix="stalebench-move-") as folder:
        folder = Path(folder)
        code = copy_checkout(folder / "code")
        before, after = folder / "disk a" / "results", folder / "disk b" / "re named"
        snakemake(code, before, "-c2")
        after.parent.mkdir()
        subprocess.run(["mv", str(before), str(after)], check=True)
        moved_code = folder / "moved checkout"
        subprocess.run(["mv", str(code), str(moved_code)], check=True)
        code = moved_code

        counts = planned(code, after)
        assert counts["train"] == 0 and counts["evaluate"] == 0, counts

        config = load(code / "config.yaml", {"results_dir": str(after), **OVERRIDES})
        model = Config.build(config)
        for run in model.runs:
            assert GridDir.of(config).run(*run).read_config()["run_key"] == model.run_config(run)["run_key"], run

        # aggregate reads the grid's config.json where it now lies (it recorded the old results_dir)
        grid = model.grid_dir
        aggregated = subprocess.run([sys.executable, "-m", "analysis.aggregate", "--grid", str(grid)],
                                    cwd=code, capture_output=True, text=True)
        assert aggregated.returncode == 0, aggregated.stderr[-3000:]
        assert (grid / "table.md").stat().st_mtime > (grid / "config.json").stat().st_mtime

        run = GridDir.of(config).run("grpo", 1, 0)
        scores = run.read_scores("tiny_test")
        snakemake(code, after, "-c1", "--force", str(run.status_path))  # the train job, at the new place
        assert run.read_status()["status"] == "completed"
        snakemake(code, after, "-c1", str(run.eval_path("tiny_test")))  # its evaluate job again (newer input)
        assert run.read_scores("tiny_test") == scores  # every score reused: the same eval keys
        assert [row["eval_key"] for row in read_jsonl(run.eval_path("tiny_test"))] == [
            row["eval_key"] for row in scores]
