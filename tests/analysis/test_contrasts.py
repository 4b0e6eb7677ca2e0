"""The claims' tests against values computed independently: a paired difference of staleness
costs against scipy, Welch-Satterthwaite by its formula, TOST against statsmodels, the log-rank
test and Kaplan-Meier against statsmodels, the seeds needed against the noncentral t; and a
reduced bench_coverage (the full figures: benchmarks/README.md)."""
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.duration.survfunc import SurvfuncRight, survdiff
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from analysis.statistics.contrasts import contrast, seeds_needed, seeds_needed_equivalence, tost, tost_power
from analysis.statistics.survival import collapse_test, kaplan_meier, logrank
from benchmarks.bench_coverage import MARGINALS, contrast_rates, logrank_false_positives

SEEDS = [0, 1, 2, 3, 4]
# one recipe's cells at lag 1 and 8, and another's: scores per seed (seed order SEEDS)
A1, A8 = [0.70, 0.74, 0.69, 0.77, 0.72], [0.61, 0.70, 0.58, 0.69, 0.66]
B1, B8 = [0.71, 0.73, 0.70, 0.78, 0.70], [0.70, 0.71, 0.66, 0.75, 0.69]


def test_paired_difference_of_staleness_costs_is_scipys_paired_t():
    """(a8 - a1) - (b8 - b1) paired by seed = scipy's paired t of the two recipes' per-seed costs."""
    result = contrast([(1.0, A8, SEEDS), (-1.0, A1, SEEDS), (-1.0, B8, SEEDS), (1.0, B1, SEEDS)])
    cost_a, cost_b = np.subtract(A8, A1), np.subtract(B8, B1)
    reference = stats.ttest_rel(cost_a, cost_b)
    ci = reference.confidence_interval(0.95)
    assert result.method == "paired-t" and result.n == 5 and result.df == 4
    assert result.estimate == pytest.approx(np.mean(cost_a - cost_b))
    assert (result.low, result.high, result.p) == (pytest.approx(ci.low), pytest.approx(ci.high),
                                                   pytest.approx(reference.pvalue))
    assert result.spread == pytest.approx(np.std(cost_a - cost_b, ddof=1))


def test_welch_satterthwaite_when_seeds_differ():
    """Different seeds in one cell: the cells are independent; two cells give exactly Welch's test,
    four cells the Satterthwaite degrees of freedom written out."""
    two = contrast([(1.0, A8, SEEDS), (-1.0, A1[:4], SEEDS[:4])])
    welch = stats.ttest_ind(A8, A1[:4], equal_var=False)
    assert two.method == "welch-satterthwaite" and two.p == pytest.approx(welch.pvalue)
    assert (two.low, two.high) == (pytest.approx(welch.confidence_interval(0.95).low),
                                   pytest.approx(welch.confidence_interval(0.95).high))
    cells = [(1.0, A8), (-1.0, A1), (-1.0, B8[:3]), (1.0, B1)]
    four = contrast([(w, x, list(range(len(x)))) for w, x in cells])
    parts = [np.var(x, ddof=1) / len(x) for _, x in cells]
    df = sum(parts) ** 2 / sum(v ** 2 / (len(x) - 1) for v, (_, x) in zip(parts, cells))
    estimate = np.mean(A8) - np.mean(A1) - np.mean(B8[:3]) + np.mean(B1)
    half = stats.t.ppf(0.975, df) * math.sqrt(sum(parts))
    assert four.df == pytest.approx(df) and four.n == 3
    assert (four.estimate, four.low, four.high) == (pytest.approx(estimate), pytest.approx(estimate - half),
                                                    pytest.approx(estimate + half))


def test_contrast_fallbacks():
    assert contrast([(1.0, [0.3], [0]), (-1.0, [0.2], [0])]).method == "n<2"
    flat = contrast([(1.0, [0.5, 0.75], [0, 1]), (-1.0, [0.25, 0.5], [0, 1])])  # binary-exact: no rounding
    assert flat.method == "degenerate" and flat.low == flat.high == 0.25
    assert tost(flat, 0.3) == 0.0 and tost(flat, 0.1) == 1.0
    dropped = contrast([(1.0, [0.3, None, 0.5, 0.6], [0, 1, 2, 3]), (-1.0, [0.2, 0.3, math.nan, 0.4], [0, 1, 2, 3])])
    assert dropped.n == 2 and dropped.estimate == pytest.approx(0.15)  # seeds 0 and 3: finite in both
    assert contrast([(1.0, [], []), (-1.0, [], [])]).method == "empty"


