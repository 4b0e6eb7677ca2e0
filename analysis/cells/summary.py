"""Collect a finished grid into cells (recipe x lag) and their statistics: summary.json.

:func:`collect` reads every run of the grid (grid.expand.expand / run_dir) through
analysis.cells.curves.read_run; :func:`summarize` computes each cell's statistics and the comparisons
between cells (analysis.statistics.intervals, analysis.statistics.contrasts), and answers the config's claims
(analysis.claims.verdicts): the claims are the confirmatory family, every other comparison is exploratory.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from analysis.cells.curves import RunSummary, read_run
from analysis.cells.noise import summarize_noise
from analysis.cells.pareto import summarize_pareto
from analysis.cells.reference import load_reference, reference_for
from analysis.claims.summary_file import Summary, json_safe
from analysis.statistics.cell_stats import CellStats, Stat
from analysis.statistics.cell_table import Cell, CellTable
from analysis.statistics.contrasts import contrast
from analysis.statistics.intervals import (
    ALPHA,
    BOOTSTRAP_MIN_SEEDS,
    CONFIDENCE,
    POWER,
    collapse_difference,
    collapse_rate,
    holm,
    mean_ci,
    prob_improvement,
)
from grid.settings import Config, thawed
from grid.tuning import CLAIM_RECIPE_FIELDS
from harness.run_config import PinnedRun

SCORES = {"fixed": "Fixed-step score", "best": "Best-checkpoint score (optimistic: chosen on the test set)",
          "selected": "Selected-checkpoint score (chosen on the selection task)",
          "auc": "AUC (area under the score curve / step budget)"}
MISMATCH = {"dbar": "d-bar: mean |log pi/mu| over the last 10% of steps",
            "dtail": "Tail of |d|: mean p99 |log pi/mu| over the last 10% of steps"}
# the endpoints whose comparison tables the report shows, each with its own tests; AUC first, the
# claims' default endpoint (docs/statistics.md says why); summary.json has every score's
ENDPOINTS = ("auc", "fixed")
ENDPOINT_NAMES = {"auc": "AUC", "fixed": "fixed-step score", "best": "best-checkpoint score",
                  "selected": "selected-checkpoint score"}
FAMILY = "exploratory: one table (one comparison and endpoint over every recipe and lag)"


@dataclass(frozen=True)
class RunResult:
    recipe: str
    lag: int
    seed: int
    pinned: PinnedRun  # its config.json: the run key, and the resolved recipe (the published row it reproduces)
    summary: RunSummary
    curve: list[tuple[int, float]]  # test-task (step, score)
    train: list[dict]  # the run's training metrics rows


def collect(config: Config, progress: bool = True, which: list[tuple[str, int, int]] | None = None) -> list[RunResult]:
    """The runs ``which`` (default: every run of the grid), read and summarized; a missing or bad file
    fails with its path, and a run whose loss is not its recipe's is refused
    (harness.run.RunDir.check_fingerprint)."""
    runs = []
    for recipe, lag, seed in tqdm(config.grid_runs if which is None else which, desc="aggregate: reading runs",
                                  unit="run", disable=not progress, file=sys.stderr):
        folder = config.folder.run(recipe, lag, seed)
        summary, pinned, curve, train = read_run(folder, config)
        folder.check_fingerprint()
        runs.append(RunResult(recipe, lag, seed, pinned, summary, curve, train))
    return runs


def by_cell(runs: list[RunResult]) -> dict[tuple[str, int], list[RunResult]]:
    """The runs grouped by cell (recipe, lag)."""
    cells: dict[tuple[str, int], list[RunResult]] = {}
    for run in runs:
        cells.setdefault((run.recipe, run.lag), []).append(run)
    return cells


def summary_cells(summary: Summary) -> dict[tuple[str, int], CellStats]:
    """summary.json's cells by (recipe, lag)."""
    return {cell.cell: cell for cell in summary.cells}


def realized_lag_distribution(runs: list[RunResult]) -> dict:
    """The realized lag of every trained step of the cell's runs (its training rows): lowest,
    highest, mean and how many steps had each lag, pooled over seeds (the engines fail a run whose
    realized lag leaves its mode's bound, harness.lag.check_realized_lag)."""
    lags = [int(row["realized_lag"]) for run in runs for row in run.train if "realized_lag" in row]
    if not lags:
        return {"min": None, "max": None, "mean": None, "steps": {}}
    values, counts = np.unique(lags, return_counts=True)
    return {"min": min(lags), "max": max(lags), "mean": float(np.mean(lags)),
            "steps": {str(int(v)): int(n) for v, n in zip(values, counts)}}


def score_at_steps(run: RunResult, steps: list[int]) -> list[float]:
    """The run's test score at each step (0 after a divergence, NaN where not evaluated)."""
    scores = dict(run.curve)
    last = run.curve[-1][0] if run.curve else 0
    diverged = run.summary.status == "diverged"
    return [scores.get(s, 0.0 if diverged and s > last else math.nan) for s in steps]


