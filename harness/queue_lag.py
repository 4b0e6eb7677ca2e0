"""Staleness as a queue makes it: the lag mode ``queue``, each group's lag drawn from a model of a
fully asynchronous system, in which long responses are staler.

The system (the cast of Applied Compute's "Predicting and Controlling Staleness in Fully
Asynchronous RL Training", 2026, www.appliedcompute.com/research/staleness-in-fully-async-rl:
rollout engines that never idle, a queue of finished groups, a trainer taking a batch of groups per
step, and staleness governed by utilization, batch size, queue capacity, rollout concurrency and
the tail of the response length). That post derives closed forms for the mean staleness; its
formulas were not readable here, so this model is our own approximation, derived as follows.

Time in trainer steps. B = groups per trainer step (the engine's prompts per step), C = rollout
concurrency (groups generated at once), K = queue capacity (groups), rho = utilization (the rate
the rollout engines can finish groups over the rate the trainer consumes them), X = a group's
generation length relative to the mean (lognormal, mean 1, log-sd ``length_sigma``: the tail).

- A rollout slot holds a group for C / B steps on average whatever rho (Little's law: C groups in
  slots, B leave per step). When rho <= 1 all of it is generation, proportional to X; when rho > 1
  the slots generate for (C / B) / rho per mean group and are blocked by the full queue for the rest,
  which does not depend on X: slot time (C / B) (X / r + 1 - 1 / r), r = max(rho, 1).
- A finished group then waits for the groups queued ahead of it: L / B steps, with L the mean number
  of an M/M/1/K queue at load rho (L -> K as rho grows, rho / (1 - rho) for rho << 1).
- A group's lag counts the trainer steps that end while it is in the system, D = slot time + L / B,
  from a uniform phase U of the trainer's step when its generation starts: lag = floor(D + U), so
  that P(lag = k | X) = max(0, 1 - |D(X) - k|) and E[lag] = E[D] = C / B + L / B (with rho > 1:
  (C + K) / B, Little's law for a system holding C + K groups).
- A group staler than the configured ``lag`` is dropped (AReaL's staleness filter) and replaced by a
  fresh draw: the lags are the model's conditioned on lag <= ``lag``; the drop rate is the
  throughput the bound costs.

Draws are independent per (seed, step, group): sha256 of them, as the bounded mode's, so the same
numbers on every machine and Python. The model's temporal correlation (consecutive groups of one
batch share a queue state) is left out: what it keeps is each group's lag distribution and its
dependence on the group's length.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

QUEUE_KEYS = ("utilization", "concurrency", "capacity", "length_sigma")
_QUADRATURE = 2000  # midpoint quantiles of X for the model's pmf (error well below 1e-3 per lag)


@dataclass(frozen=True)
class QueueModel:
    batch: int  # B: groups per trainer step
    concurrency: int  # C: groups generated at once
    capacity: int  # K: queue capacity, groups
    utilization: float  # rho: rollout throughput over trainer throughput
    length_sigma: float  # log-sd of the lognormal generation length (mean 1)
    max_lag: int  # the configured lag: the staleness filter's bound

    def __post_init__(self):
        for name in ("batch", "concurrency", "capacity"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"lag_queue.{name} must be a positive integer, got {value!r}")
        if not self.utilization > 0 or not self.length_sigma >= 0:
            raise ValueError(f"lag_queue needs utilization > 0 and length_sigma >= 0, got {self.utilization}, "
                             f"{self.length_sigma}")

    def queued(self) -> float:
        """L: the mean number in an M/M/1/K queue at load rho."""
        rho, k = self.utilization, self.capacity
        if abs(rho - 1) < 1e-12:
            return k / 2
        weights = [rho ** n for n in range(k + 1)]
        return sum(n * w for n, w in enumerate(weights)) / sum(weights)

    def steps_in_system(self, length: float) -> float:
        """D(X): the trainer steps a group of relative length X spends from its start to its batch."""
        r = max(self.utilization, 1.0)
        return self.concurrency / self.batch * (length / r + 1 - 1 / r) + self.queued() / self.batch

    def length(self, u: float) -> float:
        """The relative length at quantile u of the lognormal with mean 1."""
        s = self.length_sigma
        return math.exp(s * NormalDist().inv_cdf(u) - s * s / 2)

    def unfiltered_pmf(self) -> list[float]:
        """P(lag = k) for k = 0..max_lag + 1 before the filter; the last entry: P(lag > max_lag)."""
        pmf = [0.0] * (self.max_lag + 2)
        for i in range(_QUADRATURE):
            d = self.steps_in_system(self.length((i + 0.5) / _QUADRATURE))
            low = math.floor(d)
            for k, p in ((low, 1 - (d - low)), (low + 1, d - low)):
                pmf[min(k, self.max_lag + 1)] += p / _QUADRATURE
        return pmf

    def pmf(self) -> list[float]:
        """P(lag = k), k = 0..max_lag: the model's lag distribution after the staleness filter."""
        kept = self.unfiltered_pmf()[:-1]
        return [p / sum(kept) for p in kept]

    def drop_rate(self) -> float:
        """The fraction of generated groups the filter drops (generation spent on nothing)."""
        return self.unfiltered_pmf()[-1]


def queue_model(settings: dict, batch: int, lag: int) -> QueueModel:
    """The model of a run config's ``lag_queue`` settings, an engine's batch of groups and its lag."""
    return QueueModel(batch=batch, max_lag=lag, **{key: settings[key] for key in QUEUE_KEYS})


def _uniform(seed: int, step: int, group: int, attempt: int, stream: str) -> float:
    digest = hashlib.sha256(f"stalebench-queue-lag:{stream}:{seed}:{step}:{group}:{attempt}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2 ** 64


@lru_cache(maxsize=4096)
def group_draws(model: QueueModel, step: int, seed: int) -> tuple[tuple[int, float], ...]:
    """(lag, relative length) of each of the B groups of trainer step ``step``: drawn from the
    model, redrawn while past the filter's bound (at most 10,000 tries), then capped at step - 1
    (the first batches can only come from the base model)."""
    draws = []
    for group in range(model.batch):
        for attempt in range(10_000):
            length = model.length(_uniform(seed, step, group, attempt, "length"))
            lag = math.floor(model.steps_in_system(length) + _uniform(seed, step, group, attempt, "phase"))
            if lag <= model.max_lag:
                break
        else:
            raise ValueError(f"lag_queue: no group within lag {model.max_lag} in 10,000 draws; raise the lag")
        draws.append((min(lag, step - 1), length))
    return tuple(draws)
