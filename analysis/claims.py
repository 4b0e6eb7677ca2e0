"""The verdict on each claim of the config (harness.model.Claim): the confirmatory family.

Each claim is a contrast of cell means (analysis.contrasts: paired by seed where the cells share
their seeds, else Welch-Satterthwaite) or, for collapse, a log-rank test of two cells' collapse
times with the Newcombe interval of their collapse rates (analysis.survival). Holm runs over the
claims' p-values only. Verdicts, at ALPHA after Holm:

- supported: the test rejects 0 and the estimate has the claimed sign (greater / less).
- contradicted: the test rejects 0 with the other sign, or the 95% interval rules out the
  smallest effect that matters on the claimed side; for "equivalent", the interval lies outside
  +-margin.
- equivalent within +-margin: TOST (two one-sided tests) rejects |contrast| >= margin.
- inconclusive: none of these; with the seeds per cell at which the test would reach POWER at
  the declared smallest effect, given the spread measured so far.
"""
from __future__ import annotations

import math

from analysis.contrasts import contrast, seeds_needed, seeds_needed_equivalence, tost
from analysis.stats import ALPHA, holm
from analysis.survival import collapse_test, seeds_needed_collapse
from harness.model import Claim

KIND_TEXT = {"staleness_cost": "staleness cost of {recipe} (lag {lag} minus lag {reference_lag})",
             "cost_difference": "staleness cost of {recipe} minus that of {versus} (lag {lag} minus lag "
                                "{reference_lag})",
             "recipes": "{recipe} minus {versus} at lag {lag}",
             "collapse": "collapse of {recipe} at lag {lag} against {versus} at lag {versus_lag}",
             "interaction": "{recipe} against {versus} minus {other_recipe} against {other_versus} ({of}, lag {lag})",
             "trend": "least-squares slope of {recipe}'s score against lag over lags {lags} (per unit of lag)"}
METRIC_TEXT = {"auc": "AUC", "fixed": "fixed-step score", "best": "best-checkpoint score",
               "selected": "selected-checkpoint score"}


def statement(claim: Claim, reference_lag: int) -> str:
    """The claim in words, with its endpoint and its smallest effect (points or rate)."""
    what = KIND_TEXT[claim.kind].format(reference_lag=reference_lag, **vars(claim))
    if claim.kind == "collapse":
        more = "more" if claim.expect == "greater" else "less"
        return f"{what}: {claim.recipe} collapses {more} (by >= {claim.smallest_effect:.2f} in rate)"
    effect = f"{claim.smallest_effect * 100:.1f} points"
    if claim.expect == "equivalent":
        return f"{what}, {METRIC_TEXT[claim.metric]}: within +-{effect} of 0"
    sign = ">" if claim.expect == "greater" else "<"
    return f"{what}, {METRIC_TEXT[claim.metric]}: {sign} 0 (smallest effect that matters: {effect})"


def test_claim(claim: Claim, cells: dict, reference_lag: int, budget: int) -> dict:
    """The claim's estimate, interval, test (p before Holm) and the seeds needed at its declared effect."""
    if claim.kind == "collapse":
        x = cells[claim.recipe, claim.lag]["per_seed"]["collapse_step"]
        y = cells[claim.versus, claim.versus_lag]["per_seed"]["collapse_step"]
        result = collapse_test(x, y, budget)
        pooled = (result.rate_x * result.n_x + result.rate_y * result.n_y) / max(result.n_x + result.n_y, 1)
        return {"estimate": result.estimate, "low": result.low, "high": result.high, "z": result.z,
                "n": min(result.n_x, result.n_y), "method": "newcombe", "test": "log-rank", "p": result.p,
                "seeds_needed": seeds_needed_collapse(claim.smallest_effect, pooled)}
    arms = [(weight, cells[recipe, lag]["per_seed"][claim.metric], cells[recipe, lag]["seeds"])
            for weight, recipe, lag in claim.cells(reference_lag)]
    result = contrast(arms)
    fields = {"estimate": result.estimate, "low": result.low, "high": result.high, "n": result.n,
              "method": result.method}
    if claim.expect == "equivalent":
        return {**fields, "test": f"tost ({result.method})", "p": tost(result, claim.smallest_effect),
                "seeds_needed": seeds_needed_equivalence(claim.smallest_effect, result.spread)}
    return {**fields, "test": result.method, "p": result.p,
            "seeds_needed": seeds_needed(claim.smallest_effect, result.spread)}


def verdict(claim: Claim, tested: dict) -> tuple[str, str]:
    """(verdict, why) from the claim's tested numbers and its Holm-adjusted p."""
    p, low, high = tested["p_holm"], tested["low"], tested["high"]
    rejects = p is not None and p < ALPHA
    has_interval = low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
    effect = claim.smallest_effect
    scale, unit = (1, "") if claim.kind == "collapse" else (100, " points")
    if claim.expect == "equivalent":
        if rejects:
            return "equivalent", f"TOST Holm p {p:.3g} < {ALPHA:g}: within +-{effect * scale:g}{unit}"
        if has_interval and (low > effect or high < -effect):
            return "contradicted", f"the 95% interval lies outside +-{effect * scale:g}{unit}"
    else:
        sign = 1 if claim.expect == "greater" else -1
        observed = tested["z"] if claim.kind == "collapse" else tested["estimate"]
        if rejects and sign * observed > 0:
            return "supported", f"Holm p {p:.3g} < {ALPHA:g}, the claimed sign"
        if rejects:
            return "contradicted", f"Holm p {p:.3g} < {ALPHA:g}, the opposite sign"
        if has_interval and (high < effect if sign > 0 else low > -effect):
            bound = f"{sign * effect * scale:+g}{unit}"
            return "contradicted", f"the 95% interval excludes the smallest effect that matters ({bound})"
    needed, n = tested["seeds_needed"], tested["n"]
    if not needed:
        return "inconclusive", "no spread measured yet (fewer than 2 seeds)"
    if needed <= n:
        # The seed count already gives the planned power: the estimate itself sits between the decisions.
        boundary = "the margin" if claim.expect == "equivalent" else "0 and the smallest effect that matters"
        return "inconclusive", (f"{n} seeds per cell already give 80% power at the declared effect (about "
                                f"{needed} would); the estimate lies between {boundary}, where more seeds "
                                "narrow the interval but no seed count is promised to decide it")
    return "inconclusive", f"about {needed} seeds per cell would resolve it at the declared effect"


def answer(claims: tuple[Claim, ...], cells: dict, reference_lag: int, budget: int) -> list[dict]:
    """Every claim tested, Holm over the family, and its verdict (summary.json's ``claims``)."""
    tested = [test_claim(claim, cells, reference_lag, budget) for claim in claims]
    for row, adjusted in zip(tested, holm([row["p"] for row in tested])):
        row["p_holm"] = adjusted
    out = []
    for claim, row in zip(claims, tested):
        row = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        name, why = verdict(claim, row)
        out.append({**vars(claim), "statement": statement(claim, reference_lag), **row,
                    "verdict": name, "why": why, "family_size": len(claims)})
    return out
