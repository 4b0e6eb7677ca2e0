"""The small print counts what exists (issue 51): the parent run's n_runs and table.md's runs without a
provenance.json count the runs trained, not the grid's planned ones (a seed schedule trains some); the
header says each recipe's seeds where the cells differ; a score difference's /se and /spread are in points."""
from __future__ import annotations

import shutil

from analysis.cells.summary import seeds_text
from analysis.claims.summary_file import Summary
from analysis.report.machines import provenance_section
from analysis.report.render import markdown
from analysis.report.tables import seed_order_text
from analysis.statistics.cell_stats import CellStats
from grid.expand import expand
from grid.settings import Config
from tests.support.grid_fixture import make_grid
from tracking.layout import cell_values
from tracking.sync import sync
from tracking.writer import Writer


def unscheduled(config: dict) -> tuple[Config, int]:
    """The fabricated grid with grpo's seed 2 at every lag never trained (as a seed schedule leaves it)."""
    typed = Config.build(config)
    for lag in config["lags"]:
        shutil.rmtree(typed.folder.run("grpo", lag, 2).path)
    return typed, len(expand(config)) - len(config["lags"])


def test_runs_without_provenance_are_runs_that_were_trained(tmp_path):
    typed, trained = unscheduled(make_grid(tmp_path / "results"))  # the fabricated runs record no provenance
    lines = markdown([provenance_section(typed)])
    assert any(line.startswith(f"{trained} run(s) have no provenance.json") for line in lines), lines
    assert not any("grpo/lag1/seed2" in line for line in lines)


def test_the_parent_run_counts_the_runs_there_are(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    typed, trained = unscheduled(make_grid(tmp_path / "results"))
    marker = sync(typed, progress=False, final=False)
    parent = Writer(typed.results_dir).client.get_run(marker["parent_run_id"])
    assert parent.data.tags["n_runs"] == str(trained) != str(len(typed.grid_runs))


def test_the_header_names_each_recipes_seeds_where_they_differ():
    cells = [CellStats("grpo", 1, [0, 1, 2, 3, 4, 5], {}), CellStats("grpo", 8, [0, 1, 2], {}),
             CellStats("gspo", 1, list(range(10)), {}), CellStats("gspo", 8, list(range(10)), {})]
    assert seeds_text(Summary(cells=cells, seeds=list(range(10)))) == "seeds per cell: grpo 3-6, gspo 10"
    assert seeds_text(Summary(cells=cells[2:], seeds=list(range(12)))) == "10 seeds"  # the cells', not the config's


def test_the_seed_order_says_when_cells_hold_fewer_seeds_than_declared():
    cells = [CellStats("grpo", 1, [0, 1, 2], {}), CellStats("gspo", 1, [0, 1, 2, 3, 4], {})]
    assert seed_order_text(Summary(cells=cells, seeds=[0, 1, 2, 3, 4])) == (
        "in seed order [0, 1, 2, 3, 4]; a cell lists only the seeds its looks ran (counts in the heading)")
    assert seed_order_text(Summary(cells=cells[1:], seeds=[0, 1, 2, 3, 4])) == "in seed order [0, 1, 2, 3, 4]"


def test_a_score_differences_se_and_spread_are_in_points_as_its_estimate():
    cost = {"estimate": -0.2825, "low": -0.35, "high": -0.2, "se": 0.0105, "spread": 0.03, "p": 0.01, "n": 5}
    metrics, _ = cell_values(CellStats.from_row({"recipe": "grpo", "lag": 8, "seeds": [], "per_seed": {},
                                                 "staleness_cost": {"auc": cost}}))
    assert {key: metrics[f"staleness_cost/auc{key}"] for key in ("", "/low", "/se", "/spread", "/p", "/n")} == {
        "": -28.25, "/low": -35.0, "/se": 1.05, "/spread": 3.0, "/p": 0.01, "/n": 5.0}
