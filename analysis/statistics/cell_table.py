"""A grid's per-run values as arrays over (recipe, lag, seed), one array per metric: the cells' one shape.

A cell is the slice [recipe, lag] of every array; pairing two cells by seed is reading the same seed
positions of both; a claim's estimate is its weights times the cell means. Built once where runs become
cells (analysis.cells.summary.build_cells) or from summary.json's cells (``of_cells``: a grid read back, the
tracker's seed runs); arrays in, no config.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from analysis.statistics.cell_stats import CellStats

Cell = tuple[str, int]  # (recipe, lag)


def _python(value):
    """A float array's element as JSON has it (NaN: None); an object array's as it is."""
    if isinstance(value, np.floating):
        return None if math.isnan(value) else float(value)
    return value


@dataclass(frozen=True)
class CellTable:
    """``values[metric][r, l, s]``: the run (recipes[r], lags[l], seeds[s])'s value (float metrics: NaN where
    there is none; the rest, steps, flags and statuses, objects: None); ``ran[r, l, s]`` whether that run is
    in the grid. ``cells``: the cells the grid has, in its order (a cell may hold no run yet)."""

    recipes: tuple[str, ...]
    lags: tuple[int, ...]
    seeds: tuple[int, ...]
    cells: tuple[Cell, ...]
    ran: np.ndarray
    values: Mapping[str, np.ndarray]

    @classmethod
    def build(cls, cells: Iterable[Cell], runs: Mapping[tuple[str, int, int], Mapping[str, object]]) -> "CellTable":
        """From each run's (recipe, lag, seed) and its metric values; the seed axis in the runs' order."""
        cells = tuple(cells)
        recipes = tuple(dict.fromkeys(recipe for recipe, _ in cells))
        lags = tuple(dict.fromkeys(lag for _, lag in cells))
        seeds = tuple(dict.fromkeys(seed for _, _, seed in runs))
        shape = (len(recipes), len(lags), len(seeds))
        ran = np.zeros(shape, dtype=bool)
        metrics = dict.fromkeys(metric for values in runs.values() for metric in values)
        present = {m: [run[m] for run in runs.values() if m in run] for m in metrics}
        floats = {m for m, seen in present.items()  # a score (float, None where not measured); not a step, flag, status
                  if any(isinstance(v, float) for v in seen) and all(isinstance(v, float) or v is None for v in seen)}
        values = {m: np.full(shape, math.nan) if m in floats else np.full(shape, None, dtype=object) for m in metrics}
        for (recipe, lag, seed), run in runs.items():
            at = (recipes.index(recipe), lags.index(lag), seeds.index(seed))
            ran[at] = True
            for metric, value in run.items():
                values[metric][at] = math.nan if value is None and metric in floats else value
        return cls(recipes, lags, seeds, cells, ran, values)

    @classmethod
    def of_cells(cls, cells: Iterable[CellStats]) -> "CellTable":
        """From summary.json's cells (analysis.statistics.cell_stats.CellStats: seeds, a value per seed per metric)."""
        cells = list(cells)
        runs = {(cell.recipe, cell.lag, seed): {metric: values[i] for metric, values in cell.per_seed.items()}
                for cell in cells for i, seed in enumerate(cell.seeds)}
        return cls.build((cell.cell for cell in cells), runs)

    def has(self, cell: Cell) -> bool:
        return cell in self.cells

    def _at(self, cell: Cell, among: set[int] | None) -> tuple[tuple[int, int], np.ndarray]:
        at = (self.recipes.index(cell[0]), self.lags.index(cell[1]))
        ran = self.ran[at]
        return at, ran if among is None else ran & np.isin(self.seeds, sorted(among))

    def seeds_of(self, cell: Cell, among: set[int] | None = None) -> list[int]:
        """The cell's seeds (of ``among``), in the grid's seed order."""
        _, mask = self._at(cell, among)
        return np.asarray(self.seeds)[mask].tolist()

    def column(self, cell: Cell, metric: str, among: set[int] | None = None) -> list:
        """The cell's value of ``metric`` per seed (of ``among``), in seeds_of's order."""
        at, mask = self._at(cell, among)
        return self.values[metric][at][mask].tolist()

    def arm(self, cell: Cell, metric: str, among: set[int] | None = None) -> tuple[list, list[int]]:
        """(values, seeds) of the cell: one arm of analysis.statistics.contrasts.contrast."""
        return self.column(cell, metric, among), self.seeds_of(cell, among)

    def runs(self) -> list[tuple[str, int, int]]:
        """Every run (recipe, lag, seed) the table holds, cell by cell."""
        return [(*cell, seed) for cell in self.cells for seed in self.seeds_of(cell)]

    def run(self, recipe: str, lag: int, seed: int) -> dict:
        """The run's value of every metric (None where it has none)."""
        at = (self.recipes.index(recipe), self.lags.index(lag), self.seeds.index(seed))
        return {metric: _python(values[at]) for metric, values in self.values.items()}

    def count(self, cell: Cell) -> int:
        """How many runs the cell holds."""
        return int(self._at(cell, None)[1].sum())
