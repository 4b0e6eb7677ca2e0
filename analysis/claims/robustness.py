"""What each claim's outcome rests on beyond its t interval (docs/statistics.md, "What the guarantee
covers"), read on the seeds the outcome was read at: the skew of its per-seed contrasts and what that
skew does to its interval (analysis.statistics.skew; a row whose skew breaks the interval's level is
flagged), and AdaStop's permutation test of its two sides (analysis.statistics.crosscheck), exploratory.
A claim on collapse rates, or whose cells do not share their seeds, has neither (None). A claim that
declares the spread its design was planned at (``planning_spread``) also gets ``spread_check``: the
measured per-seed sd against it (chi-square test of one variance, two-sided), flagged below SPREAD_P with
the replication probability the design would have at the planned sd (a 5-seed spread of 0.73 points
against 4.17 planned: p 0.004).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

from analysis.claims.verdict import Verdict
from analysis.claims.verdicts import read_at
from analysis.statistics.cell_table import CellTable
from analysis.statistics.contrasts import per_seed
from analysis.statistics.crosscheck import adastop
from analysis.statistics.predictive import contrast_agreement
from analysis.statistics.skew import skew_check
from grid.claims import Family

SPREAD_P = 0.05  # a measured spread this unlikely under the planned one is flagged


def sides(claim, cells: CellTable, seeds: set[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """The claim's two sides per seed (x: its cells of positive weight, y: of negative weight, each
    sum |w| value), x - y its per-seed contrast; None where the cells do not share their seeds."""
    arms = [(weight, *cells.arm((recipe, lag), claim.metric, seeds))
            for weight, recipe, lag in claim.cells()]
    if len({tuple(s) for _, _, s in arms}) > 1:
        return None
    x, y = (per_seed([(abs(w) if (w > 0) == positive else 0.0, v, s) for w, v, s in arms]) for positive in (True, False))
    return x, y


def checked(family: Family, cells: CellTable, claims: list[Verdict]) -> list[Verdict]:
    """Each answered claim of ``family`` (analysis.claims.verdicts.answer, same order) with ``skew`` and
    ``crosscheck`` added: at the seeds of the look its outcome was read at and at that look's level."""
    _, schedule = read_at(family, cells)
    out = []
    for verdict in claims:
        claim, found = verdict.claim, None
        if verdict.tested and claim.scale == "points":
            seeds = set(schedule.seeds[:schedule.looks[verdict.look - 1]])
            found = sides(claim, cells, seeds)
        verdict = dataclasses.replace(verdict, spread_check=spread_check(verdict, schedule))
        if found is not None:
            x, y = found
            level = 1 - verdict.confidence
            verdict = dataclasses.replace(verdict, skew=skew_check(list(x - y), level), crosscheck=adastop(x, y, level))
        out.append(verdict)
    return out


def spread_check(verdict: Verdict, schedule) -> dict | None:
    """The measured per-seed sd of a paired claim against its declared planning spread: {planned, measured,
    n, p, flagged, replication_at_planned (flagged only: the design's P(same outcome) at the planned sd,
    the estimate as measured)}; None without a planning spread, a paired t reading or a finite spread."""
    claim, row = verdict.claim, verdict.measured
    planned = claim.planning_spread
    if planned is None or row is None or row.method != "paired-t":
        return None
    measured, n = row.spread, row.n or 0
    if measured is None or not math.isfinite(measured) or n < 2:
        return None
    below = float(stats.chi2.cdf((n - 1) * measured ** 2 / planned ** 2, n - 1))
    p = min(1.0, 2 * min(below, 1 - below))
    at_planned = None
    if p < SPREAD_P:
        at_planned = contrast_agreement(row.estimate, planned, planned / math.sqrt(n), n - 1, schedule.looks,
                                        schedule.levels, claim.smallest_effect, claim.expect, verdict.verdict)[0]
    return {"planned": planned, "measured": measured, "n": n, "p": p, "flagged": p < SPREAD_P,
            "replication_at_planned": at_planned}


def checks_text(claim: Verdict) -> str:
    """"**skewed**: skew +3.2 (normal p <0.001, n 10): the interval misses 0.103 at this skew (0.0125
    nominal); AdaStop 98.75%: > 0 (n 10 vs 10)"; "–" without checks."""
    parts = []
    skew = claim.skew
    if skew:
        p = "<0.001" if skew["p"] < 0.001 else f"{skew['p']:.3f}"
        parts.append(f"{'**skewed**: ' if skew['breaks'] else ''}skew {skew['skew']:+.1f} (normal p {p}, n {skew['n']}): "
                     f"the interval misses {skew['miss']:.3f} at this skew ({skew['level']:.3g} nominal)")
    spread = claim.spread_check
    if spread and spread["flagged"]:
        side = "below" if spread["measured"] < spread["planned"] else "above"
        parts.append(f"**spread {side} plan**: sd {spread['measured'] * 100:.2f} points against {spread['planned'] * 100:.2f} "
                     f"planned (chi-square p {spread['p']:.3f}, n {spread['n']}); P(same outcome) at the planned sd "
                     f"{spread['replication_at_planned']:.2f}")
    cross = claim.crosscheck
    if cross and cross["decision"]:
        text = f"AdaStop {1 - cross['level']:.2%}: {cross['decision']} (n {cross['n_x']} vs {cross['n_y']})"
        if cross["smallest_level"] > cross["level"] and math.isfinite(cross["smallest_level"]):
            text += f", cannot reject below {cross['smallest_level']:.3g}"
        parts.append(text)
    return "; ".join(parts) or "–"
