"""An equal tuning budget through the real `snakemake`, stage by stage: the candidates on the tuning seeds and the
grid-wide pick (checkpoint tune), then the picked values' first look, then the interim job (checkpoint look) adding
the next seed only to the cells of the claim still open; the tuned presets' plans and run counts."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from analysis.cells.summary import collect
from analysis.schedule.looks import look_runs
from analysis.schedule.tune import pick, tuning_scores
from grid.config import load
from grid.folder import GridDir
from harness.io import read_json
from grid.settings import Config
from grid.tuning import Tuning
from tests.support.workflow_cli import ROOT, job_counts, planned_outputs, snakemake

# As test_workflow_seeding's grid, each recipe tuned: grpo_twin is grpo under another name (the same runs seed
# for seed, so the same pick and a contrast of exactly 0: final at the first look); grpo_fast, grpo at 30x its
# learning rate, against grpo at a 1-point effect is open after two seeds.
CLIP = {"param": ["eps_low", "eps_high"], "values": [0.2, 0.05]}
OVERRIDES = {
    "grid": "tuned_seeding", "steps": 4, "eval_every": 2, "recipes": ["grpo", "grpo_twin", "grpo_fast"],
    "lags": [1], "seeds": [0, 1, 2], "seeding": {"looks": [2, 3], "boundary": "pocock"}, "baseline": "grpo",
    "extra_recipes": {"grpo_twin": {"loss": "grpo"}, "grpo_fast": {"loss": "grpo"}},
    "recipe_engine_params": {"grpo_fast": {"lr": 0.01}},
    "tuning": {"seeds": [10, 11], "recipes": {"grpo": CLIP, "grpo_twin": CLIP, "grpo_fast": CLIP}},
    "engine_params": {"preset": "demo", "warmstart_steps": 60},
    "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 4, "problems": {"tiny_test": 32}},
    "claims": [{"name": "twin_is_grpo", "kind": "recipes", "recipe": "grpo_twin", "versus": "grpo", "lag": 1,
                "expect": "equivalent", "smallest_effect": 0.05},
               {"name": "fast_beats_grpo", "kind": "recipes", "recipe": "grpo_fast", "versus": "grpo", "lag": 1,
                "expect": "greater", "smallest_effect": 0.01}],
}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_picked_values_run_the_declared_seed_schedule_look_by_look():
    with tempfile.TemporaryDirectory(prefix="stalebench-tuned-seeding-") as folder:
        results = Path(folder) / "results"
        args = ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]
        config = load(ROOT / "config.yaml", {"results_dir": str(results), **OVERRIDES})
        grid, tuning, model = GridDir.of(config), Tuning.of(config), Config.build(config)

        def trained() -> set:
            return {run for run in model.runs if grid.run(*run).status_path.exists()}

        def run(*targets: str) -> None:
            result = snakemake("-c2", *targets, *args, timeout=700)  # targets first: -C takes every word after it
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

        # stage 1: every candidate on the tuning seeds, then the pick; no confirmation run yet
        run(str(grid.tuning_path))
        assert trained() == set(tuning.runs())
        picked = {recipe: entry["picked"] for recipe, entry in grid.read_tuning()["recipes"].items()}
        scores = tuning_scores(model, collect(model, progress=False, which=tuning.runs()))
        for recipe, entry in grid.read_tuning()["recipes"].items():  # the rule's pick on the runs as they are on disk
            assert entry["picked"] == pick(scores[recipe]) and entry["tuning_scores"] == [s for _, s in scores[recipe]]
        assert picked["grpo_twin"] == picked["grpo"]  # the same runs, the same pick
        view = model.confirmation(picked)
        assert view.seeding == model.seeding and len(view.claims) == 2  # the declared schedule and family
        variants = dict(zip(model.recipes, view.recipes))
        # stage 2: the picked values' first look, seeds 0-1 of every cell, then the interim reading
        run(grid.look_pattern.format(look=1))
        first = {(variant, 1, seed) for variant in view.recipes for seed in (0, 1)}
        assert trained() == set(tuning.runs()) | first
        interim = json.loads(Path(grid.look_pattern.format(look=1)).read_text())
        assert interim["open_cells"] == [[variants["grpo"], 1], [variants["grpo_fast"], 1]]
        # stage 3: the last look adds seed 2 to the open claim's cells only, and the grid is read
        run()
        assert trained() == set(tuning.runs()) | first | {(variants["grpo"], 1, 2), (variants["grpo_fast"], 1, 2)}
        for variant, lag, seed in sorted(trained() - set(tuning.runs())):  # the picked values reach the runs
            recipe = next(name for name, picked_variant in variants.items() if picked_variant == variant)
            params = json.loads(grid.run(variant, lag, seed).config_path.read_text())["recipe"]["params"]
            assert params["eps_low"] == params["eps_high"] == picked[recipe]
        summary = read_json(grid.summary_path)
        assert summary["recipes"] == list(view.recipes) and summary["seeding"] == {"looks": [2, 3], "boundary": "pocock"}
        claims = {claim["name"]: claim for claim in summary["claims"]}
        twin, fast = claims["twin_is_grpo"], claims["fast_beats_grpo"]
        assert (twin["recipe"], twin["verdict"], twin["look"], twin["n"]) == (variants["grpo_twin"], "negligible", 1, 2)
        assert (fast["recipe"], fast["look"], fast["n"]) == (variants["grpo_fast"], 2, 3)
        assert "tuning_scores" not in json.dumps(summary["tuning"])  # reported: the confirmation runs alone
        table = grid.table_path("md").read_text()
        assert "## Equal tuning budget" in table and "seed schedule [2, 3] (pocock spending)" in table
        for recipe, variant in variants.items():
            cell = next(c for c in summary["cells"] if c["recipe"] == variant)
            row = next(line for line in table.splitlines() if line.startswith(f"| {recipe} |"))
            assert f"{100 * cell['stats']['auc']['estimate']:.1f}" in row
        # a second call plans nothing: the pick and the looks are read from the same runs
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
    # recipes x 3 candidates x 2 lags, each cell's 3 tuning seeds in one job (grid.jobs.run_packs);
    # the confirmation runs (field_autumn: its seed schedule's looks) come after the pick
    assert (counts["train_tuning"], counts["evaluate_tuning"], counts["tune"], counts["aggregate"]) == (cells, cells, 1, 1)
    assert "train" not in counts and "look" not in counts
    assert all(len(outputs) == 3 for outputs in planned_outputs(plan.stdout, "train_tuning"))
    lint = snakemake("--lint", *args, timeout=300)
    assert lint.returncode == 0 and "Lints for" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr


def test_the_autumn_field_trains_198_tuning_runs_then_110_at_the_first_look_and_at_most_194():
    model = Config.build(load(ROOT / "workflow" / "presets" / "field_autumn.yaml"))
    view = model.confirmation({recipe: candidates.values[0] for recipe, candidates in model.tuning.candidates.items()})
    assert len(model.tuning.runs()) == 11 * 3 * 2 * 3 and len(view.first_look()) == 11 * 2 * 5
    # later looks add seeds only to the cells a claim reads: at most those to 12 seeds, the others at 5
    claimed = {cell for claim in view.claims for cell in claim.read_cells()}
    most = len(view.first_look()) + sum(len(look_runs(view, sorted(claimed), look)) for look in (2, 3))
    assert len(claimed) == 12 and most == 12 * 12 + 10 * 5


def test_the_autumn_rerun_is_the_fields_cells_of_its_recipes():
    """workflow/presets/field_autumn_rerun.yaml (issue 62): every setting that makes a run the field's, so that a
    run both grids hold has the same run key and reproduces the field's number; its recipes' tuning entries the
    field's; no claims and no seed schedule (exploratory): 54 tuning runs, then 30 at seeds 0-4."""
    field, rerun = (load(ROOT / "workflow" / "presets" / f"{name}.yaml") for name in ("field_autumn", "field_autumn_rerun"))
    differ = {"grid", "recipes", "seeds", "seeding", "claims", "tuning"}
    assert {key: value for key, value in rerun.items() if key not in differ} == \
        {key: value for key, value in field.items() if key not in differ}
    assert set(rerun["recipes"]) < set(field["recipes"]) and rerun["seeds"] == field["seeds"][:5]
    assert {key: value for key, value in rerun["tuning"].items() if key != "recipes"} == \
        {key: value for key, value in field["tuning"].items() if key != "recipes"}
    assert rerun["tuning"]["recipes"] == {name: field["tuning"]["recipes"][name] for name in rerun["recipes"]}
    model = Config.build(rerun)
    view = model.confirmation({recipe: candidates.values[0] for recipe, candidates in model.tuning.candidates.items()})
    assert model.claims == () and model.seeding is None
    assert len(model.tuning.runs()) == 3 * 3 * 2 * 3 and len(view.first_look()) == 3 * 2 * 5


