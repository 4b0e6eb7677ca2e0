"""The decision rule of a claim (docs/statistics.md, "Verdicts"): one interval, exclusive outcomes.

A claim's contrast c has an interval [low, high] at the claim's level. With delta the smallest effect
that matters, the outcome is where the interval lies against -delta, 0 and +delta. For a directional
claim the interval is first oriented so that the claimed direction is positive (expect "less": -c):

| oriented interval                       | outcome          | reads                                    |
|-----------------------------------------|------------------|------------------------------------------|
| low >= delta                            | exceeds          | the claimed effect, at least delta       |
| 0 < low < delta <= high                 | claimed sign     | the claimed sign; size against delta open|
| 0 < low and high < delta                | below effect     | the claimed sign, smaller than delta     |
| low <= 0 <= high, inside (-delta, delta)| negligible       | no effect that matters, sign unknown     |
| high < 0                                | opposite         | the other sign                           |
| anything else (0 inside, reaching delta)| undecided        | more seeds needed                        |

An equivalence claim (|c| < delta) reads the interval as it is:

| interval                                 | outcome            |
|------------------------------------------|--------------------|
| inside (-delta, delta)                   | negligible         |
| 0 outside, reaching +-delta              | nonzero            |
| wholly beyond +delta or beyond -delta    | exceeds            |
| anything else                            | undecided          |

Beside a negligible outcome the claim says whether the interval also excludes 0 (a small cost that
is real, analysis.claims.verdicts): a remark, not another outcome, so that the verdict does not hang on a
boundary the claim did not ask about.

An interval that covers the true contrast gives an outcome that is true of it (each row is a region
of the parameter line the interval lies in), so a claim errs only when its interval misses. The
family's intervals are read at ALPHA / m each (Bonferroni over the m claims a config declares): all of
them cover with probability >= 1 - ALPHA, so P(any wrong outcome) <= ALPHA whatever the true effects.
Holm's step-down is not used: it gains power only for one null per claim, and its compatible
intervals are uninformative (Strassburger & Bretz 2008); a claim here has several (0 and +-delta).

A declared seed schedule (config ``seeding``: looks n_1 < ... < n_K seeds) reads a claim's interval
at each look as a repeated confidence interval (Jennison & Turnbull 1989): the chance that any
look's interval misses is the claim's level, spent over the looks by an alpha-spending function
(Lan & DeMets 1983: O'Brien-Fleming-like or Pocock-like; analysis.statistics.boundaries computes
each look's level). A claim stops taking seeds at the first look whose outcome is FINAL for its kind;
reading every look is safe.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep

DIRECTIONAL = ("exceeds", "claimed sign", "below effect", "negligible", "opposite", "undecided")
EQUIVALENCE = ("negligible", "nonzero", "exceeds", "undecided")
# Outcomes after which more seeds cannot change the answer to the claim's question; the others
# ("claimed sign": is it at least delta?, "nonzero": is it within delta?, "undecided") take the next look.
FINAL = {"directional": ("exceeds", "below effect", "negligible", "opposite"),
         "equivalent": ("negligible", "exceeds")}
SUPPORTS = {"exceeds": "supports the claim", "claimed sign": "supports its sign; size against delta open",
            "below effect": "its sign, but below the smallest effect that matters",
            "negligible": "no effect that matters", "opposite": "against the claim: the other sign",
            "undecided": "the interval holds 0 and reaches the smallest effect"}
SUPPORTS_EQUIVALENCE = {"negligible": "supports the claim", "nonzero": "differs from 0; within delta open",
                        "exceeds": "against the claim: beyond the margin",
                        "undecided": "the interval holds 0 and reaches past the margin"}


def outcomes(low, high, delta: float, expect: str) -> np.ndarray:
    """The outcome of each interval [low, high] for a claim expecting ``expect`` (the tables of the
    module docstring); vectorised: the simulations call it on thousands of intervals at once."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    finite = np.isfinite(low) & np.isfinite(high)
    if expect == "equivalent":
        cases = {"negligible": (-delta < low) & (high < delta),
                 "exceeds": (low >= delta) | (high <= -delta), "nonzero": (low > 0) | (high < 0)}
    else:
        if expect == "less":
            low, high = -high, -low
        cases = {"exceeds": low >= delta, "below effect": (low > 0) & (high < delta), "claimed sign": low > 0,
                 "opposite": high < 0, "negligible": (-delta < low) & (high < delta)}
    return np.select([case & finite for case in cases.values()], list(cases), default="undecided")


def outcome(low: float, high: float, delta: float, expect: str) -> str:
    """The outcome of one interval (:func:`outcomes`)."""
    return str(outcomes(low, high, delta, expect)[()])


