"""A queue grid at equal modelled wall-clock (analysis.cells.pareto): the time model, the step each cell
reaches at equal time, the Pareto front, by hand; table.md's section, summary.json's "pareto" and the
two queue figures through analysis.aggregate on a fabricated queue grid."""
import math

import matplotlib
import pytest

import analysis.report.plots as plots
from analysis.aggregate import main
from analysis.cells.pareto import pareto_front, score_within, summarize_pareto, throughput
from analysis.claims.summary_file import Summary, read_summary
from analysis.statistics.cell_stats import CellStats, Stat
from grid.config import validate
from grid.settings import Config
from harness.queue_lag import QueueModel
from tests.support.grid_fixture import STEPS, make_config, make_grid, scores_of, written_grid

matplotlib.use("Agg")


def model(utilization: float, max_lag: int) -> QueueModel:
    """B = C = 2, K = 1, no length tail (X = 1): D = C/B x (1/r + 1 - 1/r) + L/B = 1 + L/2, with L the
    M/M/1/1 mean: 1/2 at rho 1, 1.5/2.5 = 0.6 at rho 1.5; lag = floor(D + U)."""
    return QueueModel(batch=2, concurrency=2, capacity=1, utilization=utilization, length_sigma=0.0,
                      max_lag=max_lag)


def test_the_time_model_by_hand():
    # rho 1: D = 1.25, P(lag 2) = 0.25 is past bound 1: 3/4 of the groups kept, the trainer waits
    assert model(1.0, 1).drop_rate() == pytest.approx(0.25)
    assert throughput(model(1.0, 1)) == pytest.approx(0.75)
    assert throughput(model(1.0, 2)) == pytest.approx(1.0)  # nothing dropped
    # rho 1.5: D = 1.3, drops 0.3, but 1.5 x 0.7 = 1.05 batches per step: the trainer's own speed bounds it
    assert model(1.5, 1).drop_rate() == pytest.approx(0.3)
    assert throughput(model(1.5, 1)) == 1.0


def curve(*points):
    return [Stat.from_row({"step": s, "estimate": e, "low": None if e is None else e - 0.1,
                           "high": None if e is None else e + 0.1, "n": 3, "method": "student-t"}) for s, e in points]


def test_equal_time_by_hand(tmp_path):
    raw = {**make_config(tmp_path, lag_mode="queue", lags=(0, 1, 2)), "recipes": ["grpo"], "steps": 100,
           "engine_params": {"preset": "demo", "prompts_per_step": 2}, "claims": [],
           "lag_queue": {"utilization": 1.0, "concurrency": 2, "capacity": 1, "length_sigma": 0.0}}
    config = Config.build(validate(raw))
    scores = curve((20, 0.1), (40, 0.2), (60, 0.3), (80, 0.4), (100, 0.5))
    cells = [CellStats(recipe="grpo", lag=lag, seeds=[], per_seed={}, curve=scores,
                       stats={"auc": Stat.from_row({"estimate": auc, "low": auc - 0.05, "high": auc + 0.05})})
             for lag, auc in ((0, 0.9), (1, 0.4), (2, 0.3))]
    pareto = summarize_pareto(config, cells)
    assert pareto["left_out"] == [0] and [row["bound"] for row in pareto["cells"]] == [1, 2]
    bound1, bound2 = pareto["cells"]
    # bound 2 is the fastest (1 step per unit): T = 100; bound 1 at 0.75 reaches 75 steps, evaluated last at 60
    assert pareto["time_budget"] == pytest.approx(100)
    assert bound1["time"] == pytest.approx(100 / 0.75) and bound1["relative_time"] == pytest.approx(4 / 3)
    assert (bound1["steps_reached"], bound1["equal_time"]["step"], bound1["equal_time"]["estimate"]) == (75, 60, 0.3)
    assert (bound2["steps_reached"], bound2["equal_time"]["step"], bound2["equal_time"]["estimate"]) == (100, 100, 0.5)
    # AUC: the slower bound 1 scores higher, so both are on the front; at equal time bound 2 dominates
    assert bound1["front"] == {"auc": True, "equal_time": False} and bound2["front"] == {"auc": True, "equal_time": True}
    assert summarize_pareto(Config.build(validate({**raw, "lag_mode": "interval"})), cells) is None


