"""What skewed per-seed contrasts do to a claim's t interval (docs/statistics.md, "What the guarantee
covers"): arrays in, numbers out.

The claims' error bound rests on the paired t pivot, exact for normal per-seed contrasts. A skewed
law breaks it on one side: with a right skew a low sample mean comes with a small sd, so the interval
lies wholly below the truth more often than its level says (and above it less often).

- :func:`skewness`: the adjusted Fisher-Pearson sample skewness G1 (scipy.stats.skew, bias=False) and
  how often normal per-seed contrasts give one as large, |G1| (scipy.stats.monte_carlo_test: exact
  up to its draws at any n >= 3, where D'Agostino's test needs 8).
- :func:`skewed_miss`: each tail's miss rate of the two-sided t interval at ``level`` from n per-seed
  contrasts of a Gamma law with that skewness (shape 4 / G1^2, mirrored for a negative skew), seeded.
- :func:`skew_check`: both, and whether the skew breaks the interval: its miss rate above BREAKS x
  the level, with normal contrasts rarely that skewed (p below SKEW_P).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats

DRAWS = 20_000
SEED = 20261203
BREAKS = 1.5  # a miss rate above 1.5 x the claim's level breaks its share of the family's bound
SKEW_P = 0.05  # ... when normal per-seed contrasts give so large a skew less often than this (the flag's false alarms)


def _g1(sample, axis=-1):
    return stats.skew(sample, axis=axis, bias=False)


def skewness(values) -> tuple[float, float]:
    """(G1, P(|G1| at least this large | normal contrasts, same n)); NaN for fewer than 3 values or
    equal values."""
    values = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(values) < 3 or np.ptp(values) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(SEED)
    result = stats.monte_carlo_test(values, lambda size: rng.standard_normal(size), _g1, vectorized=True,
                                    n_resamples=DRAWS // 2, alternative="two-sided")
    return float(result.statistic), float(result.pvalue)


def standardized_draws(skew: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Draws of mean 0, sd 1 and skewness ``skew``: a Gamma of shape 4 / skew^2, mirrored for a
    negative skew; normal at 0."""
    if skew == 0:
        return rng.standard_normal(shape)
    k = 4.0 / skew ** 2
    return math.copysign(1.0, skew) * (rng.gamma(k, 1.0, shape) - k) / math.sqrt(k)


@functools.lru_cache(maxsize=256)
def skewed_miss(skew: float, n: int, level: float, draws: int = DRAWS) -> tuple[float, float]:
    """(P(the interval lies wholly below the true mean), P(wholly above)) of the two-sided Student t
    interval at ``level`` from ``n`` per-seed contrasts of skewness ``skew`` (standardized_draws);
    each is level / 2 for normal contrasts."""
    sample = standardized_draws(skew, (draws, n), np.random.default_rng(SEED))
    mean, se = sample.mean(axis=1), sample.std(axis=1, ddof=1) / math.sqrt(n)
    half = stats.t.isf(level / 2, n - 1) * se
    return float(np.mean(mean + half < 0)), float(np.mean(mean - half > 0))


def skew_check(values, level: float) -> dict | None:
    """The skew of a claim's per-seed contrasts and its measured effect on the claim's interval at
    ``level``: {skew, p, n, miss_below, miss_above, miss, level, breaks}; None where no skew is defined
    (fewer than 3 contrasts, all equal)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    skew, p = skewness(values)
    if not math.isfinite(skew):
        return None
    below, above = skewed_miss(round(skew, 2), len(values), level)
    return {"skew": skew, "p": p, "n": len(values), "miss_below": below, "miss_above": above,
            "miss": below + above, "level": level, "breaks": bool(below + above > BREAKS * level and p < SKEW_P)}
