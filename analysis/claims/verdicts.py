"""The verdict on each claim of the config (grid.claims.Claim): the confirmatory family.

Each claim is a contrast of cell means (analysis.statistics.contrasts: paired by seed where the cells
share their seeds, else Welch-Satterthwaite) or, for collapse, a difference of two cells' collapse rates
(Newcombe interval; the log-rank test of their collapse times beside it, stratified by seed where the
cells share their seeds). Its outcome is where its interval lies against 0 and the smallest effect
(analysis.statistics.decision: one rule, exclusive outcomes), read at ALPHA / m for the m claims the
config declares (one family per config: a grid narrowed after its runs reads at the declared level), at
each look of the declared seed schedule (config ``seeding``) until the outcome is final. Beside each
outcome: the probability that an independent rerun of the declared design gives it again (posterior
predictive, with its 80% range over the effect's uncertainty: analysis.statistics.predictive), and while
it is not final the seeds per cell that would likely decide it. A claim naming a cell this grid does not
have (a grid narrowed on the command line) is "not tested in this grid": it keeps its share of ALPHA
unspent.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from scipy import stats

from analysis.claims.verdict import Measured, RateMeasured, ScoreMeasured, Verdict
from analysis.statistics.boundaries import look_levels
from analysis.statistics.cell_table import CellTable
from analysis.statistics.contrasts import contrast, seeds_needed, seeds_needed_equivalence
from analysis.statistics.decision import (
    is_final,
    newcombe_bounds,
    outcome,
    reading,
    t_bounds,
)
from analysis.statistics.intervals import ALPHA
from analysis.statistics.predictive import collapse_agreement, contrast_agreement
from analysis.statistics.survival import collapse_test, seeds_needed_collapse
from grid.claims import NOT_TESTED, Claim, Family, Seeding, StalenessCost

METRIC_TEXT = {"auc": "AUC", "fixed": "fixed-step score", "best": "best-checkpoint score",
               "selected": "selected-checkpoint score"}


@dataclass(frozen=True)
class Schedule:
    """The looks a grid reads its claims at: seeds[:n] for each n of ``looks`` (a fixed design: one
    look at every seed), each look's interval at ``levels`` (analysis.statistics.boundaries.look_levels)."""
    looks: tuple[int, ...]
    levels: tuple[float, ...]
    seeds: tuple[int, ...]
    boundary: str | None

    @classmethod
    def build(cls, seeding: Seeding | None, seeds, family_size: int) -> "Schedule":
        level = ALPHA / max(family_size, 1)
        if seeding is None:
            return cls((len(seeds),), (level,), tuple(seeds), None)
        return cls(seeding.looks, look_levels(seeding.looks, level, seeding.boundary), tuple(seeds),
                   seeding.boundary)

    def through(self, look: int) -> "Schedule":
        """The schedule read only through its ``look``-th look (1-based), each look at its own level."""
        return Schedule(self.looks[:look], self.levels[:look], self.seeds, self.boundary)


def statement(claim: Claim) -> str:
    """The claim in words: what is tested, its endpoint and its smallest effect (points or rate)."""
    what = claim.describe()
    effect, endpoint = RULES[claim.scale].effect_and_endpoint(claim)
    if claim.expect == "equivalent":
        return f"{what}, {endpoint}: within +-{effect} of 0"
    sign = ">" if claim.expect == "greater" else "<"
    return f"{what}, {endpoint}: {sign} 0 by at least {effect}"


def tested_in(claim: Claim, cells: CellTable) -> bool:
    """Whether the grid has every cell the claim reads."""
    return all(cells.has(cell) for cell in claim.read_cells())


