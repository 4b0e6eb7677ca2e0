"""A cell's numbers as summary.json holds them, typed: each estimate with its interval a ``Stat``, each cell a
``CellStats`` (its seeds and per-seed values, the mean per metric, the score curve, the collapse rate, the
realized lag, the published row it reproduces and its comparisons with other cells). ``from_row`` reads a
row of the file (or of analysis.cells.summary before it is written), ``row`` gives it back key for key,
so summary.json's bytes stay those of its rows (analysis.claims.summary_file, the one edge). Numbers
only, no config.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    """An estimate and its interval (None: none) by ``method``; beside it, as its kind has them: ``n`` (a mean, a
    contrast), ``n_x``/``n_y`` and ``test`` (two groups), the two-sided ``p`` and its ``p_holm`` within a table,
    ``se``/``df``/``spread`` (a contrast), ``k`` (collapsed runs of n), ``step`` (a point of a score curve).
    ``shape``: the keys its row holds, in their order."""

    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    method: str | None = None
    n: int | None = None
    n_x: int | None = None
    n_y: int | None = None
    test: str | None = None
    p: float | None = None
    p_holm: float | None = None
    se: float | None = None
    df: float | None = None
    spread: float | None = None
    k: int | None = None
    step: int | None = None
    shape: tuple[str, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping) -> "Stat":
        return cls(**row, shape=tuple(row))

    def row(self) -> dict:
        return {key: getattr(self, key) for key in self.shape}

    def adjusted(self, p_holm: float | None) -> "Stat":
        """The same with its Holm-adjusted p (analysis.statistics.intervals.holm over its table)."""
        return Stat.from_row({**self.row(), "p_holm": p_holm})

    @property
    def tested(self) -> bool:
        """Whether it carries a test (a p); under 2 seeds, or without spread, it has none."""
        return self.p is not None


@dataclass(frozen=True)
class RealizedLag:
    """The realized lag of every trained step of a cell's runs: lowest, highest, mean (None: no training rows),
    and how many steps had each lag (keyed by the lag as text, as JSON keys are)."""

    min: int | None
    max: int | None
    mean: float | None
    steps: dict


@dataclass(frozen=True)
class CellStats:
    """One cell (recipe, lag) of a grid: its seeds and runs, ``per_seed`` (metric -> a value per seed, in ``seeds``'
    order), ``stats`` (metric -> the mean over seeds with its 95% interval), the test-score ``curve``, the
    ``collapse`` rate (k of n), the ``realized_lag``, the published row it reproduces (``reference``, None: none),
    and its exploratory comparisons per endpoint (``improvement``, ``vs_baseline``, ``staleness_cost``) and of its
    collapse rate (``collapse_vs_baseline``, ``collapse_vs_reference_lag``), None where they do not apply."""

    recipe: str
    lag: int
    seeds: list
    per_seed: dict
    stats: dict = dataclasses.field(default_factory=dict)
    run_keys: list = dataclasses.field(default_factory=list)
    curve: list = dataclasses.field(default_factory=list)
    collapse: Stat | None = None
    realized_lag: RealizedLag | None = None
    reference: dict | None = None
    improvement: dict | None = None
    vs_baseline: dict | None = None
    staleness_cost: dict | None = None
    collapse_vs_baseline: Stat | None = None
    collapse_vs_reference_lag: Stat | None = None

    @property
    def cell(self) -> tuple[str, int]:
        return self.recipe, self.lag

    @classmethod
    def from_row(cls, row: Mapping) -> "CellStats":
        """A cell row of summary.json (older files may lack run_keys)."""
        return cls(**{key: _READ.get(key, _same)(value) for key, value in row.items()})

    def row(self) -> dict:
        return {field.name: _WRITE.get(field.name, _same)(getattr(self, field.name)) for field in dataclasses.fields(self)}


def _same(value):
    return value


def _stats(row: Mapping | None) -> dict[str, Stat] | None:
    """Stats per metric (or endpoint)."""
    return None if row is None else {metric: Stat.from_row(stat) for metric, stat in row.items()}


def _stat(row: Mapping | None) -> Stat | None:
    return None if row is None else Stat.from_row(row)


def _stats_rows(stats: dict[str, Stat] | None) -> dict | None:
    return None if stats is None else {metric: stat.row() for metric, stat in stats.items()}


def _stat_row(stat: Stat | None) -> dict | None:
    return None if stat is None else stat.row()


# how each field of a cell row is read and written back; the rest are as they are
_READ = {"stats": _stats, "curve": lambda points: [Stat.from_row(point) for point in points], "collapse": _stat,
         "realized_lag": lambda lags: None if lags is None else RealizedLag(**lags),
         "improvement": _stats, "vs_baseline": _stats, "staleness_cost": _stats,
         "collapse_vs_baseline": _stat, "collapse_vs_reference_lag": _stat}
_WRITE = {"stats": _stats_rows, "curve": lambda points: [point.row() for point in points], "collapse": _stat_row,
          "realized_lag": lambda lags: None if lags is None else dataclasses.asdict(lags),
          "improvement": _stats_rows, "vs_baseline": _stats_rows, "staleness_cost": _stats_rows,
          "collapse_vs_baseline": _stat_row, "collapse_vs_reference_lag": _stat_row}
