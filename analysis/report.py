"""Aggregate a finished grid into cells (recipe x lag) and write the reports (shared/DESIGN.md).

:func:`collect` reads every run of the grid (harness.grid.expand / run_dir) through
analysis.curves.read_run; :func:`summarize` computes each cell's statistics (analysis.stats);
:func:`write_reports` writes table.md / table.csv / table.tex (rows = recipes, columns = lags,
per-seed values beside each aggregate, the published Table 1 value in its own column),
curves.png, mismatch.png, collapse.png and summary.json, each atomically.
"""
from __future__ import annotations

import csv
import io
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from analysis import provenance
from analysis.curves import RunSummary, read_run, test_task
from analysis.stats import (
    ALPHA,
    BOOTSTRAP_MIN_SEEDS,
    CONFIDENCE,
    POWER,
    collapse_difference,
    collapse_rate,
    difference,
    holm,
    mean_ci,
    prob_improvement,
    smallest_p,
)
from harness.grid import expand, run_dir
from harness.io import write_json_atomic, write_text_atomic
from stabilizers import load_recipes

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "table1.csv"
SCORES = {"fixed": "Fixed-step score", "best": "Best-checkpoint score (optimistic: chosen on the test set)",
          "selected": "Selected-checkpoint score (chosen on the selection task)",
          "auc": "AUC (area under the score curve / step budget)"}
MISMATCH = {"dbar": "d-bar: mean |log pi/mu| over the last 10% of steps",
            "dtail": "Tail of |d|: mean p99 |log pi/mu| over the last 10% of steps"}
QUANTILES = ("d/mean_abs", "d/p50", "d/p90", "d/p99")
PRIMARY = "fixed"  # the score whose comparisons the tables and conclusions show (summary.json: every score)
FAMILY = "one table: one comparison (and score) over every recipe and lag"


@dataclass(frozen=True)
class Run:
    recipe: str
    lag: int
    seed: int
    run_key: str
    summary: RunSummary
    curve: list[tuple[int, float]]  # test-task (step, score)
    train: list[dict]  # the run's training metrics rows


def collect(config: dict, progress: bool = True) -> list[Run]:
    """Every run of the grid, read and summarized; a missing or bad file fails with its path."""
    runs = []
    for recipe, lag, seed in tqdm(expand(config), desc="aggregate: reading runs", unit="run",
                                  disable=not progress, file=sys.stderr):
        summary, run_config, curve, train = read_run(run_dir(config, recipe, lag, seed), config)
        runs.append(Run(recipe, lag, seed, run_config.get("run_key", ""), summary, curve, train))
    return runs


