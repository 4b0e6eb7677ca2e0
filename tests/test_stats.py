"""Across-seed statistics against independently computed values."""
import math

import numpy as np
import pytest
from scipy import stats

from analysis.stats import collapse_rate, mean_ci, prob_improvement

X = [0.31, 0.27, 0.35, 0.30, 0.41]


def wilson(k, n, z=stats.norm.ppf(0.975)):
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


def test_bootstrap_ci_matches_scipy_called_directly():
    ci = mean_ci(X)
    ref = stats.bootstrap((np.array(X),), np.mean, method="BCa", n_resamples=9999,
                          rng=np.random.default_rng(0)).confidence_interval
    assert ci.method == "BCa" and ci.estimate == pytest.approx(np.mean(X))
    assert (ci.low, ci.high) == (pytest.approx(ref.low), pytest.approx(ref.high))
    assert ci.low < ci.estimate < ci.high
    assert mean_ci(X) == ci  # fixed resampling seed: same inputs, same interval


def test_degenerate_fallbacks():
    equal = mean_ci([0.3, 0.3, 0.3])
    assert (equal.low, equal.high, equal.method) == (0.3, 0.3, "degenerate")
    one = mean_ci([0.3, None, math.nan])
    assert one.n == 1 and one.estimate == 0.3 and math.isnan(one.low) and one.method == "n<2"
    two = mean_ci([0.2, 0.4])
    ref = stats.bootstrap((np.array([0.2, 0.4]),), np.mean, method="percentile",
                          rng=np.random.default_rng(0)).confidence_interval
    assert two.method == "percentile" and (two.low, two.high) == (ref.low, ref.high)
    assert mean_ci([]).method == "empty" and math.isnan(collapse_rate(0, 0).estimate)


def test_probability_of_improvement():
    x, y = [0.3, 0.4, 0.5], [0.1, 0.4, 0.6]
    # by hand: pairs (x > y) = 0.3>0.1, 0.4>0.1, 0.5>0.1, 0.5>0.4 -> 4; ties 0.4=0.4 -> 1 -> (4 + 0.5)/9
    pi = prob_improvement(x, y)
    assert pi.estimate == pytest.approx(4.5 / 9) and pi.n == 9
    assert pi.low <= pi.estimate <= pi.high
    ref = stats.bootstrap((np.array(x), np.array(y)),
                          lambda a, b, axis: ((a[..., :, None] > b[..., None, :])
                                              + 0.5 * (a[..., :, None] == b[..., None, :])).mean((-2, -1)),
                          method=pi.method, rng=np.random.default_rng(0)).confidence_interval
    assert (pi.low, pi.high) == (pytest.approx(ref.low), pytest.approx(ref.high))
    assert prob_improvement(x, x).estimate == pytest.approx(0.5)
    assert prob_improvement([0.2, 0.2], [0.2, 0.2]).method == "degenerate"
    sure = prob_improvement([0.5, 0.6, 0.7], [0.1, 0.2, 0.3])
    assert (sure.estimate, sure.low, sure.high) == (1.0, 1.0, 1.0)
    assert prob_improvement([0.5], [0.1, 0.2]).method == "n<2"