class ScoreRule:
    """How a claim on a score is decided: a contrast of cell means (analysis.statistics.contrasts, paired by seed
    where the cells share their seeds) and its Student t interval."""

    @staticmethod
    def effect_and_endpoint(claim: Claim) -> tuple[str, str]:
        return f"{claim.smallest_effect * 100:.1f} points", METRIC_TEXT[claim.metric]

    @staticmethod
    def measure(claim: Claim, cells: CellTable, budget: int, seeds: set[int]) -> ScoreMeasured:
        result = contrast([(weight, *cells.arm((recipe, lag), claim.metric, seeds))
                           for weight, recipe, lag in claim.cells()])
        return ScoreMeasured(estimate=result.estimate, n=result.n, method=result.method, test=result.method,
                             p=result.p, se=result.se, df=result.df, spread=result.spread)

    @staticmethod
    def interval(measured: ScoreMeasured, level: float) -> tuple[float, float]:
        if measured.method == "degenerate":
            return measured.estimate, measured.estimate
        if not math.isfinite(measured.se):
            return math.nan, math.nan
        low, high = t_bounds(measured.estimate, measured.se, measured.df, level)
        return float(low), float(high)

    @staticmethod
    def agreement(decided: ScoreMeasured, args: tuple) -> tuple[float, float, float] | None:
        if decided.method not in ("paired-t", "welch-satterthwaite"):
            return None
        return contrast_agreement(decided.estimate, decided.spread, decided.se, decided.df, *args)

    @staticmethod
    def seeds_to_decide(claim: Claim, decided: ScoreMeasured, level: float) -> int | None:
        spread, n = decided.spread, decided.n
        if not (spread is not None and math.isfinite(spread) and n >= 2):
            return None
        upper = spread * math.sqrt((n - 1) / stats.chi2.ppf(0.2, n - 1)) if spread > 0 else 0.0
        if claim.expect == "equivalent":
            return seeds_needed_equivalence(claim.smallest_effect, upper, alpha=level)
        return seeds_needed(claim.smallest_effect, upper, alpha=level)


class RateRule:
    """How a claim on collapse rates is decided: the difference of two cells' collapse rates with its
    Newcombe interval, the log-rank test of their collapse times beside it (stratified by seed where
    the cells share their seeds)."""

    @staticmethod
    def effect_and_endpoint(claim: Claim) -> tuple[str, str]:
        return f"{claim.smallest_effect:.2f} in rate", "by the step budget"

    @staticmethod
    def measure(claim: Claim, cells: CellTable, budget: int, seeds: set[int]) -> RateMeasured:
        (x, seeds_x), (y, seeds_y) = (cells.arm(cell, "collapse_step", seeds)
                                      for cell in claim.read_cells())
        result = collapse_test(x, y, budget, strata=(seeds_x, seeds_y))
        return RateMeasured(estimate=result.estimate, n=min(result.n_x, result.n_y), method="newcombe",
                            test=result.method, p=result.p, z=result.z,
                            counts=[round(result.rate_x * result.n_x), result.n_x,
                                    round(result.rate_y * result.n_y), result.n_y],
                            rates=[result.rate_x, result.rate_y])

    @staticmethod
    def interval(measured: RateMeasured, level: float) -> tuple[float, float]:
        if min(measured.counts[1], measured.counts[3]) == 0:
            return math.nan, math.nan
        low, high = newcombe_bounds(*measured.counts, level)
        return float(low), float(high)

    @staticmethod
    def agreement(decided: RateMeasured, args: tuple) -> tuple[float, float, float] | None:
        if min(decided.counts[1], decided.counts[3]) == 0:
            return None
        return collapse_agreement(decided.counts, *args)

    @staticmethod
    def seeds_to_decide(claim: Claim, decided: RateMeasured, level: float) -> int | None:
        counts = decided.counts
        pooled = (counts[0] + counts[2]) / max(counts[1] + counts[3], 1)
        return seeds_needed_collapse(claim.smallest_effect, pooled, alpha=level)


RULES = {"points": ScoreRule, "rate": RateRule}  # by Claim.scale


def measure(claim: Claim, cells: CellTable, budget: int, seeds: set[int]) -> Measured:
    """The claim's estimate and what its interval rests on, from the cells' runs of ``seeds``."""
    return RULES[claim.scale].measure(claim, cells, budget, seeds)


def interval(claim: Claim, measured: Measured, level: float) -> tuple[float, float]:
    """The claim's two-sided interval at ``level`` (NaN bounds: none)."""
    return RULES[claim.scale].interval(measured, level)