def load_reference(path: Path = REFERENCE) -> dict[tuple[str, bool, bool, int], dict]:
    """Table 1 rows keyed by (method, routing_replay, tis, lag)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    table = {}
    for row in csv.DictReader(lines):
        key = (row["method"], row["routing_replay"] == "true", row["tis"] == "true", int(row["lag"]))
        table[key] = {"aime24": _number(row["aime24"]), "best_step": _number(row["best_step"]),
                      "collapsed": row["collapsed"] == "true", "dbar": _number(row["dbar"])}
    return table


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def reference_for(config: dict, recipe: str, lag: int, table: dict) -> dict | None:
    """The published row a recipe reproduces at this lag (its `table1` method + R3 + TIS), if any."""
    spec = load_recipes(extra=config.get("extra_recipes") or {})[recipe]
    if spec.table1 is None:
        return None
    return table.get((spec.table1, spec.routing_replay, spec.tis is not None, lag))


def summarize(config: dict, runs: list[Run]) -> dict:
    """The machine-readable summary (summary.json): one entry per cell with per-seed values,
    mean + 95% CI per metric, collapse k/n with Wilson CI, and the comparisons (analysis.stats):
    P(improvement) over the baseline (``improvement``), the difference to the baseline at the same
    lag (``vs_baseline``), the staleness cost against the smallest lag (``staleness_cost``) and
    the collapse-rate differences (``collapse_vs_baseline``, ``collapse_vs_reference_lag``), each
    with its p-value Holm-adjusted within its table (``p_holm``); then the generated conclusions."""
    baseline = config.get("baseline")
    if baseline is not None and baseline not in config["recipes"]:
        raise ValueError(f"baseline {baseline!r} is not one of the grid's recipes {config['recipes']}")
    reference = load_reference()
    reference_lag = min(config["lags"])
    by_cell = _by_cell(runs)

    cells = {}
    for recipe in config["recipes"]:
        for lag in config["lags"]:
            cell_runs = by_cell.get((recipe, lag), [])
            seeds = {m: [getattr(r.summary, m) for r in cell_runs]
                     for m in (*SCORES, *MISMATCH, "collapsed", "best_step", "selected_step", "status")}
            k = sum(seeds["collapsed"])
            cells[recipe, lag] = {
                "recipe": recipe, "lag": lag, "seeds": [r.seed for r in cell_runs],
                "run_keys": [r.run_key for r in cell_runs], "per_seed": seeds,
                "stats": {m: mean_ci(seeds[m]).as_dict() for m in (*SCORES, *MISMATCH)},
                "collapse": {"k": k, **collapse_rate(k, len(cell_runs)).as_dict()},
                "improvement": None, "vs_baseline": None, "collapse_vs_baseline": None,
                "reference": reference_for(config, recipe, lag, reference)}

    def compare(function, cell, other, metrics=SCORES):
        return {m: _comparison(function(cell["per_seed"][m], other["per_seed"][m])) for m in metrics}

    def compare_collapse(cell, other):
        return _comparison(collapse_difference(cell["collapse"]["k"], cell["collapse"]["n"],
                                               other["collapse"]["k"], other["collapse"]["n"]))

    for (recipe, lag), cell in cells.items():
        first = cells[recipe, reference_lag]
        cell["staleness_cost"] = None if lag == reference_lag else compare(difference, cell, first)
        cell["collapse_vs_reference_lag"] = None if lag == reference_lag else compare_collapse(cell, first)
        if baseline is not None:
            base = cells[baseline, lag]
            cell["improvement"] = compare(prob_improvement, cell, base)
            if recipe != baseline:
                cell["vs_baseline"] = compare(difference, cell, base)
                cell["collapse_vs_baseline"] = compare_collapse(cell, base)
    _adjust(list(cells.values()), baseline)
    settings = config.get("eval") or {}
    summary = {"grid": config["grid"], "engine": config["engine"], "recipes": list(config["recipes"]),
               "lags": list(config["lags"]), "seeds": list(config["seeds"]), "steps": config["steps"],
               "test_task": test_task(settings), "selection_task": settings.get("selection_task"),
               "fixed_step": settings.get("fixed_step"), "baseline": baseline,
               "collapse_fraction": float(config["collapse"]["fraction"]),
               "reference_lag": reference_lag,
               "comparisons": {"confidence": CONFIDENCE, "alpha": ALPHA, "power": POWER,
                               "correction": "holm", "family": FAMILY, "primary": PRIMARY,
                               "bootstrap_min_seeds": BOOTSTRAP_MIN_SEEDS},
               "cells": _json_safe(list(cells.values()))}
    summary["conclusions"] = conclusions(summary)
    return summary


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


def _json_safe(obj):
    """NaN -> None: summary.json is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return _json_safe(obj.item())
    return obj


# --- tables -------------------------------------------------------------------------------------

def _fmt(value, scale: float, digits: int, sign: bool = False) -> str:
    return "–" if value is None else f"{value * scale:{'+' if sign else ''}.{digits}f}"


def _interval_text(stat: dict, values: list | None, scale: float, digits: int, sign: bool = False) -> str:
    """"mean [low, high] (per-seed values)"; no brackets when there is no interval."""
    text = _fmt(stat["estimate"], scale, digits, sign)
    if stat["low"] is not None:
        text += f" [{_fmt(stat['low'], scale, digits, sign)}, {_fmt(stat['high'], scale, digits, sign)}]"
    if values is not None:
        text += " (" + ", ".join(_fmt(v, scale, digits) for v in values) + ")"
    return text


