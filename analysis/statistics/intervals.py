"""Across-seed statistics for cells (recipe x lag) and comparisons between them; scipy and
statsmodels, nothing hand-rolled. Methods were chosen by their measured coverage of a 95%
interval at 3-20 seeds (``python -m benchmarks.bench_coverage``, 1,000 trials per cell, 2-core
shared machine, 2026-11-30; tests/analysis/test_stats.py checks n = 3, 5, 10 on 10,000 trials):

- :func:`mean_ci`: mean over seeds with the Student t interval, at every seed count: it covered
  93-95% at n = 3..20 on normal and Beta(2, 8) scores, where the BCa bootstrap covered 72-74% at
  n = 3, 84-85% at 5, 88-89% at 10 and 92-94% at 20 (so no n of a grid calls for it). Both
  undercover strongly skewed scores (Beta(0.5, 4): t 83-91%). Fallbacks: no finite value ->
  everything NaN ("empty"); one value -> no interval ("n<2"); all values equal -> the point
  interval [x, x] ("degenerate").
- differences of cell means (staleness costs, recipe against recipe) and the seeds they need:
  analysis.statistics.contrasts (paired by seed, or Welch-Satterthwaite).
- :func:`prob_improvement`: P(X > Y) + 0.5 P(X = Y) over all seed pairs (rliable's probability
  of improvement) with the two-sided Mann-Whitney test (exact without ties; a permutation test
  with ties, exact whenever the partitions number at most N_RESAMPLES). Its bootstrap (BCa)
  interval is given only when both groups have BOOTSTRAP_MIN_SEEDS or more seeds (it covered
  96-97% at 10 and 20 seeds, but 74-88% at 3 and 93% at 5 on normal scores), so small grids get
  the test and no interval.
- :func:`collapse_rate`: k/n collapsed with the Wilson score interval; :func:`collapse_difference`:
  the difference of two rates with its Newcombe interval and Fisher's exact test.
- :func:`holm`: Holm's step-down adjustment of one family of p-values (statsmodels).
Resampling uses a fixed seed, so the same inputs give the same intervals and p-values.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep

ALPHA = 0.05  # two-sided test level
CONFIDENCE = 1 - ALPHA  # of every interval: a t interval excludes 0 exactly when its p < ALPHA
POWER = 0.8  # of the seeds a claim needs at its declared effect (analysis.statistics.contrasts, analysis.statistics.survival)
BOOTSTRAP_MIN_SEEDS = 10  # per group, for the P(improvement) interval (module docstring)
N_RESAMPLES = 9999
SEED = 0


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int
    method: str  # "student-t" | "degenerate" | "n<2" | "wilson" | "empty"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """An effect of x over y with its interval (NaN bounds: none) and a two-sided test (NaN p: none)."""
    estimate: float
    low: float
    high: float
    n_x: int
    n_y: int
    method: str  # the interval's: "newcombe" | "BCa" | "percentile" | "degenerate" | "none" | "n<2" | "empty"
    p: float
    test: str  # "mann-whitney-exact" | "mann-whitney-permutation" | "fisher-exact" | "none"

    def as_dict(self) -> dict:
        return asdict(self)


def _finite(values) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


@contextlib.contextmanager
def _constant_group_is_exact():
    """Silence scipy's "precision loss ... nearly identical" warning: a group of equal seeds (a
    cell whose runs all collapsed to 0, say) has spread 0 exactly, which is no loss."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        yield


def t_interval(x: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high) of the Student t interval along ``axis``; vectorised (the simulation
    tests call it on thousands of samples at once)."""
    with np.errstate(all="ignore"), _constant_group_is_exact():
        ci = stats.ttest_1samp(x, 0.0, axis=axis).confidence_interval(CONFIDENCE)
    return np.mean(x, axis=axis), ci.low, ci.high


def mean_ci(values) -> Interval:
    """Mean over seeds and its 95% Student t interval (fallbacks in the module docstring).
    Non-finite and None values are left out; ``n`` counts the values used."""
    x = _finite(values)
    if len(x) == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "empty")
    mean = float(x.mean())
    if len(x) == 1:
        return Interval(mean, math.nan, math.nan, 1, "n<2")
    if np.all(x == x[0]):
        return Interval(mean, mean, mean, len(x), "degenerate")
    _, low, high = t_interval(x)
    return Interval(mean, float(low), float(high), len(x), "student-t")


def collapse_rate(k: int, n: int) -> Interval:
    """k of n runs collapsed: the rate and its 95% Wilson score interval."""
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "empty")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return Interval(k / n, float(ci.low), float(ci.high), n, "wilson")


def newcombe(k_x: int, n_x: int, k_y: int, n_y: int) -> tuple[float, float]:
    """95% Newcombe (hybrid Wilson score) interval of k_x/n_x - k_y/n_y (statsmodels)."""
    low, high = confint_proportions_2indep(k_x, n_x, k_y, n_y, method="newcomb", alpha=ALPHA)
    return float(low), float(high)


def collapse_difference(k_x: int, n_x: int, k_y: int, n_y: int) -> Comparison:
    """Collapse rate k_x/n_x - k_y/n_y with its Newcombe interval and Fisher's exact test (two-sided)."""
    if n_x == 0 or n_y == 0:
        return Comparison(math.nan, math.nan, math.nan, n_x, n_y, "empty", math.nan, "none")
    p = stats.fisher_exact([[k_x, n_x - k_x], [k_y, n_y - k_y]]).pvalue
    low, high = newcombe(k_x, n_x, k_y, n_y)
    return Comparison(k_x / n_x - k_y / n_y, low, high, n_x, n_y, "newcombe", float(p), "fisher-exact")


