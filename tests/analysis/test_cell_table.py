"""analysis.statistics.cell_table and cell_stats: a grid's runs as arrays over (recipe, lag, seed), a cell a slice and
two cells paired by seed position; summary.json's cells typed and written back key for key."""
import json
import math

from analysis.statistics.cell_stats import CellStats, Stat
from analysis.statistics.cell_table import CellTable
from tests.support.paths import ROOT

GOLDEN = ROOT / "tests" / "fixtures" / "golden"


def test_a_cell_is_a_slice_in_the_grids_seed_order():
    table = CellTable.build([("a", 1), ("a", 8), ("b", 1)], {
        ("a", 1, 3): {"auc": 0.3, "collapse_step": None}, ("a", 1, 5): {"auc": 0.5, "collapse_step": 40},
        ("a", 8, 5): {"auc": None, "collapse_step": None}, ("b", 1, 3): {"auc": 0.1, "collapse_step": 12}})
    assert (table.recipes, table.lags, table.seeds) == (("a", "b"), (1, 8), (3, 5))
    assert table.values["auc"].shape == (2, 2, 2) and table.values["auc"].dtype == float
    assert table.arm(("a", 1), "auc") == ([0.3, 0.5], [3, 5])
    assert table.arm(("a", 1), "auc", {5}) == ([0.5], [5])
    assert table.arm(("a", 8), "collapse_step") == ([None], [5])  # a step stays a step or None, never NaN
    assert table.arm(("b", 1), "collapse_step") == ([12], [3])
    assert math.isnan(table.column(("a", 8), "auc")[0]) and table.run("a", 8, 5) == {"auc": None, "collapse_step": None}
    # ("b", 8) is on the axes but not a cell of the grid; ("a", 8) is, with one run
    assert not table.has(("b", 8)) and table.has(("a", 8)) and table.count(("a", 8)) == 1
    assert table.runs() == [("a", 1, 3), ("a", 1, 5), ("a", 8, 5), ("b", 1, 3)]


def test_summary_cells_read_back_are_written_back_key_for_key():
    for grid in ("every_kind", "tuned", "beside"):
        rows = json.loads((GOLDEN / grid / "summary.json").read_text())["cells"]
        cells = [CellStats.from_row(row) for row in rows]
        assert [cell.row() for cell in cells] == rows
        table = CellTable.of_cells(cells)
        for cell, row in zip(cells, rows):
            assert table.seeds_of(cell.cell) == row["seeds"]
            for metric, values in row["per_seed"].items():
                assert [None if isinstance(v, float) and math.isnan(v) else v
                        for v in table.column(cell.cell, metric)] == values
        assert [table.run(*run) for run in table.runs()] == [
            {metric: values[i] for metric, values in row["per_seed"].items()}
            for row in rows for i in range(len(row["seeds"]))]


def test_a_stat_keeps_the_keys_its_kind_has():
    comparison = Stat.from_row({"estimate": 0.5, "low": 0.2, "high": 0.8, "n_x": 3, "n_y": 3, "method": "none",
                                "p": 0.1, "test": "mann-whitney-exact"})
    assert comparison.tested and comparison.n is None and "p_holm" not in comparison.row()
    assert comparison.adjusted(0.3).row() == {**comparison.row(), "p_holm": 0.3}
    assert not Stat.from_row({"estimate": 0.5, "low": None, "high": None, "n": 1, "method": "n<2"}).tested
