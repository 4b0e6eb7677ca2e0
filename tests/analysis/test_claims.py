"""Claims: declared in the config and checked before any job runs; answered by analysis.aggregate
on a fabricated grid, with the verdicts first in table.md, in table.csv and in summary.json."""
import csv
import json
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep

from analysis.claims.verdict import Verdict
from analysis.claims.verdicts import NOT_TESTED, answer, open_cells
from analysis.statistics.boundaries import look_levels
from analysis.statistics.cell_stats import CellStats
from analysis.statistics.cell_table import CellTable
from analysis.statistics.decision import outcome, outcomes, true_of
from analysis.statistics.survival import collapse_test
from grid.claims import Family, Recipes, Seeding, StalenessCost
from grid.config import ConfigError, load
from tests.support.aggregated_grid import aggregated_grid


@pytest.fixture(scope="module")
def grid(tmp_path_factory, run_folder):
    root = tmp_path_factory.mktemp("grid")
    config = aggregated_grid(run_folder, root)
    out = root / config["grid"]
    return config, out, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("path", ["config.yaml", "workflow/presets/field.yaml", "workflow/presets/table1.yaml",
                                  "workflow/presets/tuned_field.yaml"])
def test_every_shipped_config_declares_claims(path):
    claims = load(path)["claims"]
    assert claims and all(c["metric"] in ("auc", "fixed", "best") for c in claims)


def test_each_claim_is_read_from_its_interval_at_alpha_over_the_family(grid):
    config, _, summary = grid
    claims = {c["name"]: c for c in summary["claims"]}
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    assert all(c["family_size"] == 5 for c in summary["claims"])
    # grpo's staleness cost on AUC: scipy's paired t of the per-seed values, its interval at 1 - 0.05 / 5
    a8, a1 = (np.array(cells["grpo", lag]["per_seed"]["auc"]) for lag in (8, 1))
    cost = claims["grpo_cost"]
    assert cost["method"] == "paired-t" and cost["n"] == 3 and cost["metric"] == "auc"
    assert (cost["estimate"], cost["p"]) == (pytest.approx(np.mean(a8 - a1)), pytest.approx(stats.ttest_rel(a8, a1).pvalue))
    low, high = stats.t.interval(0.99, 2, loc=np.mean(a8 - a1), scale=stats.sem(a8 - a1))
    assert (cost["low"], cost["high"], cost["confidence"]) == (pytest.approx(low), pytest.approx(high), pytest.approx(0.99))
    for claim in summary["claims"]:
        assert claim["verdict"] == outcome(claim["low"] if claim["low"] is not None else math.nan,
                                           claim["high"] if claim["high"] is not None else math.nan,
                                           claim["smallest_effect"], claim["expect"])
        assert 0 <= claim["replication_low"] <= claim["replication_high"] <= 1 and "posterior predictive" in claim["replication_method"]
        if not claim["final"] and claim["seeds_needed"]:
            assert f"about {claim['seeds_needed']} seeds" in claim["why"]
    # sat_grpo's lag-8 seeds sit 2.6 points below its equal lag-1 seeds, but at 3 seeds the 99% interval
    # reaches past -10 points: undecided, however small the estimate
    no_cost = claims["sat_no_cost"]
    assert no_cost["test"] == "paired-t" and -0.10 < no_cost["estimate"] < 0 and no_cost["low"] < -0.10
    assert no_cost["verdict"] == "undecided" and not no_cost["final"]
    collapse = claims["grpo_collapses_at_lag8"]
    assert collapse["test"] == "log-rank stratified by seed; newcombe" and collapse["estimate"] == pytest.approx(2 / 3)
    newcombe_low, newcombe_high = confint_proportions_2indep(2, 3, 0, 3, method="newcomb", alpha=0.01)
    assert (collapse["low"], collapse["high"]) == (pytest.approx(newcombe_low), pytest.approx(newcombe_high))


def test_verdicts_open_table_md_and_reach_csv_and_conclusions(grid):
    _, out, summary = grid
    markdown = (out / "table.md").read_text()
    first = markdown.index("## ", markdown.index("\n"))
    assert markdown[first:].startswith("## Claims (confirmatory")
    assert "chance a rerun repeats this outcome" in markdown
    rows = [r for r in csv.DictReader((out / "table.csv").open()) if r["claim"]]
    assert [r["claim"] for r in rows] == [c["name"] for c in summary["claims"]]
    for row, claim in zip(rows, summary["claims"]):
        assert row["claim_verdict"] == claim["verdict"] and f"**{claim['verdict']}**" in markdown
        assert float(row["claim_replication"]) == pytest.approx(claim["replication"])
    lines = summary["conclusions"]
    assert lines[0].startswith("Claims (confirmatory, declared in the config: each of the 5 claims tested")
    assert all(lines[i + 1].startswith(c["name"]) for i, c in enumerate(summary["claims"]))