def true_of(names, contrast: float, delta: float, expect: str):
    """Whether each outcome is true of a true ``contrast`` (the region of its table row); vectorised.
    "undecided" claims nothing and is always true."""
    c = -contrast if expect == "less" else contrast
    if expect == "equivalent":
        regions = {"negligible": abs(c) < delta, "nonzero": c != 0,
                   "exceeds": abs(c) >= delta}
    else:
        regions = {"exceeds": c >= delta, "claimed sign": c > 0, "below effect": 0 < c < delta,
                   "negligible": abs(c) < delta, "opposite": c < 0}
    return np.vectorize(lambda name: regions.get(name, True), otypes=[bool])(names)


def is_final(names, expect: str):
    """Whether each outcome ends the claim's schedule (FINAL); vectorised."""
    return np.isin(names, FINAL["equivalent" if expect == "equivalent" else "directional"])


def reading(name: str, expect: str) -> str:
    """What the outcome says about the claim, in words."""
    return (SUPPORTS_EQUIVALENCE if expect == "equivalent" else SUPPORTS)[name]


def size_to_delta(estimate, low, high, delta: float) -> str:
    """Where a claim's estimate and interval lie against the smallest effect, in units of it:
    "-0.46 [-0.72, -0.19] x delta, inside +-delta" (or beyond +delta / -delta, reaching past +delta /
    -delta / both); "" without an interval. An outcome names a side (opposite, exceeds); this says how far."""
    if any(v is None or not math.isfinite(v) for v in (estimate, low, high)) or not delta > 0:
        return ""
    if low >= delta or high <= -delta:
        where = "beyond +delta" if low >= delta else "beyond -delta"
    elif low > -delta and high < delta:
        where = "inside +-delta"
    else:
        where = "reaching past " + ("both" if low <= -delta and high >= delta else "+delta" if high >= delta else "-delta")
    return f"{estimate / delta:+.2f} [{low / delta:+.2f}, {high / delta:+.2f}] x delta, {where}"


def t_bounds(estimate, se, df, level):
    """(low, high) of the two-sided t interval at ``level``; a zero se gives the point [estimate,
    estimate]; vectorised."""
    with np.errstate(all="ignore"):
        half = stats.t.ppf(1 - np.asarray(level) / 2, df) * se
    half = np.where(np.asarray(se) == 0, 0.0, half)
    return estimate - half, estimate + half


def run_schedule(interval_at, looks: tuple[int, ...], levels: tuple[float, ...], delta: float, expect: str):
    """(outcome, look index) of each of a batch of designs: ``interval_at(k, n, level) -> (low, high)``
    gives their intervals at look k (n seeds); a design stops at its first final outcome or the last look."""
    result = stopped = None
    for k, (n, level) in enumerate(zip(looks, levels)):
        names = outcomes(*interval_at(k, n, level), delta, expect)
        if result is None:
            result, stopped, running = names.copy(), np.zeros(names.shape, dtype=int), np.ones(names.shape, bool)
        take = running & (is_final(names, expect) | (k == len(looks) - 1))
        result[take], stopped[take] = names[take], k
        running &= ~take
    return result, stopped


def simulate_contrast(estimate: float, spread: float, looks, levels, delta: float, expect: str, *,
                      draws: int = 4000, seed: int = 0):
    """(outcome, look index) of ``draws`` reruns of a paired design whose per-seed contrast is normal
    with mean ``estimate`` and sd ``spread``."""
    seeds = np.random.default_rng(seed).normal(estimate, spread, (draws, looks[-1]))

    def interval_at(k, n, level):
        sample = seeds[:, :n]
        return t_bounds(sample.mean(axis=1), sample.std(axis=1, ddof=1) / math.sqrt(n), n - 1, level)

    return run_schedule(interval_at, tuple(looks), tuple(levels), delta, expect)


def simulate_collapse(rate_x: float, rate_y: float, looks, levels, delta: float, expect: str, *,
                      draws: int = 4000, seed: int = 0):
    """(outcome, look index) of ``draws`` reruns of a collapse claim: each run of either cell collapses
    with its rate (independently), the difference read from its Newcombe interval."""
    rng = np.random.default_rng(seed)
    collapsed_x = np.cumsum(rng.random((draws, looks[-1])) < rate_x, axis=1)
    collapsed_y = np.cumsum(rng.random((draws, looks[-1])) < rate_y, axis=1)

    def interval_at(k, n, level):
        return newcombe_bounds(collapsed_x[:, n - 1], n, collapsed_y[:, n - 1], n, level)

    return run_schedule(interval_at, tuple(looks), tuple(levels), delta, expect)


def newcombe_bounds(k_x, n_x, k_y, n_y, level):
    """Newcombe's (hybrid Wilson score) interval of k_x/n_x - k_y/n_y at two-sided ``level``; vectorised."""
    return confint_proportions_2indep(k_x, n_x, k_y, n_y, method="newcomb", alpha=level)
