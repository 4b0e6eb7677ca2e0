"""The intervals the MLflow comparison shows as images (tracking.runs.Tracker.sync_intervals), each a chart with named
categories: per later lag, each recipe's staleness cost with its 95% interval (plots.cost_panel, a panel of
staleness.png), the recipes named on the x axis; per tested claim, its contrast with its interval at the claim's
level against 0 and its smallest effect (delta), the contrast named on the x axis in words. MLflow's own charts draw
neither: its bar chart has no interval and names its bars in a legend only (docs/mlflow.md). Every number is
summary.json's: nothing is recomputed here."""
from __future__ import annotations

import textwrap
from pathlib import Path

from analysis.claims.summary_file import Summary
from analysis.claims.verdict import Verdict
from analysis.report.colors import recipe_colour
from analysis.report.plots import cost_panel, save_figure
from grid.settings import Config

# inches: an intervals card (tracking.layout.intervals_view) draws an image ~345 px wide at 1440x900, so 10-point text
# reads at ~11 px there (at 5 inches it read at ~9.6 px; as MLflow's 256 px thumbnail, ~5 px)
WIDTH = 4.2
SMALL = 8  # points: the smallest text (the claims under the cost chart, the delta's label), ~9 px in a card


def cost_key(endpoint: str, lag: int) -> str:
    """The image key of the staleness cost chart at ``lag`` (MLflow: letters, digits, _ - . / and spaces)."""
    return f"staleness_cost/{endpoint}/lag{lag}"


def claim_key(name: str) -> str:
    """The image key of a claim's contrast chart."""
    return f"claim/{name}"


def contrast_panel(ax, verdict: Verdict, words: str, recipes: list[str]) -> None:
    """A claim's contrast (summary.json's claims[]: estimate, low, high, smallest_effect) in points (a collapse
    claim: as a difference of rates), its interval at the claim's level, 0 and +-delta dashed, ``words`` naming the
    contrast on the x axis, its verdict in the title; drawn in the colour of the claim's recipe (of ``recipes``)."""
    claim, (scale, points, _) = verdict.claim, verdict.shown_as
    unit = points.strip() or "difference of collapse rates"
    estimate = scale * verdict.measured.estimate
    low, high = (estimate if bound is None else scale * bound for bound in (verdict.low, verdict.high))
    ax.errorbar([0], [estimate], yerr=[[estimate - low], [high - estimate]], fmt="o", capsize=8, markersize=7,
                color=recipe_colour(claim.recipe, recipes))
    ax.axhline(0, color="grey", linewidth=0.8)
    if claim.smallest_effect:
        delta = scale * claim.smallest_effect
        for bound in (-delta, delta):
            ax.axhline(bound, color="grey", linewidth=0.8, linestyle="--")
        ax.annotate("+-delta (smallest effect)", (0.98, delta), xycoords=("axes fraction", "data"), ha="right",
                    va="bottom", fontsize=SMALL, color="grey")
    ax.set_xlim(-1, 1)
    ax.set_xticks([0], [textwrap.fill(words, 45)])
    ax.set(title=textwrap.fill(f"{claim.name}: {verdict.verdict}", 45),
           ylabel=textwrap.fill(f"contrast, {unit} ({verdict.confidence:.2%} interval, {verdict.measured.method})", 48))
    ax.grid(alpha=0.3, axis="y")


def interval_figures(config: Config, summary: Summary, endpoint: str, folder: Path) -> list[tuple[str, Path]]:
    """(image key, PNG written under ``folder``) of each chart: the staleness cost on ``endpoint`` at each lag other
    than the reference (cost_key), then each tested claim's contrast (claim_key), in the config's order."""
    import matplotlib.pyplot as plt
    charts, recipes = [], summary.recipes
    for lag in [lag for lag in summary.lags if lag != summary.reference_lag]:
        fig, ax = plt.subplots(figsize=(max(WIDTH, 0.7 * len(recipes)), 4.0))
        cost_panel(ax, summary, endpoint, lag)
        # the claims listed under the chart, larger than staleness.png's 7 points: wrapped to the narrower figure
        ax.set_xlabel(textwrap.fill(" ".join(ax.get_xlabel().split()), 55), fontsize=SMALL)
        charts.append((cost_key(endpoint, lag), fig))
    words = {claim.name: claim.describe() for claim in config.claims}
    for verdict in summary.claims:
        if verdict.tested and verdict.measured.estimate is not None:
            fig, ax = plt.subplots(figsize=(WIDTH, 4.0))
            contrast_panel(ax, verdict, words[verdict.claim.name], recipes)
            charts.append((claim_key(verdict.claim.name), fig))
    written = []
    for key, fig in charts:
        path = folder / (key.replace("/", "~") + ".png")
        save_figure(fig, path)
        written.append((key, path))
    return written
