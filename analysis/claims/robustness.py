"""What each claim's outcome rests on beyond its t interval (docs/statistics.md, "What the guarantee
covers"), read on the seeds the outcome was read at: the skew of its per-seed contrasts and what that
skew does to its interval (analysis.statistics.skew; a row whose skew breaks the interval's level is
flagged), and AdaStop's permutation test of its two sides (analysis.statistics.crosscheck), exploratory.
A claim on collapse rates, or whose cells do not share their seeds, has neither (None).
"""
from __future__ import annotations

import math

import numpy as np

from analysis.claims.verdicts import _values, family
from analysis.statistics.contrasts import per_seed
from analysis.statistics.crosscheck import adastop
from analysis.statistics.skew import skew_check
from grid.claims import NOT_TESTED
from grid.settings import Config


def sides(claim, cells: dict, reference_lag: int, seeds: set[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """The claim's two sides per seed (x: its cells of positive weight, y: of negative weight, each
    sum |w| value), x - y its per-seed contrast; None where the cells do not share their seeds."""
    arms = [(weight, *_values(cells[recipe, lag], claim.metric, seeds))
            for weight, recipe, lag in claim.cells(reference_lag)]
    if len({tuple(s) for _, _, s in arms}) > 1:
        return None
    x, y = (per_seed([(abs(w) if (w > 0) == positive else 0.0, v, s) for w, v, s in arms]) for positive in (True, False))
    return x, y


def checked(config: Config, cells: dict, claims: list[dict]) -> list[dict]:
    """Each answered claim (analysis.claims.verdicts.answer, same order) with ``skew`` and
    ``crosscheck`` added: at the seeds of the look its outcome was read at and at that look's level."""
    reference_lag = config.reference_lag
    _, schedule = family(config.claims, cells, reference_lag, config.seeding, config.seeds)
    out = []
    for claim, row in zip(config.claims, claims):
        found = None
        if row["verdict"] != NOT_TESTED and claim.scale == "points":
            seeds = set(schedule.seeds[:schedule.looks[row["look"] - 1]])
            found = sides(claim, cells, reference_lag, seeds)
        if found is None:
            out.append({**row, "skew": None, "crosscheck": None})
            continue
        x, y = found
        level = 1 - row["confidence"]
        out.append({**row, "skew": skew_check(list(x - y), level), "crosscheck": adastop(x, y, level)})
    return out


def checks_text(claim: dict) -> str:
    """"**skewed**: skew +3.2 (normal p <0.001, n 10): the interval misses 0.103 at this skew (0.0125
    nominal); AdaStop 98.75%: > 0 (n 10 vs 10)"; "–" without checks."""
    parts = []
    skew = claim.get("skew")
    if skew:
        p = "<0.001" if skew["p"] < 0.001 else f"{skew['p']:.3f}"
        parts.append(f"{'**skewed**: ' if skew['breaks'] else ''}skew {skew['skew']:+.1f} (normal p {p}, n {skew['n']}): "
                     f"the interval misses {skew['miss']:.3f} at this skew ({skew['level']:.3g} nominal)")
    cross = claim.get("crosscheck")
    if cross and cross["decision"]:
        text = f"AdaStop {1 - cross['level']:.2%}: {cross['decision']} (n {cross['n_x']} vs {cross['n_y']})"
        if cross["smallest_level"] > cross["level"] and math.isfinite(cross["smallest_level"]):
            text += f", cannot reject below {cross['smallest_level']:.3g}"
        parts.append(text)
    return "; ".join(parts) or "–"
