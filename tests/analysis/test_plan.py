"""analysis.claims.planning: a grid's expected cost and outcomes under its seed schedule, before any run."""
from __future__ import annotations

import pytest

from analysis.claims import planning as plan
from grid.config import load
from grid.settings import Config
from tests.support.paths import ROOT

TUNED = ROOT / "workflow" / "presets" / "tuned_field.yaml"
COST = {"name": "grpo_staleness_cost", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less",
        "smallest_effect": 0.05}
SCHEDULE = {"looks": [3, 5]}


@pytest.mark.parametrize("assumed, stops_first", [((-0.5, 0.01), True), ((-0.05, 0.5), False)])
def test_a_clear_claim_stops_at_the_first_look_and_an_unclear_one_runs_on(assumed, stops_first):
    config = load(TUNED, {"claims": [COST], "tuning": None, "seeding": SCHEDULE})
    result = plan.plan(Config.build(config), {COST["name"]: assumed}, replicates=400)
    (row,) = result["claims"]
    # at most, the claim's two cells run to the last look and the other 12 stay at the first
    assert (result["fewest_runs"], result["most_runs"]) == (14 * 3, 12 * 3 + 2 * 5)
    if stops_first:
        assert row["outcomes"] == {"exceeds": 1.0} and result["expected_runs"] == result["fewest_runs"]
    else:
        # only the claim's two cells (grpo at lags 1 and 8) go on to the second look's 2 more seeds
        assert row["mean_look"] > 1.5
        assert result["expected_runs"] == pytest.approx(14 * 3 + 2 * 2 * (row["mean_look"] - 1))


def test_the_tuning_runs_are_counted_beside_the_schedule():
    """tuned_field.yaml: 7 recipes x 3 candidates x 2 lags x 3 tuning seeds, before the 70 it plans."""
    result = plan.plan(Config.build(load(TUNED, {"claims": [COST]})), {COST["name"]: (-0.3, 0.02)}, replicates=100)
    assert (result["tuning_runs"], result["expected_runs"]) == (126, 70.0)
    assert plan.render(result).splitlines()[0].endswith("expected runs 70.0 (fewest 70, most 70), after 126 tuning runs")
    untuned = plan.plan(Config.build(load(TUNED, {"claims": [COST], "tuning": None})), {COST["name"]: (-0.3, 0.02)},
                        replicates=100)
    assert untuned["tuning_runs"] == 0 and "tuning" not in plan.render(untuned)


def test_several_claims_are_planned_at_the_declared_familys_level_tested_or_not():
    """Three claims declared, one on a lag the grid lacks: the two tested are read at 0.05 / 3 spent over the
    looks, the share of the untested one unspent (issue 63: the level from the tested claims passed)."""
    from analysis.statistics.boundaries import look_levels

    other = {**COST, "name": "sat_grpo_staleness_cost", "recipe": "sat_grpo"}
    untested = {**COST, "name": "grpo_cost_at_lag_64", "lag": 64}
    config = Config.build(load(TUNED, {"claims": [COST, other, untested], "tuning": None, "seeding": SCHEDULE}))
    result = plan.plan(config, {COST["name"]: (-0.5, 0.01), other["name"]: (-0.5, 0.01)}, replicates=100)
    assert [row["name"] for row in result["claims"]] == [COST["name"], other["name"]]
    assert result["levels"] == list(look_levels((3, 5), 0.05 / 3, result["boundary"]))
    assert result["levels"] != list(look_levels((3, 5), 0.05 / 2, result["boundary"]))
