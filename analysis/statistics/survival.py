"""Collapse as a time to event: each run's collapse step (analysis.cells.curves: the start of its final
below-threshold stretch, or the step it diverged at), runs that did not collapse censored at the
step budget. scipy's Kaplan-Meier estimator (``stats.ecdf`` on censored data) and log-rank test
(``stats.logrank``; tests/analysis/test_contrasts.py checks it against statsmodels' ``survdiff``), and the
Newcombe interval of a difference of collapse rates (statsmodels).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats
from statsmodels.duration.survfunc import survdiff
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import proportion_effectsize

from analysis.statistics.contrasts import _fewest
from analysis.statistics.intervals import ALPHA, POWER, newcombe


@dataclass(frozen=True)
class CollapseTest:
    """Collapse of cell x against cell y: the log-rank test over time and the rate difference by
    the budget with its 95% Newcombe interval."""
    z: float  # log-rank statistic: > 0 when x collapses sooner / more often than expected
    p: float  # two-sided; NaN when neither cell has a collapse (nothing to compare)
    rate_x: float
    rate_y: float
    estimate: float  # rate_x - rate_y
    low: float
    high: float
    n_x: int
    n_y: int
    method: str = "log-rank; newcombe"

    def as_dict(self) -> dict:
        return asdict(self)


def censored(times: list[int | None], budget: int) -> stats.CensoredData:
    """Collapse steps (None: no collapse) as right-censored data, censored at the budget."""
    events = [float(t) for t in times if t is not None]
    return stats.CensoredData(uncensored=events, right=[float(budget)] * (len(times) - len(events)))


def kaplan_meier(times: list[int | None], budget: int) -> tuple[list[float], list[float]]:
    """(steps, fraction not yet collapsed) of the Kaplan-Meier curve, starting at (0, 1) and
    ending at the budget."""
    if all(t is None for t in times):
        return [0.0, float(budget)], [1.0, 1.0]
    curve = stats.ecdf(censored(times, budget)).sf
    steps = [0.0, *map(float, curve.quantiles)]
    alive = [1.0, *map(float, curve.probabilities)]
    if steps[-1] < budget:
        steps.append(float(budget))
        alive.append(alive[-1])
    return steps, alive


def logrank(x: list[int | None], y: list[int | None], budget: int) -> tuple[float, float]:
    """(z, two-sided p) of the log-rank test; NaN, NaN when no run of either cell collapsed."""
    if all(t is None for t in [*x, *y]):
        return math.nan, math.nan
    with np.errstate(all="ignore"):
        result = stats.logrank(censored(x, budget), censored(y, budget))
    return float(result.statistic), float(result.pvalue)


def stratified_logrank(x: list[int | None], y: list[int | None], budget: int, strata: list) -> float:
    """Two-sided p of the log-rank test stratified by ``strata`` (one per run, the same for x and y:
    runs paired by seed compared within their seed; statsmodels' survdiff); NaN without a collapse."""
    if all(t is None for t in [*x, *y]):
        return math.nan
    times = np.array([budget if t is None else t for t in [*x, *y]], dtype=float)
    status = np.array([t is not None for t in [*x, *y]], dtype=int)
    group = np.array([0] * len(x) + [1] * len(y))
    with np.errstate(all="ignore"):
        try:
            _, p = survdiff(times, status, group, strata=np.array([*strata, *strata]))
        except np.linalg.LinAlgError:  # no stratum's collapses can tell the cells apart: no evidence
            return 1.0
    return float(p)


def collapse_test(x: list[int | None], y: list[int | None], budget: int,
                  strata: tuple[list, list] | None = None) -> CollapseTest:
    """Log-rank test and Newcombe rate-difference interval of two cells' collapse steps; the test is
    stratified by seed where ``strata`` (the runs' seeds) pairs the two cells run for run."""
    n_x, n_y = len(x), len(y)
    if n_x == 0 or n_y == 0:
        nan = math.nan
        return CollapseTest(nan, nan, nan, nan, nan, nan, nan, n_x, n_y, "empty")
    k_x, k_y = sum(t is not None for t in x), sum(t is not None for t in y)
    z, p = logrank(x, y, budget)
    method = "log-rank; newcombe"
    if strata is not None and list(strata[0]) == list(strata[1]):
        p, method = stratified_logrank(x, y, budget, list(strata[0])), "log-rank stratified by seed; newcombe"
    low, high = newcombe(k_x, n_x, k_y, n_y)
    return CollapseTest(z, p, k_x / n_x, k_y / n_y, k_x / n_x - k_y / n_y, low, high, n_x, n_y, method)


def seeds_needed_collapse(smallest_effect: float, rate: float, alpha: float = ALPHA) -> int | None:
    """Seeds per cell at which a two-sided test of two collapse rates detects a difference of
    ``smallest_effect`` around the pooled ``rate`` measured so far with POWER at ``alpha`` (normal
    approximation with Cohen's h, statsmodels): the rates rate -+ effect/2, kept inside [0, 1].
    The log-rank test, which also reads when runs collapsed, needs at most about as many."""
    if not math.isfinite(rate):
        return None
    low = min(max(rate - smallest_effect / 2, 0.0), 1.0 - smallest_effect)
    effect = abs(proportion_effectsize(low + smallest_effect, low))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the normal power far in its tail
        return _fewest(lambda n: not NormalIndPower().power(effect, nobs1=n, alpha=alpha) < POWER)
