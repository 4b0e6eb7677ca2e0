"""The training dynamics that explain the claims, per lag and recipe: the clip fraction (clipping), the ratio's spread, the
entropy, the reward, the off-policy diagnostics and the response length, each recipe's mean over its seeds at each
step over the band from the seeds' minimum to their maximum (BAND), as MLflow's grouped charts draw them
(tracking.layout.dynamics_view), so that dynamics.png (plot_dynamics) and the UI show the same thing in the same
colours (analysis.report.colors). Which metrics: those of GROUPS the runs log (an engine or a loss logs only some)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from analysis.cells.summary import RunResult, by_cell
from analysis.report.colors import recipe_colour
from grid.settings import Config

# (what it shows, the training metrics' keys that show it: a regular expression on the engine's row keys)
GROUPS = (("clipping", r"clip/frac_.+"), ("ratio", r"ratio/(max|min|std)"), ("entropy", r"entropy"),
          ("reward", r"reward"), ("off-policy", r"offpolicy/(ess|k3_kl)|tv/mean|d/mean_abs"),
          ("length", r"length/(mean|max)"))  # short names: a section's title in the UI shows about 26 characters at 1440 px
BAND = "min-max"  # the band's method: MLflow's grouped band, the seeds' min and max; short: a section's title


def dynamics_keys(keys) -> list[tuple[str, list[str]]]:
    """(group name, its keys among ``keys``, sorted) of each group of GROUPS with at least one, in GROUPS order."""
    found = [(name, sorted(k for k in keys if re.fullmatch(pattern, k))) for name, pattern in GROUPS]
    return [(name, group) for name, group in found if group]


def plot_dynamics(config: Config, runs: list[RunResult], path: Path) -> None:
    """dynamics.png: a row per metric of dynamics_keys, a column per lag; per recipe the mean over its seeds at each
    step (a run that stopped early drops out of later steps) over the band from their minimum to their maximum."""
    import matplotlib.pyplot as plt

    from analysis.report.plots import save_figure, series_by_step
    cells, lags = by_cell(runs), list(config.lags)
    keys = [key for _, group in dynamics_keys({k for run in runs for row in run.train for k in row}) for key in group]
    if not keys:
        keys = ["reward"]  # an engine that logs none of them: one empty panel says so
    fig, axes = plt.subplots(len(keys), len(lags), figsize=(5 * len(lags), 2.2 * len(keys)), squeeze=False,
                             sharex=True)
    for col, lag in enumerate(lags):
        for row, key in enumerate(keys):
            ax = axes[row][col]
            for recipe in config.recipes:
                series = series_by_step(cells.get((recipe, lag), []), key)
                steps = sorted(series)
                colour = recipe_colour(recipe, config.recipes)
                ax.plot(steps, [np.mean(series[s]) for s in steps], label=recipe, linewidth=1, color=colour)
                ax.fill_between(steps, [min(series[s]) for s in steps], [max(series[s]) for s in steps],
                                color=colour, alpha=0.15, linewidth=0)
            ax.set_title(f"lag {lag}: {key}", fontsize=9)
            ax.grid(alpha=0.3)
        axes[-1][col].set_xlabel("step")
    # the band's method in the legend's title: a figure title would overlap the first panels' (save_figure's layout)
    axes[0][-1].legend(fontsize=7, title=f"mean over seeds, band {BAND}", title_fontsize=7)
    save_figure(fig, path)
