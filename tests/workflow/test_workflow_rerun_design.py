"""analysis.schedule.rerun through the real `snakemake`: a finished grid with a seed schedule, rerun on fresh
declared seeds into a new grid by the normal workflow, and the claim-by-claim report of both outcomes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.grid_dir import GridDir
from tests.support.workflow_cli import ROOT, session_workdir, snakemake
from tests.workflow.test_workflow_seeding import OVERRIDES


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_a_rerun_runs_the_declared_design_on_fresh_seeds_and_reports_both_outcomes():
    with tempfile.TemporaryDirectory(prefix="stalebench-rerun-") as folder:
        results = Path(folder) / "results"
        args = ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]
        first = snakemake("-c2", *args, timeout=1700)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        again = results / "seeding_again"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "analysis.schedule.rerun", "--grid", str(results / "seeding"),
                               "--out", str(again), "--kernel", "avx2", "--", "-d", str(session_workdir())],
                              cwd=ROOT, capture_output=True, text=True, timeout=1700, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        declared = json.loads(GridDir(again).rerun_path.read_text())
        assert declared["seeds"] == [3, 4, 5] and declared["kernel"] == "avx2"
        summary = json.loads(GridDir(again).summary_path.read_text())
        assert summary["seeds"] == [3, 4, 5] and summary["seeding"] == {"looks": [2, 3], "boundary": "pocock"}
        trained = {p.parent.parent.name for p in (again / "runs").glob("*/lag1/seed*/train/status.json")}
        assert trained <= {"seed3", "seed4", "seed5"} and {"seed3", "seed4"} <= trained
        provenance = json.loads(next((again / "runs").glob("grpo/lag1/seed3/provenance.json")).read_text())
        assert "avx2" in json.dumps(provenance).lower()
        for name in ("twin_is_grpo", "fast_beats_grpo"):
            assert f"| {name} | " in done.stdout
        assert "outcomes repeated; the first run's printed probabilities predict" in done.stdout