# issue 62's new recipes -> each one's one-difference control (stabilizers/recipes.yaml's comments)
NEW_RECIPE_CONTROLS = {"ipo_pr3418": "ipo", "icepop_prime": "ipo", "ipo_score_centering": "ipo",
                       "flash_reinforce": "flash_reinforce_unfiltered", "topr_token": "topr",
                       "grpo_seqmean_tis": "grpo_seq_tis", "grpo_mu_seq_mask3": "grpo_mu"}


def test_the_autumn_new_grid_is_the_fields_settings_with_each_new_recipe_beside_its_control():
    """workflow/presets/field_autumn_new.yaml (issue 62): the field's settings, so that ipo's run configurations
    are field_autumn_rerun's but for the grid's name and reproduce its numbers; every new recipe beside its
    one-difference control (a cut drops both); ipo's tuning entry the field's; no claims, no seed schedule."""
    field, new = (load(ROOT / "workflow" / "presets" / f"{name}.yaml") for name in ("field_autumn", "field_autumn_new"))
    differ = {"grid", "recipes", "seeds", "seeding", "claims", "tuning", "baseline"}
    assert {key: value for key, value in new.items() if key not in differ} == \
        {key: value for key, value in field.items() if key not in differ}
    assert new["seeds"] == field["seeds"][:5] and new["baseline"] == "ipo"
    assert {key: value for key, value in new["tuning"].items() if key != "recipes"} == \
        {key: value for key, value in field["tuning"].items() if key != "recipes"}
    assert new["tuning"]["recipes"]["ipo"] == field["tuning"]["recipes"]["ipo"]
    news = [recipe for recipe in new["recipes"] if recipe in NEW_RECIPE_CONTROLS]
    assert news and all(NEW_RECIPE_CONTROLS[recipe] in new["recipes"] for recipe in news)
    assert set(new["recipes"]) == set(news) | {NEW_RECIPE_CONTROLS[recipe] for recipe in news}
    model = Config.build(new)
    view = model.confirmation({recipe: candidates.values[0] for recipe, candidates in model.tuning.candidates.items()})
    assert model.claims == () and model.seeding is None
    count = len(new["recipes"])
    assert len(model.tuning.runs()) == count * 3 * 2 * 3 and len(view.first_look()) == count * 2 * 5