def _p(value) -> str:
    return "–" if value is None else "<0.001" if value < 0.001 else f"{value:.3f}"


def _comparison_text(stat: dict, scale: float, digits: int, sign: bool = True) -> str:
    """"+d [low, high], p 0.012 (Holm 0.048)"; parts without a value are left out."""
    text = _interval_text(stat, None, scale, digits, sign)
    if stat["p"] is not None:
        text += f", p {_p(stat['p'])} (Holm {_p(stat['p_holm'])})"
    return text


METHOD_NAMES = {"student-t": "Student t", "welch": "Welch", "BCa": "BCa bootstrap",
                "percentile": "percentile bootstrap", "degenerate": "equal seeds: a point",
                "none": f"no interval below {BOOTSTRAP_MIN_SEEDS} seeds per arm", "n<2": "one seed: none",
                "empty": "no value"}


def _methods(stats: list[dict]) -> str:
    """The interval methods used in one table, in METHOD_NAMES order."""
    used = {s["method"] for s in stats}
    return "; ".join(name for method, name in METHOD_NAMES.items() if method in used)


def _holm_note(stats: list[dict]) -> str:
    return f"Holm-adjusted over the {sum(s['p_holm'] is not None for s in stats)} tests of this table"


def sections(summary: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's tables, rendered to text once and shared by the Markdown and LaTeX writers:
    (title, header, rows). Rows = recipes; one column per lag for each column group (the value,
    then the published value or the seeds needed)."""
    cells = summary_cells(summary)
    baseline, reference_lag = summary["baseline"], summary["reference_lag"]
    others = [r for r in summary["recipes"] if r != baseline]
    later = [lag for lag in summary["lags"] if lag != reference_lag]
    out = []

    def table(title, columns, recipes=summary["recipes"], lags=summary["lags"]):
        """columns: (header prefix, text of a cell), each one column per lag."""
        header = ["recipe"] + [f"{prefix}lag {lag}" for prefix, _ in columns for lag in lags]
        rows = [[recipe] + [text(cells[recipe, lag]) for _, text in columns for lag in lags]
                for recipe in recipes]
        out.append((title, header, rows))

    def shown(get, recipes=summary["recipes"], lags=summary["lags"]):
        return [get(cells[recipe, lag]) for recipe in recipes for lag in lags]

    def paper_value(key, scale=1.0, digits=2):
        return lambda c: ("–" if c["reference"] is None or c["reference"][key] is None
                          else f"{c['reference'][key] * scale:.{digits}f}")

    def seeds_needed(key):
        return "seeds for 80% power ", lambda c: str(c[key][PRIMARY]["seeds_needed"] or "–")

    fixed = summary["fixed_step"] if summary["fixed_step"] is not None else "last evaluated"
    for metric, title in SCORES.items():
        if metric == "selected" and summary["selection_task"] is None:
            continue
        if metric == "fixed":
            title += f" (step {fixed})"
        columns = [("", lambda c, m=metric: _interval_text(c["stats"][m], c["per_seed"][m], 100, 1))]
        if metric != "auc":  # the paper's number is a best observed score: no counterpart for an area
            columns.append(("paper best ", paper_value("aime24")))
        table(f"{title}, % (mean [95% CI: {_methods(shown(lambda c, m=metric: c['stats'][m]))}] (per seed))",
              columns)
    table("Collapsed runs k/n [95% Wilson CI] (per seed: 1 = collapsed)",
          [("", lambda c: (f"{c['collapse']['k']}/{c['collapse']['n']} [{_fmt(c['collapse']['low'], 1, 2)}, "
                           f"{_fmt(c['collapse']['high'], 1, 2)}] "
                           f"({', '.join(str(int(v)) for v in c['per_seed']['collapsed'])})")),
           ("paper collapsed ", lambda c: "–" if c["reference"] is None else
            ("yes" if c["reference"]["collapsed"] else "no"))])
    score = SCORES[PRIMARY].lower()
    if baseline is not None and others:
        stats = shown(lambda c: c["vs_baseline"][PRIMARY], others)
        table(f"Difference to {baseline} at the same lag, {score}, points (mean difference "
              f"[95% CI: {_methods(stats)}], Welch p, {_holm_note(stats)}); seeds per arm to detect "
              "that difference with 80% power",
              [("", lambda c: _comparison_text(c["vs_baseline"][PRIMARY], 100, 1)), seeds_needed("vs_baseline")],
              recipes=others)
        stats = shown(lambda c: c["improvement"][PRIMARY], others)
        table(f"P(improvement) over {baseline} at the same lag, {score} ([95% CI: {_methods(stats)}], "
              f"two-sided Mann-Whitney p, {_holm_note(stats)})",
              [("", lambda c: _comparison_text(c["improvement"][PRIMARY], 1, 2, sign=False))], recipes=others)
    if later:
        stats = shown(lambda c: c["staleness_cost"][PRIMARY], lags=later)
        table(f"Staleness cost: {score} at this lag minus lag {reference_lag}, points (mean difference "
              f"[95% CI: {_methods(stats)}], Welch p, {_holm_note(stats)}); seeds per arm to detect "
              "that difference with 80% power",
              [("", lambda c: _comparison_text(c["staleness_cost"][PRIMARY], 100, 1)),
               seeds_needed("staleness_cost")], lags=later)
        stats = shown(lambda c: c["collapse_vs_reference_lag"], lags=later)
        table(f"Collapse rate at this lag minus lag {reference_lag} (Fisher exact p, {_holm_note(stats)})",
              [("", lambda c: _comparison_text(c["collapse_vs_reference_lag"], 1, 2))], lags=later)
    if baseline is not None and others:
        stats = shown(lambda c: c["collapse_vs_baseline"], others)
        table(f"Collapse rate minus {baseline}'s at the same lag (Fisher exact p, {_holm_note(stats)})",
              [("", lambda c: _comparison_text(c["collapse_vs_baseline"], 1, 2))], recipes=others)
    for metric, title in MISMATCH.items():
        columns = [("", lambda c, m=metric: _interval_text(c["stats"][m], c["per_seed"][m], 1, 4))]
        if metric == "dbar":
            columns.append(("paper ", paper_value("dbar", 1, 4)))
        table(f"{title} (mean [95% CI: {_methods(shown(lambda c, m=metric: c['stats'][m]))}] (per seed))",
              columns)
    return out


def conclusions(summary: dict) -> list[str]:
    """What the primary score's comparisons do and do not show, as sentences generated from the
    numbers (the report's last section and summary.json's ``conclusions``)."""
    cells, baseline, reference_lag = summary["cells"], summary["baseline"], summary["reference_lag"]
    score = SCORES[PRIMARY].lower()
    lines = [f"Intervals are 95%; p-values are two-sided and Holm-adjusted within each table, read at "
             f"{ALPHA:g}. A difference whose interval contains 0 is not evidence of a difference in "
             "either direction: ranking recipes by point estimates inside their intervals is not a result."]

    def claims(what, stats, null, text, smallest=None):
        """Sort one table's comparisons into evidence / suggestive / not distinguishable / untested."""
        tested = [(c, s) for c, s in stats if s["p"] is not None]
        groups = {"evidence": [], "suggestive": [], "inside": []}
        for c, s in tested:
            excludes = s["low"] is not None and not s["low"] <= null <= s["high"]
            kind = "evidence" if s["p_holm"] < ALPHA else "suggestive" if excludes else "inside"
            groups[kind].append(f"{c['recipe']} at lag {c['lag']}: {text(s)}")
        if smallest is not None and tested:
            best = min((s for _, s in tested), key=smallest)
            if smallest(best) >= ALPHA:
                lines.append(f"{what.capitalize()}: with {best['n_x']} vs {best['n_y']} seeds even complete "
                             f"separation gives p = {smallest(best):.3f} >= {ALPHA:g}, so no comparison in "
                             "this table can be significant: its values are descriptive.")
        null_text = "" if null is None else f"{null:g}"  # None: no interval, never "suggestive"
        titles = {"evidence": f"Evidence of a {what} (Holm p < {ALPHA:g})",
                  "suggestive": f"Suggestive only, {what} (the 95% interval excludes {null_text}, the Holm p "
                                f"does not reach {ALPHA:g})",
                  "inside": f"No evidence either way, {what} (not significant after Holm)"}
        for kind, items in groups.items():
            if items:
                lines.append(f"{titles[kind]}: " + "; ".join(items) + ".")
        if len(tested) < len(stats):
            lines.append(f"No test for {len(stats) - len(tested)} of the {len(stats)} comparisons of the "
                         f"{what} (fewer than 2 seeds, or no spread).")
        needed = sorted(s["seeds_needed"] for c, s in tested if s.get("seeds_needed") is not None
                        and s["p_holm"] >= ALPHA)
        if needed:
            span = f"{needed[0]}" if needed[0] == needed[-1] else f"{needed[0]}-{needed[-1]}"
            lines.append(f"Seeds per arm that would detect the {what} where it is not significant, at its "
                         f"observed size and spread, with {POWER:.0%} power at {ALPHA:g}: {span} "
                         f"(this grid has {len(summary['seeds'])}).")

    def points(stat):
        return _interval_text(stat, None, 100, 1, sign=True) + " points"

    if baseline is not None:
        claims(f"difference to {baseline} in the {score}",
               [(c, c["vs_baseline"][PRIMARY]) for c in cells if c["vs_baseline"] is not None], 0.0, points)
        claims(f"P(improvement) over {baseline} in the {score}",
               [(c, c["improvement"][PRIMARY]) for c in cells if c["recipe"] != baseline], 0.5,
               lambda s: _interval_text(s, None, 1, 2), lambda s: smallest_p(s["test"], s["n_x"], s["n_y"]))
    staleness = [(c, c["staleness_cost"][PRIMARY]) for c in cells if c["staleness_cost"] is not None]
    claims(f"staleness cost (lag L minus lag {reference_lag}) in the {score}", staleness, 0.0, points)
    if len({c["recipe"] for c, _ in staleness}) > 1:
        lines.append("Whether one recipe's staleness cost is smaller than another's (the SAT paper's claim) "
                     "is a difference of these differences, which is not tested here: overlapping cost "
                     "intervals do not show that the costs differ.")
    for key, what in (("collapse_vs_reference_lag", f"collapse-rate change from lag {reference_lag}"),
                      ("collapse_vs_baseline", f"collapse-rate difference to {baseline}")):
        claims(what, [(c, c[key]) for c in cells if c[key] is not None], None,
               lambda s: f"{s['estimate']:+.2f}", lambda s: smallest_p(s["test"], s["n_x"], s["n_y"]))
    return lines


def render_markdown(summary: dict) -> str:
    lines = [f"# {summary['grid']}: {summary['engine']} engine, {len(summary['seeds'])} seeds, "
             f"{summary['steps']} steps",
             "",
             f"Test task `{summary['test_task']}`; selection task `{summary['selection_task']}`; "
             f"collapse = diverged, or below {summary['collapse_fraction']} x peak after the peak "
             "through the last evaluation. Per-seed values in parentheses, in seed order "
             f"{summary['seeds']}. Paper columns: Table 1 of the SAT paper (AIME24, %, one seed).", ""]
    for title, header, rows in sections(summary):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    lines += [f"## What can and cannot be concluded ({SCORES[PRIMARY].lower()})", ""]
    lines += [f"- {line}" for line in summary["conclusions"]] + [""]
    return "\n".join(lines)


def _tex(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"),
                          ("#", r"\#"), ("–", "--"), ("|", r"$|$"), ("<", r"$<$"), (">", r"$>$")):
        text = text.replace(char, escaped)
    return text


def render_latex(summary: dict) -> str:
    parts = [f"% {summary['grid']}: generated by analysis.aggregate; per-seed values in parentheses"]
    for title, header, rows in sections(summary):
        parts += [r"\begin{table}[ht]", r"\centering", r"\small", f"\\caption{{{_tex(title)}}}",
                  r"\begin{tabular}{l" + "l" * (len(header) - 1) + "}", r"\hline",
                  " & ".join(_tex(h) for h in header) + r" \\", r"\hline"]
        parts += [" & ".join(_tex(v) for v in row) + r" \\" for row in rows]
        parts += [r"\hline", r"\end{tabular}", r"\end{table}", ""]
    parts += [f"\\paragraph{{What can and cannot be concluded ({SCORES[PRIMARY].lower()})}}", r"\begin{itemize}"]
    parts += [f"\\item {_tex(line)}" for line in summary["conclusions"]] + [r"\end{itemize}", ""]
    return "\n".join(parts)


def render_csv(summary: dict) -> str:
    """Rows = recipes; per lag: mean/low/high/method/per-seed of every metric, collapse k/n, the
    comparisons of the primary score (difference to the baseline, staleness cost, P(improvement):
    estimate/low/high/method/p/p_holm/seeds_needed), the collapse-rate comparisons
    (estimate/p/p_holm), and the published values. Scores as fractions (avg@k), paper in %."""
    cells = summary_cells(summary)
    header, rows = ["recipe"], []
    for recipe in summary["recipes"]:
        row = {"recipe": recipe}
        for lag in summary["lags"]:
            c = cells[recipe, lag]
            for metric, stat in c["stats"].items():
                row.update({f"{metric}_lag{lag}_{part}": stat[part] for part in ("estimate", "low", "high", "method")})
                row[f"{metric}_lag{lag}_per_seed"] = ";".join("" if v is None else repr(v)
                                                             for v in c["per_seed"][metric])
            row.update({f"collapse_lag{lag}_{part}": c["collapse"][part] for part in ("k", "n", "low", "high")})
            for key, name in (("vs_baseline", "diff_baseline"), ("staleness_cost", "staleness"),
                              ("improvement", "p_improve")):
                if c[key] is not None:
                    row.update({f"{name}_{PRIMARY}_lag{lag}_{part}": c[key][PRIMARY][part] for part in
                                ("estimate", "low", "high", "method", "p", "p_holm", "seeds_needed")})
            for key, name in (("collapse_vs_baseline", "collapse_diff_baseline"),
                              ("collapse_vs_reference_lag", f"collapse_diff_lag{summary['reference_lag']}")):
                if c[key] is not None:
                    row.update({f"{name}_lag{lag}_{part}": c[key][part] for part in ("estimate", "p", "p_holm")})
            ref = c["reference"] or {}
            row.update({f"paper_{key}_lag{lag}": ref.get(key) for key in ("aime24", "collapsed", "dbar")})
        header += [k for k in row if k not in header]
        rows.append(row)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()


# --- plots --------------------------------------------------------------------------------------

def _score_at_steps(run: Run, steps: list[int]) -> list[float]:
    """The run's test score at each step (0 after a divergence, NaN where not evaluated)."""
    scores = dict(run.curve)
    last = run.curve[-1][0] if run.curve else 0
    diverged = run.summary.status == "diverged"
    return [scores.get(s, 0.0 if diverged and s > last else math.nan) for s in steps]


def _by_cell(runs: list[Run]) -> dict[tuple[str, int], list[Run]]:
    """The runs grouped by cell (recipe, lag)."""
    cells: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        cells.setdefault((run.recipe, run.lag), []).append(run)
    return cells


def summary_cells(summary: dict) -> dict[tuple[str, int], dict]:
    """summary.json's cells by (recipe, lag)."""
    return {(cell["recipe"], cell["lag"]): cell for cell in summary["cells"]}


def plot_curves(config: dict, runs: list[Run], path: Path) -> None:
    """Test score vs step: the seed mean per recipe with its 95% Student t band, one panel per lag."""
    import matplotlib.pyplot as plt
    cells = _by_cell(runs)
    lags = list(config["lags"])
    fig, axes = plt.subplots(1, len(lags), figsize=(5 * len(lags), 4), squeeze=False, sharey=True)
    for ax, lag in zip(axes[0], lags):
        for recipe in config["recipes"]:
            cell = cells.get((recipe, lag), [])
            steps = sorted({s for run in cell for s, _ in run.curve} | {int(config["steps"])})
            per_run = np.array([_score_at_steps(run, steps) for run in cell])
            intervals = [mean_ci(per_run[:, i]) for i in range(len(steps))]
            mean = np.array([ci.estimate for ci in intervals])
            line, = ax.plot(steps, mean, marker=".", label=recipe)
            ax.fill_between(steps, [ci.low for ci in intervals], [ci.high for ci in intervals],
                            color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set(title=f"lag {lag}", xlabel="step", ylabel="test score (avg@k)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def plot_mismatch(config: dict, runs: list[Run], path: Path) -> None:
    """|d| = |log pi/mu| quantiles vs step (seed mean): one row per quantile, one column per lag."""
    import matplotlib.pyplot as plt
    cells = _by_cell(runs)
    lags = list(config["lags"])
    fig, axes = plt.subplots(len(QUANTILES), len(lags), figsize=(5 * len(lags), 2.6 * len(QUANTILES)),
                             squeeze=False, sharex=True)
    for col, lag in enumerate(lags):
        for row, key in enumerate(QUANTILES):
            ax = axes[row][col]
            for recipe in config["recipes"]:
                series: dict[int, list[float]] = {}
                for run in cells.get((recipe, lag), []):
                    for line in run.train:
                        value = line.get(key)
                        if value is not None and math.isfinite(value) and value > 0:
                            series.setdefault(line["step"], []).append(value)
                steps = sorted(series)
                ax.plot(steps, [np.mean(series[s]) for s in steps], label=recipe, linewidth=1)
            ax.set_yscale("log")
            ax.set(title=f"lag {lag}: {key}", xlabel="step" if row == len(QUANTILES) - 1 else None)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    _save(fig, path)


def plot_collapse(summary: dict, path: Path) -> None:
    """Collapse rate per recipe and lag with 95% Wilson intervals."""
    import matplotlib.pyplot as plt
    cells = summary_cells(summary)
    recipes, lags = summary["recipes"], summary["lags"]
    width = 0.8 / len(lags)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(recipes)), 4))
    for i, lag in enumerate(lags):
        x = np.arange(len(recipes)) + i * width
        stats = [cells[r, lag]["collapse"] for r in recipes]
        rate = np.array([s["estimate"] for s in stats], dtype=float)
        low = np.array([s["low"] for s in stats], dtype=float)
        high = np.array([s["high"] for s in stats], dtype=float)
        ax.bar(x, rate, width, label=f"lag {lag}")
        ax.errorbar(x, rate, yerr=[rate - low, high - rate], fmt="none", ecolor="black", capsize=3)
    ax.set_xticks(np.arange(len(recipes)) + width * (len(lags) - 1) / 2, recipes, rotation=30, ha="right")
    ax.set(ylabel="collapsed runs (fraction)", ylim=(0, 1.05),
           title=f"collapse rate, 95% Wilson CI (n = {len(summary['seeds'])} seeds)")
    ax.legend()
    _save(fig, path)


def _save(fig, path: Path) -> None:
    """Render to a temp file beside the target, then rename (atomic like harness.io)."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)


REPORT_FILES = ("table.md", "table.csv", "table.tex", "curves.png", "mismatch.png", "collapse.png",
                "summary.json")


def write_reports(config: dict, out: str | Path, progress: bool = True) -> dict:
    """Read the grid, write every report file into ``out``; returns the summary."""
    import matplotlib
    matplotlib.use("Agg")  # files only: no display on a cluster node or in CI
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = collect(config, progress=progress)
    summary = summarize(config, runs)
    # then what the runs ran on and what they cost (analysis.provenance)
    write_text_atomic(out / "table.md", render_markdown(summary) + provenance.render_markdown(config))
    write_text_atomic(out / "table.csv", render_csv(summary))
    write_text_atomic(out / "table.tex", render_latex(summary))
    plot_curves(config, runs, out / "curves.png")
    plot_mismatch(config, runs, out / "mismatch.png")
    plot_collapse(summary, out / "collapse.png")
    write_json_atomic(out / "summary.json", summary)  # last: its presence means the reports are complete
    return summary
