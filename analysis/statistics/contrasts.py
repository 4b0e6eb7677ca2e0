"""Linear contrasts of cell means (recipe x lag) over seeds: the tests the claims are answered by.

A contrast is sum_i w_i * mean(cell_i): a staleness cost is (lag L) - (lag 1) of one recipe, the
difference of two recipes' staleness costs is (a_L - a_1) - (b_L - b_1), two recipes at one lag
is a_L - b_L. Two ways to put an interval on it, chosen by the design:

- paired by seed ("paired-t"): when every cell has the same seeds, the per-seed contrast
  c_s = sum_i w_i x_i(s) is one number per seed and its mean gets the Student t interval and test
  (n = seeds, n - 1 degrees of freedom). Where a seed fixes the training prompts and the
  evaluation draws in every recipe and lag (the embedded CPU engine's design), c_s removes what
  the seed shares; where seeds share nothing the paired interval is still valid (the c_s are
  independent), only a little wider.
- Welch-Satterthwaite ("welch-satterthwaite"): when the seeds differ between cells, the cell
  means are independent: var = sum w_i^2 s_i^2 / n_i with Satterthwaite's degrees of freedom (two
  cells, weights +1 / -1: exactly Welch's interval and test).

:func:`tost`: two one-sided tests of |contrast| < margin (equivalence), p = the larger of the
two one-sided p-values; its 90% interval lies inside (-margin, margin) exactly when p < ALPHA.
:func:`seeds_needed`: the seeds per cell at which the contrast's test detects a declared smallest
effect with POWER, from the spread measured so far (never the observed effect: post-hoc power).
Coverage and error rates at 3, 5 and 10 seeds: benchmarks/bench_coverage.py.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.power import TTestPower

from analysis.statistics.intervals import ALPHA, CONFIDENCE, POWER, _constant_group_is_exact, _finite

Arm = tuple[float, list, list]  # (weight, per-seed values, their seeds)


@dataclass(frozen=True)
class Contrast:
    """A contrast with its 95% interval and two-sided test of 0 (NaN: none), and what it rests on."""
    estimate: float
    low: float
    high: float
    se: float
    df: float
    n: int  # seeds (paired) or the smallest cell's seeds (Welch-Satterthwaite)
    method: str  # "paired-t" | "welch-satterthwaite" | "degenerate" | "n<2" | "empty"
    p: float
    spread: float  # sd of one seed's contrast: what seeds_needed scales

    def as_dict(self) -> dict:
        return asdict(self)


def t_statistics(estimate, se, df) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, two-sided p) of a t interval and test of 0; vectorised."""
    with np.errstate(all="ignore"):
        half = stats.t.ppf(1 - ALPHA / 2, df) * se
        p = 2 * stats.t.sf(np.abs(estimate / se), df)
    return estimate - half, estimate + half, p


def paired(contrasts: np.ndarray, axis: int = -1):
    """(estimate, low, high, p, se, df) of per-seed contrasts by the Student t; vectorised."""
    n = contrasts.shape[axis]
    with np.errstate(all="ignore"), _constant_group_is_exact():
        result = stats.ttest_1samp(contrasts, 0.0, axis=axis)
        ci = result.confidence_interval(CONFIDENCE)
        se = np.std(contrasts, axis=axis, ddof=1) / math.sqrt(n)
    return np.mean(contrasts, axis=axis), ci.low, ci.high, result.pvalue, se, np.full_like(se, n - 1.0)


def welch_satterthwaite(weights, samples: list[np.ndarray], axis: int = -1):
    """(estimate, low, high, p, se, df) of sum w_i mean(x_i) over independent cells; vectorised."""
    with np.errstate(all="ignore"):
        estimate = sum(w * np.mean(x, axis=axis) for w, x in zip(weights, samples))
        parts = [w ** 2 * np.var(x, axis=axis, ddof=1) / x.shape[axis] for w, x in zip(weights, samples)]
        variance = sum(parts)
        df = variance ** 2 / sum(part ** 2 / (x.shape[axis] - 1) for part, x in zip(parts, samples))
        se = np.sqrt(variance)
    low, high, p = t_statistics(estimate, se, df)
    return estimate, low, high, p, se, df


def per_seed(arms: list[Arm]) -> np.ndarray | None:
    """The per-seed contrasts when every arm has the same seeds (those finite in every arm), else None."""
    seed_sets = [list(seeds) for _, _, seeds in arms]
    if any(s != seed_sets[0] for s in seed_sets):
        return None
    rows = np.array([[math.nan if v is None else float(v) for v in values] for _, values, _ in arms])
    keep = np.all(np.isfinite(rows), axis=0)
    return np.array([w for w, _, _ in arms]) @ rows[:, keep]


