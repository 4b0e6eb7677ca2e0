"""Is the printed replication probability calibrated, and do the demo's boundaries hold their level?

    .venv/bin/python -m benchmarks.bench_replication [--runs 500] [--truth-reruns 200000]

The design config.yaml declares (read from it: its seed schedule's looks and boundary, alpha over its
claims; the demo's 5 -> 8 -> 12 Pocock at 0.05 / 4 today), a claim with delta 10 points and per-seed sd 6 (claim (b)'s scale, docs/findings.md). For each truth
(25 directional contrasts every 2 points from -14 to +34, the boundaries 0 and +-10 among them, and
12 equivalence contrasts from 0 to 22) ``--runs`` first runs are simulated by this file's own code (numpy
seeds, scipy's t, the outcome table of docs/statistics.md written out again); each prints, from its
own data at its stopping look, the old plug-in (analysis.statistics.decision.simulate_contrast at the
measured mean and sd: the rule before issue 47) and the new posterior predictive
(analysis.statistics.predictive), same first runs. The truth a printed value is checked against: the
chance that a rerun at the true effect gives the first run's outcome, from ``--truth-reruns`` reruns
of this file's simulation. Calibration table: the runs binned by the printed value, per bin the mean
printed and the mean true agreement (calibrated: equal; target |difference| <= 0.03 in every bin),
and how often the true agreement lies in the printed 80% range. The same for collapse claims (Jeffreys
Beta posteriors, exact binomial reruns; delta 0.2; 25 rate pairs, each rate 0.1 to 0.9 by 0.2; the
truth by simulation with statsmodels' Newcombe interval). Then the demo's four claims at once, at the
field's effects (claims sharing a recipe correlated): the printed P(every outcome again), a product
that takes the claims as independent, against the true chance that a rerun repeats the first run's
four outcomes. Then the declared design's boundaries: the joint miss of its levels by an independent
simulation of the seeds, and the joint miss of the collapse claims'
Newcombe intervals read at those (t-based) levels. Seeded: the same arguments print the same figures.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep

from analysis.statistics.boundaries import look_levels
from analysis.statistics.decision import simulate_collapse, simulate_contrast
from analysis.statistics.intervals import ALPHA
from analysis.statistics.predictive import collapse_agreement, contrast_agreement
from grid.config import load
from grid.settings import Config

# the design the demo runs, as config.yaml declares it (a hard-coded copy measured a design the demo had left)
DECLARED = Config.build(load(Path(__file__).resolve().parents[1] / "config.yaml"))
LOOKS, BOUNDARY = DECLARED.seeding.looks, DECLARED.seeding.boundary
LEVEL = ALPHA / len(DECLARED.claims)
DELTA, SD = 10.0, 6.0
# evenly spaced (the flat prior the printed value assumes: calibration in bins is defined only against a
# spread of truths), the boundaries 0 and +-10 among them; equivalence is symmetric: 0..22 stands for -22..22
TRUTHS = {"greater": tuple(range(-14, 35, 2)), "equivalent": tuple(range(0, 23, 2))}
RATE_DELTA = 0.2
RATE_TRUTHS = tuple((x, y) for x in (0.1, 0.3, 0.5, 0.7, 0.9) for y in (0.1, 0.3, 0.5, 0.7, 0.9))  # evenly spread
BINS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.97, 1.0001)
FINAL = {"greater": ("exceeds", "below effect", "negligible", "opposite"), "equivalent": ("negligible", "exceeds")}
FINAL["less"] = FINAL["greater"]


def classify(low, high, delta: float, expect: str) -> np.ndarray:
    """The outcome table of docs/statistics.md, written out again (not analysis.statistics.decision)."""
    out = np.full(np.shape(low), "undecided", dtype=object)
    if expect == "less":  # the mirror of greater
        low, high = -high, -low
    if expect != "equivalent":
        rows = [("negligible", (low > -delta) & (high < delta)), ("opposite", high < 0), ("claimed sign", low > 0),
                ("below effect", (low > 0) & (high < delta)), ("exceeds", low >= delta)]
    else:
        rows = [("nonzero", (low > 0) | (high < 0)), ("exceeds", (low >= delta) | (high <= -delta)),
                ("negligible", (low > -delta) & (high < delta))]
    for name, where in rows:  # later rows win
        out[where] = name
    return out


def first_runs(truth: float, expect: str, runs: int, levels, rng, keep: bool = True):
    """Outcome of each simulated run of the design (and, with ``keep``, its mean, sd and n at the look it stopped)."""
    return read_design(rng.normal(truth, SD, (runs, LOOKS[-1])), expect, levels, keep)


def read_design(seeds: np.ndarray, expect: str, levels, keep: bool = True):
    """The design read on each row of per-seed contrasts (:func:`first_runs`)."""
    runs = len(seeds)
    result = np.full(runs, "", dtype=object)
    mean, sd, n_at = np.zeros(runs), np.zeros(runs), np.zeros(runs, dtype=int)
    for k, (n, level) in enumerate(zip(LOOKS, levels)):
        m, s = seeds[:, :n].mean(axis=1), seeds[:, :n].std(axis=1, ddof=1)
        half = stats.t.isf(level / 2, n - 1) * s / math.sqrt(n)
        names = classify(m - half, m + half, DELTA, expect)
        stop = (result == "") & (np.isin(names, FINAL[expect]) | (k == len(LOOKS) - 1))
        result[stop], mean[stop], sd[stop], n_at[stop] = names[stop], m[stop], s[stop], n
    return (result, mean, sd, n_at) if keep else result


def shares(names: np.ndarray) -> dict:
    values, counts = np.unique(names, return_counts=True)
    return dict(zip(values, counts / len(names)))


def calibration(rows: list[tuple[float, float, float, float, float]]) -> list[str]:
    """rows: (old printed, new printed, true, range low, range high) per first run."""
    data = np.array(rows)
    lines = ["| printed | runs (old) | old: mean printed | mean true | abs diff | runs (new) | new: mean printed | "
             "mean true | abs diff | true in the new 80% range |", "|---" * 10 + "|"]
    for low, high in zip(BINS, BINS[1:]):
        cells = [f"{low:.2f}-{min(high, 1):.2f}"]
        for column in (0, 1):
            inside = (data[:, column] >= low) & (data[:, column] < high)
            if not inside.any():
                cells += ["0", "–", "–", "–"]
                continue
            printed, true = data[inside, column].mean(), data[inside, 2].mean()
            cells += [str(int(inside.sum())), f"{printed:.3f}", f"{true:.3f}", f"{abs(printed - true):.3f}"]
        inside = (data[:, 1] >= low) & (data[:, 1] < high)
        covered = (data[inside, 3] <= data[inside, 2]) & (data[inside, 2] <= data[inside, 4])
        cells.append(f"{covered.mean():.2f}" if inside.any() else "–")
        lines.append("| " + " | ".join(cells) + " |")
    pooled = [abs(data[:, c].mean() - data[:, 2].mean()) for c in (0, 1)]
    weighted = [np.mean([abs(data[(data[:, c] >= lo) & (data[:, c] < hi), c].mean()
                             - data[(data[:, c] >= lo) & (data[:, c] < hi), 2].mean())
                         for lo, hi in zip(BINS, BINS[1:]) if ((data[:, c] >= lo) & (data[:, c] < hi)).any()])
                for c in (0, 1)]
    covered = np.mean((data[:, 3] <= data[:, 2]) & (data[:, 2] <= data[:, 4]))
    lines.append(f"| all | {len(data)} | {data[:, 0].mean():.3f} | {data[:, 2].mean():.3f} | {pooled[0]:.3f} | "
                 f"{len(data)} | {data[:, 1].mean():.3f} | {data[:, 2].mean():.3f} | {pooled[1]:.3f} | {covered:.2f} |")
    lines.append(f"\nmean over bins of |mean printed - mean true|: old {weighted[0]:.3f}, new {weighted[1]:.3f}")
    return lines


def contrast_table(runs: int, truth_reruns: int) -> tuple[list[str], list]:
    levels = look_levels(LOOKS, LEVEL, BOUNDARY)
    rng = np.random.default_rng(47)
    by_truth = ["| claim | truth (points) | first runs' outcomes | old: mean printed | new: mean printed | "
                "true P(two runs agree) |", "|---" * 6 + "|"]
    rows = []
    for expect, truths in TRUTHS.items():
        for truth in truths:
            truth_share = shares(first_runs(truth, expect, truth_reruns, levels, rng, keep=False))
            names, mean, sd, n_at = first_runs(truth, expect, runs, levels, rng)
            here = []
            for name, m, s, n in zip(names, mean, sd, n_at):
                old = float(np.mean(simulate_contrast(m, s, LOOKS, levels, DELTA, expect)[0] == name))
                new, low, high = contrast_agreement(m, s, s / math.sqrt(n), n - 1, LOOKS, levels, DELTA, expect, name)
                here.append((old, new, truth_share.get(name, 0.0), low, high))
            rows += here
            top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(shares(names).items(), key=lambda x: -x[1])[:2])
            agree = sum(v ** 2 for v in truth_share.values())
            by_truth.append(f"| {expect} | {truth:+g} | {top} | {np.mean([h[0] for h in here]):.3f} | "
                            f"{np.mean([h[1] for h in here]):.3f} | {agree:.3f} |")
    return by_truth, rows


def collapse_runs(rate_x: float, rate_y: float, runs: int, levels, rng):
    """(outcome, counts at the stopping look) of each simulated run of a collapse claim (expect greater)."""
    x = np.cumsum(rng.random((runs, LOOKS[-1])) < rate_x, axis=1)
    y = np.cumsum(rng.random((runs, LOOKS[-1])) < rate_y, axis=1)
    result = np.full(runs, "", dtype=object)
    counts = np.zeros((runs, 4), dtype=int)
    for k, (n, level) in enumerate(zip(LOOKS, levels)):
        low, high = confint_proportions_2indep(x[:, n - 1], n, y[:, n - 1], n, method="newcomb", alpha=level)
        names = classify(np.asarray(low), np.asarray(high), RATE_DELTA, "greater")
        stop = (result == "") & (np.isin(names, FINAL["greater"]) | (k == len(LOOKS) - 1))
        result[stop] = names[stop]
        counts[stop] = np.stack([x[:, n - 1], np.full(runs, n), y[:, n - 1], np.full(runs, n)], axis=1)[stop]
    return result, counts


def collapse_table(runs: int, truth_reruns: int) -> list:
    levels = look_levels(LOOKS, LEVEL, BOUNDARY)
    rng = np.random.default_rng(48)
    rows = []
    for rate_x, rate_y in RATE_TRUTHS:
        truth_share = shares(collapse_runs(rate_x, rate_y, truth_reruns, levels, rng)[0])
        names, counts = collapse_runs(rate_x, rate_y, runs, levels, rng)
        for name, (k_x, n_x, k_y, n_y) in zip(names, counts):
            old = float(np.mean(simulate_collapse(k_x / n_x, k_y / n_y, LOOKS, levels, RATE_DELTA, "greater")[0] == name))
            new, low, high = collapse_agreement([k_x, n_x, k_y, n_y], LOOKS, levels, RATE_DELTA, "greater", name)
            rows.append((old, new, truth_share.get(name, 0.0), low, high))
    return rows


def joint(runs: int, reruns: int) -> list[str]:
    """The demo's four claims at the field's effects (benchmarks.bench_verdicts.COSTS: claims sharing
    sat_gspo correlated as in a grid): the printed P(every outcome again), the product of the claims'
    probabilities, against the true chance that a rerun gives the first run's four outcomes."""
    from benchmarks.bench_verdicts import CLAIMS, COSTS

    levels, rng = look_levels(LOOKS, LEVEL, BOUNDARY), np.random.default_rng(51)

    def grids(count):
        draws = {recipe: rng.normal(mean, sd, (count, LOOKS[-1])) for recipe, (mean, sd) in COSTS.items()}
        return {name: read_design(sum(w * draws[r] for r, w in weights.items()), expect, levels)
                for name, (weights, expect) in CLAIMS.items()}

    def vectors(read):
        return np.array([" | ".join(row) for row in zip(*(read[name][0] for name in CLAIMS))])

    reread = grids(reruns)
    truth, marginal = shares(vectors(reread)), {name: shares(reread[name][0]) for name in CLAIMS}
    first = grids(runs)
    printed = [math.prod(contrast_agreement(first[name][1][i], first[name][2][i], first[name][2][i] / math.sqrt(first[name][3][i]),
                                            first[name][3][i] - 1, LOOKS, levels, DELTA, CLAIMS[name][1], first[name][0][i])[0]
                         for name in CLAIMS) for i in range(runs)]
    true = [truth.get(v, 0.0) for v in vectors(first)]
    independent = [math.prod(marginal[name].get(first[name][0][i], 0.0) for name in CLAIMS) for i in range(runs)]
    return [f"{runs} first runs: mean printed P(all four again) {np.mean(printed):.3f}; at the truth: the joint "
            f"{np.mean(true):.3f}, the product of the claims' own {np.mean(independent):.3f} (what independence "
            f"costs), two runs agree {sum(v ** 2 for v in truth.values()):.3f}"]


