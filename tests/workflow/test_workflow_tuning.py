"""An equal tuning budget through the real `snakemake`: 2 recipes x 2 candidates x 2 tuning seeds, the
grid-wide pick (checkpoint tune), then only the picked values' runs on the 2 confirmation seeds."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from analysis.cells.summary import collect
from analysis.schedule.tune import pick, tuning_scores
from harness.config import load
from harness.grid_dir import GridDir
from harness.settings import Config
from harness.tuning import Tuning
from tests.support.workflow_cli import ROOT, job_counts, planned_outputs, snakemake

# The warm start gives the base model a score above 0, so that the candidates' AUCs differ.
OVERRIDES = {
    "grid": "tuning", "steps": 4, "eval_every": 2, "recipes": ["grpo", "sat_grpo"], "lags": [1],
    "seeds": [0, 1], "seeding": None, "baseline": "grpo",
    "tuning": {"seeds": [10, 11], "recipes": {"grpo": {"param": ["eps_low", "eps_high"], "values": [0.2, 0.05]},
                                               "sat_grpo": {"param": "alpha", "values": [0.9, 0.5]}}},
    "engine_params": {"preset": "demo", "warmstart_steps": 60},
    "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 16}},
    "claims": [{"name": "sat_beats_grpo", "kind": "recipes", "recipe": "sat_grpo", "versus": "grpo", "lag": 1,
                "expect": "greater", "smallest_effect": 0.05}],
}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_picked_values_are_confirmed_on_fresh_seeds_and_only_those_are_reported():
    with tempfile.TemporaryDirectory(prefix="stalebench-tuning-") as folder:
        results = Path(folder) / "results"
        args = ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]
        result = snakemake("-c2", *args, timeout=1100)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        config = load(ROOT / "config.yaml", {"results_dir": str(results), **OVERRIDES})
        grid, tuning, model = GridDir.of(config), Tuning.of(config), Config.build(config)
        picked = json.loads(grid.tuning_path.read_text())
        # the pick is the rule's on the tuning runs as they are on disk
        scores = tuning_scores(model, collect(model, progress=False, which=tuning.runs()))
        for recipe in ("grpo", "sat_grpo"):
            entry = picked["recipes"][recipe]
            assert entry["picked"] == pick(scores[recipe])
            assert entry["tuning_scores"] == [score for _, score in scores[recipe]]
        variants = [picked["recipes"][recipe]["variant"] for recipe in ("grpo", "sat_grpo")]
        # trained: every candidate on the tuning seeds, only the picked ones on the confirmation seeds
        trained = {run for run in model.runs if grid.run(*run).status_path.exists()}
        confirmation = {(variant, 1, seed) for variant in variants for seed in (0, 1)}
        assert trained == set(tuning.runs()) | confirmation
        assert sorted(map(tuple, picked["confirmation_runs"])) == sorted(confirmation)
        sat = json.loads(grid.run(variants[1], 1, 0).config_path.read_text())
        assert sat["recipe"]["params"]["alpha"] == picked["recipes"]["sat_grpo"]["picked"]
        # reported: the picked variants' confirmation seeds, the claim on them, no tuning score
        summary = json.loads(grid.summary_path.read_text())
        assert summary["recipes"] == variants and summary["seeds"] == [0, 1]
        assert {cell["recipe"] for cell in summary["cells"]} == set(variants)
        claim = summary["claims"][0]
        assert claim["name"] == "sat_beats_grpo" and claim["n"] == 2
        assert "tuning_scores" not in json.dumps(summary["tuning"])
        table = grid.table_path("md").read_text()
        assert "## Equal tuning budget" in table
        for recipe, variant in zip(("grpo", "sat_grpo"), variants):
            cell = next(c for c in summary["cells"] if c["recipe"] == variant)
            row = next(line for line in table.splitlines() if line.startswith(f"| {recipe} |"))
            assert f"{100 * cell['stats']['auc']['estimate']:.1f}" in row and "(n 2)" in row
        # a second call plans nothing: the pick is read from the same runs
        again = snakemake("-c2", "-n", *args, timeout=300)
        assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("preset, cells", [("tuned_field", 7 * 3 * 2), ("field_autumn", 11 * 3 * 2)])
def test_a_tuned_field_plans_every_candidates_tuning_runs_before_the_pick_and_lints_clean(tmp_path, preset, cells):
    args = ["--configfile", f"workflow/presets/{preset}.yaml", "-C", f"results_dir={tmp_path}"]
    plan = snakemake("-n", *args, timeout=300)
    assert plan.returncode == 0, plan.stderr[-3000:]
    counts = job_counts(plan.stdout)
    # recipes x 3 candidates x 2 lags, each cell's 3 tuning seeds in one job (harness.jobs.run_packs);
    # the confirmation runs (field_autumn: its seed schedule's looks) come after the pick
    assert (counts["train_tuning"], counts["evaluate_tuning"], counts["tune"], counts["aggregate"]) == (cells, cells, 1, 1)
    assert "train" not in counts and "look" not in counts
    assert all(len(outputs) == 3 for outputs in planned_outputs(plan.stdout, "train_tuning"))
    lint = snakemake("--lint", *args, timeout=300)
    assert lint.returncode == 0 and "Lints for" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr
