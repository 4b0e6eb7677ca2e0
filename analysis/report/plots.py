"""The report's plots, each written atomically: score curves (percent), |d| quantiles, Kaplan-Meier
curves of collapse per lag, the staleness cost per recipe with its interval, claims marked, and for a
queue grid (lag mode queue) the Pareto front of modelled time against score and each group's lag
against its modelled length (drawn for a queue grid only; a text panel where its runs lack the data).
Each recipe is drawn in its chosen colour, the MLflow views' (analysis.report.colors.recipe_colour) and, where two
recipes share a colour, told apart by its marker (its place in the grid's recipe list)."""
from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path

import numpy as np

from analysis.cells.pareto import ENDPOINTS as PARETO_ENDPOINTS
from analysis.cells.pareto import queue_models
from analysis.cells.summary import ENDPOINT_NAMES, ENDPOINTS, RunResult, by_cell, score_curve, summary_cells
from analysis.claims.summary_file import Summary
from analysis.report.colors import MARKERS, recipe_colour
from analysis.statistics.cell_stats import CellStats
from analysis.statistics.survival import kaplan_meier
from grid.settings import Config
from harness.io import write_bytes_atomic

QUANTILES = ("d/mean_abs", "d/p50", "d/p90", "d/p99")
COLLAPSE_DASHES = ("-", "--", ":", "-.")  # collapse.png: a recipe's curve by its width and dash (plot_collapse)


def plot_curves(config: Config, runs: list[RunResult], path: Path) -> None:
    """Test score (%) vs step: the seed mean per recipe with its 95% Student t band, one panel per lag."""
    import matplotlib.pyplot as plt
    cells = by_cell(runs)
    lags = list(config.lags)
    fig, axes = plt.subplots(1, len(lags), figsize=(5 * len(lags), 4), squeeze=False, sharey=True)
    for ax, lag in zip(axes[0], lags):
        for i, recipe in enumerate(config.recipes):
            curve = score_curve(cells.get((recipe, lag), []), config.steps)
            steps = [point.step for point in curve]
            ax.plot(steps, [100 * point.estimate for point in curve], marker=_marker(i), markersize=3,
                    color=recipe_colour(recipe, config.recipes), label=recipe)
            ax.fill_between(steps, [100 * point.low for point in curve], [100 * point.high for point in curve],
                            color=recipe_colour(recipe, config.recipes), alpha=0.2, linewidth=0)
        ax.set(title=f"lag {lag}", xlabel="step", ylabel="test score (%, avg@k)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    save_figure(fig, path)


def plot_mismatch(config: Config, runs: list[RunResult], path: Path) -> None:
    """|d| = |log pi/mu| quantiles vs step (seed mean): one row per quantile, one column per lag."""
    import matplotlib.pyplot as plt
    cells = by_cell(runs)
    lags = list(config.lags)
    fig, axes = plt.subplots(len(QUANTILES), len(lags), figsize=(5 * len(lags), 2.6 * len(QUANTILES)),
                             squeeze=False, sharex=True)
    for col, lag in enumerate(lags):
        for row, key in enumerate(QUANTILES):
            ax = axes[row][col]
            for recipe in config.recipes:
                series = series_by_step(cells.get((recipe, lag), []), key, positive=True)  # on a log axis
                steps = sorted(series)
                ax.plot(steps, [np.mean(series[s]) for s in steps], label=recipe, linewidth=1,
                        color=recipe_colour(recipe, config.recipes))
            ax.set_yscale("log")
            ax.set(title=f"lag {lag}: {key}", xlabel="step" if row == len(QUANTILES) - 1 else None)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    save_figure(fig, path)


def series_by_step(runs: list[RunResult], key: str, positive: bool = False) -> dict[int, list[float]]:
    """A training metric's finite values (``positive``: above 0) of the runs, by step: at a step the values of
    the runs that logged it (one that stopped early drops out of later steps)."""
    series: dict[int, list[float]] = {}
    for run in runs:
        for line in run.train:
            value = line.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value) and (value > 0 or not positive):
                series.setdefault(line["step"], []).append(value)
    return series


