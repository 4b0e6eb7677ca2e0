"""Two levels of noise in a cell's score: the training seed, and the evaluation (the k samples per
problem and the draw of the problems); the interval that names both, the plan that says whether
more seeds or a larger k reaches a claim's target standard error for less compute, and the
inflation of the best-checkpoint score when a run does not improve.

The data: eval/<task>.jsonl holds, per checkpoint, each problem's correct count out of k
(eval/score.py). For a cell, X[s, p] = count / k of seed s on problem p at the run's fixed step,
an S x P table read as a two-way crossed random-effects model with a known-form sampling error:

    X[s, p] = mu + a_s + u_p + (au)_sp + e_sp
    a_s     training seed            var sigma2_seed
    u_p     problem                  var sigma2_problem   (shared by every seed: the problem draw)
    (au)_sp seed x problem           var sigma2_seed_problem
    e_sp    the k samples            var tau2 / k, tau2 = E[p (1 - p)] of one sample

The two-way ANOVA mean squares (MS_seed, MS_problem, MS_residual) have expectations
(sigma2_seed_problem + tau2/k) + P sigma2_seed, ... + S sigma2_problem, and sigma2_seed_problem + tau2/k;
tau2 comes from the counts themselves, p^(1 - p^) k / (k - 1) averaged over (s, p) (unbiased for
p (1 - p)), which needs k >= 2. Each component is its moment estimate truncated at 0 (REML gives
the same for a balanced table when positive: tests/analysis/test_noise.py checks statsmodels' MixedLM).

A run's score has variance  seed part (sigma2_seed + sigma2_seed_problem / P)  +  k part (tau2 / (k P)),
what the seeds' spread shows on this problem set; the problem part sigma2_problem / P is shared by
the cell's seeds and enters only an interval that generalises to the task's other problems.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy import integrate, stats
from statsmodels.stats.power import TTestPower

from analysis.statistics.contrasts import tost_power
from analysis.statistics.intervals import ALPHA, POWER


@dataclass(frozen=True)
class NoiseParts:
    """A cell's variance components (fractions of the score squared) and its design (S, P, k)."""

    seeds: int
    problems: int
    k: int
    mean: float
    seed: float  # sigma2_seed
    seed_problem: float  # sigma2_seed_problem
    problem: float  # sigma2_problem
    sample: float  # tau2, one sample's Bernoulli variance
    ms_seed: float
    ms_problem: float
    ms_residual: float

    @property
    def seed_part(self) -> float:
        """The training seed's variance of one run's score on this problem set."""
        return self.seed + self.seed_problem / self.problems

    def k_part(self, k: int | None = None) -> float:
        """The k samples' variance of one run's score (at this k, or another)."""
        return self.sample / ((k or self.k) * self.problems)

    @property
    def problem_part(self) -> float:
        return self.problem / self.problems

    def as_dict(self) -> dict:
        return {**asdict(self), "seed_part": self.seed_part, "k_part": self.k_part(), "problem_part": self.problem_part}


def decompose(counts, k: int) -> NoiseParts:
    """The components of an S x P table of correct counts out of k (S, P >= 2; k >= 2)."""
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2 or min(counts.shape) < 2 or k < 2:
        raise ValueError(f"decompose needs >= 2 seeds, >= 2 problems and k >= 2; got {counts.shape} and k = {k}")
    s, p = counts.shape
    x = counts / k
    grand, rows, cols = x.mean(), x.mean(1), x.mean(0)
    ms_seed = p * ((rows - grand) ** 2).sum() / (s - 1)
    ms_problem = s * ((cols - grand) ** 2).sum() / (p - 1)
    ms_residual = ((x - rows[:, None] - cols[None, :] + grand) ** 2).sum() / ((s - 1) * (p - 1))
    sample = float((x * (1 - x)).mean() * k / (k - 1))
    return NoiseParts(seeds=s, problems=p, k=k, mean=float(grand),
                      seed=max(0.0, (ms_seed - ms_residual) / p), seed_problem=max(0.0, ms_residual - sample / k),
                      problem=max(0.0, (ms_problem - ms_residual) / s), sample=sample,
                      ms_seed=float(ms_seed), ms_problem=float(ms_problem), ms_residual=float(ms_residual))


def interval(parts: NoiseParts, over_problems: bool = True) -> dict:
    """The cell mean's 95% t interval and the shares of its variance. Over the seeds on this problem
    set: Var = MS_seed / (S P), S - 1 df (the seeds' usual t interval); over the problems too:
    Var = (MS_seed + MS_problem - MS_residual) / (S P), Satterthwaite's df."""
    s, p = parts.seeds, parts.problems
    terms = [(parts.ms_seed, s - 1)] + ([(parts.ms_problem, p - 1), (-parts.ms_residual, (s - 1) * (p - 1))]
                                        if over_problems else [])
    total = sum(ms for ms, _ in terms)
    if total < parts.ms_seed:  # the problem part's estimate below 0: the seeds' own interval
        terms, total = terms[:1], parts.ms_seed
    df = total ** 2 / sum(ms ** 2 / dof for ms, dof in terms) if total > 0 else math.inf
    half = stats.t.ppf(1 - ALPHA / 2, df) * math.sqrt(total / (s * p)) if total > 0 else 0.0
    shares = {"seed": parts.seed_part / s, "k": parts.k_part() / s, "problem": parts.problem_part if over_problems else 0.0}
    scale = sum(shares.values())
    return {"estimate": parts.mean, "low": parts.mean - half, "high": parts.mean + half, "df": df,
            "over_problems": over_problems, "variance": total / (s * p),
            "shares": {key: (value / scale if scale > 0 else math.nan) for key, value in shares.items()}}


