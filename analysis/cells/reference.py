"""The published numbers a run reproduces: the SAT paper's Table 1 (workflow/reference/table1.csv, tracked,
outside the output folder so that `rm -rf results` keeps it), looked up by the recipe recorded in the run's
own config.json (its `table1` method, R3, TIS)."""
from __future__ import annotations

import csv
from pathlib import Path

from harness.run_config import PinnedRun

REFERENCE = Path(__file__).resolve().parents[2] / "workflow" / "reference" / "table1.csv"


def load_reference(path: Path = REFERENCE) -> dict[tuple[str, bool, bool, int], dict]:
    """Table 1 rows keyed by (method, routing_replay, tis, lag)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    table = {}
    for row in csv.DictReader(lines):
        key = (row["method"], row["routing_replay"] == "true", row["tis"] == "true", int(row["lag"]))
        table[key] = {"aime24": _number(row["aime24"]), "best_step": _number(row["best_step"]),
                      "collapsed": row["collapsed"] == "true", "dbar": _number(row["dbar"])}
    return table


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def reference_for(run: PinnedRun, table: dict) -> dict | None:
    """The published row a run's recipe (config.json's ``recipe``) reproduces at its lag, if any."""
    recipe = run.recipe
    if recipe.table1 is None:
        return None
    return table.get((recipe.table1, bool(recipe.routing_replay), recipe.tis is not None, run.lag))
