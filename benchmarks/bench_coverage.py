"""Coverage of the report's 95% intervals at the seed counts the harness uses: methods x n x distributions.

    .venv/bin/python -m benchmarks.bench_coverage [--trials 1000] [--bootstrap-trials 1000] [--n 3 5 10 20]
        [--contrast-trials 2000] [--survival-trials 2000]
    .venv/bin/python -m benchmarks.bench_coverage --grid results/<grid>   # AUC vs fixed-step power
    .venv/bin/python -m benchmarks.bench_coverage --verdicts   # the claims' decision rule end to end

Each trial draws n seed scores per arm from a known distribution and asks whether the interval
(analysis.statistics.intervals, the functions the report calls) contains the true value: the mean of x (Student
t, as reported; BCa bootstrap for comparison), mean(x) - mean(y) (Welch), and P(X > Y) (BCa
bootstrap, which the report gives only from analysis.statistics.intervals.BOOTSTRAP_MIN_SEEDS seeds per arm).
A 95% interval should cover about 0.95 of the time; with T trials the printed fraction has a
standard error of about sqrt(0.95 * 0.05 / T) (0.007 at 1,000). The last distribution is a
stress case (skewness about 2, a score pinned near 0): the limit of the intervals, not their use.
Seeded: the same arguments print the same table.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import integrate, stats

from analysis.statistics.contrasts import paired, seeds_needed, tost_p, welch_satterthwaite
from analysis.statistics.intervals import ALPHA, _improvement, bootstrap_interval, t_interval
from analysis.statistics.survival import logrank
from grid.folder import GridDir


@dataclass(frozen=True)
class Scores:
    """Seed scores of two arms: x ~ dist(*x_args), y ~ dist(*y_args) (scipy.stats names)."""
    name: str
    dist: str
    x_args: tuple[float, float]
    y_args: tuple[float, float]

    def draw(self, rng: np.random.Generator, shape) -> tuple[np.ndarray, np.ndarray]:
        dist = getattr(stats, self.dist)
        return (dist.rvs(*self.x_args, size=shape, random_state=rng),
                dist.rvs(*self.y_args, size=shape, random_state=rng))

    def truth(self) -> dict[str, float]:
        """True mean of x, mean(x) - mean(y) and P(X > Y) (continuous: no ties)."""
        x, y = getattr(stats, self.dist)(*self.x_args), getattr(stats, self.dist)(*self.y_args)
        if self.dist == "norm":
            p = float(stats.norm.cdf((x.mean() - y.mean()) / np.hypot(x.std(), y.std())))
        else:  # P(X > Y) = integral of f_x(v) F_y(v) dv
            p = integrate.quad(lambda v: x.pdf(v) * y.cdf(v), *x.support())[0]
        return {"mean": float(x.mean()), "difference": float(x.mean() - y.mean()), "improvement": p}


# normal: scores around 70% with a 3-point spread (the simulation), y one spread lower;
# beta: a skewed score near 20% (skewness 0.8 and 1.1); stress: skewness 1.8 and 2.1.
DISTRIBUTIONS = (Scores("normal", "norm", (0.70, 0.03), (0.67, 0.03)),
                 Scores("beta(2,8)", "beta", (2.0, 8.0), (1.5, 8.5)),
                 Scores("stress beta(0.5,4)", "beta", (0.5, 4.0), (0.4, 4.1)))


def covered(low, high, truth) -> np.ndarray:
    return (np.asarray(low) <= truth) & (truth <= np.asarray(high))


def analytic_coverage(scores: Scores, n: int, trials: int, seed: int = 0) -> dict[str, float]:
    """Coverage of the Student t mean interval and the Welch difference interval, vectorised."""
    x, y = scores.draw(np.random.default_rng(seed), (trials, n))
    truth = scores.truth()
    _, low, high = t_interval(x)
    _, d_low, d_high, *_ = welch_satterthwaite((1.0, -1.0), [x, y])
    return {"mean student-t": float(covered(low, high, truth["mean"]).mean()),
            "difference welch": float(covered(d_low, d_high, truth["difference"]).mean())}


def bootstrap_coverage(scores: Scores, n: int, trials: int, seed: int = 0) -> dict[str, float]:
    """Coverage of the BCa bootstrap for the mean and for P(X > Y), one trial at a time."""
    x, y = scores.draw(np.random.default_rng(seed), (trials, n))
    truth = scores.truth()
    mean_hits = [covered(*bootstrap_interval((a,), np.mean)[:2], truth["mean"]) for a in x]
    improvement_hits = [covered(*bootstrap_interval((a, b), _improvement)[:2], truth["improvement"])
                        for a, b in zip(x, y)]
    return {"mean BCa": float(np.mean(mean_hits)), "P(improvement) BCa": float(np.mean(improvement_hits))}


# --- contrasts of cells (analysis.statistics.contrasts) and collapse times (analysis.statistics.survival) -----------------
# Six cells per simulated grid: recipes a, b, c at lag 1 and lag 8; a1, b1, b8, c1 ~ base and
# a8, c8 ~ stale (the marginal's two distributions). So a's staleness
# cost is the true effect, b's is 0 (a true null), a's cost minus b's is the effect and a's minus
# c's is 0, a8 - b8 the effect and a8 - c8 0. Paired design: one seed effect shared by the six
# cells (half the variance of a score on the normal scale, a Gaussian copula keeps each cell's
# marginal), analysed paired by seed; independent design: no shared part, Welch-Satterthwaite.


@dataclass(frozen=True)
class Marginal:
    """A cell's score distribution by its quantile function, before (base) and after (stale) the lag."""
    name: str
    base: object  # frozen scipy distribution, or a Collapsing mixture
    stale: object

    def effect(self) -> float:
        return float(self.stale.mean() - self.base.mean())