@pytest.mark.parametrize("preset, recipe", [("field_autumn_new_flash", "flash_reinforce"), ("field_autumn_new_topr", "topr_token"),
                                            ("field_autumn_new_seqmean", "grpo_seqmean_tis"),
                                            ("field_autumn_new_mask", "grpo_mu_seq_mask3")])
def test_a_cut_pairs_grid_is_field_autumn_news_settings_with_the_control_as_baseline(preset, recipe):
    """workflow/presets/field_autumn_new_{flash,topr,seqmean,mask}.yaml: a pair field_autumn_new cut, in a grid of its
    own at the same settings; its control the baseline; 36 tuning runs, then 20."""
    new, flash = (load(ROOT / "workflow" / "presets" / f"{name}.yaml") for name in ("field_autumn_new", preset))
    differ = {"grid", "recipes", "baseline", "tuning"}
    assert {key: value for key, value in flash.items() if key not in differ} == \
        {key: value for key, value in new.items() if key not in differ}
    assert {key: value for key, value in flash["tuning"].items() if key != "recipes"} == \
        {key: value for key, value in new["tuning"].items() if key != "recipes"}
    assert flash["recipes"] == [recipe, NEW_RECIPE_CONTROLS[recipe]] and flash["baseline"] == NEW_RECIPE_CONTROLS[recipe]
    model = Config.build(flash)
    view = model.confirmation({recipe: candidates.values[0] for recipe, candidates in model.tuning.candidates.items()})
    assert len(model.tuning.runs()) == 2 * 3 * 2 * 3 and len(view.first_look()) == 2 * 2 * 5
