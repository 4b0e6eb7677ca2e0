"""The interaction and trend claim kinds (grid.claims.Claim): their cells and weights worked by
hand, the contrast they give on hand-made cell values, and the config checks of their fields."""
import numpy as np
import pytest
from scipy import stats

from analysis.statistics.cell_stats import CellStats
from analysis.statistics.cell_table import CellTable
from analysis.statistics.contrasts import contrast
from grid.claims import Claim, claims, slope_weights
from grid.config import ConfigError, load

GRID = {"lags": [0, 1, 8]}


def claim(**fields) -> Claim:
    section = {"name": "c", "expect": "greater", "smallest_effect": 0.05, "metric": "auc", **fields}
    return claims({**GRID, "claims": [section]})[0]


def test_the_interaction_of_cost_differences_is_eight_cells_by_hand():
    """[(X8 - X0) - (G8 - G0)] - [(X'8 - X'0) - (G'8 - G'0)]."""
    c = claim(kind="interaction", recipe="x_bf16", versus="g_bf16", other_recipe="x_fp32", other_versus="g_fp32",
              lag=8)
    assert c.of == "cost_difference"
    assert c.cells() == [(1.0, "x_bf16", 8), (-1.0, "x_bf16", 0), (-1.0, "g_bf16", 8), (1.0, "g_bf16", 0),
                          (-1.0, "x_fp32", 8), (1.0, "x_fp32", 0), (1.0, "g_fp32", 8), (-1.0, "g_fp32", 0)]


def test_the_interaction_of_recipes_is_four_cells_by_hand():
    c = claim(kind="interaction", of="recipes", recipe="x_bf16", versus="g_bf16", other_recipe="x_fp32",
              other_versus="g_fp32", lag=1)
    assert c.cells() == [(1.0, "x_bf16", 1), (-1.0, "g_bf16", 1), (-1.0, "x_fp32", 1), (1.0, "g_fp32", 1)]


def test_an_interaction_contrast_on_hand_made_values():
    """Two seeds; the per-seed values are chosen so that each seed's contrast is worked by hand:
    seed 0: [(0.50 - 0.70) - (0.20 - 0.70)] - [(0.60 - 0.70) - (0.55 - 0.70)] = 0.30 - 0.05 = 0.25
    seed 1: [(0.40 - 0.60) - (0.20 - 0.60)] - [(0.50 - 0.60) - (0.50 - 0.60)] = 0.20 - 0.00 = 0.20."""
    c = claim(kind="interaction", recipe="x", versus="g", other_recipe="x2", other_versus="g2", lag=8)
    values = {("x", 8): [0.50, 0.40], ("x", 0): [0.70, 0.60], ("g", 8): [0.20, 0.20], ("g", 0): [0.70, 0.60],
              ("x2", 8): [0.60, 0.50], ("x2", 0): [0.70, 0.60], ("g2", 8): [0.55, 0.50], ("g2", 0): [0.70, 0.60]}
    result = contrast([(w, values[r, lag], [0, 1]) for w, r, lag in c.cells()])
    assert result.method == "paired-t" and result.n == 2
    assert result.estimate == pytest.approx(0.225)
    reference = stats.ttest_1samp([0.25, 0.20], 0.0)
    assert result.p == pytest.approx(reference.pvalue)


def test_slope_weights_by_hand():
    """lags 0, 1, 8: mean 3, deviations -3, -2, 5, sum of squares 9 + 4 + 25 = 38."""
    assert slope_weights([8, 0, 1]) == [(-3 / 38, 0), (-2 / 38, 1), (5 / 38, 8)]
    weights = [w for w, _ in slope_weights([0, 1, 2, 4, 8, 16])]
    assert sum(weights) == pytest.approx(0.0)
    assert sum(w * lag for w, lag in zip(weights, [0, 1, 2, 4, 8, 16])) == pytest.approx(1.0)


