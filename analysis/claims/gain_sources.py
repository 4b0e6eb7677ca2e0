"""Where each recipe's gain comes from: staleness, the sampler's numerics (mismatch), both or neither.

A grid that crosses lag 0 with a mismatch-free sampler (config ``gain_sources``: each recipe, and the
baseline, as two arms, ``without_mismatch`` (a float32 sampler: pi/mu = 1 at lag 0) and
``with_mismatch``) splits a recipe R's gain over the baseline G into two contrasts, paired by seed:

- staleness: R's staleness cost minus G's, both without mismatch, at the grid's largest lag H
  ((R0(H) - R0(0)) - (G0(H) - G0(0))): what R corrects when only the weights are stale;
- mismatch: R's benefit over G at lag 0 with the mismatch minus without it
  ((R1(0) - G1(0)) - (R0(0) - G0(0))): what R corrects when only the numerics differ.

Each is read by the claims' rule (analysis.statistics.decision, expect "greater" at ``smallest_effect``) at the
family's level (alpha / the claims the grid tests), but outside the family: a description of the
grid, exploratory, not a claim. A part counts as present when its outcome is "exceeds" or "claimed
sign", absent when "below effect", "negligible" or "opposite"; otherwise it is undecided (and with
the other part present, the source says so: "staleness (mismatch undecided)").
"""
from __future__ import annotations

from dataclasses import asdict

from analysis.claims.verdicts import interval, measure, tested_in
from analysis.statistics.cell_table import CellTable
from analysis.statistics.decision import outcome
from analysis.statistics.intervals import ALPHA
from grid.claims import NOT_TESTED, Claim, CostDifference, Interaction
from grid.settings import Config, GainSources

PRESENT = ("exceeds", "claimed sign")
ABSENT = ("below effect", "negligible", "opposite")


def parts(section: GainSources, recipe: str, largest_lag: int) -> dict[str, Claim]:
    """The two contrasts of ``recipe`` (a key of ``section.recipes``) as claims of the decision rule."""
    arms, base, effect = section.recipes[recipe], section.baseline, section.smallest_effect
    common = {"expect": "greater", "smallest_effect": effect, "metric": "auc", "reference_lag": 0}
    return {"staleness": CostDifference(name=f"{recipe}.staleness", recipe=arms.without_mismatch,
                                        versus=base.without_mismatch, lag=largest_lag, **common),
            "mismatch": Interaction(name=f"{recipe}.mismatch", recipe=arms.with_mismatch, versus=base.with_mismatch,
                                    other_recipe=arms.without_mismatch, other_versus=base.without_mismatch,
                                    of="recipes", lag=0, **common)}


def source(staleness: str | None, mismatch: str | None) -> str:
    """staleness / mismatch / both / neither from the two parts' outcomes; a part present beside one
    undecided: "staleness (mismatch undecided)"; otherwise undecided."""
    parts_found = {"staleness": staleness, "mismatch": mismatch}
    present = [name for name, found in parts_found.items() if found in PRESENT]
    open_parts = [name for name, found in parts_found.items() if found not in PRESENT + ABSENT]
    if not open_parts:
        return {0: "neither", 1: present[0] if present else "neither", 2: "both"}[len(present)]
    if present:
        return f"{present[0]} ({open_parts[0]} undecided)"
    return "undecided"


def gain_sources(config: Config, cells: CellTable) -> dict | None:
    """The section's baseline and smallest effect, and each of its recipes: its two parts (estimate,
    interval, outcome) and its source; None without the section. Read at the level of the config's claims
    (ALPHA over the claims declared)."""
    section = config.gain_sources
    if section is None:
        return None
    level = ALPHA / max(len(config.claims), 1)  # the declared family's level, whatever this grid tests
    largest = max(config.lags)
    seeds = set(cells.seeds)
    out = []
    for recipe in section.recipes:
        read, split = {}, parts(section, recipe, largest)
        if not all(tested_in(part, cells) for part in split.values()):
            out.append({"recipe": recipe, "source": NOT_TESTED})
            continue
        for name, part in split.items():
            measured = measure(part, cells, config.steps, seeds)
            low, high = interval(part, measured, level)
            read[name] = {"estimate": measured.estimate, "low": low, "high": high, "n": measured.n,
                          "method": measured.method, "outcome": outcome(low, high, part.smallest_effect, "greater")}
        out.append({"recipe": recipe, "lag": largest, "confidence": 1 - level, **read,
                    "source": source(read["staleness"]["outcome"], read["mismatch"]["outcome"])})
    return {"baseline": asdict(section.baseline), "smallest_effect": section.smallest_effect, "recipes": out}
