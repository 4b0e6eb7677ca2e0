"""Every report a grid writes, as text that a later version of the code must reproduce byte for byte:
table.md, table.csv, table.tex, summary.json and the MLflow store's params, metrics and tags, of three
fabricated grids that together hold every claim kind, a seed schedule, tuning, gain sources and a grid
beside another (tests/analysis/test_reports_golden.py). The expected texts are in
tests/fixtures/golden/; a change meant to change a report rewrites them, and its diff shows what moved:

    .venv/bin/python -m tests.support.golden_reports --write
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from grid.config import validate
from grid.folder import GridDir
from grid.settings import Config
from grid.tuning import Tuning
from harness.io import write_json_atomic
from tests.support.grid_fixture import CLAIMS, make_grid
from tests.support.tuning_grid import TUNING_SCORE, raw_config, write_run

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"
REPORTS = ("table.md", "table.csv", "table.tex", "summary.json")
LAGS = (0, 1, 8)
# beside CLAIMS (staleness cost, cost difference, recipes, equivalence, collapse): the two kinds they lack
MORE_CLAIMS = [
    {"name": "sat_r3_interaction", "kind": "interaction", "recipe": "sat_grpo", "versus": "grpo",
     "other_recipe": "grpo_r3", "other_versus": "grpo", "lag": 8, "expect": "greater", "smallest_effect": 0.05},
    {"name": "grpo_trend", "kind": "trend", "recipe": "grpo", "expect": "less", "smallest_effect": 0.005,
     "threshold": 0.05}]
GAIN_SOURCES = {"baseline": {"without_mismatch": "grpo", "with_mismatch": "grpo_r3"},
                "recipes": {"sat_grpo": {"without_mismatch": "sat_grpo", "with_mismatch": "grpo_r3"}},
                "smallest_effect": 0.05}


def write_grids(results: Path) -> list[dict]:
    """The three grids, finished, aggregated and synced into the store under ``results``; their checked
    configs. 'beside' is the grid 'every_kind' shows beside its own claims."""
    from analysis.aggregate import main as aggregate
    from analysis.schedule.tune import selection
    from tracking.sync import main as track

    configs = []
    beside = make_grid(results, grid="beside", seeds=(3, 4, 5), lags=LAGS)
    configs.append(validate({**beside, "claims": CLAIMS + MORE_CLAIMS}))
    every = make_grid(results, grid="every_kind", seeds=tuple(range(6)), lags=LAGS)
    configs.append(validate({**every, "claims": CLAIMS + MORE_CLAIMS, "seeding": {"looks": [3, 6]},
                             "gain_sources": GAIN_SOURCES, "side_by_side": {"grid": "beside", "label": "other seeds"}}))
    tuned = validate(raw_config(results, lag_mode="constant"))
    model, grid = Config.build(tuned), GridDir.of(tuned)
    for run in Tuning.of(tuned).runs():
        write_run(tuned, model, run, TUNING_SCORE[run[0]])
    write_json_atomic(grid.tuning_path, selection(model))
    for variant, lag, seed in grid.read_tuning()["confirmation_runs"]:
        write_run(tuned, model, (variant, lag, seed), 0.2 + 0.01 * seed + 0.02 * lag)
    configs.append(tuned)
    for config in configs:
        folder = GridDir.of(config).path
        write_json_atomic(folder / "config.json", config)
        assert aggregate(["--grid", str(folder)]) == 0
        assert track(["--grid", str(folder)]) == 0
    return configs


def _rounded(value):
    """Floats to 12 significant digits: the reports' own rounding is far coarser, and the last bits of
    a reduction may differ between CPUs."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


# the parent's MLflow id, which every new store draws anew (the fabricated runs record no provenance tags)
VOLATILE_TAGS = {"stalebench.grid_run"}


def _store(config: dict) -> dict:
    """The grid's experiments in the MLflow store: per run (by name), its params, last metrics and
    tags, without the ids, times and paths a new sync gives anew."""
    from mlflow.tracking import MlflowClient

    marker = json.loads(GridDir.of(config).mlflow_path.read_text())
    client = MlflowClient(marker["tracking_uri"])
    store = {}
    for key in ("experiment_id", "summary_experiment_id", "comparison_experiment_id", "tuning_experiment_id"):
        if marker.get(key) is None:
            continue
        experiment = client.get_experiment(marker[key])
        runs = {}
        for run in client.search_runs([marker[key]], max_results=10000):
            tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.") and k not in VOLATILE_TAGS}
            runs[run.info.run_name] = {"status": run.info.status, "params": dict(sorted(run.data.params.items())),
                                       "metrics": _rounded(dict(sorted(run.data.metrics.items()))),
                                       "tags": dict(sorted(tags.items()))}
        store[experiment.name] = dict(sorted(runs.items()))
    return store


def _placeheld(text: str, results: Path) -> str:
    """``text`` with the results folder as ``<results>``, also where table.tex escaped its underscores."""
    return text.replace(str(results), "<results>").replace(str(results).replace("_", r"\_"), "<results>")


def snapshot(config: dict, results: Path) -> dict[str, str]:
    """File name -> its text, for one grid: the reports, and the store as JSON (store.json)."""
    folder = GridDir.of(config).path
    texts = {name: _placeheld((folder / name).read_text(), results) for name in REPORTS}
    texts["summary.json"] = json.dumps(_rounded(json.loads(texts["summary.json"])), indent=1, sort_keys=True) + "\n"
    store = json.dumps(_store(config), indent=1, sort_keys=True) + "\n"
    texts["store.json"] = store.replace(str(results), "<results>")
    return texts


def snapshots(results: Path) -> dict[str, dict[str, str]]:
    """Grid name -> snapshot, every grid written anew under ``results`` (the store is the default one
    there: MLFLOW_TRACKING_URI is left out for the call)."""
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        return {config["grid"]: snapshot(config, results) for config in write_grids(results)}
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.golden_reports", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite tests/fixtures/golden/ from this code")
    args = parser.parse_args(argv)
    if not args.write:
        parser.error("--write: rewrites the expected reports (only when a change of a report is meant)")
    with tempfile.TemporaryDirectory() as tmp:
        for grid, texts in snapshots(Path(tmp) / "results").items():
            for name, text in texts.items():
                (GOLDEN / grid).mkdir(parents=True, exist_ok=True)
                (GOLDEN / grid / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