def plot_collapse(summary: Summary, path: Path) -> None:
    """Kaplan-Meier curves of collapse, one panel per lag: the fraction of a recipe's runs not yet
    collapsed vs step, runs that never collapsed censored at the step budget."""
    import matplotlib.pyplot as plt
    cells = summary_cells(summary)
    lags = summary.lags
    fig, axes = plt.subplots(1, len(lags), figsize=(5 * len(lags), 4), squeeze=False, sharey=True)
    recipes = summary.recipes
    for ax, lag in zip(axes[0], lags):
        for i, recipe in enumerate(recipes):
            cell = cells[recipe, lag]
            steps, alive = kaplan_meier(cell.per_seed["collapse_step"], summary.steps)
            # curves that coincide (no collapse: all at 1) told apart where they are: each next recipe drawn
            # narrower and in its own dash on top of the ones before, never moved off its values
            ax.step(steps, alive, where="post", linewidth=1.2 + 2.4 * (len(recipes) - 1 - i) / max(len(recipes) - 1, 1),
                    linestyle=COLLAPSE_DASHES[i % len(COLLAPSE_DASHES)], color=recipe_colour(recipe, recipes),
                    label=f"{recipe} ({cell.collapse.k}/{cell.collapse.n})")
        ax.set(title=f"lag {lag}: runs not yet collapsed (Kaplan-Meier)", xlabel="step",
               ylabel="fraction of runs", ylim=(-0.05, 1.05))
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, title="recipe (collapsed k/n)", title_fontsize=7)
    save_figure(fig, path)


def plot_staleness(summary: Summary, path: Path) -> None:
    """Staleness cost (lag L minus the reference lag) per recipe with its 95% interval, one panel
    per endpoint and later lag (cost_panel); a grid of more than two lags: the cost against lag instead
    (plot_staleness_by_lag)."""
    if len(summary.lags) > 2:
        plot_staleness_by_lag(summary, path)
        return
    import matplotlib.pyplot as plt
    recipes, reference_lag = summary.recipes, summary.reference_lag
    later = [lag for lag in summary.lags if lag != reference_lag] or [reference_lag]
    panels = [(e, lag) for e in ENDPOINTS for lag in later]
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 0.7 * len(recipes)) * len(panels), 4.8),
                             squeeze=False)
    for ax, (endpoint, lag) in zip(axes[0], panels):
        cost_panel(ax, summary, endpoint, lag)
    save_figure(fig, path)


def cost_bars(cell: CellStats, endpoint: str) -> tuple[float, float, float] | None:
    """The cell's staleness cost on ``endpoint`` in points and how far its 95% interval reaches below and above
    it (0 without one); None where it has none (the reference lag, no value)."""
    stat = (cell.staleness_cost or {}).get(endpoint)
    if stat is None or stat.estimate is None:
        return None
    low = stat.estimate if stat.low is None else stat.low
    high = stat.estimate if stat.high is None else stat.high
    return 100 * stat.estimate, 100 * (stat.estimate - low), 100 * (high - stat.estimate)


def cost_panel(ax, summary: Summary, endpoint: str, lag: int) -> None:
    """One panel of staleness.png: each recipe's staleness cost at ``lag`` on ``endpoint`` (summary.json's cells)
    with its 95% interval, the recipes named on the x axis in their colours; the recipes of a staleness or
    cost-difference claim at that lag marked (a filled square, the name in bold), the claims' verdicts under it.
    Also the MLflow comparison's chart of the cost at one lag (analysis.report.interval_plots)."""
    cells, recipes, reference_lag = summary_cells(summary), summary.recipes, summary.reference_lag
    claimed = [c for c in summary.claims if c.claim.is_cost and c.claim.lag == lag and c.claim.metric == endpoint]
    marked = {c.claim.recipe for c in claimed} | {c.claim.versus for c in claimed if getattr(c.claim, "versus", None)}
    for x, recipe in enumerate(recipes):
        bars = cost_bars(cells[recipe, lag], endpoint)
        if bars is None:
            continue
        estimate, below, above = bars
        ax.errorbar(x, estimate, yerr=[[below], [above]],
                    fmt="s" if recipe in marked else "o", color=recipe_colour(recipe, recipes), capsize=3,
                    markerfacecolor=recipe_colour(recipe, recipes) if recipe in marked else "white")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(recipes)), recipes, rotation=30, ha="right")
    for tick, recipe in zip(ax.get_xticklabels(), recipes):
        tick.set(color=recipe_colour(recipe, recipes), fontweight="bold" if recipe in marked else "normal")
    ax.set(title=f"{ENDPOINT_NAMES[endpoint]}: lag {lag} minus lag {reference_lag}",
           ylabel="staleness cost (points, 95% CI)")
    ax.grid(alpha=0.3, axis="y")
    if claimed:
        text = "claims (square markers, bold names): " + "; ".join(f"{c.claim.name}: {c.verdict}" for c in claimed)
        ax.set_xlabel(textwrap.fill(text, 70), fontsize=7)  # wrapped: a long list stays inside its panel