def contrast(arms: list[Arm]) -> Contrast:
    """sum w_i * mean(values_i): paired by seed when the arms share their seeds, else
    Welch-Satterthwaite (module docstring). None and non-finite values are left out."""
    pairs = per_seed(arms)
    nan = math.nan
    if pairs is not None:
        n = len(pairs)
        if n == 0:
            return Contrast(nan, nan, nan, nan, nan, 0, "empty", nan, nan)
        mean = float(pairs.mean())
        if n == 1:
            return Contrast(mean, nan, nan, nan, nan, 1, "n<2", nan, nan)
        spread = float(np.std(pairs, ddof=1))
        if spread == 0:
            return Contrast(mean, mean, mean, 0.0, n - 1.0, n, "degenerate", nan, 0.0)
        estimate, low, high, p, se, df = (float(v) for v in paired(pairs))
        return Contrast(estimate, low, high, se, df, n, "paired-t", p, spread)
    samples = [_finite(values) for _, values, _ in arms]
    weights = [w for w, _, _ in arms]
    n = min(len(x) for x in samples)
    if n == 0:
        return Contrast(nan, nan, nan, nan, nan, 0, "empty", nan, nan)
    mean = float(sum(w * x.mean() for w, x in zip(weights, samples)))
    if n == 1:
        return Contrast(mean, nan, nan, nan, nan, 1, "n<2", nan, nan)
    spread = float(math.sqrt(sum(w ** 2 * np.var(x, ddof=1) for w, x in zip(weights, samples))))
    if spread == 0:
        return Contrast(mean, mean, mean, 0.0, nan, n, "degenerate", nan, 0.0)
    estimate, low, high, p, se, df = (float(v) for v in welch_satterthwaite(weights, samples))
    return Contrast(estimate, low, high, se, df, n, "welch-satterthwaite", p, spread)


def tost_p(estimate, se, df, margin: float):
    """p of the two one-sided t tests of -margin < contrast < margin; vectorised."""
    with np.errstate(all="ignore"):
        above_low = stats.t.sf((estimate + margin) / se, df)
        below_high = stats.t.cdf((estimate - margin) / se, df)
    return np.maximum(above_low, below_high)


def tost(result: Contrast, margin: float) -> float:
    """Equivalence p-value of a contrast within +-margin; NaN where it has no test. A degenerate
    contrast (no spread) is exact: p 0 inside the margin, 1 outside."""
    if result.method == "degenerate":
        return 0.0 if abs(result.estimate) < margin else 1.0
    if not math.isfinite(result.se):
        return math.nan
    return float(tost_p(result.estimate, result.se, result.df, margin))


def _fewest(enough) -> int:
    """The smallest n >= 2 with enough(n) (enough is monotone in n): doubling, then bisection."""
    high = 2
    while not enough(high):
        high *= 2
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def seeds_needed(smallest_effect: float, spread: float, alpha: float = ALPHA) -> int | None:
    """Seeds per cell at which the two-sided t test of a paired contrast (one value per seed, sd
    ``spread``) detects ``smallest_effect`` with POWER at ``alpha`` (statsmodels TTestPower). For
    Welch-Satterthwaite contrasts ``spread`` is sqrt(sum w_i^2 s_i^2): the same count, slightly
    conservative (its degrees of freedom are more than n - 1). None without a measured spread."""
    if not math.isfinite(spread):
        return None
    if spread == 0:
        return 2
    effect = abs(smallest_effect) / spread
    return _fewest(lambda n: not TTestPower().power(effect_size=effect, nobs=n, alpha=alpha) < POWER)


def tost_power(margin: float, spread: float, n: int, alpha: float = ALPHA) -> float:
    """A lower bound of TOST's power at a true contrast of 0 with n seeds, each one-sided test at
    ``alpha``: 1 - 2 P(T < t_crit), T noncentral t (n - 1 df, noncentrality margin sqrt(n) / spread),
    by Bonferroni's inequality."""
    critical = stats.t.ppf(1 - alpha, n - 1)
    return float(max(0.0, 1 - 2 * stats.nct.cdf(critical, n - 1, margin * math.sqrt(n) / spread)))


def seeds_needed_equivalence(margin: float, spread: float, alpha: float = 2 * ALPHA) -> int | None:
    """Seeds per cell at which the two-sided interval at ``alpha`` (TOST at alpha / 2 a side) lies
    inside +-margin with POWER when the true contrast is 0 (tost_power), from the spread given."""
    if not math.isfinite(spread):
        return None
    if spread == 0:
        return 2
    return _fewest(lambda n: tost_power(margin, spread, n, alpha / 2) >= POWER)