def joint_miss(levels, paths: int = 4_000_000) -> float:
    """P(some look's paired-t interval misses), numpy seeds and scipy's t (not the project's code)."""
    rng = np.random.default_rng(49)
    critical = [stats.t.isf(level / 2, n - 1) for n, level in zip(LOOKS, levels)]
    missed = 0
    for start in range(0, paths, 500_000):
        seeds = rng.standard_normal((min(500_000, paths - start), LOOKS[-1]))
        miss = np.zeros(len(seeds), dtype=bool)
        for n, c in zip(LOOKS, critical):
            sample = seeds[:, :n]
            miss |= np.abs(sample.mean(axis=1)) / (sample.std(axis=1, ddof=1) / math.sqrt(n)) > c
        missed += miss.sum()
    return missed / paths


def collapse_miss(rate_x: float, rate_y: float, levels, paths: int = 200_000) -> float:
    """P(some look's Newcombe interval misses the true difference of rates) at the t-based levels."""
    rng = np.random.default_rng(50)
    x = np.cumsum(rng.random((paths, LOOKS[-1])) < rate_x, axis=1)
    y = np.cumsum(rng.random((paths, LOOKS[-1])) < rate_y, axis=1)
    miss = np.zeros(paths, dtype=bool)
    for n, level in zip(LOOKS, levels):
        low, high = confint_proportions_2indep(x[:, n - 1], n, y[:, n - 1], n, method="newcomb", alpha=level)
        miss |= (np.asarray(low) > rate_x - rate_y) | (np.asarray(high) < rate_x - rate_y)
    return float(miss.mean())


