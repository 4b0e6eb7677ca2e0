"""staleness.png of a grid of more than two lags (analysis.report.plots.plot_staleness_by_lag): the cost
against lag per recipe, each point at its cell's estimate with its interval, the claims' verdicts
under their endpoint's panel; each recipe in its colour of the MLflow views; a claim's contrast chart (interval_plots)."""
import dataclasses

import matplotlib

import analysis.report.plots as plots
from analysis.claims.summary_file import Summary
from analysis.claims.verdict import ScoreMeasured, Verdict
from analysis.report.colors import recipe_colour
from analysis.report.interval_plots import contrast_panel
from analysis.statistics.cell_stats import CellStats, Stat
from grid.claims import Claim

matplotlib.use("Agg")

LAGS = [0, 1, 2, 4, 8, 16]


def verdict(outcome: str, **section) -> Verdict:
    """A claim of the config section's fields (name, kind, recipe, ...) decided as ``outcome``."""
    section = {"recipe": "grpo", "lag": 8, "expect": "less", "smallest_effect": 0.05, "metric": "auc", **section}
    return Verdict(claim=Claim.build(section, LAGS), statement="", family_size=2, verdict=outcome, why="", final=True)


def cost(recipe: str, lag: int) -> dict[str, Stat]:
    """A made-up cost (fraction of the score) and interval, different per recipe, lag and endpoint."""
    slope = {"grpo": -0.02, "sat_gspo": -0.005}[recipe]
    return {endpoint: Stat(estimate=slope * lag * scale, low=slope * lag * scale - 0.01,
                           high=slope * lag * scale + 0.02) for endpoint, scale in (("auc", 1.0), ("fixed", 2.0))}


SUMMARY = Summary(recipes=["grpo", "sat_gspo"], lags=LAGS, reference_lag=0,
                  cells=[CellStats(r, lag, [], {}, staleness_cost=None if lag == 0 else cost(r, lag))
                         for r in ("grpo", "sat_gspo") for lag in LAGS],
                  claims=[verdict("supported", name="grpo_trend", kind="trend", threshold=0.1),
                          verdict("inconclusive", name="a_recipes_claim", kind="recipes", versus="sat_gspo")])


def test_the_cost_against_lag_per_recipe_with_intervals(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    plots.plot_staleness(SUMMARY, tmp_path / "staleness.png")  # more than two lags: by lag
    (fig,) = figures
    auc, fixed = fig.axes
    for ax, endpoint in ((auc, "auc"), (fixed, "fixed")):
        recipes = {container.get_label(): container for container in ax.containers}
        assert sorted(recipes) == ["grpo", "sat_gspo"]
        for recipe, container in recipes.items():
            line, _, (bars,) = container.lines
            expected = [0.0] + [100 * cost(recipe, lag)[endpoint].estimate for lag in LAGS[1:]]
            assert [round(y, 9) for y in line.get_ydata()] == [round(y, 9) for y in expected]
            assert [float(x) for x in line.get_xdata()] != list(range(len(LAGS)))  # offset within a lag
            assert [round(x) for x in line.get_xdata()] == list(range(len(LAGS)))  # lags evenly spaced
            # each point's interval: its bar spans low..high (3 points); the reference lag's is a point
            spans = [round(segment[1][1] - segment[0][1], 6) for segment in bars.get_segments()]
            assert spans == [0.0] + [3.0] * (len(LAGS) - 1)
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(lag) for lag in LAGS]
    assert "grpo_trend: supported" in auc.get_xlabel() and "a_recipes_claim" not in auc.get_xlabel()
    assert "grpo_trend" not in fixed.get_xlabel()
    # the trend's threshold (10 points) dashed on its endpoint's panel alone
    dashed = {name: [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
              for name, ax in (("auc", auc), ("fixed", fixed))}
    assert dashed == {"auc": [-10.0], "fixed": []}


def test_two_lags_keep_the_per_recipe_panels(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    two = dataclasses.replace(SUMMARY, lags=[0, 8], cells=[c for c in SUMMARY.cells if c.lag in (0, 8)], claims=[])
    plots.plot_staleness(two, tmp_path / "staleness.png")
    assert len(figures[0].axes) == 2 and all(ax.get_title().endswith("lag 8 minus lag 0") for ax in figures[0].axes)
    for ax in figures[0].axes:  # the recipes named on the x axis, each drawn in its colour of the MLflow views
        assert [t.get_text() for t in ax.get_xticklabels()] == two.recipes
        colours = [recipe_colour(r, two.recipes) for r in two.recipes]
        assert [c.lines[0].get_color() for c in ax.containers] == colours


def test_a_claims_contrast_with_its_interval_named_on_the_axis():
    import matplotlib.pyplot as plt
    measured = ScoreMeasured(estimate=0.02, n=3, method="paired-t", test="paired-t", p=None, se=None, df=None,
                             spread=None)
    claim = dataclasses.replace(verdict("undecided", name="sat_cheaper", kind="cost_difference", recipe="sat_gspo",
                                        versus="grpo"), measured=measured, low=-0.01, high=0.07, confidence=0.99)
    fig, ax = plt.subplots()
    contrast_panel(ax, claim, "staleness cost of sat_gspo minus that of grpo", ["grpo", "sat_gspo"])
    ((line, _, (bars,)),) = [container.lines for container in ax.containers]
    assert [round(float(y), 9) for y in line.get_ydata()] == [2.0]
    assert line.get_color() == recipe_colour("sat_gspo", ["grpo", "sat_gspo"])
    ((_, low), (_, high)) = bars.get_segments()[0]
    assert (round(float(low), 9), round(float(high), 9)) == (-1.0, 7.0)  # points, asymmetric as the summary's
    rules = [line for line in ax.get_lines() if list(line.get_xdata()) == [0, 1]]  # axhline: the axes' width
    assert sorted(float(rule.get_ydata()[0]) for rule in rules) == [-5.0, 0.0, 5.0]  # 0 and +-delta
    assert [t.get_text() for t in ax.get_xticklabels()] == ["staleness cost of sat_gspo minus that of grpo"]
    assert ax.get_title() == "sat_cheaper: undecided" and "99.00% interval, paired-t" in ax.get_ylabel()
    plt.close(fig)
