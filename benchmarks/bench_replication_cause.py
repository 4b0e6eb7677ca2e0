"""What carries the printed replication probability's miss on the field's effects (issue 63)?

    .venv/bin/python -m benchmarks.bench_replication_cause [--runs 30] [--write docs/figures]

The first runs of benchmarks/bench_replication.py's field table (the same truths, seed and truth reruns:
the same runs), each read at its stopping look, print their P(same outcome) five ways, each from 400
draws of the per-seed contrast's (mean, sd) read against the same 400 reruns
(analysis.statistics.predictive.chances_at, its seed); only the draws differ:

- **printed**: as table.md prints it (contrast_agreement: the mean and the sd from their posterior);
- **spread known**: the sd the truth's, the mean from its posterior given that sd (no spread uncertainty);
- **effect known**: the mean the truth's, the sd from its posterior (no effect uncertainty);
- **both known**: the truth itself: what is left is the printed value's own Monte Carlo error (its 400
  reruns, the same for every run of a truth) against the truth's outcome shares;
- **spread prior**: the sd's posterior under a log-normal prior fitted to the field's per-seed sds
  (empirical Bayes, bench only: log sd mean and sd of the field's), the mean flat given it.

Per bin of each variant's own value: mean printed against mean true, the Monte Carlo error (sd of printed -
true / sqrt(runs): the runs taken as independent, which the shared reruns of one truth are not, so "both
known" shows the floor it leaves out), the target 0.03 in bins of >= 30 runs. ``--write DIR``:
DIR/replication_cause.md and .json (:func:`summary` is what docs/statistics.md quotes). Seeded.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from analysis.statistics.predictive import DRAWS, RANGE, SEED, chances_at
from benchmarks.replication_truths import (
    FIELD,
    FIELD_SEED,
    MIN_RUNS,
    ROOT,
    Design,
    calibration,
    field_truths,
    first_runs,
    verdict,
    write_figures,
)

VARIANTS = ("printed", "spread known", "effect known", "both known", "spread prior")
POOL = 8  # spread prior: the flat-prior sds drawn POOL x DRAWS, resampled by the prior's weight


def draws(variant: str, m: float, s: float, n: int, truth: tuple[float, float], prior: tuple[float, float],
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """DRAWS (mean, sd) draws of one first run (mean m, sd s on n seeds) under ``variant`` (module docstring);
    the printed variant's are contrast_agreement's own (the same generator calls in the same order)."""
    df = n - 1
    if variant in ("printed", "effect known", "spread prior"):
        sigma = s * np.sqrt(df / rng.chisquare(df, POOL * DRAWS if variant == "spread prior" else DRAWS))
    if variant == "spread prior":  # importance resampling: the flat-prior posterior's weight 1 / sd, times sd x prior
        weight = stats.norm.pdf(np.log(sigma), *prior)
        sigma = rng.choice(sigma, DRAWS, p=weight / weight.sum())
    if variant in ("spread known", "both known"):
        sigma = np.full(DRAWS, truth[1])
    if variant in ("effect known", "both known"):
        return np.full(DRAWS, truth[0]), sigma
    return m + sigma / math.sqrt(n) * rng.standard_normal(DRAWS), sigma


def variant_rows(truths, design: Design, runs: int, truth_reruns: int, prior) -> dict[str, list]:
    """Per variant: (printed, true, range low, range high) of every first run (points as fractions)."""
    rows = {variant: [] for variant in VARIANTS}
    for _, expect, mean, sd, truth_share, read in first_runs(truths, design, runs, truth_reruns, FIELD_SEED):
        for name, m, s, n in zip(*read):
            for variant in VARIANTS:
                rng = np.random.default_rng(SEED)
                mu, sigma = draws(variant, m / 100, s / 100, n, (mean / 100, sd / 100), prior, rng)
                each = chances_at(mu, sigma, design.looks, design.levels, design.delta / 100, expect, name, rng)
                rows[variant].append((float(np.mean(each)), truth_share.get(name, 0.0), *np.quantile(each, RANGE)))
    return rows


def summary(figures: dict) -> str:
    """The sentence docs/statistics.md quotes (tests/project/test_doc_figures.py holds it to the figures)."""
    parts = [f"{key} {f['largest']:.3f} (Monte Carlo error <= {f['largest_error']:.3f})" if f["counted_bins"]
             else f"{key}: no bin of >= {MIN_RUNS} runs" for key, f in ((key, figures[key]) for key in VARIANTS)]
    return (f"On {figures['design']}, the field's first runs ({figures['runs_per_truth']} per truth), largest "
            f"|printed - true| over the bins of >= {MIN_RUNS} runs: " + "; ".join(parts) + ".")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml", help="the config whose design is read")
    parser.add_argument("--runs", type=int, default=30, help="first runs per field truth")
    parser.add_argument("--truth-reruns", type=int, default=100_000, help="reruns that give each truth's outcome shares")
    parser.add_argument("--write", type=Path, help="a folder: replication_cause.md and replication_cause.json")
    args = parser.parse_args(argv)
    started, design = time.monotonic(), Design(args.config)
    truths, _ = field_truths(FIELD)
    logs = np.log([sd for *_, sd in truths])
    prior = (float(logs.mean()), float(logs.std(ddof=1)))  # log-normal over the field's sds, as fractions
    rows = variant_rows(truths, design, args.runs, args.truth_reruns, (prior[0] - math.log(100), prior[1]))
    out = [f"# What carries the replication probability's miss on the field ({design.name}, delta {design.delta:g} "
           f"points; {len(truths)} truths x {args.runs} first runs)", "",
           f"spread prior: log-normal over the field's per-seed sds, median {math.exp(prior[0]):.2f} points, "
           f"log sd {prior[1]:.2f}", ""]
    figures = {"design": design.name, "config": args.config.name, "runs_per_truth": args.runs}
    for variant in VARIANTS:
        table, bins = calibration(rows[variant])
        figures[variant] = verdict(bins)
        out += [f"## {variant}", "", *table, ""]
    figures.update(minutes=round((time.monotonic() - started) / 60, 1), arguments=sys.argv[1:] if argv is None else argv)
    out += [f"run time {figures['minutes']:.1f} min", "", summary(figures)]
    print(*out, sep="\n")
    write_figures(args.write, "replication_cause", out, figures)


if __name__ == "__main__":
    main()
