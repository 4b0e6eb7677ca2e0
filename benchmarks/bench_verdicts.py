"""The decision rule end to end (analysis.statistics.decision, analysis.claims.verdicts): does a second run repeat the
verdicts, and is the familywise error held, for fixed and sequential seed designs?

    .venv/bin/python -m benchmarks.bench_verdicts [--replicates 20000]
    (also: python -m benchmarks.bench_coverage --verdicts)

The demo's four claims (config.yaml) at the field's 10-seed effects and spreads (per-seed staleness
costs, AUC points: grpo -29.2 sd 4.05, gspo -23.0 sd 6.0, gspo_mu -1.9 sd 3.6, sat_gspo -3.0 sd 2.1;
docs/findings.md), each recipe's per-seed cost normal and independent between recipes, so claims that
share sat_gspo are correlated as in a real grid. Each replicate runs the whole rule: every claim's
interval at ALPHA / 4, the looks of the design, a claim's cells taking the next look's seeds only
while its outcome is not final. Printed per design: P(each claim's outcome) and P(two independent
runs give the same four outcomes), the expected runs (8 cells: 4 recipes x lags 1, 8), and the
familywise error P(any outcome false of the truth) under nulls at the boundaries (every contrast at
0, and at the smallest effect). Then optional stopping: the unadjusted 95% rule read at 3 then 5
seeds against the declared schedule; and a fixed true effect of a quarter of delta as seeds grow.
Seeded: the same arguments print the same figures.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from analysis.statistics.boundaries import look_levels
from analysis.statistics.decision import newcombe_bounds, outcomes, run_schedule, t_bounds, true_of
from analysis.statistics.intervals import ALPHA
from analysis.statistics.skew import standardized_draws
from analysis.statistics.survival import stratified_logrank

DELTA = 10.0  # points: the demo's smallest effect
COSTS = {"grpo": (-29.2, 4.05), "gspo": (-23.0, 6.0), "gspo_mu": (-1.9, 3.6), "sat_gspo": (-3.0, 2.1)}
# name -> (weights on the recipes' per-seed costs, expect)
CLAIMS = {"grpo_staleness_cost": ({"grpo": 1}, "less"),
          "sat_gspo_cost_below_gspo": ({"sat_gspo": 1, "gspo": -1}, "greater"),
          "sat_gspo_cost_below_gspo_mu": ({"sat_gspo": 1, "gspo_mu": -1}, "greater"),
          "sat_gspo_cost_within_10_points": ({"sat_gspo": 1}, "equivalent")}
DESIGNS = {"fixed 3": ((3,), "obrien_fleming"), "fixed 5": ((5,), "obrien_fleming"),
           "fixed 8": ((8,), "obrien_fleming"), "fixed 10": ((10,), "obrien_fleming"),
           "3 -> 5 O'Brien-Fleming": ((3, 5), "obrien_fleming"), "3 -> 5 Pocock": ((3, 5), "pocock"),
           "4 -> 6 O'Brien-Fleming": ((4, 6), "obrien_fleming"),
           "3 -> 5 -> 8 O'Brien-Fleming": ((3, 5, 8), "obrien_fleming"),
           "4 -> 6 -> 8 O'Brien-Fleming": ((4, 6, 8), "obrien_fleming"),
           "3 -> 6 -> 10 O'Brien-Fleming": ((3, 6, 10), "obrien_fleming"),
           "3 -> 6 -> 10 Pocock": ((3, 6, 10), "pocock"),
           "5 -> 8 -> 12 Pocock": ((5, 8, 12), "pocock"),
           "5 -> 7 -> 10 O'Brien-Fleming": ((5, 7, 10), "obrien_fleming")}
SKEW = math.sqrt(2.0)  # a standardized Gamma(2): skewness 1.41


def run_design(costs: dict, looks, boundary: str, replicates: int, seed: int, level=None, skew: float = 0.0):
    """Every claim's (outcome, look index) over ``replicates`` grids drawn from ``costs``; ``skew``: each
    per-seed cost of that skewness (analysis.statistics.skew.standardized_draws: +SKEW a standardized
    Gamma(2), -SKEW its mirror) instead of a normal, same mean and sd."""
    rng = np.random.default_rng(seed)
    draws = {recipe: mean + sd * standardized_draws(skew, (replicates, looks[-1]), rng)
             for recipe, (mean, sd) in costs.items()}
    levels = look_levels(tuple(looks), level or ALPHA / len(CLAIMS), boundary) if level is None or len(looks) > 1 \
        else (level,)
    result = {}
    for name, (weights, expect) in CLAIMS.items():
        per_seed = sum(w * draws[recipe] for recipe, w in weights.items())

        def interval_at(k, n, lvl, per_seed=per_seed):
            sample = per_seed[:, :n]
            return t_bounds(sample.mean(axis=1), sample.std(axis=1, ddof=1) / math.sqrt(n), n - 1, lvl)

        result[name] = run_schedule(interval_at, tuple(looks), levels, DELTA, expect)
    return result


def expected_runs(result: dict, looks) -> float:
    """Mean runs of a design: each cell runs the seeds of the last look any of its claims reached."""
    cells = {recipe: [name for name, (weights, _) in CLAIMS.items() if recipe in weights] for recipe in COSTS}
    seeds = np.array(looks)
    return float(sum(2 * seeds[np.max([result[c][1] for c in names], axis=0)].mean() for names in cells.values()))


def null_costs(at: str) -> dict:
    """Costs whose every claim sits at a boundary: contrasts 0 (``at`` "zero") or the smallest effect."""
    if at == "zero":
        return {recipe: (0.0, sd) for recipe, (_, sd) in COSTS.items()}
    # grpo's cost at -delta, gspo and gspo_mu so that (b) and (c) sit at +delta, sat_gspo at +-delta (d)
    return {"grpo": (-DELTA, 4.05), "sat_gspo": (-DELTA, 2.1), "gspo": (-2 * DELTA, 6.0), "gspo_mu": (-2 * DELTA, 3.6)}


def contrast_of(costs: dict, name: str) -> float:
    return sum(w * costs[recipe][0] for recipe, w in CLAIMS[name][0].items())


def familywise_error(costs: dict, result: dict) -> float:
    wrong = [~true_of(result[name][0], contrast_of(costs, name), DELTA, CLAIMS[name][1]) for name in CLAIMS]
    return float(np.mean(np.any(wrong, axis=0)))


def design_table(replicates: int) -> list[str]:
    lines = ["| design | " + " | ".join(CLAIMS) + " | P(two runs agree) | runs | FWER at 0 | FWER at delta | "
             "FWER at 0, skew + / - | FWER at delta, skew + / - |", "|---" * (len(CLAIMS) + 7) + "|"]
    for label, (looks, boundary) in DESIGNS.items():
        result = run_design(COSTS, looks, boundary, replicates, seed=1)
        shares = []
        for name in CLAIMS:
            names, counts = np.unique(result[name][0], return_counts=True)
            top = sorted(zip(names, counts / replicates), key=lambda x: -x[1])[:2]
            shares.append(", ".join(f"{n} {p:.2f}" for n, p in top) + f" (agree {np.sum((counts / replicates) ** 2):.2f})")
        joint = np.array([" | ".join(row) for row in zip(*(result[name][0] for name in CLAIMS))])
        _, counts = np.unique(joint, return_counts=True)
        agree = float(np.sum((counts / replicates) ** 2))  # two independent runs: sum of squared shares
        errors = [familywise_error(null_costs(at), run_design(null_costs(at), looks, boundary, replicates, seed=2,
                                                              skew=skew))
                  for at, skew in (("zero", 0.0), ("delta", 0.0), ("zero", SKEW), ("zero", -SKEW), ("delta", SKEW),
                                   ("delta", -SKEW))]
        lines.append(f"| {label} | " + " | ".join(shares) + f" | {agree:.3f} | {expected_runs(result, looks):.1f} | "
                     + f"{errors[0]:.4f} | {errors[1]:.4f} | {errors[2]:.4f} / {errors[3]:.4f} | "
                     f"{errors[4]:.4f} / {errors[5]:.4f} |")
    return lines


def optional_stopping(replicates: int) -> list[str]:
    """One directional claim at a true 0: the unadjusted 95% interval read at 3 seeds, then at 5 if
    undecided, against the declared 3 -> 5 schedule at the same level."""
    rng = np.random.default_rng(3)
    per_seed = rng.normal(0.0, 4.0, (replicates, 5))

    def interval_at(k, n, level):
        sample = per_seed[:, :n]
        return t_bounds(sample.mean(axis=1), sample.std(axis=1, ddof=1) / math.sqrt(n), n - 1, level)

    rows = []
    for label, levels in (("unadjusted 95% at 3 then 5", (ALPHA, ALPHA)),
                          ("declared 3 -> 5 O'Brien-Fleming at 0.05", look_levels((3, 5), ALPHA))):
        names, _ = run_schedule(interval_at, (3, 5), levels, DELTA, "greater")
        rows.append(f"| {label} | {np.mean(~true_of(names, 0.0, DELTA, 'greater')):.4f} |")
    return ["| rule (true contrast 0) | P(a false sign) |", "|---|---|", *rows]


def growing_seeds(replicates: int) -> list[str]:
    """A fixed true effect of delta / 4 in the claimed direction, read at alpha / 4 as seeds grow."""
    lines = ["| seeds | " + " | ".join(("exceeds", "claimed sign", "below effect", "negligible", "opposite",
                                         "undecided")) + " |", "|---" * 7 + "|"]
    rng = np.random.default_rng(4)
    for n in (3, 5, 10, 20, 40, 80):
        sample = rng.normal(DELTA / 4, 6.0, (replicates, n))
        low, high = t_bounds(sample.mean(axis=1), sample.std(axis=1, ddof=1) / math.sqrt(n), n - 1, ALPHA / 4)
        names = outcomes(low, high, DELTA, "greater")
        lines.append(f"| {n} | " + " | ".join(f"{np.mean(names == o):.3f}" for o in
                                             ("exceeds", "claimed sign", "below effect", "negligible", "opposite",
                                              "undecided")) + " |")
    return lines


def collapse_nulls(trials: int) -> list[str]:
    """Equal collapse laws in both cells (each evaluation of 10 a collapse with a per-step hazard that
    gives the rate by the budget), runs paired by seed: the Newcombe interval's coverage of 0 at 95%
    and at 0.05 / 4, and the false-positive rate of the log-rank test stratified by seed at 0.05."""
    lines = ["| collapse rate | seeds | Newcombe 95% covers | Newcombe 98.75% covers | stratified log-rank at 0.05 |",
             "|---|---|---|---|---|"]
    rng = np.random.default_rng(5)
    for rate in (0.1, 0.3, 0.6):
        hazard = 1 - (1 - rate) ** (1 / 10)
        for n in (3, 5, 10):
            times = [[[None if not collapsed.any() else int(20 * (np.argmax(collapsed) + 1))
                       for collapsed in rng.random((n, 10)) < hazard] for _ in range(2)] for _ in range(trials)]
            covers = {level: 0 for level in (ALPHA, ALPHA / 4)}
            rejections = 0
            for x, y in times:
                k_x, k_y = sum(t is not None for t in x), sum(t is not None for t in y)
                for level in covers:
                    low, high = newcombe_bounds(k_x, n, k_y, n, level)
                    covers[level] += bool(low <= 0 <= high)
                p = stratified_logrank(x, y, 200, list(range(n)))
                rejections += bool(p < ALPHA)  # NaN (no collapse) is no rejection
            lines.append(f"| {rate} | {n} | {covers[ALPHA] / trials:.3f} | {covers[ALPHA / 4] / trials:.3f} | "
                         f"{rejections / trials:.3f} |")
    return lines


def report(replicates: int) -> list[str]:
    return ["## The demo's claims at the field's effects, by design", "", *design_table(replicates), "",
            "## Optional stopping", "", *optional_stopping(replicates), "",
            "## A true effect of delta / 4 (sd 6 points) as seeds grow, fixed design at alpha / 4", "",
            *growing_seeds(replicates), "",
            "## Collapse claims under equal collapse laws", "", *collapse_nulls(max(replicates // 20, 200))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=20000, help="simulated grids per design")
    print("\n".join(report(parser.parse_args(argv).replicates)))


if __name__ == "__main__":
    main()