@pytest.mark.parametrize("margin", [0.02, 0.05, 0.1])
def test_tost_is_statsmodels_ttost(margin):
    paired_result = contrast([(1.0, A8, SEEDS), (-1.0, A1, SEEDS)])
    assert tost(paired_result, margin) == pytest.approx(ttost_paired(np.array(A8), np.array(A1), -margin, margin)[0])
    welch_result = contrast([(1.0, B8, SEEDS), (-1.0, B1[:4], SEEDS[:4])])
    expected = ttost_ind(np.array(B8), np.array(B1[:4]), -margin, margin, usevar="unequal")[0]
    assert tost(welch_result, margin) == pytest.approx(expected)


def test_seeds_needed_at_the_declared_effect():
    spread = contrast([(1.0, A8, SEEDS), (-1.0, A1, SEEDS)]).spread
    for effect in (0.01, 0.03, 0.05):
        n = seeds_needed(effect, spread)
        power = TTestPower().power(effect_size=effect / spread, nobs=n, alpha=0.05)
        assert power >= 0.8 and (n == 2 or TTestPower().power(effect_size=effect / spread, nobs=n - 1,
                                                              alpha=0.05) < 0.8)
    assert seeds_needed(0.05, math.nan) is None and seeds_needed(0.05, 0.0) == 2
    n = seeds_needed_equivalence(0.05, spread)
    assert tost_power(0.05, spread, n) >= 0.8 > tost_power(0.05, spread, n - 1)
    # the bound against a simulation of TOST at a true contrast of 0: it is a lower bound
    rng = np.random.default_rng(0)
    samples = rng.normal(0, spread, size=(4000, n))
    simulated = np.mean([ttost_paired(s, np.zeros(n), -0.05, 0.05)[0] < 0.05 for s in samples])
    assert simulated >= tost_power(0.05, spread, n) - 0.02


def test_logrank_and_kaplan_meier_are_statsmodels():
    x, y, budget = [20, 40, None, 60, None], [None, 100, None, None, None], 120
    z, p = logrank(x, y, budget)
    times = np.array([t or budget for t in x + y], dtype=float)
    events = np.array([t is not None for t in x + y], dtype=float)
    chi2, p_statsmodels = survdiff(times, events, np.array([0] * 5 + [1] * 5))
    assert p == pytest.approx(p_statsmodels) and z ** 2 == pytest.approx(chi2) and z > 0  # x collapses sooner
    steps, alive = kaplan_meier(x, budget)
    reference = SurvfuncRight(times[:5], events[:5])
    assert alive[1:-1] == pytest.approx(list(reference.surv_prob)) and steps[1:-1] == list(reference.surv_times)
    assert (steps[0], alive[0], steps[-1]) == (0.0, 1.0, budget)
    none = collapse_test([None] * 3, [None] * 3, budget)
    assert math.isnan(none.p) and none.estimate == 0 and none.low < 0 < none.high
    test = collapse_test(x, y, budget)
    assert test.estimate == pytest.approx(3 / 5 - 1 / 5) and test.p == pytest.approx(p)


def test_reduced_coverage_benchmark():
    """bench_coverage at a size for the suite (the full one: 2,000 grids per case): the paired and
    Welch-Satterthwaite intervals of a cost and of a difference of costs cover 90-99% of 800
    simulated grids at 5 seeds, their tests reject a true null at most 9% of the time, TOST at the
    margin at most 9%, and the log-rank test's false-positive rate stays below 10%."""
    normal, beta = MARGINALS[0], MARGINALS[1]
    for marginal in (normal, beta):
        for design in ("paired", "independent"):
            rates = contrast_rates(marginal, design, n=5, trials=800, seed=1)
            for name in ("staleness cost", "cost difference", "recipes at one lag"):
                assert 0.90 <= rates[f"{name}: coverage"] <= 0.99, (marginal.name, design, rates)
                assert rates[f"{name}: false positives"] <= 0.09, (marginal.name, design, rates)
            assert rates["TOST at the margin: rejections"] <= 0.09, (marginal.name, design, rates)
    assert logrank_false_positives(5, trials=300, seed=2) <= 0.10