def decide(claim: Claim, cells: CellTable, budget: int, schedule: Schedule) -> Verdict:
    """The claim read at each look of the schedule until its outcome is final (or the last look); its
    words (statement, why) and what rests on it are answer's."""
    for look, (n, level) in enumerate(zip(schedule.looks, schedule.levels)):
        measured = measure(claim, cells, budget, set(schedule.seeds[:n]))
        low, high = interval(claim, measured, level)
        name = outcome(low, high, claim.smallest_effect, claim.expect)
        if is_final(name, claim.expect) or look == len(schedule.looks) - 1:
            return Verdict(claim=claim, statement="", family_size=0, verdict=name, why="",
                           final=bool(is_final(name, claim.expect)), measured=measured, low=low, high=high,
                           confidence=1 - level, look=look + 1, looks=len(schedule.looks))
    raise AssertionError("a schedule has at least one look")


def threshold_lag(claim: Claim, cells: CellTable, budget: int, seeds: set[int], level: float) -> dict:
    """The smallest of a trend's lags whose staleness cost (the lag minus the reference lag) passes
    ``claim.threshold``, with an interval. Each lag's cost interval is read at level / (the lags
    compared), so that all cover together with probability >= 1 - level (Bonferroni); then the true
    smallest lag lies between the first lag whose interval reaches past -threshold and the first whose
    interval lies wholly past it (None: none of the grid's lags)."""
    lags = [lag for lag in sorted(claim.lags) if lag != claim.reference_lag]
    each = level / len(lags)
    costs = []
    for lag in lags:
        cost = StalenessCost(name=claim.name, recipe=claim.recipe, lag=lag, expect=claim.expect,
                             smallest_effect=claim.smallest_effect, metric=claim.metric,
                             reference_lag=claim.reference_lag)
        measured = measure(cost, cells, budget, seeds)
        low, high = interval(cost, measured, each)
        costs.append({"lag": lag, "estimate": measured.estimate, "low": low, "high": high})

    def first(passes) -> int | None:
        return next((c["lag"] for c in costs if passes(c)), None)

    beyond = -claim.threshold
    return {"threshold": claim.threshold, "confidence": 1 - level, "each_confidence": 1 - each, "costs": costs,
            "estimate": first(lambda c: c["estimate"] < beyond),
            "low": first(lambda c: math.isfinite(c["low"]) and c["low"] < beyond),
            "high": first(lambda c: math.isfinite(c["high"]) and c["high"] < beyond)}


def threshold_text(found: dict, largest_lag: int) -> str:
    """"cost passes 10 points from lag 4 [2, 8]" (the interval's upper end "> 16": past the grid's lags)."""
    def lag(value):
        return f"> {largest_lag}" if value is None else str(value)
    return (f"cost passes {found['threshold'] * 100:g} points from lag {lag(found['estimate'])} "
            f"[{lag(found['low'])}, {lag(found['high'])}] ({found['confidence']:.2%} jointly over its lags)")


def replication(decided: Verdict, schedule: Schedule) -> tuple[float | None, float | None, float | None]:
    """P(an independent rerun of the declared design gives the same outcome) and its 80% range
    (analysis.claims.verdict.REPLICATION_METHOD); None where nothing was measured to simulate from."""
    claim = decided.claim
    args = (schedule.looks, schedule.levels, claim.smallest_effect, claim.expect, decided.verdict)
    return RULES[claim.scale].agreement(decided.measured, args) or (None, None, None)


def replication_text(claim: Verdict, with_range: bool = False) -> str:
    """"0.81", with its 80% range "0.81 (0.55-1.00)"; "–" where there is none. Beside a skew that breaks the
    claim's level (analysis.claims.robustness) it says what the number rests on: "assumes normal contrasts"."""
    if claim.replication is None:
        return "–"
    ends = f" ({claim.replication_low:.2f}-{claim.replication_high:.2f})" if with_range else ""
    caveat = ", assumes normal contrasts" if (claim.skew or {}).get("breaks") else ""
    return f"{claim.replication:.2f}{ends}{caveat}"


