"""The fabricated grid (tests/support/grid_fixture.py) aggregated by analysis.aggregate, with the claims
of every kind or none: built once per test run (tests/support/run_folder.py) and copied to each test
or module that reads it, instead of aggregated anew by each (~8 s of CPU each)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from grid.config import validate
from grid.folder import GridDir
from harness.io import write_json_atomic
from tests.support.grid_fixture import CLAIMS, make_grid, written_grid
from tests.support.run_folder import built_once

GRID = "demo"  # make_grid's grid name


def _aggregated(results: Path, claims: list[dict]) -> None:
    from analysis.aggregate import main as aggregate

    config = validate({**make_grid(results), "claims": claims})
    assert aggregate(["--grid", written_grid(config)]) == 0


def aggregated_grid(run_folder: Path, results: Path, claims: bool = True) -> dict:
    """A copy at ``results`` (a results folder, new or empty) of the aggregated grid, with CLAIMS
    (``claims``) or none; its checked config, which names ``results`` as its results_dir."""
    name = "aggregated_grid" + ("_claims" if claims else "")
    built = built_once(run_folder, name, lambda folder: _aggregated(folder, CLAIMS if claims else []))
    shutil.copytree(built, results, dirs_exist_ok=True)
    config = {**json.loads((results / GRID / "config.json").read_text()), "results_dir": str(results)}
    write_json_atomic(GridDir.of(config).config_path, config)  # its one absolute path: where the grid now is
    return config
