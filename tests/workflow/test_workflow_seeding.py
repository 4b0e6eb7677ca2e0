"""A declared seed schedule through the real `snakemake`: the first look runs every cell, the
interim job reads the claims, and only the cells of the claim still open get the next look's seed. The
finished grid is then rerun on fresh declared seeds (analysis.schedule.rerun) by the normal workflow, and
the claim-by-claim report of both outcomes read (one grid trained for both: CI's time)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from analysis.schedule.looks import scheduled_runs
from grid.config import load
from grid.expand import expand
from grid.folder import GridDir
from grid.settings import Config
from tests.support.workflow_cli import ROOT, session_workdir, snakemake

# grpo_twin is grpo under another name: the same runs seed for seed, a contrast of exactly 0 (a point
# interval inside any margin: final at the first look). grpo_fast, grpo at 30x its learning rate, against
# grpo at a 1-point effect is open after two seeds, whose interval (1 df, at 0.05 / 2 spent by Pocock) is
# wide. The warm start gives the base model a score above 0, so that the two recipes' seeds differ.
OVERRIDES = {
    "grid": "seeding", "steps": 4, "eval_every": 2, "recipes": ["grpo", "grpo_twin", "grpo_fast"], "lags": [1],
    "seeds": [0, 1, 2], "seeding": {"looks": [2, 3], "boundary": "pocock"}, "baseline": "grpo",
    "extra_recipes": {"grpo_twin": {"loss": "grpo"}, "grpo_fast": {"loss": "grpo"}},
    "recipe_engine_params": {"grpo_fast": {"lr": 0.01}},
    "engine_params": {"preset": "demo", "warmstart_steps": 60},
    "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 4, "problems": {"tiny_test": 32}},
    "claims": [{"name": "twin_is_grpo", "kind": "recipes", "recipe": "grpo_twin", "versus": "grpo", "lag": 1,
                "expect": "equivalent", "smallest_effect": 0.05},
               {"name": "fast_beats_grpo", "kind": "recipes", "recipe": "grpo_fast", "versus": "grpo", "lag": 1,
                "expect": "greater", "smallest_effect": 0.01}],
}


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_a_declared_schedule_adds_seeds_only_to_the_open_claims_cells_and_a_rerun_reports_both_outcomes():
    with tempfile.TemporaryDirectory(prefix="stalebench-seeding-") as folder:
        results = Path(folder) / "results"
        args = ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]
        result = snakemake("-c2", *args, timeout=1700)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        config = load(ROOT / "config.yaml", {"results_dir": str(results), **OVERRIDES})
        # look 1: 3 cells x 2 seeds; look 2: seed 2 of grpo and grpo_fast only
        # (Snakemake's job table is printed before the checkpoint adds look 2: count the runs trained)
        assert sum(GridDir.of(config).run(*run).status_path.exists() for run in expand(config)) == 8
        interim = json.loads(Path(GridDir.of(config).look_pattern.format(look=1)).read_text())
        assert interim["open_cells"] == [["grpo", 1], ["grpo_fast", 1]]
        assert interim["next_runs"] == [["grpo", 1, 2], ["grpo_fast", 1, 2]]
        assert not GridDir.of(config).run("grpo_twin", 1, 2).path.exists() and GridDir.of(config).run("grpo_fast", 1, 2).path.exists()
        assert scheduled_runs(Config.build(config)) == [("grpo", 1, 0), ("grpo", 1, 1), ("grpo", 1, 2), ("grpo_twin", 1, 0),
                                          ("grpo_twin", 1, 1), ("grpo_fast", 1, 0), ("grpo_fast", 1, 1),
                                          ("grpo_fast", 1, 2)]
        summary = json.loads(GridDir.of(config).summary_path.read_text())
        claims = {c["name"]: c for c in summary["claims"]}
        twin, fast = claims["twin_is_grpo"], claims["fast_beats_grpo"]
        assert (twin["verdict"], twin["look"], twin["n"], twin["method"]) == ("negligible", 1, 2, "degenerate")
        assert (fast["look"], fast["n"], fast["method"]) == (2, 3, "paired-t")
        table = GridDir.of(config).table_path("md").read_text()
        assert "seed schedule [2, 3] (pocock spending)" in table and "chance a rerun repeats this outcome" in table
        # a second call plans nothing: the schedule is read from the same runs
        again = snakemake("-c2", "-n", *args, timeout=300)
        assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
        rerun_on_fresh_seeds(results)


def rerun_on_fresh_seeds(results: Path) -> None:
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
