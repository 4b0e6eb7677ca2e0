"""summary.json's one edge: the report's summary written to the file (``write_summary``) and a file read
back (``read_summary``): the claims are analysis.claims.verdict.Verdict objects in memory and
their rows in the file, and every number is strict JSON (NaN -> None). The aggregate writes through
here; the trackers, the comparison of two grids, the planner and the rerun read through here. It sits
in the claims room because the planner (claims/) reads a finished grid's verdicts too.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from analysis.claims.verdict import Verdict
from grid.folder import SUMMARY
from harness.io import read_json, write_json_atomic


def json_safe(obj):
    """NaN -> None, numpy -> Python, a verdict -> its row: summary.json is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Verdict):
        return json_safe(obj.row())
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


def write_summary(path: Path, summary: dict) -> None:
    """summary.json, atomically."""
    write_json_atomic(path, json_safe(summary))


def read_summary(path: Path, required: tuple[str, ...] = ("claims",)) -> dict:
    """A grid's summary.json, its claims as verdicts; FileNotFoundError or ValueError naming the file, also
    where a key of ``required`` is missing (a JSON file that is not a summary)."""
    summary = read_json(path)
    missing = [key for key in required if not isinstance(summary, dict) or key not in summary]
    if missing:
        raise ValueError(f"{path}: no key {missing[0]!r}: not a {SUMMARY} of python -m analysis.aggregate")
    return {**summary, "claims": [Verdict.from_row(row) for row in summary["claims"]]}
