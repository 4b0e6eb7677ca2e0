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

from harness.grid import expand, run_dir
from harness.io import read_jsonl, write_json_atomic, write_text_atomic
from analysis import provenance
from analysis.curves import RunSummary, read_run, test_task
from analysis.stats import collapse_rate, mean_ci, prob_improvement
from stabilizers import load_recipes

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "table1.csv"
SCORES = {"fixed": "Fixed-step score", "best": "Best-checkpoint score (optimistic: chosen on the test set)",
          "selected": "Selected-checkpoint score (chosen on the selection task)",
          "auc": "AUC (area under the score curve / step budget)"}
MISMATCH = {"dbar": "d-bar: mean |log pi/mu| over the last 10% of steps",
            "dtail": "Tail of |d|: mean p99 |log pi/mu| over the last 10% of steps"}
QUANTILES = ("d/mean_abs", "d/p50", "d/p90", "d/p99")


@dataclass(frozen=True)
class Run:
    recipe: str
    lag: int
    seed: int
    run_key: str
    summary: RunSummary
    curve: list[tuple[int, float]]  # test-task (step, score)
    train: list[dict]  # train/metrics.jsonl rows


def collect(config: dict, progress: bool = True) -> list[Run]:
    """Every run of the grid, read and summarized; a missing or bad file fails with its path."""
    runs = []
    for recipe, lag, seed in tqdm(expand(config), desc="aggregate: reading runs", unit="run",
                                  disable=not progress, file=sys.stderr):
        directory = run_dir(config, recipe, lag, seed)
        summary, run_config, curve = read_run(directory, config)
        runs.append(Run(recipe, lag, seed, run_config.get("run_key", ""), summary, curve,
                        read_jsonl(directory / "train" / "metrics.jsonl")))
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
    mean + 95% CI per metric, collapse k/n with Wilson CI, P(improvement) over the baseline."""
    baseline = config.get("baseline")
    if baseline is not None and baseline not in config["recipes"]:
        raise ValueError(f"baseline {baseline!r} is not one of the grid's recipes {config['recipes']}")
    reference = load_reference()
    by_cell: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        by_cell.setdefault((run.recipe, run.lag), []).append(run)

    def per_seed(cell_runs, metric):
        return [getattr(r.summary, metric) for r in cell_runs]

    cells = []
    for recipe in config["recipes"]:
        for lag in config["lags"]:
            cell_runs = by_cell.get((recipe, lag), [])
            seeds = {m: per_seed(cell_runs, m) for m in (*SCORES, *MISMATCH, "collapsed", "best_step",
                                                         "selected_step", "status")}
            k = sum(seeds["collapsed"])
            cell = {"recipe": recipe, "lag": lag, "seeds": [r.seed for r in cell_runs],
                    "run_keys": [r.run_key for r in cell_runs], "per_seed": seeds,
                    "stats": {m: mean_ci(seeds[m]).as_dict() for m in (*SCORES, *MISMATCH)},
                    "collapse": {"k": k, **collapse_rate(k, len(cell_runs)).as_dict()},
                    "improvement": None,
                    "reference": reference_for(config, recipe, lag, reference)}
            if baseline is not None:
                base_runs = by_cell.get((baseline, lag), [])
                cell["improvement"] = {m: prob_improvement(seeds[m], per_seed(base_runs, m)).as_dict()
                                       for m in SCORES}
            cells.append(cell)
    settings = config.get("eval") or {}
    return {"grid": config["grid"], "engine": config["engine"], "recipes": list(config["recipes"]),
            "lags": list(config["lags"]), "seeds": list(config["seeds"]), "steps": config["steps"],
            "test_task": test_task(settings), "selection_task": settings.get("selection_task"),
            "fixed_step": settings.get("fixed_step"), "baseline": baseline,
            "collapse_fraction": float((config.get("collapse") or {}).get("fraction", 0.5)),
            "cells": _json_safe(cells)}


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

def _fmt(value, scale: float, digits: int) -> str:
    return "–" if value is None else f"{value * scale:.{digits}f}"


def _interval_text(stat: dict, values: list | None, scale: float, digits: int) -> str:
    """"mean [low, high] (per-seed values)"; no brackets when there is no interval."""
    text = _fmt(stat["estimate"], scale, digits)
    if stat["low"] is not None:
        text += f" [{_fmt(stat['low'], scale, digits)}, {_fmt(stat['high'], scale, digits)}]"
    if values is not None:
        text += " (" + ", ".join(_fmt(v, scale, digits) for v in values) + ")"
    return text


def sections(summary: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's tables, rendered to text once and shared by the Markdown and LaTeX writers:
    (title, header, rows). Rows = recipes; one column per lag, then the published value per lag."""
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    lags = summary["lags"]
    out = []

    def table(title, text_of, reference_of=None, reference_name="paper"):
        header = ["recipe"] + [f"lag {lag}" for lag in lags]
        if reference_of:
            header += [f"{reference_name} lag {lag}" for lag in lags]
        rows = []
        for recipe in summary["recipes"]:
            row = [recipe] + [text_of(cells[recipe, lag]) for lag in lags]
            if reference_of:
                row += [reference_of(cells[recipe, lag]["reference"]) for lag in lags]
            rows.append(row)
        out.append((title, header, rows))

    def paper_value(key, scale=1.0, digits=2):
        return lambda ref: "–" if ref is None or ref[key] is None else f"{ref[key] * scale:.{digits}f}"

    fixed = summary["fixed_step"] if summary["fixed_step"] is not None else "last evaluated"
    for metric, title in SCORES.items():
        if metric == "selected" and summary["selection_task"] is None:
            continue
        if metric == "fixed":
            title += f" (step {fixed})"
        table(f"{title}, % (mean [95% CI] (per seed))",
              lambda c, m=metric: _interval_text(c["stats"][m], c["per_seed"][m], 100, 1),
              # the paper's number is a best observed score: no counterpart for an area
              None if metric == "auc" else paper_value("aime24"), "paper best")
    table("Collapsed runs k/n [95% Wilson CI] (per seed: 1 = collapsed)",
          lambda c: (f"{c['collapse']['k']}/{c['collapse']['n']} [{_fmt(c['collapse']['low'], 1, 2)}, "
                     f"{_fmt(c['collapse']['high'], 1, 2)}] ({', '.join(str(int(v)) for v in c['per_seed']['collapsed'])})"),
          lambda ref: "–" if ref is None else ("yes" if ref["collapsed"] else "no"), "paper collapsed")
    if summary["baseline"] is not None:
        table(f"P(improvement) over {summary['baseline']} at the same lag, fixed-step score [95% CI]",
              lambda c: _interval_text(c["improvement"]["fixed"], None, 1, 2))
    for metric, title in MISMATCH.items():
        table(f"{title} (mean [95% CI] (per seed))",
              lambda c, m=metric: _interval_text(c["stats"][m], c["per_seed"][m], 1, 4),
              paper_value("dbar", 1, 4) if metric == "dbar" else None, "paper")
    return out


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
    return "\n".join(lines)


