"""Coverage of the report's 95% intervals at the seed counts the harness uses: methods x n x distributions.

    .venv/bin/python -m benchmarks.bench_coverage [--trials 1000] [--bootstrap-trials 1000] [--n 3 5 10 20]

Each trial draws n seed scores per arm from a known distribution and asks whether the interval
(analysis.stats, the functions the report calls) contains the true value: the mean of x (Student
t, as reported; BCa bootstrap for comparison), mean(x) - mean(y) (Welch), and P(X > Y) (BCa
bootstrap, which the report gives only from analysis.stats.BOOTSTRAP_MIN_SEEDS seeds per arm).
A 95% interval should cover about 0.95 of the time; with T trials the printed fraction has a
standard error of about sqrt(0.95 * 0.05 / T) (0.007 at 1,000). The last distribution is a
stress case (skewness about 2, a score pinned near 0): the limit of the intervals, not their use.
Seeded: the same arguments print the same table.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
from scipy import integrate, stats

from analysis.stats import _improvement, bootstrap_interval, t_interval, welch_interval


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
    _, d_low, d_high, _ = welch_interval(x, y)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials per cell, Student t and Welch")
    parser.add_argument("--bootstrap-trials", type=int, default=1000,
                        help="trials per cell for the bootstrap rows (slow: 9,999 resamples each; 0 = skip)")
    parser.add_argument("--n", type=int, nargs="+", default=[3, 5, 10, 20], help="seeds per arm")
    args = parser.parse_args(argv)
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
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
