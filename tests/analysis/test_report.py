"""analysis.aggregate on a fabricated grid: content of summary.json, the tables and the plots."""
import csv
import itertools
import json
import os
import shutil
import subprocess
import sys

import matplotlib.figure
import matplotlib.image
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.aggregate import main
from analysis.cells.reference import REFERENCE
from analysis.cells.summary import ENDPOINT_NAMES, ENDPOINTS, collect
from analysis.report.plots import plot_curves
from analysis.statistics.contrasts import contrast
from analysis.statistics.intervals import collapse_difference, prob_improvement
from grid.folder import QUEUE_PLOTS, GridDir, report_files
from grid.settings import Config
from tests.support.aggregated_grid import aggregated_grid
from tests.support.grid_fixture import (
    COLLAPSED,
    DIVERGED,
    EARLY_DIVERGED,
    EQUAL_CELL,
    make_grid,
    scores_of,
    written_grid,
)
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def grid(tmp_path_factory, run_folder):
    root = tmp_path_factory.mktemp("grid")
    config = aggregated_grid(run_folder, root, claims=False)
    out = root / config["grid"]
    return config, out, json.loads((out / "summary.json").read_text())


def paper_rows():
    lines = [line for line in REFERENCE.read_text().splitlines() if line and not line.startswith("#")]
    return {(r["method"], r["routing_replay"], r["tis"], r["lag"]): r for r in csv.DictReader(lines)}


def test_every_cell_and_seed_present(grid):
    config, out, summary = grid
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    assert set(cells) == {(r, lag) for r in config["recipes"] for lag in config["lags"]}
    for cell in cells.values():
        assert cell["seeds"] == config["seeds"] and len(set(cell["run_keys"])) == 3
        assert all(len(v) == 3 for v in cell["per_seed"].values())
    mask = os.umask(0o022)
    os.umask(mask)
    for name in report_files(config["lag_mode"]):
        assert (out / name).stat().st_size > 0
        # as open() leaves a file (0644 under umask 022), not mkstemp's 0600: readable in a shared results folder
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~mask, name
    # not a queue grid: no placeholder image of a queue grid's plots, the sentence in table.md instead
    assert config["lag_mode"] != "queue" and not any((out / f"{name}.png").exists() for name in QUEUE_PLOTS)
    assert ("## Plots not drawn\n\npareto.png and lag_vs_length.png compare a queue grid's bounds at equal modelled "
            f"wall-clock (lag_mode queue; docs/statistics.md); this grid's lag_mode is {config['lag_mode']}.") in (
        out / "table.md").read_text()


def test_cis_contain_the_mean(grid):
    _, _, summary = grid
    checked = 0
    for cell in summary["cells"]:
        comparisons = [*(cell["vs_baseline"] or {}).values(), *(cell["staleness_cost"] or {}).values()]
        for stat in [*cell["stats"].values(), cell["collapse"], *cell["improvement"].values(), *comparisons]:
            if stat["low"] is not None:
                assert stat["low"] - 1e-12 <= stat["estimate"] <= stat["high"] + 1e-12, (cell["recipe"], stat)
                checked += 1
    assert checked > 60


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
    grpo_row = next(line for line in markdown.splitlines() if line.startswith("| grpo |") and "(10.0, 0.0," in line)
    assert grpo_row.count("[") >= 2


def test_latex_and_plots_are_well_formed(grid):
    _, out, _ = grid
    tex = (out / "table.tex").read_text()
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") >= 15
    assert tex.count(r"\item ") == len(json.loads((out / "summary.json").read_text())["conclusions"])
    assert "sat\\_grpo" in tex and "sat_grpo" not in tex.replace("sat\\_grpo", "")
    for name in ("curves.png", "mismatch.png", "collapse.png", "staleness.png"):
        image = matplotlib.image.imread(out / name)
        assert image.shape[0] > 200 and image.shape[1] > 200


def test_the_curves_plot_draws_each_cells_seed_mean(grid, scratch, monkeypatch):
    """By hand (tests/support/grid_fixture.py): every seed of sat_grpo at lag 1 scores 0.30, 0.35,
    0.40, 0.45 at steps 5-20, so its line in the lag-1 panel is those points in percent."""
    config, _, _ = grid
    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda figure, *args, **kwargs: drawn.append(figure))
    typed = Config.build(config)
    plot_curves(typed, collect(typed, progress=False), scratch / "curves.png")
    (figure,) = drawn
    assert [ax.get_title() for ax in figure.axes] == ["lag 1", "lag 8"]
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert set(lines) == set(config["recipes"])
    steps, mean = lines[EQUAL_CELL[0]].get_data()
    assert list(steps) == [5, 10, 15, 20] and list(mean) == pytest.approx([30.0, 35.0, 40.0, 45.0], abs=1e-9)


