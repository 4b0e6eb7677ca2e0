"""collapse.png (analysis.report.plots.plot_collapse): curves that coincide (no run collapsed: every curve at
1) are told apart by width and dash, each drawn at its own values, not moved off them (issue 51: a nudge of
0.004 x i read 0/10 collapsed as ~0.99); each recipe in its colour of the MLflow views (analysis.report.colors)."""
import matplotlib

import analysis.report.plots as plots
from analysis.claims.summary_file import Summary
from analysis.report.colors import recipe_colour
from analysis.statistics.cell_stats import CellStats, Stat

matplotlib.use("Agg")

RECIPES = ["grpo", "gspo", "gspo_mu", "sat_gspo"]
SUMMARY = Summary(recipes=RECIPES, lags=[1], steps=200,
                  cells=[CellStats(r, 1, list(range(10)), {"collapse_step": [None] * 10}, collapse=Stat(k=0, n=10))
                         for r in RECIPES])


def test_coinciding_collapse_curves_keep_their_values_and_differ_in_width_and_dash(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    plots.plot_collapse(SUMMARY, tmp_path / "collapse.png")
    (ax,) = figures[0].axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == [f"{r} (0/10)" for r in RECIPES]
    assert all(set(map(float, line.get_ydata())) == {1.0} for line in lines)  # 0/10 collapsed reads 1, exactly
    assert [line.get_color() for line in lines] == [recipe_colour(r, RECIPES) for r in RECIPES]  # as in MLflow's
    assert len({(line.get_linewidth(), line.get_linestyle()) for line in lines}) == len(RECIPES)
    widths = [line.get_linewidth() for line in lines]
    assert widths == sorted(widths, reverse=True)  # the first drawn widest: each next one shows on top of it
