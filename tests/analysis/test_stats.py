"""Across-seed statistics against values computed independently (formulas, scipy, statsmodels),
and the coverage of the intervals the report uses, simulated at the seed counts of a grid."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.statistics.intervals import (
    BOOTSTRAP_MIN_SEEDS,
    collapse_difference,
    collapse_rate,
    holm,
    mean_ci,
    prob_improvement,
    smallest_p,
    t_interval,
)
from benchmarks.bench_coverage import DISTRIBUTIONS, analytic_coverage

X = [0.31, 0.27, 0.35, 0.30, 0.41]
Y = [0.22, 0.29, 0.18, 0.25]


Z_975 = stats.norm.ppf(0.975)


def wilson(k, n, z=Z_975):
    """The Wilson score interval, written out from its formula."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("k, n", [(0, 3), (1, 4), (2, 4), (4, 4), (3, 10)])
def test_wilson_interval_matches_formula(k, n):
    ci = collapse_rate(k, n)
    low, high = wilson(k, n)
    assert ci.estimate == k / n and ci.method == "wilson"
    assert (ci.low, ci.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


@pytest.mark.parametrize("values", [X, [0.2, 0.4], [0.5, 0.1, 0.45]])
def test_mean_interval_is_student_t_by_formula(values):
    x = np.array(values)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    ci = mean_ci(values)
    assert ci.method == "student-t" and ci.n == len(x) and ci.estimate == pytest.approx(x.mean())
    assert (ci.low, ci.high) == (pytest.approx(x.mean() - half), pytest.approx(x.mean() + half))


def test_degenerate_fallbacks():
    equal = mean_ci([0.3, 0.3, 0.3])
    assert (equal.low, equal.high, equal.method) == (0.3, 0.3, "degenerate")
    one = mean_ci([0.3, None, math.nan])
    assert one.n == 1 and one.estimate == 0.3 and math.isnan(one.low) and one.method == "n<2"
    assert mean_ci([]).method == "empty" and math.isnan(collapse_rate(0, 0).estimate)


def exact_mann_whitney(x, y):
    """Two-sided p of U over every split of the pooled values (ties: mid-ranks), by enumeration."""
    pooled = np.concatenate([x, y])
    ranks = stats.rankdata(pooled)
    observed = ranks[:len(x)].sum()
    mean = len(x) * (len(pooled) + 1) / 2
    sums = [ranks[list(c)].sum() for c in itertools.combinations(range(len(pooled)), len(x))]
    return np.mean([abs(s - mean) >= abs(observed - mean) - 1e-9 for s in sums])


def test_probability_of_improvement_and_mann_whitney():
    x, y = [0.3, 0.4, 0.5], [0.1, 0.4, 0.6]
    # by hand: pairs (x > y) = 0.3>0.1, 0.4>0.1, 0.5>0.1, 0.5>0.4 -> 4; ties 0.4=0.4 -> 1 -> (4 + 0.5)/9
    pi = prob_improvement(x, y)
    assert pi.estimate == pytest.approx(4.5 / 9) and (pi.n_x, pi.n_y) == (3, 3)
    assert pi.method == "none" and math.isnan(pi.low)  # 3 seeds: no interval, the test only
    assert pi.test == "mann-whitney-permutation" and pi.p == pytest.approx(exact_mann_whitney(x, y))
    sure = prob_improvement([0.5, 0.6, 0.7], [0.1, 0.2, 0.3])
    assert sure.estimate == 1.0 and sure.test == "mann-whitney-exact"
    assert sure.p == pytest.approx(0.1) == exact_mann_whitney([0.5, 0.6, 0.7], [0.1, 0.2, 0.3])  # 2/C(6,3)
    no_ties = prob_improvement(X, Y)
    assert no_ties.p == pytest.approx(stats.mannwhitneyu(X, Y, method="exact").pvalue)
    assert no_ties.p == pytest.approx(exact_mann_whitney(np.array(X), np.array(Y)))
    assert prob_improvement(x, x).estimate == pytest.approx(0.5)
    assert math.isnan(prob_improvement([], y).estimate)
    one = prob_improvement([0.5], [0.5, 0.2])
    assert (one.estimate, one.method, one.test) == (0.75, "n<2", "none") and math.isnan(one.p)


def test_probability_of_improvement_interval_from_ten_seeds():
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.5, 0.1, BOOTSTRAP_MIN_SEEDS), rng.normal(0.45, 0.1, BOOTSTRAP_MIN_SEEDS)
    pi = prob_improvement(x, y)
    ref = stats.bootstrap((x, y), lambda a, b, axis: ((a[..., :, None] > b[..., None, :])
                                                      + 0.5 * (a[..., :, None] == b[..., None, :])).mean((-2, -1)),
                          method="BCa", rng=np.random.default_rng(0)).confidence_interval
    assert pi.method == "BCa" and (pi.low, pi.high) == (pytest.approx(ref.low), pytest.approx(ref.high))
    assert pi.low < pi.estimate < pi.high
    assert prob_improvement(x[:-1], y).method == "none"


