"""How likely an independent rerun of a claim's declared design is to give its outcome again: the
posterior predictive probability, and its 80% range over the effect's uncertainty (docs/statistics.md,
"Replication probability").

A plug-in (simulating reruns at the measured mean and sd, as if they were the truth) reads high:
near a boundary a run that landed on one side of it takes its own estimate for the effect. Here the
effect is uncertain as the data leave it:

- a contrast of cell means: the per-seed contrast normal with mean mu and sd sigma, under the
  reference prior p(mu, sigma) ~ 1 / sigma: sigma^2 = spread^2 df / chi2(df) and
  mu = estimate + (sigma / spread) se z (paired: se = spread / sqrt(n), df = n - 1, the posterior
  whose credible interval is the t interval);
- a collapse claim: each cell's collapse rate Beta(k + 1/2, n - k + 1/2) (Jeffreys), the cells
  independent.

Each of DRAWS posterior draws is read against the same RERUNS reruns of the whole design (its looks,
each at its level, stopping at the first final outcome; common random numbers): the share of them that
give the outcome again is the chance of agreement at that draw's effect. The predictive probability is
its mean over the draws and the 80% range its 10th and 90th percentiles: both from the same draws, the
range a credible range of the agreement (collapse: the agreement exact per draw, binomial paths).
Seeded: the same inputs give the same numbers. benchmarks/bench_replication.py measures the
calibration against an independent simulation.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from analysis.statistics.decision import is_final, newcombe_bounds, outcomes, run_schedule, t_bounds

DRAWS, RERUNS = 400, 400  # contrasts; a collapse claim's agreement is exact, over COLLAPSE_DRAWS
COLLAPSE_DRAWS = 4000
RANGE = (0.10, 0.90)
SEED = 20261203


def _posterior(estimate: float, spread: float, se: float, df: float, rng: np.random.Generator, size: int,
               prior: tuple[float, float] | None = None):
    """(mu, sigma) draws of a normal per-seed contrast's mean and sd (module docstring). With ``prior`` (mean,
    sd) a normal prior on mu in place of the flat one (empirical Bayes over a field of such contrasts):
    mu given sigma is the normal-normal posterior; sigma keeps its posterior from the seeds' spread alone."""
    sigma = spread * np.sqrt(df / rng.chisquare(df, size))
    scale = sigma / spread * se  # the sd of the estimate at sigma
    if prior is None:
        return estimate + scale * rng.standard_normal(size), sigma
    center, width = prior
    weight = width ** 2 / (width ** 2 + scale ** 2)
    return center + weight * (estimate - center) + np.sqrt(weight) * scale * rng.standard_normal(size), sigma


def _rerun_bank(rng: np.random.Generator, reruns: int, looks: tuple[int, ...]):
    """Per look: the mean and sd of ``reruns`` standard normal samples of its seeds (nested)."""
    seeds = rng.standard_normal((reruns, looks[-1]))
    return [(seeds[:, :n].mean(axis=1), seeds[:, :n].std(axis=1, ddof=1)) for n in looks]


def _agrees(mu, sigma, bank, looks, levels, delta: float, expect: str, observed: str) -> np.ndarray:
    """Whether each rerun of the design at (mu, sigma) gives ``observed``; mu, sigma broadcast against
    the bank's reruns."""
    def interval_at(k, n, level):
        mean, sd = bank[k]
        return t_bounds(mu + sigma * mean, sigma * sd / math.sqrt(n), n - 1, level)

    return run_schedule(interval_at, looks, levels, delta, expect)[0] == observed


def contrast_agreement(estimate: float, spread: float, se: float, df: float, looks, levels, delta: float,
                       expect: str, observed: str, seed: int = SEED,
                       prior: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """(P(a rerun gives ``observed``), its 80% range) for a contrast measured at ``estimate`` with
    per-seed sd ``spread``, standard error ``se`` and ``df`` degrees of freedom (module docstring);
    ``prior``: a normal prior on the effect (:func:`_posterior`), used by benchmarks/bench_replication.py."""
    rng = np.random.default_rng(seed)
    mu, sigma = _posterior(estimate, spread, se, df, rng, DRAWS, prior)
    each = chances_at(mu, sigma, looks, levels, delta, expect, observed, rng)
    low, high = np.quantile(each, RANGE)
    return float(np.mean(each)), float(low), float(high)


def chances_at(mu: np.ndarray, sigma: np.ndarray, looks, levels, delta: float, expect: str, observed: str,
               rng: np.random.Generator) -> np.ndarray:
    """The chance of agreement at each (mu, sigma) draw: the share of the same RERUNS reruns of the design
    (drawn from ``rng``) that give ``observed``; benchmarks/bench_replication_cause.py reads it at draws of
    its own (the effect or the spread known)."""
    looks, levels = tuple(looks), tuple(levels)
    bank = _rerun_bank(rng, RERUNS, looks)
    return np.mean(_agrees(mu[:, None], sigma[:, None], bank, looks, levels, delta, expect, observed), axis=1)


def _binomial(n: int, rates: np.ndarray) -> np.ndarray:
    """P(k of n collapse) for k = 0..n, one row per rate."""
    return stats.binom.pmf(np.arange(n + 1)[None, :], n, rates[:, None])


def collapse_agreement_at(rate_x: np.ndarray, rate_y: np.ndarray, looks, levels, delta: float, expect: str,
                          observed: str) -> np.ndarray:
    """P(a rerun gives ``observed``) at each pair of true collapse rates, exactly: the distribution of
    the two cells' collapse counts carried over the looks (binomial increments), the paths whose
    Newcombe interval is final stopping at their look."""
    mass = np.ones((len(rate_x), 1, 1))  # P(counts (a, b), still running), before any seed
    agree, before = np.zeros(len(rate_x)), 0
    for k, (n, level) in enumerate(zip(looks, levels)):
        px, py = _binomial(n - before, rate_x), _binomial(n - before, rate_y)
        grown = np.zeros((len(rate_x), n + 1, n + 1))
        for i in range(n - before + 1):
            for j in range(n - before + 1):
                grown[:, i:i + before + 1, j:j + before + 1] += mass * (px[:, i] * py[:, j])[:, None, None]
        a, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        names = outcomes(*newcombe_bounds(a, n, b, n, level), delta, expect)
        stops = is_final(names, expect) | (k == len(looks) - 1)
        agree += np.sum(grown * (stops & (names == observed)), axis=(1, 2))
        mass, before = grown * ~stops, n
    return agree


def collapse_agreement(counts, looks, levels, delta: float, expect: str, observed: str,
                       seed: int = SEED) -> tuple[float, float, float]:
    """(P(a rerun gives ``observed``), its 80% range) for a collapse claim measured at ``counts``
    [k_x, n_x, k_y, n_y]: the mean and percentiles of the exact agreement over Jeffreys posterior draws."""
    k_x, n_x, k_y, n_y = counts
    rng = np.random.default_rng(seed)
    rate_x, rate_y = rng.beta(k_x + 0.5, n_x - k_x + 0.5, COLLAPSE_DRAWS), rng.beta(k_y + 0.5, n_y - k_y + 0.5, COLLAPSE_DRAWS)
    each = collapse_agreement_at(rate_x, rate_y, tuple(looks), tuple(levels), delta, expect, observed)
    low, high = np.quantile(each, RANGE)
    return float(np.mean(each)), float(low), float(high)
