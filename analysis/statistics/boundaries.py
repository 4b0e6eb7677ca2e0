"""The group-sequential levels of a declared seed schedule (docs/statistics.md, "Seed schedule").

A claim read at looks n_1 < ... < n_K seeds (the repeated confidence intervals of Jennison & Turnbull
1989) spends its level over the looks by a Lan-DeMets spending function (:func:`spent`). Each look's
critical t is the one at which the chance that some look's paired-t interval has missed by then is
the spending function's: the first look's is exact (scipy's t), each later one's spends exactly its
share, spent(n_k / n_K) - spent(n_{k-1} / n_K), among DRAWS seeded Monte Carlo paths that no earlier
look stopped. The paired t statistics of nested samples are pivotal under normal seeds, and a path
is simulated from its sufficient statistics, not its seeds: per block of new seeds a normal block sum
and a chi-square within-block sum of squares, pooled into the running mean and sum of squares. With
10^7 paths the later looks' shares rest on >= 10^4 tail events (the demo's second look: 12,600), so
each look's spend is within about 1% of its share (tests/analysis/test_boundaries.py checks the
demo's joint miss against an independent simulation of the seeds).

Computing 10^7 paths takes seconds, so the levels are computed once per design and kept with their
inputs (looks, level, boundary, draws, seed) and the code that computed them (CODE: a hash of the source
of spent, _statistics and compute_levels, so that an entry of changed code is never read) in
look_levels.json beside this module, written by

    .venv/bin/python -m analysis.schedule.levels_cache      # the shipped configs' designs

A design not in it is computed when first asked for (and kept for the process).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

BOUNDARIES = ("obrien_fleming", "pocock")
DRAWS = 10_000_000
SEED = 20261201
CACHE = Path(__file__).with_name("look_levels.json")
CHUNK = 2_500_000  # paths simulated at once (memory: ~100 MB per chunk)


def spent(fraction: float, level: float, boundary: str) -> float:
    """The error a boundary has spent by information fraction n_k / n_K (Lan & DeMets 1983):
    O'Brien-Fleming-like 2 - 2 Phi(z_{1-level/2} / sqrt(fraction)), Pocock-like level log(1 + (e - 1) fraction)."""
    if boundary == "obrien_fleming":
        return float(2 * stats.norm.sf(stats.norm.isf(level / 2) / math.sqrt(fraction)))
    return float(level * math.log(1 + (math.e - 1) * fraction))


def _key(looks: tuple[int, ...], level: float, boundary: str, draws: int, seed: int, code: str) -> str:
    return json.dumps({"looks": list(looks), "level": level, "boundary": boundary, "draws": draws, "seed": seed,
                       "code": code}, sort_keys=True)


@functools.lru_cache(maxsize=1)
def _cached() -> dict[str, tuple[float, ...]]:
    if not CACHE.exists():
        return {}
    return {_key(tuple(e["looks"]), e["level"], e["boundary"], e["draws"], e["seed"], e.get("code")): tuple(e["levels"])
            for e in json.loads(CACHE.read_text())}


def _statistics(looks: tuple[int, ...], rng: np.random.Generator, size: int):
    """|t| of each look for ``size`` paths of standard normal seeds, from their sufficient statistics."""
    total, squares, before = np.zeros(size), np.zeros(size), 0
    for n in looks:
        block = n - before
        sums = rng.standard_normal(size) * math.sqrt(block)
        within = rng.chisquare(block - 1, size) if block > 1 else 0.0
        if before:
            squares += within + before * block / n * (total / before - sums / block) ** 2
        else:
            squares = squares + within
        total += sums
        before = n
        yield np.abs(total / n) / np.sqrt(squares / ((n - 1) * n))


def compute_levels(looks: tuple[int, ...], level: float, boundary: str, draws: int = DRAWS,
                   seed: int = SEED) -> tuple[float, ...]:
    """Each look's two-sided nominal level (module docstring), from ``draws`` seeded paths."""
    rng = np.random.default_rng(seed)
    chunks = [list(_statistics(looks, rng, min(CHUNK, draws - start))) for start in range(0, draws, CHUNK)]
    running = [np.ones(len(c[0]), dtype=bool) for c in chunks]
    levels = []
    for k, n in enumerate(looks):
        share = spent(n / looks[-1], level, boundary) - (spent(looks[k - 1] / looks[-1], level, boundary) if k else 0.0)
        if k == 0:
            critical = float(stats.t.isf(share / 2, n - 1))
        else:
            tail = np.concatenate([c[k][r] for c, r in zip(chunks, running)])
            misses = min(int(round(share * draws)), len(tail) - 1)
            critical = float(np.partition(tail, len(tail) - 1 - misses)[len(tail) - 1 - misses])
        levels.append(float(2 * stats.t.sf(critical, n - 1)))
        for c, r in zip(chunks, running):
            r &= c[k] <= critical
    return tuple(levels)


# the computation's own source: a cached entry is read only under the code that wrote it
CODE = hashlib.sha256("".join(inspect.getsource(f) for f in (spent, _statistics, compute_levels)).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def look_levels(looks: tuple[int, ...], level: float, boundary: str = "obrien_fleming") -> tuple[float, ...]:
    """The two-sided nominal level of each look's paired-t interval: the chance that some look's
    interval misses the true contrast is ``level``, spent over the looks by ``boundary``'s spending
    function (module docstring); kept in look_levels.json, else computed. One look: ``level`` itself."""
    if len(looks) == 1:
        return (level,)
    if boundary not in BOUNDARIES:
        raise ValueError(f"seeding.boundary must be one of {BOUNDARIES}, got {boundary!r}")
    looks = tuple(int(n) for n in looks)
    found = _cached().get(_key(looks, level, boundary, DRAWS, SEED, CODE))
    return found if found is not None else compute_levels(looks, level, boundary)


def write_cache(designs) -> list[dict]:
    """Compute each (looks, level, boundary) of ``designs`` into look_levels.json (replacing it)."""
    entries = [{"looks": list(looks), "level": level, "boundary": boundary, "draws": DRAWS, "seed": SEED, "code": CODE,
                "levels": list(compute_levels(tuple(looks), level, boundary))} for looks, level, boundary in designs]
    CACHE.write_text(json.dumps(entries, indent=1) + "\n")
    _cached.cache_clear()
    look_levels.cache_clear()
    return entries
