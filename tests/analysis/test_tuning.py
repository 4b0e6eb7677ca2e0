"""The equal tuning budget (config tuning; grid.tuning, analysis.schedule.tune): the rule on hand-made
scores, the config's refusals, the candidates' run identities, and the pick and the report on a
fabricated grid (tests/workflow/test_workflow_tuning.py runs it through snakemake)."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import yaml

from analysis.aggregate import main as aggregate
from analysis.schedule.tune import TIE, pick, selection, tuning_scores
from analysis.schedule.tune import main as tune
from grid.claims import Seeding
from grid.config import ConfigError, validate
from grid.expand import resolve_run_config
from grid.folder import GridDir
from harness.io import read_json
from grid.settings import Config
from grid.tuning import Tuning, confirmation_config
from stabilizers import load_recipes, parameters
from tests.support.grid_fixture import written_grid
from tests.support.tuning_grid import CLAIM, TUNING, TUNING_SCORE, raw_config, write_run


# ----------------------------------------------------------------------------- the rule
def test_the_highest_mean_wins_and_a_tie_goes_to_the_candidate_listed_first():
    assert pick([(0.2, 0.30), (0.1, 0.41), (0.3, 0.40)]) == 0.1
    assert pick([(0.2, 0.40), (0.1, 0.40), (0.3, 0.39)]) == 0.2  # the default, listed first, keeps a tie
    assert pick([(0.3, 0.40), (0.2, 0.40)]) == 0.3  # declared order, not the values' order
    assert pick([(0.2, 0.40), (0.1, 0.40 + TIE / 2)]) == 0.2  # rounding is a tie
    assert pick([(0.2, 0.40), (0.1, 0.40 + 1e-9)]) == 0.1  # a real difference is not
    with pytest.raises(ValueError, match=r"\[0.1\] have no finite tuning score"):
        pick([(0.2, 0.40), (0.1, math.nan)])


def _run(recipe, lag, seed, auc):
    return SimpleNamespace(recipe=recipe, lag=lag, seed=seed, summary=SimpleNamespace(auc=auc, fixed=auc))


def test_a_candidates_score_is_its_mean_over_the_tuning_seeds_and_lags():
    config = Config.build(validate(raw_config()))
    # grpo eps 0.1 is better at lag 8 only, by more than eps 0.2 is better at lag 1: the mean over lags decides
    aucs = {("grpo.eps_low_eps_high-0.2", 1): (0.50, 0.52), ("grpo.eps_low_eps_high-0.2", 8): (0.20, 0.22),
            ("grpo.eps_low_eps_high-0.1", 1): (0.45, 0.47), ("grpo.eps_low_eps_high-0.1", 8): (0.30, 0.32),
            ("sat_grpo.alpha-0.9", 1): (0.4, 0.4), ("sat_grpo.alpha-0.9", 8): (0.4, 0.4),
            ("sat_grpo.alpha-0.5", 1): (0.4, 0.4), ("sat_grpo.alpha-0.5", 8): (0.4, 0.4)}
    runs = [_run(variant, lag, seed, value) for (variant, lag), values in aucs.items()
            for seed, value in zip((10, 11), values)]
    scores = tuning_scores(config, runs)
    assert scores["grpo"] == [(0.2, pytest.approx(0.36)), (0.1, pytest.approx(0.385))]
    assert pick(scores["grpo"]) == 0.1 and pick(scores["sat_grpo"]) == 0.9
    with pytest.raises(ValueError, match=r"tuning run\(s\) \[\('sat_grpo.alpha-0.5', 8, 11\)\] of 'sat_grpo'"):
        tuning_scores(config, runs[:-1])


# ----------------------------------------------------------------------------- the config's refusals
@pytest.mark.parametrize("changes, message", [
    ({"tuning": {**TUNING, "recipes": {**TUNING["recipes"], "sat_grpo": {"param": "alpha", "values": [0.9, 0.5, 0.7]}}}},
     r"config key 'tuning.recipes.sat_grpo.values': 3 candidates, but 'tuning.recipes.grpo.values' has 2"),
    ({"tuning": {**TUNING, "seeds": [2, 10]}},
     r"config key 'tuning.seeds\[0\]': seed 2 is also a confirmation seed \(config key 'seeds'\)"),
    ({"tuning": {**TUNING, "recipes": {"grpo": TUNING["recipes"]["grpo"]}}},
     r"config key 'tuning.recipes': the grid's recipe 'sat_grpo' has no candidates"),
    ({"tuning": {**TUNING, "recipes": {**TUNING["recipes"], "sat_grpo": {"param": "beta", "values": [1, 2]}}}},
     r"config key 'tuning.recipes.sat_grpo.param': 'sat_grpo' \(sat_grpo\) has no parameter 'beta'"),
    ({"tuning": {**TUNING, "recipes": {**TUNING["recipes"], "grpo": {"param": "veto.threshold", "values": [1, 2]}}}},
     r"config key 'tuning.recipes.grpo.param': 'veto.threshold': recipe 'grpo' has no veto to tune"),
    ({"tuning": {**TUNING, "recipes": {**TUNING["recipes"], "sat_grpo": {"param": "alpha", "values": [0.9, 0.9]}}}},
     r"config key 'tuning.recipes.sat_grpo.values\[1\]': 0.9 is listed twice"),
    ({"tuning": {**TUNING, "recipes": {**TUNING["recipes"], "sat_grpo": {"param": "alpha", "values": [0.9, 2.0]}}}},
     r"config key 'tuning.recipes.sat_grpo.values\[1\]': .*alpha"),
    ({"tuning": {**TUNING, "lags": [4]}}, r"config key 'tuning.lags\[0\]': 4 is not one of the grid's lags"),
    ({"tuning": {**TUNING, "recipes": {**TUNING["recipes"], "sat_grpo": {"param": "alpha", "values": [0.9]}}}},
     r"config key 'tuning.recipes.sat_grpo.values': \[0.9\] is too short"),
])
def test_an_unequal_or_leaking_budget_is_refused_naming_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate(raw_config(**changes))


def test_a_recipe_of_the_section_outside_a_narrowed_grid_still_counts_towards_the_equal_budget():
    tuning = {**TUNING, "recipes": {**TUNING["recipes"], "p3o": {"param": "aggregation",
                                                                     "values": ["token_mean", "sample_mean", "token_sum_norm"]}}}
    with pytest.raises(ConfigError, match=r"'tuning.recipes.p3o.values': 3 candidates"):
        validate(raw_config(tuning=tuning))
    tuning["recipes"]["p3o"]["values"] = ["token_mean", "sample_mean"]
    assert Tuning.of(validate(raw_config(tuning=tuning))).candidates.keys() == {"grpo", "sat_grpo"}


# ----------------------------------------------------------------------------- identities
def test_each_candidate_is_a_recipe_of_its_own_with_its_own_run_key():
    config = validate(raw_config())
    model = Config.build(config)
    assert model.recipes == ("grpo", "sat_grpo")  # the rows stay the recipes
    tuning = Tuning.of(config)
    assert len(tuning.runs()) == 2 * 2 * 2 * 2  # recipes x candidates x lags x tuning seeds
    assert set(tuning.runs()) <= set(model.runs)
    low = model.run_config(("grpo.eps_low_eps_high-0.1", 8, 10))["recipe"]
    assert (low["params"]["eps_low"], low["params"]["eps_high"], low["table1"]) == (0.1, 0.1, None)
    assert model.run_config(("sat_grpo.alpha-0.5", 1, 0))["recipe"]["params"]["alpha"] == 0.5
    keys = {model.run_config(run)["run_key"] for run in model.runs}
    assert len(keys) == len(model.runs)  # every candidate, lag and seed its own identity
    assert not any(run[0] in ("grpo", "sat_grpo") for run in model.runs)  # no untuned run


def test_the_confirmation_grid_renames_rows_baseline_and_claims_to_the_picked_variants():
    config = validate(raw_config(recipe_engine_params={"sat_grpo": {"lr": 0.01}}))
    view = validate(confirmation_config(config, Tuning.of(config), {"grpo": 0.1, "sat_grpo": 0.9}))
    assert view["recipes"] == ["grpo.eps_low_eps_high-0.1", "sat_grpo.alpha-0.9"] and view["tuning"] is None
    assert view["baseline"] == "grpo.eps_low_eps_high-0.1" and view["seeds"] == [0, 1, 2]
    assert (view["claims"][0]["recipe"], view["claims"][0]["versus"]) == ("sat_grpo.alpha-0.9", "grpo.eps_low_eps_high-0.1")
    assert view["recipe_engine_params"] == {"sat_grpo.alpha-0.9": {"lr": 0.01}}
    # the same run key for a confirmation run, whether resolved from the tuning config or from its view
    run = ("sat_grpo.alpha-0.9", 8, 1)
    assert Config.build(config).run_config(run)["run_key"] == resolve_run_config(view, *run)["run_key"]


def test_a_seed_schedule_is_the_confirmations_the_picked_values_grid_runs_it_with_the_declared_family():
    config = validate(raw_config(seeds=[0, 1, 2, 3], seeding={"looks": [2, 4], "boundary": "pocock"}))
    model = Config.build(config)
    view = model.confirmation({"grpo": 0.1, "sat_grpo": 0.9})
    assert view.seeding == model.seeding == Seeding((2, 4), "pocock") and view.claims[0].name == CLAIM["name"]
    assert len(view.claims) == len(model.claims) == 1  # m: the claims the config declares
    variants = ("grpo.eps_low_eps_high-0.1", "sat_grpo.alpha-0.9")
    assert view.first_look() == [(variant, lag, seed) for variant in variants for lag in (1, 8) for seed in (0, 1)]
    # the tuning seeds train every candidate; the schedule's runs are the picked values' on the grid's seeds
    assert set(view.first_look()) <= set(model.runs) and not set(view.first_look()) & set(Tuning.of(config).runs())


# ----------------------------------------------------------------------------- pick and report on disk
@pytest.mark.slow  # aggregates a fabricated grid: ~50 s on 2 cores
def test_the_pick_on_disk_and_a_report_of_the_confirmation_seeds_only(tmp_path):
    config = validate(raw_config(tmp_path, lag_mode="constant"))
    model = Config.build(config)
    # grpo: eps 0.1 is better on the tuning seeds; sat_grpo: a tie (the same scores), alpha 0.9 listed first
    for run in Tuning.of(config).runs():
        write_run(config, model, run, TUNING_SCORE[run[0]])
    grid = GridDir.of(config)
    assert tune(["--grid", written_grid(config), "--out", str(grid.tuning_path)]) == 0
    picked = json.loads(grid.tuning_path.read_text())
    assert {r: e["picked"] for r, e in picked["recipes"].items()} == {"grpo": 0.1, "sat_grpo": 0.9}
    assert picked["confirmation_runs"][0] == ["grpo.eps_low_eps_high-0.1", 1, 0] and len(picked["confirmation_runs"]) == 12
    # the confirmation seeds score otherwise: the report must show these, never the tuning scores
    confirmation_score = {"grpo.eps_low_eps_high-0.1": 0.20, "sat_grpo.alpha-0.9": 0.60}
    for variant, lag, seed in picked["confirmation_runs"]:
        write_run(config, model, (variant, lag, seed), confirmation_score[variant] + 0.01 * seed)
    assert selection(model) == picked  # aggregation replays the same pick
    assert aggregate(["--grid", str(grid.path)]) == 0
    summary = read_json(grid.summary_path)
    assert summary["recipes"] == ["grpo.eps_low_eps_high-0.1", "sat_grpo.alpha-0.9"] and summary["seeds"] == [0, 1, 2]
    assert summary["claims"][0]["recipe"] == "sat_grpo.alpha-0.9"
    assert "tuning_scores" not in json.dumps(summary["tuning"])
    table = grid.table_path("md").read_text()
    section = table.split("## Equal tuning budget", 1)[1]
    rows = {line.split(" | ")[0][2:]: line for line in section.splitlines() if line.startswith("| grpo") or
            line.startswith("| sat_grpo")}
    cells = {(c["recipe"], c["lag"]): c["stats"]["auc"] for c in summary["cells"]}
    for recipe, variant, value in (("grpo", "grpo.eps_low_eps_high-0.1", "0.1"), ("sat_grpo", "sat_grpo.alpha-0.9", "0.9")):
        row = rows[recipe].split(" | ")
        assert row[3] == value
        for column, lag in zip(row[4:], (1, 8)):
            auc = cells[variant, lag]
            assert column.startswith(f"{100 * auc['estimate']:.1f} [{100 * auc['low']:.1f}, {100 * auc['high']:.1f}] (n 3)")
    tuned = [f"{100 * v:.1f}" for v in (0.3, 0.5)]
    assert not any(text in section.split("\n|", 1)[1] for text in tuned)  # no tuning score in the table


def test_the_tuned_field_preset_gives_every_recipe_three_candidates_on_seeds_the_claims_never_read():
    config = validate(yaml.safe_load(open("workflow/presets/tuned_field.yaml")))
    tuning = Tuning.of(config)
    assert set(tuning.candidates) == set(config["recipes"]) >= {"p3o", "mu_grpo", "sat_grpo", "sat_gspo"}
    assert {len(c.values) for c in tuning.candidates.values()} == {3}
    assert not set(tuning.seeds) & set(config["seeds"]) and tuning.lags == (1, 8)
    assert len(tuning.runs()) == 7 * 3 * 2 * 3
    # each recipe's own value is listed first, so a tie keeps it
    recipes = load_recipes(check_values=False)
    for recipe, candidates in tuning.candidates.items():
        spec = recipes[recipe]
        own = {**parameters(spec.loss), **spec.params, **{f"veto.{key}": value for key, value in (spec.veto or {}).items()}}
        assert all(own[param] == candidates.values[0] for param in candidates.params), recipe