# The outcome table of docs/statistics.md, worked by hand (delta 10 points; intervals in points / 100).
@pytest.mark.parametrize("low, high, expect, expected", [
    (0.01, 0.05, "greater", "below effect"),  # +3 [+1, +5]: one outcome whatever any p-value says
    (0.12, 0.30, "greater", "exceeds"),
    (0.05, 0.30, "greater", "claimed sign"),
    (-0.05, 0.08, "greater", "negligible"),
    (-0.20, 0.30, "greater", "undecided"),
    (-0.30, -0.01, "greater", "opposite"),
    (-0.30, -0.12, "less", "exceeds"),
    (0.01, 0.30, "less", "opposite"),
    (-0.045, -0.015, "equivalent", "negligible"),
    (0.02, 0.25, "equivalent", "nonzero"),
    (0.11, 0.25, "equivalent", "exceeds"),
    (-0.05, 0.25, "equivalent", "undecided"),
    (0.10, 0.30, "greater", "exceeds"),  # an interval end exactly on delta: low >= delta is "exceeds"
    (-0.30, -0.10, "less", "exceeds"),
    (0.10, 0.25, "equivalent", "exceeds"),
    (-0.25, -0.10, "equivalent", "exceeds"),
    (0.0, 0.05, "greater", "negligible"),  # an end on 0: the sign is not shown
])
def test_the_outcome_is_where_the_interval_lies(low, high, expect, expected):
    assert outcome(low, high, 0.10, expect) == expected


def test_a_grid_narrowed_to_one_of_two_claims_reads_it_at_the_declared_level():
    """One family per config: the claim the narrowed grid cannot test keeps its share unspent, so the
    other is read at alpha / 2 (the interval worked with scipy), not at alpha."""
    claim = Recipes(name="c", recipe="a", lag=8, expect="greater", smallest_effect=0.05, metric="auc", versus="b", reference_lag=1)
    other = StalenessCost(name="d", recipe="a", lag=8, expect="less", smallest_effect=0.05, metric="auc", reference_lag=1)
    per_seed = {1: [0.6, 0.62, 0.61], 8: [0.3, 0.35, 0.31]}
    cells = CellTable.of_cells(CellStats("a", lag, [0, 1, 2], {"auc": values}) for lag, values in per_seed.items())
    rows = {row["name"]: row for row in map(Verdict.row, answer(Family((claim, other), 100), cells))}
    assert rows["c"]["verdict"] == NOT_TESTED and rows["d"]["family_size"] == 2
    cost = np.subtract(per_seed[8], per_seed[1])
    low, high = stats.t.interval(1 - 0.05 / 2, 2, loc=cost.mean(), scale=stats.sem(cost))
    assert rows["d"]["confidence"] == pytest.approx(0.975)
    assert (rows["d"]["low"], rows["d"]["high"]) == (pytest.approx(low), pytest.approx(high))


def test_a_declared_schedule_stops_a_claim_at_its_first_final_look():
    cost = StalenessCost(name="cost", recipe="a", lag=8, expect="less", smallest_effect=0.05, metric="auc", reference_lag=1)
    same = Recipes(name="same", recipe="b", versus="a", lag=1, expect="greater", smallest_effect=0.05, metric="auc", reference_lag=1)
    seeds = [0, 1, 2, 3, 4]
    cells = {("a", 1): [0.60, 0.61, 0.59, 0.60, 0.62], ("a", 8): [0.20, 0.21, 0.19, 0.22, 0.20],
             ("b", 1): [0.50, 0.70, 0.55, 0.68, 0.61], ("b", 8): [0.3] * 5}
    cells = CellTable.of_cells(CellStats(*key, seeds, {"auc": v}) for key, v in cells.items())
    seeding = Seeding(looks=(3, 5), boundary="pocock")
    rows = {row["name"]: row for row in map(Verdict.row, answer(Family((cost, same), 100, seeding, seeds), cells))}
    levels = look_levels((3, 5), 0.025, "pocock")
    # the cost (-40 points, sd ~1.5) exceeds 5 points at the first look; b - a at lag 1 is open there
    assert (rows["cost"]["verdict"], rows["cost"]["look"], rows["cost"]["n"]) == ("exceeds", 1, 3)
    assert rows["cost"]["confidence"] == pytest.approx(1 - levels[0])
    assert (rows["same"]["look"], rows["same"]["n"]) == (2, 5) and rows["same"]["confidence"] == pytest.approx(1 - levels[1])
    assert open_cells(Family((cost, same), 100, seeding, seeds), cells, look=1) == [("a", 1), ("b", 1)]