def score_curve(runs: list[RunResult], budget: int) -> list[Stat]:
    """A cell's test-score curve: at each step any of its runs was evaluated (and the budget's last
    step), the mean over its seeds with the 95% interval of mean_ci, as the cell's other scores."""
    steps = sorted({s for run in runs for s, _ in run.curve} | {budget})
    per_run = np.array([score_at_steps(run, steps) for run in runs]).reshape(len(runs), len(steps))
    return [Stat.from_row({"step": step, **mean_ci(per_run[:, i]).as_dict()}) for i, step in enumerate(steps)]


# each run's values a cell keeps per seed (summary.json's per_seed)
PER_SEED = (*SCORES, *MISMATCH, "collapsed", "collapse_step", "best_step", "selected_step", "status")


def build_cells(config: Config, runs: list[RunResult]) -> CellTable:
    """Every cell (recipe, lag) of the grid with its runs' values per seed: arrays over (recipe, lag, seed)."""
    values = {(run.recipe, run.lag, run.seed): {
        **{metric: getattr(run.summary, metric) for metric in PER_SEED},
        "collapse_step": run.summary.collapse_step if run.summary.collapsed else None} for run in runs}
    return CellTable.build(((recipe, lag) for recipe in config.recipes for lag in config.lags), values)


def _row(table: CellTable, cell: tuple[str, int], runs: list[RunResult], reference: dict, budget: int) -> dict:
    """summary.json's row of a cell: its seeds and runs, per-seed values, statistics, curve and collapse rate."""
    k = sum(table.column(cell, "collapsed"))
    return {"recipe": cell[0], "lag": cell[1], "seeds": table.seeds_of(cell),
            "run_keys": [r.pinned.run_key for r in runs],
            "per_seed": {metric: table.column(cell, metric) for metric in PER_SEED},
            "stats": {m: mean_ci(table.column(cell, m)).as_dict() for m in (*SCORES, *MISMATCH)},
            "curve": score_curve(runs, budget),
            "collapse": {"k": k, **collapse_rate(k, len(runs)).as_dict()},
            "realized_lag": realized_lag_distribution(runs),
            "improvement": None, "vs_baseline": None, "collapse_vs_baseline": None,
            "reference": reference_for(runs[0].pinned, reference) if runs else None}


def summarize_cells(config: Config, runs: list[RunResult]) -> tuple[Summary, CellTable]:
    """summary.json's cells and what is read from them alone (analysis.report.write.summarize adds the
    claims), and the cells by (recipe, lag): one entry per cell with per-seed values,
    mean + 95% CI per metric, collapse k/n with Wilson CI, and the exploratory comparisons:
    P(improvement) over the baseline (``improvement``), the difference to the baseline at the same
    lag (``vs_baseline``), the staleness cost against the smallest lag (``staleness_cost``; both
    analysis.statistics.contrasts, paired by seed where the cells share seeds) and the collapse-rate
    differences (``collapse_vs_baseline``, ``collapse_vs_reference_lag``), each with its p-value
    Holm-adjusted within its table (``p_holm``); the noise section (analysis.cells.noise) and a queue
    grid's equal-time comparison (``pareto``, analysis.cells.pareto)."""
    baseline = config.baseline
    if baseline is not None and baseline not in config.recipes:
        raise ValueError(f"baseline {baseline!r} is not one of the grid's recipes {list(config.recipes)}")
    reference_lag = config.reference_lag
    table, reference, grouped = build_cells(config, runs), load_reference(), by_cell(runs)

    def minus(cell, other):
        return {m: _comparison(cell_minus(table, cell, table, other, m)) for m in SCORES}

    def improvement(cell, other):
        return {m: _comparison(prob_improvement(table.column(cell, m), table.column(other, m))) for m in SCORES}

    def compare_collapse(cell, other):
        return _comparison(cell_minus(table, cell, table, other, "collapse"))

    cells = {}
    for recipe, lag in table.cells:
        cell = cells[recipe, lag] = _row(table, (recipe, lag), grouped.get((recipe, lag), []), reference, config.steps)
        first = (recipe, reference_lag)
        cell["staleness_cost"] = None if lag == reference_lag else minus((recipe, lag), first)
        cell["collapse_vs_reference_lag"] = None if lag == reference_lag else compare_collapse((recipe, lag), first)
        if baseline is not None:
            base = (baseline, lag)
            cell["improvement"] = improvement((recipe, lag), base)
            if recipe != baseline:
                cell["vs_baseline"] = minus((recipe, lag), base)
                cell["collapse_vs_baseline"] = compare_collapse((recipe, lag), base)
    _adjust(list(cells.values()), baseline)
    seeding, rows = config.seeding, [CellStats.from_row(row) for row in json_safe(list(cells.values()))]
    summary = Summary(
        grid=config.grid, engine=config.engine.name, engine_preset=config.engine_params.get("preset"),
        arithmetic_version=config.engine.arithmetic_version(dict(config.engine_params)),
        recipes=list(config.recipes), lags=list(config.lags), lag_mode=config.lag_mode, seeds=list(config.seeds),
        steps=config.steps, test_task=config.eval.test_task, selection_task=config.eval.selection_task,
        fixed_step=config.eval.fixed_step, baseline=baseline, collapse_fraction=config.collapse.fraction,
        collapse_confirm=config.collapse.confirm,
        seeding=None if seeding is None else {"looks": list(seeding.looks), "boundary": seeding.boundary},
        seeding_declared=thawed(config.seeding_declared), reference_lag=reference_lag,
        comparisons={"confidence": CONFIDENCE, "alpha": ALPHA, "power": POWER, "correction": "holm", "family": FAMILY,
                     "endpoints": list(ENDPOINTS), "bootstrap_min_seeds": BOOTSTRAP_MIN_SEEDS,
                     "claims": "confirmatory: each claim's interval at alpha / the claims declared "
                               "(Bonferroni), spent over the looks of the seed schedule"},
        cells=rows,
        # the split of each cell's noise into training seed and evaluation, and the plans of seeds vs k:
        # a section of its own (analysis.cells.noise)
        noise=json_safe(summarize_noise(config, runs)),
        # a queue grid's bounds at equal modelled wall-clock and their Pareto front (analysis.cells.pareto); None otherwise
        pareto=json_safe(summarize_pareto(config, rows)))
    return summary, table