def test_score_within_skips_unscored_steps():
    points = curve((5, 0.1), (10, 0.2), (20, None))
    assert score_within(points, 20).step == 10  # the budget's step, scored by no run
    assert score_within(points, 9).step == 5 and score_within(points, 4) is None


def test_the_pareto_front_by_hand():
    points = [(1.0, 0.5), (1.2, 0.6), (1.5, 0.55), (2.0, None), (1.0, 0.4), (1.2, 0.6)]
    # (1.5, 0.55): slower and worse than (1.2, 0.6); (1.0, 0.4): as fast, worse; two equal points both stay
    assert pareto_front(points) == [True, True, False, False, False, True]


@pytest.fixture(scope="module")
def queue_grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("queue")
    config = make_grid(root, grid="queue", lag_mode="queue")
    out = root / config["grid"]
    assert main(["--grid", written_grid(config)]) == 0
    return config, out, read_summary(out / "summary.json")


def test_a_queue_grid_reports_its_equal_time_comparison(queue_grid):
    config, out, summary = queue_grid
    pareto = summary.pareto
    rows = {(row["recipe"], row["bound"]): row for row in pareto["cells"]}
    assert set(rows) == {(r, lag) for r in config["recipes"] for lag in config["lags"]}
    # the preset's system at batch 16 (the demo preset's prompts_per_step): bound 8 keeps 99.5%, bound 1 66.8%
    assert rows["grpo", 8]["throughput"] == pytest.approx(0.99501, abs=1e-4) and rows["grpo", 8]["relative_time"] == 1
    assert rows["grpo", 1]["throughput"] == pytest.approx(0.66844, abs=1e-4)
    assert rows["grpo", 1]["steps_reached"] == math.floor(STEPS * 0.66844 / 0.99501) == 13
    # step 13 is evaluated last at 10: the cell's mean over seeds there (the fixture's second score)
    mean = sum(scores_of("grpo", 1, seed)[1] for seed in config["seeds"]) / 3
    assert rows["grpo", 1]["equal_time"]["step"] == 10 and rows["grpo", 1]["equal_time"]["estimate"] == pytest.approx(mean)
    table = (out / "table.md").read_text()
    section = table[table.index("## At equal modelled wall-clock (lag mode queue; the time model is the preset's"):]
    assert "min(1, utilization x (1 - drop rate))" in section.splitlines()[0]
    assert "| grpo | 1 | 33.2 | 0.668 |" in section
    for name in ("pareto.png", "lag_vs_length.png"):
        assert (out / name).stat().st_size > 10_000  # figures, not the text panel of another grid


def test_the_pareto_plot_draws_each_recipes_points_and_front(queue_grid, tmp_path, monkeypatch):
    _, _, summary = queue_grid
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    plots.plot_pareto(summary, tmp_path / "pareto.png")
    auc, equal_time = figures[0].axes
    for ax, endpoint in ((auc, "auc"), (equal_time, "equal_time")):
        assert sorted(c.get_label() for c in ax.containers) == sorted(summary.recipes)
        for container in ax.containers:
            mine = [row for row in summary.pareto["cells"] if row["recipe"] == container.get_label()]
            line = container.lines[0]
            assert list(line.get_xdata()) == [row["relative_time"] for row in mine]
            assert list(line.get_ydata()) == pytest.approx([100 * row[endpoint]["estimate"] for row in mine])
            front, = [f for f in ax.get_lines() if f.get_label() == f"{container.get_label()}: Pareto front"]
            assert sorted(front.get_xdata()) == sorted(row["relative_time"] for row in mine if row["front"][endpoint])
        labels = {text.get_text() for text in ax.texts}
        assert labels == {"b1", "b8"}


def test_a_queue_grid_without_the_data_gets_a_text_panel(tmp_path, monkeypatch):
    """(Another grid's report draws neither plot: tests/analysis/test_report.py.)"""
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig))
    plots.plot_pareto(Summary(lag_mode="queue"), tmp_path / "pareto.png")
    plots.plot_queue_lags(Config.build(make_config(tmp_path, lag_mode="queue")), [], tmp_path / "lag_vs_length.png")
    assert len(figures) == 2
    for fig in figures:
        assert [t.get_text() for t in fig.axes[0].texts][0].startswith("a queue grid (lag_mode queue)")
