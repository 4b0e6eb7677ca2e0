"""Is the printed replication probability calibrated on the design the config declares, for the effects
users meet, and do the design's boundaries hold their level?

    .venv/bin/python -m benchmarks.bench_replication [--config config.yaml] [--write docs/figures]

The design is read from the config (default config.yaml: its looks and boundary, alpha over its claims,
their smallest effect). Two distributions of truths (per-seed contrasts: mean, sd; AUC points):
**field**, the field's measured contrasts (benchmarks/data/field_contrasts.csv, each with the
docs/findings.md table it comes from; a staleness cost read as a "less" and as an "equivalent" claim, a
difference of costs as a "greater" one), and **wide**, evenly spaced truths (directional every 2 points
from -14 to +34, equivalence 0 to 22; sd 6), the boundaries 0 and +-delta among them. For each truth
first runs of the design are simulated by the benches' own code (benchmarks/replication_truths.py: numpy
seeds, scipy's t, the outcome table written out again); each prints, from its own data at its stopping look, the project's posterior
predictive (analysis.statistics.predictive, flat prior), and on the field also under a normal prior fitted
to the field's effects (empirical Bayes). The truth it is checked against: the chance that a rerun at the
true effect gives that run's outcome (``--truth-reruns`` reruns). Per bin of the printed value: mean
printed against mean true (target |difference| <= 0.03 in every bin with >= 30 runs), the Monte Carlo
error (sd of printed - true / sqrt(runs)), how often the truth lies in the 80% range; per truth the mean
printed against the true P(two runs agree). Then collapse claims (25 rate pairs) and the boundaries' joint
miss. ``--write DIR``: DIR/replication.md (all printed) and DIR/replication.json (the figures; :func:`summary`
is what docs/statistics.md quotes). Seeded: the same arguments print the same figures.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep

from analysis.statistics.predictive import collapse_agreement, contrast_agreement
from benchmarks.replication_truths import (
    FIELD,
    FIELD_SEED,
    FINAL,
    MIN_RUNS,
    ROOT,
    TARGET,
    Design,
    calibration,
    classify,
    field_truths,
    first_runs,
    shares,
    verdict,
    write_figures,
)

WIDE_SD = 6.0
WIDE = {"greater": tuple(range(-14, 35, 2)), "equivalent": tuple(range(0, 23, 2))}  # equivalence is symmetric
RATE_DELTA = 0.2
RATE_TRUTHS = tuple((x, y) for x in (0.1, 0.3, 0.5, 0.7, 0.9) for y in (0.1, 0.3, 0.5, 0.7, 0.9))  # evenly spread
SPLIT = 0.2  # a truth "splits" where its second most common outcome has at least this share of runs


def contrast_runs(truths, design: Design, runs: int, truth_reruns: int, seed: int, priors: dict | None = None):
    """Per truth: (label, expect, truth, its outcome shares, the first runs' shares, [(printed, true, range low,
    range high) per first run], the same printed under ``priors`` (per claim kind, points) or None)."""
    out = []
    for label, expect, mean, _, truth_share, (names, means, sds, n_at) in first_runs(truths, design, runs,
                                                                                     truth_reruns, seed):
        rows, prior_rows = [], []
        for name, m, s, n in zip(names, means, sds, n_at):
            args = (m / 100, s / 100, s / 100 / math.sqrt(n), n - 1, design.looks, design.levels, design.delta / 100,
                    expect, name)
            point, low, high = contrast_agreement(*args)
            rows.append((point, truth_share.get(name, 0.0), low, high))
            if priors:
                point, low, high = contrast_agreement(*args, prior=tuple(v / 100 for v in priors[expect]))
                prior_rows.append((point, truth_share.get(name, 0.0), low, high))
        out.append((label, expect, mean, truth_share, shares(names), rows, prior_rows or None))
    return out


def by_truth(results) -> tuple[list[str], dict]:
    """Per truth the mean printed against the true P(two runs agree) (sum of squared outcome shares: the mean,
    over first runs, of the true chance of their own outcome), and per prior the largest error where two
    outcomes split."""
    priors = results[0][6] is not None
    lines = ["| claim | truth (points) | first runs' outcomes | true P(two runs agree) | mean printed | printed - true |"
             + (" with the field's prior | printed - true |" if priors else ""), "|---" * (8 if priors else 6) + "|"]
    worst = {}
    for label, expect, mean, truth_share, first, *variants in results:
        agree = sum(v ** 2 for v in truth_share.values())
        top = sorted(first.items(), key=lambda x: -x[1])[:2]
        cells = [expect, f"{label} ({mean:+.1f})", ", ".join(f"{k} {v:.2f}" for k, v in top), f"{agree:.3f}"]
        ranked = sorted(truth_share.values(), reverse=True)
        for variant, rows in zip(("flat", "field"), variants):
            if rows is None:
                continue
            printed = float(np.mean([r[0] for r in rows]))
            cells += [f"{printed:.3f}", f"{printed - agree:+.3f}"]
            if len(ranked) > 1 and ranked[1] >= SPLIT and (variant not in worst
                                                           or abs(printed - agree) > abs(worst[variant]["error"])):
                worst[variant] = {"claim": expect, "truth": f"{label} ({mean:+.1f})", "printed": round(printed, 3),
                                  "true": round(agree, 3), "error": round(printed - agree, 3)}
        lines.append("| " + " | ".join(cells) + " |")
    return lines, worst


def collapse_table(design: Design, runs: int, truth_reruns: int) -> list:
    rng, rows = np.random.default_rng(48), []
    for rate_x, rate_y in RATE_TRUTHS:
        truth_share = shares(collapse_runs(rate_x, rate_y, truth_reruns, design, rng)[0])
        names, counts = collapse_runs(rate_x, rate_y, runs, design, rng)
        for name, (k_x, n_x, k_y, n_y) in zip(names, counts):
            point, low, high = collapse_agreement([k_x, n_x, k_y, n_y], design.looks, design.levels, RATE_DELTA,
                                                  "greater", name)
            rows.append((point, truth_share.get(name, 0.0), low, high))
    return rows


def collapse_runs(rate_x: float, rate_y: float, runs: int, design: Design, rng):
    """(outcome, counts at the stopping look) of each simulated run of a collapse claim (expect greater)."""
    x = np.cumsum(rng.random((runs, design.looks[-1])) < rate_x, axis=1)
    y = np.cumsum(rng.random((runs, design.looks[-1])) < rate_y, axis=1)
    result = np.full(runs, "", dtype=object)
    counts = np.zeros((runs, 4), dtype=int)
    for k, (n, level) in enumerate(zip(design.looks, design.levels)):
        low, high = confint_proportions_2indep(x[:, n - 1], n, y[:, n - 1], n, method="newcomb", alpha=level)
        names = classify(np.asarray(low), np.asarray(high), RATE_DELTA, "greater")
        stop = (result == "") & (np.isin(names, FINAL["greater"]) | (k == len(design.looks) - 1))
        result[stop] = names[stop]
        counts[stop] = np.stack([x[:, n - 1], np.full(runs, n), y[:, n - 1], np.full(runs, n)], axis=1)[stop]
    return result, counts


def joint_miss(design: Design, paths: int = 4_000_000) -> float:
    """P(some look's paired-t interval misses), numpy seeds and scipy's t (not the project's code)."""
    rng = np.random.default_rng(49)
    critical = [stats.t.isf(level / 2, n - 1) for n, level in zip(design.looks, design.levels)]
    missed = 0
    for start in range(0, paths, 500_000):
        seeds = rng.standard_normal((min(500_000, paths - start), design.looks[-1]))
        miss = np.zeros(len(seeds), dtype=bool)
        for n, c in zip(design.looks, critical):
            sample = seeds[:, :n]
            miss |= np.abs(sample.mean(axis=1)) / (sample.std(axis=1, ddof=1) / math.sqrt(n)) > c
        missed += miss.sum()
    return missed / paths


def collapse_miss(rate_x: float, rate_y: float, design: Design, paths: int = 200_000) -> float:
    """P(some look's Newcombe interval misses the true difference of rates) at the t-based levels."""
    rng = np.random.default_rng(50)
    x = np.cumsum(rng.random((paths, design.looks[-1])) < rate_x, axis=1)
    y = np.cumsum(rng.random((paths, design.looks[-1])) < rate_y, axis=1)
    miss = np.zeros(paths, dtype=bool)
    for n, level in zip(design.looks, design.levels):
        low, high = confint_proportions_2indep(x[:, n - 1], n, y[:, n - 1], n, method="newcomb", alpha=level)
        miss |= (np.asarray(low) > rate_x - rate_y) | (np.asarray(high) < rate_x - rate_y)
    return float(miss.mean())


def boundaries(design: Design, paths: int) -> tuple[list[str], float]:
    miss = joint_miss(design, paths)
    lines = [f"| levels ({design.name}) | " + " | ".join(f"look {k + 1}" for k in range(len(design.looks)))
             + f" | joint miss (independent simulation, {paths:,} paths; nominal {design.level:g}) |",
             "|---" * (len(design.looks) + 2) + "|",
             "| 10^7 sufficient-statistic paths, exact shares | " + " | ".join(f"{v:.4g}" for v in design.levels)
             + f" | {miss:.5f} |"]
    lines += ["", f"| collapse rates (x, y) | joint miss of the Newcombe intervals ({paths // 20:,} paths) |", "|---|---|"]
    for rates in ((0.1, 0.1), (0.3, 0.3), (0.5, 0.5), (0.3, 0.1), (0.6, 0.2), (0.9, 0.5)):
        lines.append(f"| {rates[0]}, {rates[1]} | {collapse_miss(*rates, design, paths // 20):.4f} |")
    return lines, float(miss)


def summary(figures: dict) -> str:
    """The sentence docs/statistics.md quotes (tests/project/test_doc_figures.py holds it to the figures)."""
    def bins(key: str) -> str:
        f = figures[key]
        if not f["counted_bins"]:
            return f"{key}: no bin with >= {MIN_RUNS} runs"
        return (f"{key}: {'within' if f['met'] else 'not within'} {TARGET} in every bin with >= {MIN_RUNS} runs "
                f"(largest |printed - true| {f['largest']:.3f}, {f['counted_bins']} bins, Monte Carlo error <= "
                f"{f['largest_error']:.3f})")
    worst = [figures[key]["worst_split"]["flat"] for key in ("field", "wide")]
    return (f"On {figures['design']} ({figures['config']}), by bin of the printed value: "
            + "; ".join(bins(key) for key in ("field", "field, field prior", "wide")) + ". At one fixed truth where "
            "two outcomes split the printed value can be far off: " + " and ".join(
                f"{w['printed']:.2f} printed against {w['true']:.2f} true ({w['claim']} claim at {w['truth']})"
                for w in worst) + f" ({figures['minutes']:.0f} min).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml", help="the config whose design is read")
    parser.add_argument("--field", type=Path, default=FIELD, help="the field's contrasts (CSV)")
    parser.add_argument("--runs", type=int, default=30, help="first runs per field truth")
    parser.add_argument("--wide-runs", type=int, default=40, help="first runs per wide-spread truth")
    parser.add_argument("--truth-reruns", type=int, default=100_000, help="reruns that give each truth's outcome shares")
    parser.add_argument("--collapse-runs", type=int, default=20, help="first runs per collapse truth")
    parser.add_argument("--paths", type=int, default=2_000_000, help="paths of the boundaries' check (collapse: / 20)")
    parser.add_argument("--write", type=Path, help="a folder: replication.md (all printed) and replication.json")
    args = parser.parse_args(argv)
    started, design, out, figures = time.monotonic(), Design(args.config), [], {}

    def say(*lines):
        print(*lines, sep="\n", flush=True)
        out.extend(lines)

    say(f"# The replication probability on the declared design ({args.config.name}: {design.name}, delta "
        f"{design.delta:g} points)", "")
    field, priors = field_truths(args.field)
    wide = [("wide", expect, float(truth), WIDE_SD) for expect, truths in WIDE.items() for truth in truths]
    for name, truths, runs, seed in (("field", field, args.runs, FIELD_SEED), ("wide", wide, args.wide_runs, 52)):
        results = contrast_runs(truths, design, runs, args.truth_reruns, seed, priors if name == "field" else None)
        for variant, index in (("flat", 5), ("field prior", 6)):
            if results[0][index] is None:
                continue
            key = name if variant == "flat" else f"{name}, field prior"
            table, bins = calibration([row for result in results for row in result[index]])
            figures[key] = {"truths": len(truths), "runs_per_truth": runs, **verdict(bins)}
            prior = "the printed value's flat prior" if variant == "flat" else "a normal prior over the field's effects " \
                f"of the claim's kind (empirical Bayes): {', '.join(f'{e} {m:+.1f} sd {w:.1f}' for e, (m, w) in priors.items())}"
            say(f"## Claims on a score, {name} truths ({len(truths)} truths x {runs} first runs), {prior}: calibration",
                "", *table, "")
        truth_lines, worst = by_truth(results)
        figures[name]["worst_split"] = worst
        say(f"## Claims on a score, {name} truths: by truth", "", *truth_lines, "")
        for variant, row in worst.items():
            say(f"largest per-truth error where two outcomes split (the second at >= {SPLIT} of runs), {variant} prior: "
                f"{row['claim']} at {row['truth']}: printed {row['printed']:.2f} on average against {row['true']:.2f} "
                f"true ({row['error']:+.2f})", "")
    table, figures["collapse"] = calibration(collapse_table(design, args.collapse_runs, args.truth_reruns // 4))
    say("## Collapse claims: calibration (25 rate pairs)", "", *table, "")
    lines, figures["joint_miss"] = boundaries(design, args.paths)
    say("## The declared design's boundaries", "", *lines, "")
    minutes = (time.monotonic() - started) / 60
    figures.update(design=design.name, config=args.config.name, minutes=round(minutes, 1),
                   arguments=sys.argv[1:] if argv is None else argv)
    say(f"run time {minutes:.1f} min", "", summary(figures))
    write_figures(args.write, "replication", out, figures)


if __name__ == "__main__":
    main()
