"""Across-seed statistics for a cell (recipe x lag): scipy only, no hand-rolled resampling.

- :func:`mean_ci`: mean and 95% CI over seeds with ``scipy.stats.bootstrap`` (BCa). Fallbacks,
  declared here: no finite value -> everything NaN; one value -> the value, no interval (NaN
  bounds); all values equal -> the point interval [x, x] (every resample has the same mean);
  two values -> percentile bootstrap (a two-point jackknife gives BCa no usable acceleration);
  BCa returning NaN (a resample distribution too lumpy for its bias correction) -> percentile.
  The method actually used is returned with the interval.
- :func:`collapse_rate`: k/n collapsed with the Wilson score interval (``binomtest.proportion_ci``).
- :func:`prob_improvement`: P(X > Y) + 0.5 P(X = Y) over all (recipe seed, baseline seed) pairs
  (the Mann-Whitney probability of improvement, as in rliable), with a bootstrap CI resampling
  each group's seeds independently (same fallbacks as :func:`mean_ci`; no interval unless both
  groups have two or more seeds).
Resampling uses a fixed seed, so the same inputs give the same intervals.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
N_RESAMPLES = 9999
SEED = 0


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int
    method: str  # "BCa" | "percentile" | "degenerate" | "n<2" | "wilson" | "empty"

    def as_dict(self) -> dict:
        return asdict(self)


def _bootstrap(data: tuple[np.ndarray, ...], statistic, estimate: float, n: int) -> Interval:
    """BCa bootstrap CI of ``statistic`` over ``data``; percentile when BCa is unusable."""
    methods = ["percentile"] if min(len(d) for d in data) < 3 else ["BCa", "percentile"]
    for method in methods:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)  # handled: NaN -> next method
            result = stats.bootstrap(data, statistic, n_resamples=N_RESAMPLES, vectorized=True,
                                     confidence_level=CONFIDENCE, method=method,
                                     rng=np.random.default_rng(SEED))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return Interval(estimate, low, high, n, method)
    raise RuntimeError(f"bootstrap gave no finite interval for {data}")  # percentile cannot: a bug


def mean_ci(values) -> Interval:
    """Mean over seeds and its 95% bootstrap CI (fallbacks in the module docstring). Non-finite
    and None values are left out; ``n`` counts the values used."""
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "empty")
    mean = float(x.mean())
    if len(x) == 1:
        return Interval(mean, math.nan, math.nan, 1, "n<2")
    if np.all(x == x[0]):
        return Interval(mean, mean, mean, len(x), "degenerate")
    return _bootstrap((x,), np.mean, mean, len(x))


def collapse_rate(k: int, n: int) -> Interval:
    """k of n runs collapsed: the rate and its 95% Wilson score interval."""
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "empty")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return Interval(k / n, float(ci.low), float(ci.high), n, "wilson")


def _improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + 0.5 P(X = Y) over all pairs; vectorized over leading (resample) axes."""
    x = np.moveaxis(x, axis, -1)[..., :, None]
    y = np.moveaxis(y, axis, -1)[..., None, :]
    return ((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1))


def prob_improvement(values, baseline) -> Interval:
    """Probability that a seed of this recipe beats a seed of the baseline, with a 95% CI."""
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    y = np.array([v for v in baseline if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0 or len(y) == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "empty")
    estimate = float(_improvement(x, y))
    n = len(x) * len(y)
    if len(x) < 2 or len(y) < 2:  # scipy resamples each group: it needs two seeds in each
        return Interval(estimate, math.nan, math.nan, n, "n<2")
    if np.all(x == x[0]) and np.all(y == y[0]):
        return Interval(estimate, estimate, estimate, n, "degenerate")
    return _bootstrap((x, y), _improvement, estimate, n)