def test_a_trend_is_the_per_seed_least_squares_slope():
    """The contrast's estimate is the mean over seeds of np.polyfit's slope; its test is the t test
    of those per-seed slopes."""
    lags = [0, 1, 2, 4, 8, 16]
    c = claim(kind="trend", recipe="grpo", expect="less")
    assert c.lag == 8 and c.lags == (0, 1, 8)  # the grid's lags when the claim names none
    c = claim(kind="trend", recipe="grpo", expect="less", lags=lags)
    rng = np.random.default_rng(0)
    scores = {lag: list(0.7 - 0.01 * lag + rng.normal(0, 0.02, 4)) for lag in lags}
    result = contrast([(w, scores[lag], [0, 1, 2, 3]) for w, _, lag in c.cells()])
    slopes = [np.polyfit(lags, [scores[lag][s] for lag in lags], 1)[0] for s in range(4)]
    assert result.estimate == pytest.approx(np.mean(slopes))
    assert result.p == pytest.approx(stats.ttest_1samp(slopes, 0.0).pvalue)


def test_a_trend_against_versus_is_the_difference_of_slopes():
    c = claim(kind="trend", recipe="a", versus="b", expect="greater", lags=[0, 8])
    assert c.cells() == [(-1 / 8, "a", 0), (1 / 8, "a", 8), (1 / 8, "b", 0), (-1 / 8, "b", 8)]