def boundaries(paths: int) -> list[str]:
    new = look_levels(LOOKS, LEVEL, BOUNDARY)
    lines = [f"| levels ({' -> '.join(map(str, LOOKS))} {BOUNDARY}) | " + " | ".join(f"look {k + 1}" for k in range(len(LOOKS)))
             + f" | joint miss (independent simulation, {paths:,} paths; nominal {LEVEL:g}) |", "|---" * (len(LOOKS) + 2) + "|",
             "| 10^7 sufficient-statistic paths, exact shares | " + " | ".join(f"{v:.4g}" for v in new)
             + f" | {joint_miss(new, paths):.5f} |"]
    lines += ["", f"| collapse rates (x, y) | joint miss of the Newcombe intervals at these levels ({paths // 20:,} paths) |",
              "|---|---|"]
    for rates in ((0.1, 0.1), (0.3, 0.3), (0.5, 0.5), (0.3, 0.1), (0.6, 0.2), (0.9, 0.5)):
        lines.append(f"| {rates[0]}, {rates[1]} | {collapse_miss(*rates, new, paths // 20):.4f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500, help="first runs per truth")
    parser.add_argument("--truth-reruns", type=int, default=200_000, help="reruns that give each truth's outcome shares")
    parser.add_argument("--collapse-runs", type=int, default=200, help="first runs per collapse truth")
    parser.add_argument("--joint-runs", type=int, default=500, help="first runs of the demo's four claims")
    parser.add_argument("--paths", type=int, default=4_000_000, help="paths of the boundaries' check (collapse: / 20)")
    args = parser.parse_args(argv)
    by_truth, rows = contrast_table(args.runs, args.truth_reruns)
    print("## Claims on a score: by truth\n", *by_truth, "", "## Claims on a score: calibration (every truth pooled)\n",
          *calibration(rows), sep="\n", flush=True)
    print("\n## Collapse claims: calibration\n", *calibration(collapse_table(args.collapse_runs, args.truth_reruns // 4)),
          sep="\n", flush=True)
    print("\n## All four demo claims at once (the product, claims taken as independent)\n",
          *joint(args.joint_runs, args.truth_reruns), sep="\n", flush=True)
    print("\n## The demo's boundaries\n", *boundaries(args.paths), sep="\n")


if __name__ == "__main__":
    main()