@dataclass(frozen=True)
class Collapsing:
    """Bimodal, collapse-like: with probability q a run ends near 0 (uniform on [0.02, 0.03]),
    else normal(mean, sd): its quantile function, piecewise, so a copula can drive it."""
    q: float
    mean_ok: float = 0.40
    sd_ok: float = 0.05

    def ppf(self, u):
        u = np.asarray(u)
        ok = stats.norm.ppf(np.clip((u - self.q) / (1 - self.q), 1e-12, 1 - 1e-12), self.mean_ok, self.sd_ok)
        return np.where(u < self.q, 0.02 + 0.01 * u / self.q, ok)

    def mean(self) -> float:
        return self.q * 0.025 + (1 - self.q) * self.mean_ok


MARGINALS = (Marginal("normal", stats.norm(0.70, 0.03), stats.norm(0.67, 0.03)),
             Marginal("beta(2,8)", stats.beta(2.0, 8.0), stats.beta(1.5, 8.5)),
             Marginal("bimodal (collapse 10% -> 40%)", Collapsing(0.1), Collapsing(0.4)))
CELLS = {"a1": "base", "a8": "stale", "b1": "base", "b8": "base", "c1": "base", "c8": "stale"}
SHARED = 0.5  # of a score's variance (normal scale) that the seed shares across cells, paired design


def draw_grid(marginal: Marginal, design: str, n: int, trials: int, rng) -> dict[str, np.ndarray]:
    """Per-cell seed scores, shape (trials, n), under the paired or the independent design."""
    seed = rng.standard_normal((trials, n))
    cells = {}
    for name, which in CELLS.items():
        z = rng.standard_normal((trials, n))
        if design == "paired":
            z = math.sqrt(SHARED) * seed + math.sqrt(1 - SHARED) * z
        cells[name] = getattr(marginal, which).ppf(stats.norm.cdf(z))
    return cells


def contrast_rates(marginal: Marginal, design: str, n: int, trials: int, seed: int = 0) -> dict[str, float]:
    """Coverage of the 95% intervals where the contrast is the effect, false-positive rate of the
    two-sided test where it is 0, and TOST's rejections at a true cost equal to the margin and its
    power at a true cost of 0 (margin = |effect|)."""
    x = draw_grid(marginal, design, n, trials, np.random.default_rng(seed))
    effect = marginal.effect()
    contrasts = {"staleness cost": ({"a8": 1, "a1": -1}, {"b8": 1, "b1": -1}),
                 "cost difference": ({"a8": 1, "a1": -1, "b8": -1, "b1": 1}, {"a8": 1, "a1": -1, "c8": -1, "c1": 1}),
                 "recipes at one lag": ({"a8": 1, "b8": -1}, {"a8": 1, "c8": -1})}
    rates = {}

    def analyse(weights):
        if design == "paired":
            return paired(sum(w * x[cell] for cell, w in weights.items()))
        return welch_satterthwaite(list(weights.values()), [x[cell] for cell in weights])

    for name, (with_effect, null) in contrasts.items():
        _, low, high, *_ = analyse(with_effect)
        rates[f"{name}: coverage"] = float(covered(low, high, effect).mean())
        rates[f"{name}: false positives"] = float((analyse(null)[3] < ALPHA).mean())
    estimate, *_, se, df = analyse(contrasts["staleness cost"][0])
    rates["TOST at the margin: rejections"] = float((tost_p(estimate, se, df, abs(effect)) < ALPHA).mean())
    estimate, *_, se, df = analyse(contrasts["staleness cost"][1])
    rates["TOST power at 0 (margin = effect)"] = float((tost_p(estimate, se, df, abs(effect)) < ALPHA).mean())
    return rates


COLLAPSE = {"rate": 0.4, "budget": 120, "every": 20}  # collapse probability, step budget, evaluation step