def cell_minus(table: CellTable, cell: Cell, other_table: CellTable, other: Cell, metric: str, apart: bool = False):
    """``cell`` of ``table`` minus ``other`` of ``other_table``: a score by analysis.statistics.contrasts (paired
    by seed where the cells share seeds; ``apart``: cells of two grids, whose equal seed numbers are different
    runs), the collapse rate by Newcombe's interval and Fisher's test."""
    if metric == "collapse":
        return collapse_difference(sum(table.column(cell, "collapsed")), table.count(cell),
                                   sum(other_table.column(other, "collapsed")), other_table.count(other))
    (x, seeds_x), (y, seeds_y) = table.arm(cell, metric), other_table.arm(other, metric)
    if apart:
        seeds_x, seeds_y = [("B", s) for s in seeds_x], [("A", s) for s in seeds_y]
    return contrast([(1.0, x, seeds_x), (-1.0, y, seeds_y)])


def _comparison(comparison) -> dict:
    return {**comparison.as_dict(), "p_holm": None}  # filled by _adjust for the tests of a family


def _families(cells: list[dict], baseline: str | None) -> dict[str, list[dict]]:
    """The comparisons of each table (FAMILY): key or key/metric -> the cells' comparison dicts.
    The baseline against itself is no comparison: its P(improvement) is left out."""
    families: dict[str, list[dict]] = {}
    for cell in cells:
        for key in ("vs_baseline", "staleness_cost", "improvement"):
            if cell[key] is None or (key == "improvement" and cell["recipe"] == baseline):
                continue
            for metric, stat in cell[key].items():
                families.setdefault(f"{key}/{metric}", []).append(stat)
        for key in ("collapse_vs_baseline", "collapse_vs_reference_lag"):
            if cell[key] is not None:
                families.setdefault(key, []).append(cell[key])
    return families


def _adjust(cells: list[dict], baseline: str | None) -> None:
    """Holm within each family, in place."""
    for members in _families(cells, baseline).values():
        for stat, adjusted in zip(members, holm([s["p"] for s in members])):
            stat["p_holm"] = adjusted


def under_recipe_names(summary: Summary) -> Summary:
    """``summary`` with each picked variant's cells and claims named by its recipe
    (grpo.eps_low_eps_high-0.3 -> grpo), so that a tuned grid compares cell by cell and claim by claim
    with the same grid untuned (config side_by_side: analysis.report.compare.beside); ``summary`` itself
    without a tuning section."""
    tuning = summary.tuning
    if tuning is None:
        return summary
    names = {entry["variant"]: recipe for recipe, entry in tuning["recipes"].items()}

    def renamed(statement: str) -> str:  # a statement names recipes as written; the longest variant first
        for variant in sorted(names, key=len, reverse=True):
            statement = statement.replace(variant, names[variant])
        return statement

    cells = [dataclasses.replace(cell, recipe=names.get(cell.recipe, cell.recipe)) for cell in summary.cells]
    claims = [dataclasses.replace(verdict, statement=renamed(verdict.statement), claim=dataclasses.replace(
        verdict.claim, **{field: names[getattr(verdict.claim, field)] for field in CLAIM_RECIPE_FIELDS
                          if getattr(verdict.claim, field, None) in names})) for verdict in summary.claims]
    return dataclasses.replace(summary, cells=cells, claims=claims, recipes=[names.get(r, r) for r in summary.recipes])


def seeds_text(summary: Summary) -> str:
    """The seeds the cells hold: "3 seeds", or per recipe where they differ (a seed schedule): "seeds per
    cell: grpo 6, gspo 3-10"."""
    counts: dict[str, set[int]] = {}
    for cell in summary.cells:
        counts.setdefault(cell.recipe, set()).add(len(cell.seeds))
    if len(set().union(*counts.values())) <= 1:
        return f"{next(iter(set().union(*counts.values())), len(summary.seeds))} seeds"
    return "seeds per cell: " + ", ".join(f"{recipe} {min(n)}" + (f"-{max(n)}" if len(n) > 1 else "")
                                          for recipe, n in counts.items())
