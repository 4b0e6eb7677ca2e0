"""Staleness at equal modelled wall-clock (lag mode queue): the throughput a looser bound buys
against the score it costs, and the Pareto front of (time, score) per recipe.

In lag mode queue (harness.queue_lag) the grid's lags are the staleness filter's bound, and
QueueModel.drop_rate() is the fraction of generated groups the filter drops. The time model is ours,
declared by workflow/presets/queue_pareto.yaml before its runs, not measured: time in units of one
trainer step, the rollout engines finish groups at ``utilization`` times the rate the trainer uses
them, and a dropped group is generation spent on nothing, so

    steps per unit of time   s = min(1, utilization x (1 - drop rate))

(at s < 1 the trainer waits for rollouts; at most one step per unit: the trainer's own speed). A
run of ``steps`` steps takes steps / s. At equal modelled wall-clock, every (recipe, bound) gets the
time the fastest one needs for every step, T = steps / max s: it reaches floor(T x s) steps, and its
score there is the cell's score curve (analysis.cells.summary.score_curve: the mean over seeds with its 95%
interval) at its last evaluated step within them. The Pareto front of a recipe: its bounds not
dominated in (modelled time of the run: lower is better, score: higher is better), read on the
estimates (the intervals are in the table and pareto.png). Lag 0 is the synchronous loop in every
lag mode (harness.lag), which this model does not describe: it is left out.
"""
from __future__ import annotations

import math

from analysis.statistics.cell_stats import CellStats, Stat
from grid.settings import Config
from harness.queue_lag import QueueModel, queue_model

ENDPOINTS = ("auc", "equal_time")  # the scores whose front is drawn: the run's AUC, the score at equal time
TIME_MODEL = "steps per unit of time = min(1, utilization x (1 - drop rate)) (workflow/presets/queue_pareto.yaml)"


def engine_batch(config: Config, recipe: str) -> int:
    """The groups per trainer step of ``recipe``'s runs, as the engine hands them to the queue model
    (its resolved prompts_per_step: the embedded engine's trainer reads the same key)."""
    params = config.recipe_engine_params[recipe]
    if "prompts_per_step" not in params:
        raise ValueError(f"lag_mode queue: engine {config.engine.name!r} has no engine_params.prompts_per_step "
                         "(the queue model's batch)")
    return int(params["prompts_per_step"])


def queue_models(config: Config) -> dict[tuple[str, int], QueueModel]:
    """The queue model of each (recipe, bound) of a queue grid, bounds above 0 (module docstring)."""
    batches = {recipe: engine_batch(config, recipe) for recipe in config.recipes}
    return {(recipe, int(lag)): queue_model(config.lag_queue, batches[recipe], int(lag))
            for recipe in config.recipes for lag in config.lags if lag > 0}


def throughput(model: QueueModel) -> float:
    """Trainer steps per unit of time (one unit: one trainer step): min(1, utilization x (1 - drop rate))."""
    return min(1.0, model.utilization * (1.0 - model.drop_rate()))


def score_within(curve: list[Stat], steps: int) -> Stat | None:
    """The curve's point (step, estimate, low, high) at its last evaluated step <= ``steps``, or None."""
    points = [p for p in curve if p.step <= steps and p.estimate is not None]
    return points[-1] if points else None


def pareto_front(points: list[tuple[float, float | None]]) -> list[bool]:
    """For each (time, score): is it on the front, i.e. no other point has time <= and score >=
    with one of them strict? A point without a score is not on it and dominates nothing."""
    scored = [(t, s) for t, s in points if s is not None]
    return [s is not None and not any(t2 <= t and s2 >= s and (t2 < t or s2 > s) for t2, s2 in scored)
            for t, s in points]


def summarize_pareto(config: Config, cells: list[CellStats]) -> dict | None:
    """summary.json's "pareto" of a queue grid (None otherwise): per (recipe, bound) the drop rate,
    the throughput, the modelled time of the run (absolute and relative to the fastest), its AUC, the
    steps it reaches at equal time and its score there; whether it is on its recipe's front per
    endpoint (ENDPOINTS)."""
    if config.lag_mode != "queue":
        return None
    steps, models = config.steps, queue_models(config)
    rates = {key: throughput(model) for key, model in models.items()}
    fastest = max(rates.values())
    cells = {c.cell: c for c in cells}
    rows = []
    for (recipe, bound), model in models.items():
        cell, rate = cells[recipe, bound], rates[recipe, bound]
        reached = min(steps, math.floor(steps * rate / fastest + 1e-9))
        point = score_within(cell.curve, reached)
        rows.append({"recipe": recipe, "bound": bound, "batch": model.batch, "drop_rate": model.drop_rate(),
                     "throughput": rate, "time": steps / rate, "relative_time": fastest / rate,
                     "auc": cell.stats["auc"].row(), "steps_reached": reached,
                     "equal_time": None if point is None else point.row(),
                     "front": {}})
    for recipe in config.recipes:
        mine = [row for row in rows if row["recipe"] == recipe]
        for endpoint in ENDPOINTS:
            flags = pareto_front([(row["time"], (row[endpoint] or {}).get("estimate")) for row in mine])
            for row, flag in zip(mine, flags):
                row["front"][endpoint] = flag
    return {"time_model": TIME_MODEL, "lag_queue": dict(config.lag_queue), "steps": steps,
            "time_budget": steps / fastest, "left_out": [int(lag) for lag in config.lags if lag == 0],
            "cells": rows}