def _tex(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"),
                          ("#", r"\#"), ("–", "--"), ("|", r"$|$")):
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
    return "\n".join(parts)


def render_csv(summary: dict) -> str:
    """Rows = recipes; per lag: mean/low/high/per-seed of every metric, collapse k/n, P(improvement)
    on the fixed-step score, and the published values. Scores as fractions (avg@k), paper in %."""
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    header, rows = ["recipe"], []
    for recipe in summary["recipes"]:
        row = {"recipe": recipe}
        for lag in summary["lags"]:
            c = cells[recipe, lag]
            for metric, stat in c["stats"].items():
                row.update({f"{metric}_lag{lag}_{part}": stat[part] for part in ("estimate", "low", "high")})
                row[f"{metric}_lag{lag}_per_seed"] = ";".join("" if v is None else repr(v)
                                                             for v in c["per_seed"][metric])
            row.update({f"collapse_lag{lag}_{part}": c["collapse"][part] for part in ("k", "n", "low", "high")})
            if c["improvement"] is not None:
                row.update({f"p_improve_fixed_lag{lag}_{part}": c["improvement"]["fixed"][part]
                            for part in ("estimate", "low", "high")})
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
    cells: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        cells.setdefault((run.recipe, run.lag), []).append(run)
    return cells


def plot_curves(config: dict, runs: list[Run], path: Path) -> None:
    """Test score vs step: the seed mean per recipe with its 95% bootstrap CI band, one panel per lag."""
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
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
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