def contrast_spread(arms: list[tuple[float, NoiseParts]], k: int) -> float:
    """The sd of one seed's value of the contrast sum_i w_i (cell score_i), each cell scored with k
    samples per problem on the cells' shared problem set (the problem draw cancels). The cells are
    treated as independent: a pairing of seeds whose seed effects correlate positively makes it smaller."""
    return math.sqrt(sum(w * w * (parts.seed_part + parts.k_part(k)) for w, parts in arms))


def t_test_detects(smallest_effect: float, alpha: float = ALPHA) -> Callable[[float, int], bool]:
    """analysis.statistics.contrasts.seeds_needed's rule: the two-sided t test of n per-seed contrasts (sd
    ``spread``) detects ``smallest_effect`` with POWER at ``alpha`` (statsmodels TTestPower)."""
    def enough(spread: float, n: int) -> bool:
        # "not below": statsmodels' power is NaN where it is 1 to machine precision (as seeds_needed reads it)
        return spread == 0 or not TTestPower().power(effect_size=abs(smallest_effect) / spread, nobs=n,
                                                     alpha=alpha) < POWER
    return enough


def tost_shows_equivalence(margin: float, alpha: float = 2 * ALPHA) -> Callable[[float, int], bool]:
    """analysis.statistics.contrasts.seeds_needed_equivalence's rule: the two-sided interval at ``alpha`` lies inside
    +-margin with POWER when the true contrast is 0 (its tost_power)."""
    return lambda spread, n: spread == 0 or tost_power(margin, spread, n, alpha / 2) >= POWER


def plan(arms: list[tuple[float, NoiseParts]], enough: Callable[[float, int], bool], *, seeds_now: int, k_now: int,
         train_cost: float, sample_cost: float, max_seeds: int = 200, max_k: int = 256) -> dict:
    """The cheapest (n seeds per cell, k) at which ``enough(spread, n)`` holds (e.g. t_test_detects),
    against more seeds at the current k and a larger k on the current seeds. Cost of getting there, in
    the caller's unit: each new run costs ``train_cost`` plus k x ``sample_cost`` (``sample_cost``:
    scoring one sample per problem at every evaluated checkpoint of one run); raising k on an existing
    run costs its extra samples only (its checkpoints are rescored, not retrained)."""
    cells = len(arms)

    def cost(n: int, k: int) -> float:
        new = max(0, n - seeds_now) * cells * (train_cost + k * sample_cost)
        return new + min(n, seeds_now) * cells * max(0, k - k_now) * sample_cost

    def option(n: int | None, k: int) -> dict | None:
        return None if n is None else {"seeds": n, "k": k, "sd": contrast_spread(arms, k), "cost": cost(n, k)}

    def fewest(ok: Callable[[int], bool], low: int, high: int) -> int | None:
        """The smallest x in [low, high] with ok(x), ok monotone; None if ok(high) fails."""
        if not ok(high):
            return None
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if ok(mid) else (mid + 1, high)
        return low

    def seeds_for(k: int) -> int | None:
        return fewest(lambda n: enough(contrast_spread(arms, k), n), max(2, seeds_now), max_seeds)

    seeds_only = option(seeds_for(k_now), k_now)
    k_only = option(seeds_now, k) if (k := fewest(lambda k: enough(contrast_spread(arms, k), seeds_now),
                                                   k_now, max_k)) is not None else None
    cheapest = seeds_only
    for k in range(k_now + 1, max_k + 1):
        if cheapest is not None and seeds_now * cells * (k - k_now) * sample_cost >= cheapest["cost"]:
            break  # the rescoring alone costs more from here on
        candidate = option(seeds_for(k), k)
        if candidate is not None and (cheapest is None or candidate["cost"] < cheapest["cost"]):
            cheapest = candidate
    if enough(contrast_spread(arms, k_now), seeds_now):
        verdict = "reached"
    elif cheapest is None:
        verdict = "out of range"
    else:
        verdict = "larger k" if cheapest["seeds"] == seeds_now else "more seeds" if cheapest["k"] == k_now else \
            "more seeds and a larger k"
    return {"sd_now": contrast_spread(arms, k_now), "seeds_now": seeds_now, "k_now": k_now,
            "train_cost": train_cost, "sample_cost": sample_cost, "seeds_only": seeds_only, "k_only": k_only,
            "cheapest": cheapest, "cheaper": verdict}


def expected_max_normal(m: int) -> float:
    """E[max of m independent standard normals] (order statistics: the integral of x m phi(x) Phi(x)^(m-1))."""
    if m < 1:
        raise ValueError(f"expected_max_normal needs m >= 1, got {m}")
    value, _ = integrate.quad(lambda x: x * m * stats.norm.pdf(x) * stats.norm.cdf(x) ** (m - 1), -np.inf, np.inf)
    return float(value)


def selection_inflation(parts: NoiseParts, evaluations: int) -> float:
    """How far the best of a run's ``evaluations`` scores lies above its true score in expectation when
    the run does not improve: sqrt(k part) x E[max of m normals]. The k samples differ from checkpoint
    to checkpoint, the problems do not (their draw shifts every checkpoint alike and inflates nothing)."""
    return math.sqrt(parts.k_part()) * expected_max_normal(evaluations)