def _improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + 0.5 P(X = Y) over all pairs; vectorized over leading (resample) axes."""
    x = np.moveaxis(x, axis, -1)[..., :, None]
    y = np.moveaxis(y, axis, -1)[..., None, :]
    return ((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1))


def bootstrap_interval(data: tuple[np.ndarray, ...], statistic) -> tuple[float, float, str]:
    """(low, high, method): BCa bootstrap CI; percentile when BCa gives NaN (resample distribution
    too lumpy for its bias correction)."""
    for method in ("BCa", "percentile"):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)  # handled: NaN -> next method
            result = stats.bootstrap(data, statistic, n_resamples=N_RESAMPLES, vectorized=True,
                                     confidence_level=CONFIDENCE, method=method,
                                     rng=np.random.default_rng(SEED))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, method
    raise RuntimeError(f"bootstrap gave no finite interval for {data}")  # percentile cannot: a bug


def mann_whitney(x: np.ndarray, y: np.ndarray) -> tuple[float, str]:
    """Two-sided Mann-Whitney p-value and the test used: scipy's exact distribution needs no ties;
    with ties, a permutation test (exact when C(n_x + n_y, n_x) <= N_RESAMPLES, else seeded)."""
    if len(np.unique(np.concatenate([x, y]))) == len(x) + len(y):
        return float(stats.mannwhitneyu(x, y, method="exact").pvalue), "mann-whitney-exact"
    method = stats.PermutationMethod(n_resamples=N_RESAMPLES, rng=np.random.default_rng(SEED))
    return float(stats.mannwhitneyu(x, y, method=method).pvalue), "mann-whitney-permutation"


def prob_improvement(values, baseline) -> Comparison:
    """Probability that a seed of this recipe beats a seed of the baseline, with the Mann-Whitney
    test, and a 95% bootstrap interval from BOOTSTRAP_MIN_SEEDS seeds per group."""
    x, y = _finite(values), _finite(baseline)
    if len(x) == 0 or len(y) == 0:
        return Comparison(math.nan, math.nan, math.nan, len(x), len(y), "empty", math.nan, "none")
    estimate = float(_improvement(x, y))
    if len(x) < 2 or len(y) < 2:  # scipy's permutation test (ties) needs two seeds per group
        return Comparison(estimate, math.nan, math.nan, len(x), len(y), "n<2", math.nan, "none")
    p, test = mann_whitney(x, y)
    if min(len(x), len(y)) < BOOTSTRAP_MIN_SEEDS:
        return Comparison(estimate, math.nan, math.nan, len(x), len(y), "none", p, test)
    if np.all(x == x[0]) and np.all(y == y[0]):
        return Comparison(estimate, estimate, estimate, len(x), len(y), "degenerate", p, test)
    low, high, method = bootstrap_interval((x, y), _improvement)
    return Comparison(estimate, low, high, len(x), len(y), method, p, test)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm-adjusted p-values of one family; None and NaN entries are not tests and stay None."""
    tested = [i for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    adjusted: list[float | None] = [None] * len(pvalues)
    if tested:
        for i, p in zip(tested, multipletests([pvalues[i] for i in tested], alpha=ALPHA, method="holm")[1]):
            adjusted[i] = float(p)
    return adjusted


def smallest_p(test: str, n_x: int, n_y: int) -> float:
    """The smallest two-sided p-value a test can reach with these group sizes (complete
    separation): below ALPHA or not, it says whether a grid this size can show anything."""
    if test == "fisher-exact":
        return float(stats.fisher_exact([[n_x, 0], [0, n_y]]).pvalue)
    if test.startswith("mann-whitney"):
        return float(stats.mannwhitneyu(np.arange(n_x) + n_y, np.arange(n_y), method="exact").pvalue)
    raise ValueError(f"no smallest p for test {test!r}")
