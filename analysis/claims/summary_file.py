"""summary.json's one edge: the report's summary written to the file (``write_summary``) and a file read
back (``read_summary``): the claims are analysis.claims.verdict.Verdict objects in memory and
their rows in the file, and every number is strict JSON (NaN -> None). The aggregate writes through
here; the trackers, the comparison of two grids, the planner and the rerun read through here. It sits
in the claims room because the planner (claims/) reads a finished grid's verdicts too.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.claims.verdict import Verdict
from analysis.statistics.cell_stats import CellStats, Stat
from grid.folder import SUMMARY
from harness.io import read_json, write_json_atomic


@dataclass(frozen=True)
class Summary:
    """summary.json, typed at its top: what made the numbers (the grid, its engine and arithmetic, recipes, lags,
    seeds, budget, tasks, collapse rule, seed schedule), the cells (analysis.cells.summary), the claims' verdicts,
    and the sections beside them (gain sources, noise, the queue grid's front, the tuning pick, a grid beside this
    one, the conclusions). Each defaults to empty: a summary of a few parts (a test's, a report section's input)."""

    grid: str | None = None
    engine: str | None = None
    engine_preset: str | None = None
    arithmetic_version: int | None = None
    recipes: list = dataclasses.field(default_factory=list)
    lags: list = dataclasses.field(default_factory=list)
    lag_mode: str | None = None
    seeds: list = dataclasses.field(default_factory=list)
    steps: int | None = None
    test_task: str | None = None
    selection_task: str | None = None
    fixed_step: int | None = None
    baseline: str | None = None
    collapse_fraction: float | None = None
    collapse_confirm: int | None = None
    seeding: dict | None = None
    seeding_declared: dict | None = None
    reference_lag: int | None = None
    comparisons: dict | None = None
    claims: list = dataclasses.field(default_factory=list)  # analysis.claims.verdict.Verdict
    cells: list = dataclasses.field(default_factory=list)  # analysis.statistics.cell_stats.CellStats per (recipe, lag)
    gain_sources: dict | None = None
    noise: dict | None = None
    pareto: dict | None = None
    tuning: dict | None = None
    side_by_side: object = None  # analysis.report.compare.Beside; read back, its JSON as it is
    conclusions: list | None = None


def json_safe(obj):
    """NaN -> None, numpy -> Python, a verdict, cell or stat -> its row, any other dataclass (a summary) -> its
    fields: summary.json is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (Verdict, CellStats, Stat)):
        return json_safe(obj.row())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # a summary, a comparison of two grids: field by field
        return json_safe({field.name: getattr(obj, field.name) for field in dataclasses.fields(obj)})
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return json_safe(obj.item())
    return obj


def as_written(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts as summary.json holds them (their checks' NaN None), each with its declared claim, so
    that a report drawn from memory and one drawn from the file read back are the same."""
    return [Verdict.from_row(json_safe(verdict), verdict.claim) for verdict in verdicts]


def write_summary(path: Path, summary: Summary) -> None:
    """summary.json, atomically."""
    write_json_atomic(path, json_safe(summary))


def read_summary(path: Path, required: tuple[str, ...] = ("claims",)) -> Summary:
    """A grid's summary.json, typed, its claims as verdicts; FileNotFoundError or ValueError naming the file,
    also where a key of ``required`` is missing (a JSON file that is not a summary)."""
    summary = read_json(path)
    missing = [key for key in required if not isinstance(summary, dict) or key not in summary]
    if missing:
        raise ValueError(f"{path}: no key {missing[0]!r}: not a {SUMMARY} of python -m analysis.aggregate")
    known = {field.name for field in dataclasses.fields(Summary)}
    return Summary(**{**{key: value for key, value in summary.items() if key in known},
                      "claims": [Verdict.from_row(row, reference_lag=summary.get("reference_lag", 0))
                                 for row in summary["claims"]],
                      "cells": [CellStats.from_row(row) for row in summary.get("cells", [])]})