@pytest.mark.parametrize("kx, nx, ky, ny", [(3, 3, 0, 3), (2, 3, 0, 3), (1, 4, 3, 5), (0, 5, 0, 5)])
def test_collapse_difference_is_fisher_by_hypergeometric_sum(kx, nx, ky, ny):
    # two-sided Fisher: the probability of every table as likely as or less likely than the observed one
    law = stats.hypergeom(nx + ny, kx + ky, nx)
    support = range(max(0, kx + ky - ny), min(nx, kx + ky) + 1)
    p = sum(law.pmf(k) for k in support if law.pmf(k) <= law.pmf(kx) * (1 + 1e-7))
    c = collapse_difference(kx, nx, ky, ny)
    assert c.estimate == pytest.approx(kx / nx - ky / ny) and c.test == "fisher-exact"
    assert c.p == pytest.approx(min(1.0, p)) and c.method == "newcombe"
    # Newcombe's hybrid score interval (1998, method 10) from the two Wilson intervals written out above
    (low_x, high_x), (low_y, high_y), px, py = wilson(kx, nx), wilson(ky, ny), kx / nx, ky / ny
    assert (c.low, c.high) == (pytest.approx(px - py - math.hypot(px - low_x, high_y - py)),
                               pytest.approx(px - py + math.hypot(high_x - px, py - low_y)))
    assert math.isnan(collapse_difference(0, 0, 1, 3).p)


def test_holm_by_hand_and_statsmodels():
    p = [0.01, None, 0.04, 0.03, math.nan, 0.005]
    tested = [0.01, 0.04, 0.03, 0.005]
    order = np.argsort(tested)
    by_hand = np.empty(4)
    running = 0.0
    for rank, i in enumerate(order):  # step-down: (m - rank) * p, made monotone, capped at 1
        running = max(running, min(1.0, (4 - rank) * tested[i]))
        by_hand[i] = running
    adjusted = holm(p)
    assert adjusted[1] is None and adjusted[4] is None
    got = [adjusted[i] for i in (0, 2, 3, 5)]
    assert got == pytest.approx(list(by_hand))
    assert got == pytest.approx(list(multipletests(tested, method="holm")[1]))
    assert holm([]) == [] and holm([None]) == [None]


def test_smallest_p():
    assert smallest_p("fisher-exact", 3, 3) == pytest.approx(0.1)  # 2 / C(6, 3)
    assert smallest_p("mann-whitney-exact", 3, 3) == pytest.approx(0.1)
    assert smallest_p("mann-whitney-permutation", 5, 5) == pytest.approx(2 / math.comb(10, 5))
    assert smallest_p("fisher-exact", 5, 5) == pytest.approx(2 / math.comb(10, 5))


def test_vectorised_intervals_match_the_per_cell_ones():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 5))
    _, low, high = t_interval(x)
    for i in range(4):
        assert (low[i], high[i]) == (pytest.approx(mean_ci(x[i]).low), pytest.approx(mean_ci(x[i]).high))


@pytest.mark.parametrize("scores", DISTRIBUTIONS[:2], ids=lambda s: s.name)  # normal, skewed beta
@pytest.mark.parametrize("n", [3, 5, 10])
def test_intervals_keep_their_coverage(scores, n):
    """95% intervals cover 92-98% of 10,000 seeded trials (standard error 0.002): the mean and the
    difference of two arms, at the seed counts of a grid."""
    coverage = analytic_coverage(scores, n, trials=10_000, seed=n)
    assert 0.92 <= coverage["mean student-t"] <= 0.98, coverage
    assert 0.92 <= coverage["difference welch"] <= 0.98, coverage