def plot_staleness_by_lag(summary: Summary, path: Path) -> None:
    """Staleness cost against lag, one line per recipe with its 95% intervals (the cost is 0 by
    definition at the reference lag), one panel per endpoint; lags evenly spaced (they are often
    doubling). The verdicts of the claims on the panel's endpoint that read a cost against lag
    (trend, staleness cost, cost difference, interaction) are listed under it; a trend claim's threshold
    (the cost whose smallest lag it reports) is a dashed line on its endpoint's panel."""
    import matplotlib.pyplot as plt
    cells = summary_cells(summary)
    recipes, reference_lag, lags = summary.recipes, summary.reference_lag, sorted(summary.lags)
    fig, axes = plt.subplots(1, len(ENDPOINTS), figsize=(6.5 * len(ENDPOINTS), 5.2), squeeze=False)
    width = 0.5 / max(len(recipes), 1)  # recipes side by side within a lag, so intervals do not overlap
    for ax, endpoint in zip(axes[0], ENDPOINTS):
        for i, recipe in enumerate(recipes):
            xs, ys, below, above = [], [], [], []
            for x, lag in enumerate(lags):
                bars = (0.0, 0.0, 0.0) if lag == reference_lag else cost_bars(cells[recipe, lag], endpoint)
                if bars is None:
                    continue
                xs.append(x + (i - (len(recipes) - 1) / 2) * width)
                ys.append(bars[0])
                below.append(bars[1])
                above.append(bars[2])
            ax.errorbar(xs, ys, yerr=[below, above], marker=_marker(i), markersize=3, capsize=2, linewidth=1,
                        color=recipe_colour(recipe, recipes), label=recipe)
        ax.axhline(0, color="grey", linewidth=0.8)
        thresholds = {c.claim.threshold for c in summary.claims if c.claim.threshold and c.claim.metric == endpoint}
        for threshold in sorted(thresholds):
            ax.axhline(-100 * threshold, color="grey", linewidth=0.8, linestyle="--")  # a trend's threshold lag
        ax.set_xticks(range(len(lags)), [str(lag) for lag in lags])
        ax.set(title=f"{ENDPOINT_NAMES[endpoint]}: cost against lag (minus lag {reference_lag})", xlabel="lag",
               ylabel="staleness cost (points, 95% CI)")
        ax.grid(alpha=0.3, axis="y")
        claimed = [c for c in summary.claims if c.claim.metric == endpoint and c.claim.about_lag]
        if claimed:
            text = "claims: " + "; ".join(f"{c.claim.name}: {c.verdict}" for c in claimed)
            ax.set_xlabel("lag\n" + textwrap.fill(text, 80), fontsize=7)
    axes[0][-1].legend(fontsize=6, ncol=2 if len(recipes) > 8 else 1)
    save_figure(fig, path)


