"""analysis.aggregate on a fabricated grid: content of summary.json, the tables and the plots."""
import csv
import json
import shutil

import matplotlib.image
import pytest

from harness.grid import run_dir
from analysis.aggregate import main
from analysis.report import REFERENCE, REPORT_FILES, collect, summarize
from grid_fixture import COLLAPSED, DIVERGED, EARLY_DIVERGED, EQUAL_CELL, make_grid


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid")
    config = make_grid(root)
    out = root / config["grid"]
    assert main(["--config-json", json.dumps(config), "--out", str(out)]) == 0
    return config, out, json.loads((out / "summary.json").read_text())


def paper_rows():
    lines = [l for l in REFERENCE.read_text().splitlines() if l and not l.startswith("#")]
    return {(r["method"], r["routing_replay"], r["tis"], r["lag"]): r for r in csv.DictReader(lines)}


def test_every_cell_and_seed_present(grid):
    config, out, summary = grid
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    assert set(cells) == {(r, l) for r in config["recipes"] for l in config["lags"]}
    for cell in cells.values():
        assert cell["seeds"] == config["seeds"] and len(set(cell["run_keys"])) == 3
        assert all(len(v) == 3 for v in cell["per_seed"].values())
    for name in REPORT_FILES:
        assert (out / name).stat().st_size > 0


def test_cis_contain_the_mean(grid):
    _, _, summary = grid
    checked = 0
    for cell in summary["cells"]:
        for stat in [*cell["stats"].values(), cell["collapse"], *cell["improvement"].values()]:
            if stat["low"] is not None:
                assert stat["low"] - 1e-12 <= stat["estimate"] <= stat["high"] + 1e-12, (cell["recipe"], stat)
                checked += 1
    assert checked > 50


def test_known_cases(grid):
    config, _, summary = grid
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    grpo8 = cells["grpo", 8]
    assert grpo8["collapse"]["k"] == 2 and grpo8["collapse"]["n"] == 3  # one collapse, one divergence
    assert grpo8["per_seed"]["status"][config["seeds"].index(DIVERGED[2])] == "diverged"
    assert grpo8["per_seed"]["fixed"][config["seeds"].index(DIVERGED[2])] == 0.0
    assert grpo8["per_seed"]["collapsed"][config["seeds"].index(COLLAPSED[2])] is True
    equal = cells[EQUAL_CELL]["stats"]["fixed"]
    assert equal["method"] == "degenerate" and equal["low"] == equal["high"] == equal["estimate"] == 0.45
    assert cells["grpo", 1]["improvement"]["fixed"]["estimate"] == 0.5  # the baseline against itself
    early = cells[EARLY_DIVERGED[:2]]
    i = config["seeds"].index(EARLY_DIVERGED[2])
    assert early["per_seed"]["best_step"][i] is None and early["per_seed"]["best"][i] == 0.0
    assert early["collapse"]["k"] == 1
    mean = sum(grpo8["per_seed"]["auc"]) / 3
    assert grpo8["stats"]["auc"]["estimate"] == pytest.approx(mean)


def test_reference_column_matches_table1(grid):
    _, out, summary = grid
    paper = paper_rows()
    # recipes.yaml: grpo -> (grpo, no R3, no TIS); grpo_r3 -> (grpo, R3); sat_grpo -> (sat_grpo, ...)
    expect = {"grpo": ("grpo", "false"), "grpo_r3": ("grpo", "true"), "sat_grpo": ("sat_grpo", "false")}
    table = {row["recipe"]: row for row in csv.DictReader((out / "table.csv").open())}
    markdown = (out / "table.md").read_text()
    for cell in summary["cells"]:
        method, r3 = expect[cell["recipe"]]
        row = paper[method, r3, "false", str(cell["lag"])]
        assert cell["reference"]["aime24"] == float(row["aime24"])
        assert table[cell["recipe"]][f"paper_aime24_lag{cell['lag']}"] == str(float(row["aime24"]))
        assert row["aime24"] in markdown
    assert table["grpo"]["collapse_lag8_k"] == "2"
    # per-seed values next to the aggregate, in the Markdown row of the collapsed cell
    grpo_row = next(l for l in markdown.splitlines() if l.startswith("| grpo |") and "(10.0, 0.0," in l)
    assert grpo_row.count("[") >= 2


def test_latex_and_plots_are_well_formed(grid):
    _, out, _ = grid
    tex = (out / "table.tex").read_text()
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") >= 7
    assert "sat\\_grpo" in tex and "sat_grpo" not in tex.replace("sat\\_grpo", "")
    for name in ("curves.png", "mismatch.png", "collapse.png"):
        image = matplotlib.image.imread(out / name)
        assert image.shape[0] > 200 and image.shape[1] > 200


def test_summary_is_deterministic(grid):
    config, _, summary = grid
    assert json.loads(json.dumps(summarize(config, collect(config, progress=False)))) == summary


def test_bad_config_and_missing_run_are_named(grid, tmp_path, capsys):
    config, _, _ = grid
    with pytest.raises(SystemExit):
        main(["--config-json", json.dumps({**config, "recipes": ["nope"]}), "--out", str(tmp_path)])
    assert "recipes[0]" in capsys.readouterr().err
    broken = make_grid(tmp_path)
    victim = run_dir(broken, "grpo_r3", 1, 2)
    shutil.rmtree(victim / "train")
    assert main(["--config-json", json.dumps(broken), "--out", str(tmp_path / "out")]) == 2
    assert str(victim / "train" / "status.json") in capsys.readouterr().err
    assert not (tmp_path / "out" / "summary.json").exists()