@pytest.mark.slow  # another process
def test_summary_is_the_same_from_another_process(grid, scratch):
    """Same runs, same summary.json, from a second aggregate in a process with another hash seed (set
    and dict orders differ)."""
    config, _, summary = grid
    result = subprocess.run([sys.executable, "-m", "analysis.aggregate", "--grid", written_grid(config),
                             "--out", str(scratch)], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((scratch / "summary.json").read_text()) == summary


def test_bad_config_and_missing_run_are_named(grid, tmp_path, capsys):
    config, _, _ = grid
    with pytest.raises(SystemExit):
        main(["--grid", written_grid({**config, "results_dir": str(tmp_path), "recipes": ["nope"]})])
    assert "recipes[0]" in capsys.readouterr().err
    broken = make_grid(tmp_path)
    victim = GridDir.of(broken).run("grpo_r3", 1, 2).path
    shutil.rmtree(victim / "train")
    assert main(["--grid", written_grid(broken), "--out", str(tmp_path / "out")]) == 2
    assert str(victim / "train" / "status.json") in capsys.readouterr().err
    assert not (tmp_path / "out" / "summary.json").exists()


def minus(cell, other, metric):
    """cell - other paired by seed (every cell of the fixture has seeds 0, 1, 2)."""
    return contrast([(1.0, cell["per_seed"][metric], cell["seeds"]),
                     (-1.0, other["per_seed"][metric], other["seeds"])]).as_dict()


def test_comparisons_are_the_statistics_of_the_per_seed_values(grid):
    """Each comparison in summary.json is analysis.statistics.intervals applied to the cells' per-seed values."""
    config, _, summary = grid
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    first = min(config["lags"])
    for (recipe, lag), cell in cells.items():
        base, earlier = cells["grpo", lag], cells[recipe, first]
        assert (cell["vs_baseline"] is None) == (recipe == "grpo")
        assert (cell["staleness_cost"] is None) == (lag == first)
        for metric in ("fixed", "best", "auc"):
            if recipe != "grpo":
                expected = minus(cell, base, metric)
                assert {k: cell["vs_baseline"][metric][k] for k in expected} == pytest.approx(expected, nan_ok=True)
                assert cell["vs_baseline"][metric]["method"] in ("paired-t", "degenerate")
            if lag != first:
                expected = minus(cell, earlier, metric)
                assert {k: cell["staleness_cost"][metric][k] for k in expected} == pytest.approx(expected, nan_ok=True)
            expected = prob_improvement(cell["per_seed"][metric], base["per_seed"][metric])
            assert cell["improvement"][metric]["p"] == pytest.approx(expected.p)
        if lag != first:
            expected = collapse_difference(cell["collapse"]["k"], 3, earlier["collapse"]["k"], 3)
            assert cell["collapse_vs_reference_lag"]["p"] == pytest.approx(expected.p)
    assert summary["reference_lag"] == first and summary["comparisons"]["correction"] == "holm"


def test_holm_within_each_table(grid):
    _, out, summary = grid
    others = [c for c in summary["cells"] if c["recipe"] != "grpo"]
    markdown = (out / "table.md").read_text()
    for endpoint in ENDPOINTS:
        for key, members in (("vs_baseline", others), ("improvement", others),
                             ("staleness_cost", [c for c in summary["cells"] if c["staleness_cost"]])):
            stats = [c[key][endpoint] for c in members if c[key][endpoint]["p"] is not None]
            adjusted = multipletests([s["p"] for s in stats], method="holm")[1]
            assert [s["p_holm"] for s in stats] == pytest.approx(list(adjusted))
            assert f"exploratory, Holm-adjusted over the {len(stats)} tests of this table" in markdown
        # the baseline against itself is no test of the family
        assert all(c["improvement"][endpoint]["p_holm"] is None for c in summary["cells"] if c["recipe"] == "grpo")


def test_new_columns_in_csv_and_markdown(grid):
    _, out, summary = grid
    table = {row["recipe"]: row for row in csv.DictReader((out / "table.csv").open())}
    markdown = (out / "table.md").read_text()
    cell = next(c for c in summary["cells"] if (c["recipe"], c["lag"]) == ("sat_grpo", 8))
    row = table["sat_grpo"]
    for endpoint in ENDPOINTS:
        for name, key in (("diff_baseline", "vs_baseline"), ("staleness", "staleness_cost")):
            stat = cell[key][endpoint]
            for part in ("estimate", "low", "high", "p", "p_holm"):
                assert float(row[f"{name}_{endpoint}_lag8_{part}"]) == pytest.approx(stat[part])
            assert int(row[f"{name}_{endpoint}_lag8_n"]) == stat["n"] == 3
            assert row[f"{name}_{endpoint}_lag8_method"] == "paired-t"
            assert f"{stat['estimate'] * 100:+.1f} [" in markdown
        assert float(row[f"p_improve_{endpoint}_lag8_p"]) == pytest.approx(cell["improvement"][endpoint]["p"])
    collapse = cell["collapse_vs_baseline"]
    assert float(row["collapse_diff_baseline_lag8_p"]) == pytest.approx(collapse["p"])
    assert float(row["collapse_diff_baseline_lag8_low"]) == pytest.approx(collapse["low"])  # Newcombe
    assert row["fixed_lag8_method"] == "student-t"
    assert table["grpo"]["diff_baseline_fixed_lag8_p"] == ""  # the baseline is not compared with itself
    assert "paired by seed" in markdown and "95% CI: Student t" in markdown and "(n 3)" in markdown
    assert "Staleness cost: AUC at this lag minus lag 1" in markdown  # AUC tables beside the fixed-step ones


def test_conclusions_follow_the_numbers(grid):
    """Every comparison is named in the conclusion line that its Holm p and interval call for."""
    _, out, summary = grid
    lines = summary["conclusions"]
    markdown = (out / "table.md").read_text()
    assert "## What can and cannot be concluded" in markdown and all(line in markdown for line in lines)
    assert any("not evidence of a difference" in line for line in lines)
    assert lines[0].startswith("No claims declared")  # this grid declares none: everything is exploratory
    for (key, what), endpoint in itertools.product((("vs_baseline", "difference to grpo"),
                                                    ("staleness_cost", "staleness cost")), ENDPOINTS):
        what = f"{what} in the {ENDPOINT_NAMES[endpoint]}" if key == "vs_baseline" else what
        for cell in summary["cells"]:
            if cell[key] is None or cell[key][endpoint]["p"] is None:
                continue
            stat = cell[key][endpoint]
            name = f"{cell['recipe']} at lag {cell['lag']}: {stat['estimate'] * 100:+.1f}"
            if stat["p_holm"] < 0.05:
                kind = "Evidence of a"
            elif not stat["low"] <= 0 <= stat["high"]:
                kind = "Suggestive only"
            else:
                kind = "No evidence either way"
            line = next(text for text in lines if text.startswith(kind) and what in text
                        and f"in the {ENDPOINT_NAMES[endpoint]}" in text)
            assert name in line
    # 3 seeds against 3: the exact tests cannot reach 0.05 (smallest p = 2 / C(6, 3) = 0.1):
    # P(improvement) on both endpoints and the two collapse-rate tables
    assert sum("complete separation gives p = 0.100" in line for line in lines) == 4
    assert sum(line.startswith("Evidence of a") for line in lines) >= 1  # the fixture has a clear one


def test_realized_lag_distribution_per_cell(grid):
    """Each cell's realized lags, pooled over its seeds' metrics rows, in summary.json and table.md."""
    config, out, summary = grid
    markdown = (out / "table.md").read_text()
    assert "## Realized lag (interval mode)" in markdown and summary["lag_mode"] == "interval"
    for cell in summary["cells"]:
        lags = [row["realized_lag"] for seed in config["seeds"]
                for row in map(json.loads, (GridDir.of(config).run(cell["recipe"], cell["lag"], seed).path / "train" /
                                            "metrics.jsonl").read_text().splitlines())]
        distribution = cell["realized_lag"]
        assert (distribution["min"], distribution["max"]) == (min(lags), max(lags)) == (1, cell["lag"])
        assert distribution["mean"] == pytest.approx(sum(lags) / len(lags))
        assert distribution["steps"] == {str(v): lags.count(v) for v in sorted(set(lags))}
        row = next(line for line in markdown.splitlines()
                   if line.startswith(f"| {cell['recipe']} |") and "(mean" in line and ".." in line)
        assert f"1..{cell['lag']} (mean {distribution['mean']:.2f})" in row


def test_cell_curve_is_the_seed_mean_with_its_interval_at_every_evaluation_step(grid):
    """summary.json's per-step cell curve (what the MLflow summary runs chart): one point per
    evaluation step; the diverged seed counts 0 after it stopped; the interval is mean_ci's."""
    config, _, summary = grid
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    grpo8 = cells["grpo", 8]
    assert [p["step"] for p in grpo8["curve"]] == [5, 10, 15, 20]
    by_seed = {seed: scores_of("grpo", 8, seed) for seed in config["seeds"]}
    by_seed[DIVERGED[2]] = by_seed[DIVERGED[2]][:2] + [0.0, 0.0]  # diverged at step 12: 0 afterwards
    for i, point in enumerate(grpo8["curve"]):
        values = [by_seed[seed][i] for seed in config["seeds"]]
        expected = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
        assert point["estimate"] == pytest.approx(sum(values) / 3) and point["n"] == 3
        assert (point["low"], point["high"]) == pytest.approx((expected.low, expected.high))
    equal = cells[EQUAL_CELL]["curve"]
    assert {p["method"] for p in equal} == {"degenerate"} and all(p["low"] == p["high"] for p in equal)
    assert [p["low"] for p in equal] == pytest.approx([0.30, 0.35, 0.40, 0.45])