def plan_seeds(decided: Verdict, level: float) -> int | None:
    """Seeds per cell at which the claim would likely (POWER) leave its current, not final outcome:
    at a true contrast of the smallest effect (0 for an equivalence claim), at ``level``, from an
    80% upper confidence bound of the spread measured so far (never the observed effect)."""
    if decided.final:
        return None
    return RULES[decided.claim.scale].seeds_to_decide(decided.claim, decided.measured, level)


def why(decided: Verdict) -> str:
    """The outcome in words: what it says of the claim, at which look and level."""
    claim, low, high = decided.claim, decided.low, decided.high
    where = f"look {decided.look} of {decided.looks}, " if decided.looks > 1 else ""
    text = f"{reading(decided.verdict, claim.expect)} ({where}{decided.confidence:.2%} interval)"
    if claim.expect == "equivalent" and low is not None and (low > 0 or high < 0):
        text += f"; the contrast is not 0 either: {'above' if low > 0 else 'below'} 0"
    if decided.verdict == "opposite" and -claim.smallest_effect < low and high < claim.smallest_effect:
        text += "; but inside +-delta: smaller than the smallest effect that matters"
    if not decided.final and decided.seeds_needed:
        text += f"; about {decided.seeds_needed} seeds per cell would likely decide it"
    if decided.threshold_lag:
        text += f"; {threshold_text(decided.threshold_lag, max(claim.lags))}"
    return text


def read_at(family: Family, cells: CellTable) -> tuple[list[Claim], Schedule]:
    """The claims this grid tests and the schedule they are read at. The family is the config's: its
    level is ALPHA over every claim declared (``family.claims``), so a grid narrowed after its runs reads the
    claims it can test at the declared level, and one it cannot test keeps its share unspent."""
    seeds = family.seeds if family.seeds is not None else sorted(cells.seeds)
    claims, seeding = family.claims, family.seeding
    tested = [claim for claim in claims if tested_in(claim, cells)]
    return tested, Schedule.build(seeding, seeds, len(claims))


def open_cells(family: Family, cells: CellTable, look: int) -> list[tuple[str, int]]:
    """The cells of the claims whose outcome is not final at ``look`` (1-based): they get the next
    look's seeds; in the order of ``cells``."""
    tested, schedule = read_at(family, cells)
    budget = family.steps
    wanted = {cell for claim in tested
              if not decide(claim, cells, budget, schedule.through(look)).final
              for cell in claim.read_cells()}
    return [cell for cell in cells.cells if cell in wanted]


def answer(family: Family, cells: CellTable) -> list[Verdict]:
    """Every claim of the family decided (summary.json's ``claims``): its statement, numbers, outcome
    (``verdict``), what it says (``why``) and its replication probability."""
    tested, schedule = read_at(family, cells)
    claims, budget = family.claims, family.steps
    out = []
    for claim in claims:
        words = {"statement": statement(claim), "family_size": len(claims)}
        if claim not in tested:
            out.append(Verdict(claim=claim, **words, verdict=NOT_TESTED, why="a cell it compares is not in this grid",
                               final=False))
            continue
        decided = decide(claim, cells, budget, schedule)
        found = {"seeds_needed": plan_seeds(decided, schedule.levels[-1])}
        if claim.threshold is not None:  # at the seeds and the level the outcome was read at
            seeds_read = set(schedule.seeds[:schedule.looks[decided.look - 1]])
            found["threshold_lag"] = threshold_lag(claim, cells, budget, seeds_read,
                                                   1 - decided.confidence)
        decided = dataclasses.replace(_finite(decided), measured=_finite(decided.measured), **words, **found)
        decided = dataclasses.replace(decided, why=why(decided), boundary=schedule.boundary)
        point, low, high = replication(decided, schedule)
        out.append(dataclasses.replace(decided, replication=point, replication_low=low, replication_high=high))
    return out


def _finite(value):
    """``value`` (a frozen dataclass) with its non-finite floats None: summary.json is strict JSON."""
    return dataclasses.replace(value, **{field.name: None for field in dataclasses.fields(value)
                                         if isinstance(getattr(value, field.name), float)
                                         and not math.isfinite(getattr(value, field.name))})
