"""A nonparametric cross-check of a claim (docs/statistics.md, "What the guarantee covers"): AdaStop's
permutation test (Mathieu et al. 2024, "AdaStop: adaptive statistical testing for sound comparisons of
deep RL agents"; the ``adastop`` package) on the same seed table. Arrays in, numbers out.

A claim's contrast sum_i w_i mean(cell_i) is the difference of its two sides, x = the cells of positive
weight and y = those of negative weight (each per seed, sum |w_i| x_i(s)). AdaStop compares x and y as
two agents: a two-sided test of equal laws by permuting the labels, exact over every split where they
are fewer than its B draws. It needs no normal law, but it knows no smallest effect (it says only
"larger", "smaller" or no difference shown) and ignores the seed pairing; one look (K = 1) on the seeds
the claim was read at. Exploratory: no outcome rests on it.
"""
from __future__ import annotations

import math

import numpy as np

PERMUTATIONS = 10_000
SEED = 20261203
DECISIONS = {"larger": "> 0", "smaller": "< 0", "equal": "no difference shown"}


def smallest_level(n_x: int, n_y: int) -> float:
    """The smallest level at which AdaStop can reject with n_x against n_y values: one of the
    C(n_x + n_y, n_x) label splits (at 3 seeds a side 1/20 = 0.05: it cannot reject at 0.05 / 4)."""
    return 1.0 / math.comb(n_x + n_y, n_x)


def adastop(x, y, level: float) -> dict:
    """AdaStop's decision on x against y at two-sided ``level`` (one look, PERMUTATIONS label
    permutations, seeded): {decision: "> 0" | "< 0" | "no difference shown", n_x, n_y, level,
    smallest_level}; with fewer than 2 values on a side, decision None."""
    from adastop import MultipleAgentsComparator  # imports matplotlib and pandas: only when a claim is read

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    out = {"n_x": len(x), "n_y": len(y), "level": level, "decision": None,
           "smallest_level": smallest_level(len(x), len(y)) if min(len(x), len(y)) else math.nan}
    if min(len(x), len(y)) < 2:
        return out
    comparator = MultipleAgentsComparator(n=np.array([len(x), len(y)]), K=1, B=PERMUTATIONS, alpha=level, seed=SEED)
    comparator.partial_compare({"x": x, "y": y}, verbose=False)
    return {**out, "decision": DECISIONS[next(iter(comparator.decisions.values()))]}
