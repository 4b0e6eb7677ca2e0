"""The noise parts of each cell's fixed-step score (analysis.statistics.noise_parts: training seed vs
evaluation) and, per claim, whether more seeds or a larger k decides it for less compute, from the grid's
eval/<task>.jsonl counts and its jobs' measured costs."""
from __future__ import annotations

import numpy as np

from analysis.statistics.intervals import ALPHA
from analysis.statistics.noise_parts import (
    decompose,
    interval,
    plan,
    selection_inflation,
    t_test_detects,
    tost_shows_equivalence,
)
from grid.settings import Config


def _counts_at_fixed_step(config: Config, runs: list) -> tuple[np.ndarray | None, int, int, int, str]:
    """The cell's S x P table of correct counts at each run's fixed step, k, the fewest evaluations
    of a run and how many runs had no counts there (a diverged run: its fixed-step score is 0 by rule,
    not a measurement), or None and why."""
    task = config.eval.test_task
    table, ks, evaluations, left_out = [], set(), [], 0
    for run in runs:
        rows = config.folder.run(run.recipe, run.lag, run.seed).read_eval(task)
        row = next((r for r in rows if r["step"] == run.summary.fixed_step), None)
        if row is None or "per_problem" not in row:
            left_out += 1
            continue
        table.append(row["per_problem"])
        ks.add(int(row["k"]))
        evaluations.append(len(rows))
    if len({len(r) for r in table}) > 1 or len(ks) > 1:
        return None, 0, 0, left_out, "the runs' problem sets or k differ"
    k = ks.pop() if ks else 0
    if len(table) < 2 or k < 2 or len(table[0]) < 2:
        return None, k, 0, left_out, f"{len(table)} run(s) with counts, k = {k}: needs 2 seeds, 2 problems, k >= 2"
    return np.array(table, dtype=float), k, min(evaluations), left_out, ""


def measured_costs(config: Config) -> dict | None:
    """One run's training and one unit of k, in median wall seconds of the grid's train and evaluate
    jobs (Snakemake's benchmark files: grid.folder.GridDir.job_costs; an evaluate job scores one
    run's checkpoints with k samples); None without them."""
    rows = {row["rule"]: row for row in config.folder.job_costs()}
    train, evaluate = (rows.get(rule, {}).get("median_wall_s") for rule in ("train", "evaluate"))
    if not train or not evaluate:
        return None
    return {"train_cost": train, "sample_cost": evaluate / config.eval.k, "unit": "wall s (median job)"}


def summarize_noise(config: Config, runs: list) -> dict:
    """summary.json's "noise": per cell its components at the fixed step, both intervals and the
    selection inflation of its best-checkpoint score; per claim on a score, the plan (seeds vs k) at
    which its test decides it with POWER (analysis.statistics.contrasts' seeds-needed rules, at ALPHA over the
    number of claims: the claims' Bonferroni level when no seed schedule spends it further)."""
    grouped: dict = {}
    for run in runs:
        grouped.setdefault((run.recipe, run.lag), []).append(run)
    cells, parts_of = [], {}
    for (recipe, lag), cell_runs in grouped.items():
        table, k, evaluations, left_out, why = _counts_at_fixed_step(config, cell_runs)
        entry = {"recipe": recipe, "lag": lag, "runs_left_out": left_out}
        if table is None:
            cells.append({**entry, "why": why})
            continue
        parts = parts_of[recipe, lag] = decompose(table, k)
        cells.append({**entry, "parts": parts.as_dict(), "over_seeds": interval(parts, over_problems=False),
                      "over_problems": interval(parts), "evaluations": evaluations,
                      "inflation": selection_inflation(parts, evaluations)})
    costs = measured_costs(config)
    plans = []
    declared = config.claims
    level = ALPHA / max(len(declared), 1)  # the claims' level without a seed schedule: Bonferroni over them
    for claim in declared:
        if claim.scale == "rate":  # the noise parts are a score's
            continue
        arms = [(w, parts_of.get((recipe, lag))) for w, recipe, lag in claim.cells()]
        equivalence = claim.expect == "equivalent"
        entry = {"claim": claim.name, "metric": "fixed", "smallest_effect": claim.smallest_effect, "alpha": level,
                 "rule": "TOST shows equivalence" if equivalence else "the t test detects the smallest effect"}
        if any(parts is None for _, parts in arms) or costs is None:
            plans.append({**entry, "why": "no costs measured (Snakemake benchmark files)" if costs is None
                          else "a cell of the claim has no noise components"})
            continue
        rule = (tost_shows_equivalence(claim.smallest_effect, level) if equivalence
                else t_test_detects(claim.smallest_effect, level))
        plans.append({**entry, **plan(arms, rule, seeds_now=min(p.seeds for _, p in arms),
                                      k_now=arms[0][1].k, **{key: costs[key] for key in ("train_cost", "sample_cost")}),
                      "unit": costs["unit"]})
    return {"endpoint": "fixed-step score", "cells": cells, "plans": plans}