GOOD = {"name": "ok", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less", "smallest_effect": 0.05}


@pytest.mark.parametrize("bad, message", [
    ({"kind": "interaction", "versus": "gspo"}, "config key 'claims[1].other_recipe': missing (required)"),
    ({"kind": "interaction", "versus": "gspo", "other_recipe": "nope", "other_versus": "grpo"},
     "config key 'claims[1].other_recipe' (bad): unknown recipe 'nope'"),
    ({"kind": "interaction", "versus": "gspo", "other_recipe": "gspo", "other_versus": "grpo"},
     "the other comparison must name other recipes"),
    ({"kind": "interaction", "versus": "gspo", "other_recipe": "sat_gspo", "other_versus": "gspo_mu", "lag": 1},
     "config key 'claims[1].lag' (bad): an interaction of staleness costs is measured against lag 1"),
    ({"kind": "trend", "lags": [1, -4]}, "config key 'claims[1].lags[1]' (bad): -4 is not a lag"),
    ({"kind": "trend", "lags": [8, 8]}, "config key 'claims[1].lags'"),
    ({"lags": [1, 8]}, "config key 'claims[1].lags' (bad): only a trend claim has it"),
    ({"other_recipe": "gspo"}, "config key 'claims[1].other_recipe' (bad): only an interaction claim has it"),
])
def test_the_new_kinds_fields_are_checked_naming_the_key(bad, message):
    with pytest.raises(ConfigError) as error:
        load("config.yaml", {"claims": [GOOD, {**GOOD, "name": "bad", **bad}]})
    assert message in str(error.value)


def test_good_interaction_and_trend_claims_pass():
    config = load("config.yaml", {"claims": [
        {**GOOD, "name": "i", "kind": "interaction", "recipe": "sat_gspo", "versus": "gspo", "other_recipe": "gspo_mu",
         "other_versus": "grpo", "expect": "equivalent"},
        {"name": "t", "kind": "trend", "recipe": "grpo", "expect": "less", "smallest_effect": 0.01}]})
    interaction, trend = claims(config)
    assert len(interaction.cells()) == 8 and trend.cells() == [(-1 / 7, "grpo", 1), (1 / 7, "grpo", 8)]


def test_the_new_kinds_are_stated_in_words():
    from analysis.claims.verdicts import statement
    interaction = claim(kind="interaction", recipe="x_bf16", versus="g_bf16", other_recipe="x_fp32",
                        other_versus="g_fp32", lag=8, expect="equivalent")
    assert statement(interaction) == ("x_bf16 against g_bf16 minus x_fp32 against g_fp32 (cost_difference, lag 8), "
                                         "AUC: within +-5.0 points of 0")
    trend = claim(kind="trend", recipe="grpo", expect="less", smallest_effect=0.005)
    assert statement(trend).startswith("least-squares slope of grpo's score against lag over lags (0, 1, 8)")


@pytest.mark.slow  # the whole aggregate, plots included
def test_aggregate_answers_interaction_and_trend_claims(tmp_path):
    """Through analysis.aggregate on the fabricated grid (lags 1, 8): each estimate is the mean of the
    per-seed contrasts worked from summary.json's per-seed AUCs, and table.md lists both verdicts."""
    import json

    from analysis.aggregate import main
    from tests.support.grid_fixture import make_grid, written_grid

    kinds = [{"name": "i", "kind": "interaction", "recipe": "sat_grpo", "versus": "grpo", "other_recipe": "grpo_r3",
              "other_versus": "grpo", "lag": 8, "expect": "greater", "smallest_effect": 0.05},
             {"name": "t", "kind": "trend", "recipe": "grpo_r3", "expect": "less", "smallest_effect": 0.005}]
    config = {**make_grid(tmp_path), "claims": kinds}
    out = tmp_path / config["grid"]
    assert main(["--grid", written_grid(config)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    auc = {(c["recipe"], c["lag"]): np.array(c["per_seed"]["auc"], dtype=float) for c in summary["cells"]}
    by_hand_i = (auc["sat_grpo", 8] - auc["sat_grpo", 1]) - (auc["grpo", 8] - auc["grpo", 1]) \
        - ((auc["grpo_r3", 8] - auc["grpo_r3", 1]) - (auc["grpo", 8] - auc["grpo", 1]))
    by_hand_t = (auc["grpo_r3", 8] - auc["grpo_r3", 1]) / 7
    answered = {c["name"]: c for c in summary["claims"]}
    keep = np.isfinite(by_hand_i)
    assert answered["i"]["estimate"] == pytest.approx(float(np.mean(by_hand_i[keep])))
    assert answered["t"]["estimate"] == pytest.approx(float(np.mean(by_hand_t[np.isfinite(by_hand_t)])))
    table = (out / "table.md").read_text()
    for name in ("i", "t"):
        assert answered[name]["statement"] in table and answered[name]["verdict"] in table
    assert "sat_grpo against grpo minus grpo_r3 against grpo" in answered["i"]["statement"]


def test_the_threshold_lag_by_hand():
    """Costs against lag 0 over four seeds, each lag's interval at 0.05 / 3 (three lags compared, t at
    3 df): lag 2 costs -0.03 on average (its interval short of -0.10), lag 4 -0.11 (past -0.10, its
    interval on both sides of it), lag 8 -0.31 (wholly past). So the estimate is lag 4, the interval [4, 8]."""
    from analysis.claims.verdicts import threshold_lag, threshold_text
    c = claim(kind="trend", recipe="g", expect="less", lags=[0, 2, 4, 8], threshold=0.10)
    base = np.array([0.70, 0.60, 0.65, 0.55])
    costs = {2: [-0.02, -0.04, -0.03, -0.03], 4: [-0.10, -0.12, -0.11, -0.11], 8: [-0.30, -0.32, -0.31, -0.31]}
    scores = {0: list(base), **{lag: list(base + cost) for lag, cost in costs.items()}}
    cells = CellTable.of_cells(CellStats("g", lag, [0, 1, 2, 3], {"auc": values}) for lag, values in scores.items())
    found = threshold_lag(c, cells, 200, {0, 1, 2, 3}, 0.05)
    each = stats.t.ppf(1 - 0.05 / 3 / 2, 3)
    for cost, per_seed in zip(found["costs"], costs.values()):
        half = each * np.std(per_seed, ddof=1) / 2
        assert cost["low"] == pytest.approx(np.mean(per_seed) - half)
        assert cost["high"] == pytest.approx(np.mean(per_seed) + half)
    assert (found["estimate"], found["low"], found["high"]) == (4, 4, 8)
    assert threshold_text(found, 8) == "cost passes 10 points from lag 4 [4, 8] (95.00% jointly over its lags)"
    never = threshold_lag(claim(kind="trend", recipe="g", expect="less", lags=[0, 2], threshold=0.10), cells, 200,
                          {0, 1, 2, 3}, 0.05)
    assert (never["estimate"], never["low"], never["high"]) == (None, None, None)
    assert threshold_text(never, 2).startswith("cost passes 10 points from lag > 2 [> 2, > 2]")


def test_a_threshold_is_a_trend_of_one_recipe():
    trend = {"name": "t", "kind": "trend", "recipe": "grpo", "expect": "less", "smallest_effect": 0.01}
    with pytest.raises(ConfigError, match="claims\\[0\\].threshold' \\(t\\): a threshold lag is a cost of one recipe"):
        load("config.yaml", {"claims": [{**trend, "versus": "gspo", "threshold": 0.1}]})
    with pytest.raises(ConfigError, match="claims\\[0\\].threshold' \\(ok\\): only a trend claim has it"):
        load("config.yaml", {"claims": [{**GOOD, "threshold": 0.1}]})
    assert claims(load("config.yaml", {"claims": [{**trend, "threshold": 0.1}]}))[0].threshold == 0.1