def plot_pareto(summary: Summary, path: Path) -> None:
    """A queue grid's modelled time for the run (relative to the fastest (recipe, bound)) against its
    score with the 95% interval, one panel per endpoint (the AUC, the score at equal modelled time:
    analysis.cells.pareto), one marker series per recipe, each point labelled with its bound, the recipe's
    Pareto front a step line (the best score within each time)."""
    pareto = summary.pareto
    if not pareto:
        _not_a_queue_grid(summary.lag_mode, path, "no modelled wall-clock (analysis.cells.pareto)")
        return
    import matplotlib.pyplot as plt
    titles = {"auc": "AUC over the run's steps", "equal_time": "score at equal modelled time"}
    fig, axes = plt.subplots(1, len(PARETO_ENDPOINTS), figsize=(6.5 * len(PARETO_ENDPOINTS), 5), squeeze=False)
    for ax, endpoint in zip(axes[0], PARETO_ENDPOINTS):
        for i, recipe in enumerate(summary.recipes):
            rows = [row for row in pareto["cells"] if row["recipe"] == recipe
                    and row[endpoint] is not None and row[endpoint]["estimate"] is not None]
            if not rows:
                continue
            xs = [row["relative_time"] for row in rows]
            ys = [100 * row[endpoint]["estimate"] for row in rows]
            below = [100 * (row[endpoint]["estimate"] - row[endpoint]["low"]) if row[endpoint]["low"] is not None
                     else 0.0 for row in rows]
            above = [100 * (row[endpoint]["high"] - row[endpoint]["estimate"]) if row[endpoint]["high"] is not None
                     else 0.0 for row in rows]
            bars = ax.errorbar(xs, ys, yerr=[below, above], fmt=_marker(i), markersize=4, capsize=2, label=recipe,
                               color=recipe_colour(recipe, summary.recipes))
            for x, y, row in zip(xs, ys, rows):
                ax.annotate(f"b{row['bound']}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
            front = sorted((x, y) for x, y, row in zip(xs, ys, rows) if row["front"][endpoint])
            ax.step([x for x, _ in front], [y for _, y in front], where="post", color=bars.lines[0].get_color(),
                    linewidth=1, alpha=0.7, label=f"{recipe}: Pareto front")
        ax.set(title=titles[endpoint], xlabel="modelled time for the run (relative to the fastest)",
               ylabel="test score (%, 95% CI)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(textwrap.fill(f"time model (ours, not measured): {pareto['time_model']}", 120), fontsize=8)
    save_figure(fig, path)


def plot_lag_vs_length(columns: list[tuple[str, list[int], list[float], object]], path: Path) -> None:
    """Each group's realized lag against its modelled relative length, over the model's D(X) (top),
    and the realized lag distribution against the model's (bottom): one column per (title, lags,
    lengths, harness.queue_lag.QueueModel), Spearman's rho of length and lag in its title."""
    import matplotlib.pyplot as plt
    from scipy import stats
    fig, axes = plt.subplots(2, len(columns), figsize=(5 * len(columns), 7.5), squeeze=False)
    for (title, lags, lengths, model), top, bottom in zip(columns, axes[0], axes[1]):
        lags, lengths = np.asarray(lags, dtype=int), np.asarray(lengths, dtype=float)
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, lags.size)  # only to show overlapping points
        top.scatter(lengths, lags + jitter, s=6, alpha=0.4, label="groups (realized lag, jittered)")
        grid = np.geomspace(lengths.min(), lengths.max(), 200)
        top.plot(grid, [min(model.steps_in_system(x), model.max_lag) for x in grid], color="tab:red",
                 label="model: E[lag | length] = D(X), before the filter")
        top.set(xscale="log", xlabel="modelled generation length X (relative to the mean)", ylabel="lag (versions)",
                title=f"{title}: lag vs length\n(Spearman rho {stats.spearmanr(lengths, lags).statistic:.2f}, "
                      f"n {lags.size})")
        top.legend(fontsize=7)
        observed = np.bincount(lags, minlength=model.max_lag + 1)
        ks = np.arange(len(observed))
        bottom.bar(ks - 0.2, observed / observed.sum(), width=0.4, label="realized")
        bottom.bar(ks + 0.2, model.pmf(), width=0.4, label="model")
        bottom.set_xticks(ks)
        bottom.set(xlabel="lag (versions)", ylabel="fraction of groups", title=f"{title}: lag distribution")
        bottom.legend(fontsize=7)
    save_figure(fig, path)


def plot_queue_lags(config: Config, runs: list[RunResult], path: Path) -> None:
    """lag_vs_length.png of a queue grid: one column per bound above 0, the groups of the first
    recipe's runs at that bound pooled over seeds (the draws depend on the seed and the bound, not on
    the recipe, so another recipe's would repeat them), from each step's queue/lags and queue/lengths. Another
    grid's report draws neither this nor plot_pareto (analysis.report.write: a sentence in table.md instead)."""
    cells, models, recipe, columns = by_cell(runs), queue_models(config), config.recipes[0], []
    for bound in [lag for lag in config.lags if lag > 0]:
        rows = [row for run in cells.get((recipe, bound), []) for row in run.train if "queue/lags" in row]
        if rows:
            columns.append((f"{recipe}, bound {bound}", [lag for row in rows for lag in row["queue/lags"]],
                            [length for row in rows for length in row["queue/lengths"]], models[recipe, bound]))
    if not columns:
        _not_a_queue_grid(config.lag_mode, path, "no run recorded per-group lags")
        return
    plot_lag_vs_length(columns, path)


def _not_a_queue_grid(lag_mode: str, path: Path, what: str) -> None:
    """The figure of a grid it does not apply to: one text panel saying why."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 2))
    reason = "not a queue grid" if lag_mode != "queue" else "a queue grid"
    ax.text(0.5, 0.5, f"{reason} (lag_mode {lag_mode}): {what}", ha="center", va="center")
    ax.set_axis_off()
    save_figure(fig, path)


def _marker(index: int) -> str:
    """The marker of the grid's index-th recipe: what tells apart two recipes of one colour (analysis.report.colors)."""
    return MARKERS[index % len(MARKERS)]


def save_figure(fig, path: Path) -> None:
    """Render the PNG in memory, then write it atomically (harness.io: a file's mode as open() gives it)."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    png = io.BytesIO()
    try:
        fig.savefig(png, dpi=110, format="png")
    finally:
        plt.close(fig)
    write_bytes_atomic(path, png.getvalue())