def test_a_three_look_schedule_reads_each_look_on_its_own_seeds_and_level():
    """Looks 2 -> 4 -> 6 (Pocock, 0.05 / 3): claim a is final at look 1, b at look 2, c at none (its
    last look's outcome stands). Each is read from the paired t interval of its own look's seeds at
    that look's level, worked here with scipy."""
    costs = {"a": [-0.40, -0.4001, -0.40, -0.40, -0.40, -0.40], "b": [-0.30, -0.20, -0.28, -0.22, -0.25, -0.25],
             "c": [-0.30, -0.10, -0.30, -0.10, -0.20, -0.20]}
    seeds = list(range(6))
    cells = CellTable.of_cells(cell for recipe, values in costs.items() for cell in (
        CellStats(recipe, 1, seeds, {"auc": [0.5] * 6}),
        CellStats(recipe, 8, seeds, {"auc": [0.5 + v for v in values]})))
    claims = tuple(StalenessCost(name=r, recipe=r, lag=8, expect="less", smallest_effect=0.05, metric="auc", reference_lag=1) for r in costs)
    seeding = Seeding(looks=(2, 4, 6), boundary="pocock")
    rows = {row["name"]: row for row in map(Verdict.row, answer(Family(claims, 100, seeding, seeds), cells))}
    levels = look_levels((2, 4, 6), 0.05 / 3, "pocock")
    expected = {"a": (1, "exceeds", True), "b": (2, "exceeds", True), "c": (3, "claimed sign", False)}
    for name, (look, verdict, final) in expected.items():
        n, level = (2, 4, 6)[look - 1], levels[look - 1]
        per_seed = np.subtract([0.5 + v for v in costs[name][:n]], 0.5)
        low, high = stats.t.interval(1 - level, n - 1, loc=per_seed.mean(), scale=stats.sem(per_seed))
        row = rows[name]
        assert (row["look"], row["n"], row["verdict"], row["final"]) == (look, n, verdict, final)
        assert (row["low"], row["high"], row["confidence"]) == (pytest.approx(low), pytest.approx(high),
                                                                 pytest.approx(1 - level))
    assert open_cells(Family(claims, 100, seeding, seeds), cells, look=1) == [("b", 1), ("b", 8), ("c", 1), ("c", 8)]
    assert open_cells(Family(claims, 100, seeding, seeds), cells, look=2) == [("c", 1), ("c", 8)]


def test_look_levels_hold_the_familywise_coverage_across_looks():
    """An independent simulation (another seed, scipy's t) of the paired t at looks 3 and 5: the
    intervals at the schedule's levels all cover together 1 - level of the time."""
    rng = np.random.default_rng(7)
    for boundary in ("obrien_fleming", "pocock"):
        levels = look_levels((3, 5), 0.05, boundary)
        seeds = rng.normal(0.0, 1.0, (40_000, 5))
        missed = np.zeros(len(seeds), dtype=bool)
        for n, level in zip((3, 5), levels):
            t = stats.ttest_1samp(seeds[:, :n], 0.0, axis=1).statistic
            missed |= np.abs(t) > stats.t.isf(level / 2, n - 1)
        assert missed.mean() == pytest.approx(0.05, abs=0.005)
        assert levels[0] < 0.05 and levels[1] < 0.05


@pytest.mark.parametrize("seeds, looks", [(10, (3, 6, 10)), (5, (3, 5)), (3, None), (2, None), (12, (3, 6, 10))])
def test_a_narrowed_grid_runs_the_declared_schedule_cut_to_its_seeds(seeds, looks):
    config = {"seeds": list(range(seeds)), "seeding": {"looks": [3, 6, 10], "boundary": "obrien_fleming"}}
    seeding = Seeding.of(config)
    assert (seeding.looks if seeding else None) == looks


def test_looks_that_do_not_increase_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"config key 'seeding.looks': \[3, 3\] must increase"):
        load("config.yaml", {"seeding": {"looks": [3, 3]}})


def test_an_interval_that_covers_the_truth_gives_an_outcome_true_of_it():
    """The property the familywise bound rests on (analysis.statistics.decision): every row of the outcome table
    is a region of the parameter line, so a covering interval cannot land in a wrong one."""
    rng = np.random.default_rng(11)
    truth = rng.uniform(-0.3, 0.3, 20_000)
    low, high = truth - rng.exponential(0.1, truth.size), truth + rng.exponential(0.1, truth.size)
    for expect in ("greater", "less", "equivalent"):
        names = outcomes(low, high, 0.1, expect)
        assert all(true_of(name, c, 0.1, expect) for name, c in zip(names, truth))
        assert len(set(names)) >= 4  # the draw reaches most rows
    assert not true_of("opposite", 0.02, 0.1, "greater") and not true_of("exceeds", 0.05, 0.1, "equivalent")


def test_the_collapse_test_pairs_runs_by_seed():
    # Two seeds: in each, the lag-8 run collapses at step 20 and the lag-1 run never. Per stratum at
    # step 20: 2 at risk, 1 event, E = 1/2, V = 1/4; summed O - E = 1, V = 1/2: chi2 = 2, p = 0.1573.
    result = collapse_test([20, 20], [None, None], 100, strata=([0, 1], [0, 1]))
    assert result.method == "log-rank stratified by seed; newcombe"
    assert result.p == pytest.approx(stats.chi2.sf(2.0, 1)) == pytest.approx(0.1573, abs=1e-4)
    assert collapse_test([20, 20], [None, None], 100, strata=([0, 1], [2, 3])).method == "log-rank; newcombe"