def logrank_false_positives(n: int, trials: int, seed: int = 0) -> float:
    """Rejection rate of the log-rank test at ALPHA when both cells share one collapse-time
    distribution: a run collapses with probability 0.4 at an evaluation step drawn uniformly
    (ties, as in a grid), else is censored at the budget."""
    rng = np.random.default_rng(seed)
    steps = np.arange(COLLAPSE["every"], COLLAPSE["budget"] + 1, COLLAPSE["every"])
    rejected = tested = 0
    for _ in range(trials):
        times = [[int(rng.choice(steps)) if rng.uniform() < COLLAPSE["rate"] else None for _ in range(n)]
                 for _ in range(2)]
        _, p = logrank(*times, COLLAPSE["budget"])
        if math.isfinite(p):  # no collapse in either cell: no test (and no rejection)
            tested += 1
            rejected += p < ALPHA
    return rejected / trials


def contrast_table(ns: list[int], trials: int) -> list[str]:
    lines = [f"Contrasts: coverage of 95% intervals / rejection rates, {trials} simulated grids per case",
             "| design | scores | rate | " + " | ".join(f"n = {n}" for n in ns) + " |",
             "|---|---|---|" + "---|" * len(ns)]
    for design in ("paired", "independent"):
        for marginal in MARGINALS:
            by_n = {n: contrast_rates(marginal, design, n, trials, seed=n) for n in ns}
            for rate in by_n[ns[0]]:
                lines.append(f"| {design} | {marginal.name} | {rate} | "
                             + " | ".join(f"{by_n[n][rate]:.3f}" for n in ns) + " |")
    return lines


def endpoint_power(summary_path: Path, effect: float = 0.05) -> list[str]:
    """Which endpoint detects a declared effect with fewer seeds, on a finished grid's runs: for
    each exploratory contrast of summary.json (staleness costs, differences to the baseline), the
    spread of one seed's contrast under AUC and under the fixed-step score, and the seeds per cell
    analysis.statistics.contrasts.seeds_needed asks for at ``effect`` (a power comparison at a declared
    effect: the observed effects play no part)."""
    summary = json.loads(summary_path.read_text())
    lines = [f"Seeds per cell for 80% power at a {effect * 100:g}-point effect, {summary_path} "
             f"({len(summary['seeds'])} seeds measured)",
             "| contrast | spread AUC | spread fixed | seeds AUC | seeds fixed |", "|---|---|---|---|---|"]
    for cell in summary["cells"]:
        for key in ("staleness_cost", "vs_baseline"):
            if cell[key] is None:
                continue
            auc, fixed = cell[key]["auc"]["spread"], cell[key]["fixed"]["spread"]
            lines.append(f"| {key} {cell['recipe']} lag {cell['lag']} | {100 * auc:.2f} | {100 * fixed:.2f} | "
                         f"{seeds_needed(effect, auc)} | {seeds_needed(effect, fixed)} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials per cell, Student t and Welch")
    parser.add_argument("--bootstrap-trials", type=int, default=1000,
                        help="trials per cell for the bootstrap rows (slow: 9,999 resamples each; 0 = skip)")
    parser.add_argument("--n", type=int, nargs="+", default=[3, 5, 10, 20], help="seeds per arm")
    parser.add_argument("--contrast-trials", type=int, default=2000, help="simulated grids per contrast case")
    parser.add_argument("--survival-trials", type=int, default=2000, help="simulated cell pairs, log-rank")
    parser.add_argument("--grid", type=Path, help="a finished grid's folder: only compare AUC and the "
                                                  "fixed-step score's power on its summary")
    parser.add_argument("--verdicts", action="store_true", help="only the decision rule end to end "
                                                                "(benchmarks.bench_verdicts)")
    args = parser.parse_args(argv)
    if args.verdicts:
        from benchmarks.bench_verdicts import report
        print("\n".join(report(args.contrast_trials * 10)))
        return
    if args.grid:
        print("\n".join(endpoint_power(GridDir(args.grid).summary_path)))
        return
    start = time.perf_counter()
    rows: dict[tuple[str, str], dict[int, float]] = {}
    for scores in DISTRIBUTIONS:
        for n in args.n:
            results = analytic_coverage(scores, n, args.trials)
            if args.bootstrap_trials:
                results |= bootstrap_coverage(scores, n, args.bootstrap_trials)
            for method, value in results.items():
                rows.setdefault((method, scores.name), {})[n] = value
    print(f"95% interval coverage; {args.trials} trials per cell (bootstrap rows: {args.bootstrap_trials})")
    print("| method | scores | " + " | ".join(f"n = {n}" for n in args.n) + " |")
    print("|---|---|" + "---|" * len(args.n))
    for (method, name), by_n in sorted(rows.items()):
        print(f"| {method} | {name} | " + " | ".join(f"{by_n[n]:.3f}" for n in args.n) + " |")
    print("\n".join(["", *contrast_table(args.n, args.contrast_trials), ""]))
    print(f"Log-rank false-positive rate at {ALPHA:g} (collapse rate {COLLAPSE['rate']} in both cells), "
          f"{args.survival_trials} trials: " + ", ".join(
              f"n = {n}: {logrank_false_positives(n, args.survival_trials, seed=n):.3f}" for n in args.n))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
