"""The report's sections beside the claims and cell tables, from summary.json: where each recipe's gain comes
from (analysis.claims.gain_sources), the noise parts and the seeds-vs-k plan (analysis.cells.noise), and
a queue grid at equal modelled wall-clock (analysis.cells.pareto), the equal tuning budget's pick
(analysis.schedule.tune)."""
from __future__ import annotations

import math

from analysis.claims.summary_file import Summary
from analysis.report.render import Bullets, Section, Table
from analysis.statistics.cell_stats import CellStats
from grid.claims import NOT_TESTED


def _points(part: dict) -> str:
    bounds = "no interval" if part["low"] is None else f"[{part['low'] * 100:+.1f}, {part['high'] * 100:+.1f}]"
    return f"{part['estimate'] * 100:+.1f} {bounds} points ({part['outcome']}, n {part['n']})"


def sentences(found: dict) -> list[str]:
    """One sentence per recipe of gain_sources' answer: its source, with the numbers."""
    base = found["baseline"]
    return [f"`{row['recipe']}`: {NOT_TESTED} (an arm's cell is missing)." if row["source"] == NOT_TESTED else
            f"`{row['recipe']}`: **{row['source']}**. Staleness part (without the sampler's mismatch, its staleness "
            f"cost at lag {row['lag']} minus `{base['without_mismatch']}`'s; positive: a smaller cost): "
            f"{_points(row['staleness'])}. Mismatch part (at lag 0, its benefit over `{base['with_mismatch']}` with "
            f"the mismatch minus without it): {_points(row['mismatch'])}. AUC, {row['confidence']:.2%} intervals, "
            f"exploratory; smallest effect {found['smallest_effect'] * 100:g} points." for row in found["recipes"]]


def gain_sources_sections(summary: Summary) -> list[Section]:
    """Where each recipe's gain comes from (analysis.claims.gain_sources; none without it): a sentence per recipe."""
    found = summary.gain_sources
    if not found:
        return []
    return [Section("Where each recipe's gain comes from (analysis.claims.gain_sources: staleness, mismatch, "
                    "both or neither)", (Bullets(tuple(sentences(found))),))]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _best(value: float | None) -> str:
    return "–" if value is None else _pct(value)


def noise_sections(summary: Summary) -> list[Section]:
    """The "noise: seed vs evaluation" tables of summary.json's noise (analysis.cells.noise)."""
    noise = summary.noise
    if not noise:
        return []
    best = {c.cell: c.stats["best"].estimate for c in summary.cells}
    rows = []
    for cell in noise["cells"]:
        if "parts" not in cell:
            rows.append([cell["recipe"], str(cell["lag"]), "–", "–", "–", "–", "–", cell["why"]])
            continue
        parts, seeds, problems = cell["parts"], cell["over_seeds"], cell["over_problems"]
        shares = problems["shares"]
        rows.append([cell["recipe"], str(cell["lag"]), f"{parts['seeds']} x {parts['problems']} x k {parts['k']}",
                     f"{_pct(math.sqrt(parts['seed_part']))} / {_pct(math.sqrt(parts['k_part']))} / "
                     f"{_pct(math.sqrt(parts['problem_part']))}",
                     f"{_pct(seeds['estimate'])} [{_pct(seeds['low'])}, {_pct(seeds['high'])}]",
                     f"{_pct(problems['low'])}, {_pct(problems['high'])} (seed {_pct(shares['seed'])}%, "
                     f"k {_pct(shares['k'])}%, problems {_pct(shares['problem'])}%)",
                     f"{_best(best.get((cell['recipe'], cell['lag'])))} (+{_pct(cell['inflation'])}, m = {cell['evaluations']})",
                     f"{cell['runs_left_out']} run(s) without counts" if cell["runs_left_out"] else ""])
    out = [Section.table("noise: seed vs evaluation, fixed-step score, % (analysis.cells.noise: two-way random effects, seed x problem)",
            ["recipe", "lag", "seeds x problems x k", "SD of a run's score: seed / k samples / problem draw",
             "mean [95% CI over seeds, this problem set]", "95% CI over seeds and problems (variance shares)",
             "best-checkpoint score (its inflation if the run were flat, m evaluations)", "note"], rows)]
    plan_rows = []
    for p in noise["plans"]:
        if "cheapest" not in p:
            plan_rows.append([p["claim"], _pct(p["smallest_effect"]), "–", "–", "–", "–", p["why"]])
            continue

        def text(option):
            return "out of range" if option is None else \
                f"{option['seeds']} seeds x k {option['k']} (cost {option['cost']:.0f})"
        plan_rows.append([p["claim"], _pct(p["smallest_effect"]),
                          f"{_pct(p['sd_now'])} ({p['seeds_now']} seeds x k {p['k_now']})",
                          text(p["seeds_only"]), text(p["k_only"]), text(p["cheapest"]), p["cheaper"]])
    if plan_rows:
        out.append(Section.table("noise: seeds vs k to decide each claim on the fixed-step score (its t test detects the smallest "
                    "effect, or TOST shows equivalence, with power 0.8 at 0.05 over the claims; cost in the grid's "
                    "median job wall s: a new run = train + k x evaluate / k, a larger k on a run = its extra samples)",
                    ["claim", "smallest effect, %", "sd of a seed's contrast now, %", "more seeds", "larger k",
                     "cheapest", "cheaper"], plan_rows))
    return out


def pareto_sections(summary: Summary) -> list[Section]:
    """The "at equal modelled wall-clock" table of a queue grid (analysis.cells.pareto)."""
    pareto = summary.pareto
    if not pareto:
        return []

    def score(stat):
        if stat is None or stat["estimate"] is None:
            return "–"
        interval = "" if stat["low"] is None else f" [{100 * stat['low']:.1f}, {100 * stat['high']:.1f}]"
        return f"{100 * stat['estimate']:.1f}{interval}"

    rows = [[row["recipe"], str(row["bound"]), f"{100 * row['drop_rate']:.1f}", f"{row['throughput']:.3f}",
             f"{row['time']:.1f} (x{row['relative_time']:.2f})", score(row["auc"]),
             "–" if row["equal_time"] is None else f"{score(row['equal_time'])} (step {row['equal_time']['step']}"
                                                   f" of {row['steps_reached']} reached)",
             " / ".join("yes" if on_front else "no" for on_front in row["front"].values())] for row in pareto["cells"]]
    left_out = f"; lag {pareto['left_out'][0]} (the synchronous loop) left out" if pareto["left_out"] else ""
    title = (f"At equal modelled wall-clock (lag mode queue; the time model is the preset's, analysis.cells.pareto: "
             f"{pareto['time_model']}; each cell at the time the fastest needs for {pareto['steps']} steps, "
             f"{pareto['time_budget']:.1f} units of one trainer step{left_out})")
    return [Section.table(title, ["recipe", "bound", "drop rate, %", "steps per unit time", "modelled time (vs fastest)",
                     "AUC, % [95% CI]", "score at equal time, % [95% CI]", "on the Pareto front (AUC / equal time)"],
             rows)]


def tuning_sections(summary: Summary) -> list[Section]:
    """The equal tuning budget's pick (analysis.schedule.tune): per recipe the picked value and its
    confirmation-seed AUC at each lag with its 95% interval (summary.json's cells of the picked variants)."""
    tuning = summary.tuning
    if tuning is None:
        return []
    cells = {cell.cell: cell for cell in summary.cells}
    lags = summary.lags
    text = (f"Each recipe's value picked on tuning seeds {tuning['seeds']} (never the seeds below) by the "
             f"{tuning['metric']} averaged over lags {tuning['lags']}: {tuning['rule']}. Every recipe had "
             f"{len(next(iter(tuning['recipes'].values()))['values'])} candidates. The AUC is the picked value's "
             f"on the confirmation seeds {summary.seeds} (mean [95% interval]); the tuning scores are the "
            "pick's input (tuning.json), not results.")
    rows = [[recipe, ", ".join(entry["param"]), ", ".join(map(str, entry["values"])), str(entry["picked"]),
             *(_interval(cells.get((entry["variant"], lag))) for lag in lags)] for recipe, entry in tuning["recipes"].items()]
    header = ["recipe", "parameter", "candidates", "picked", *(f"AUC lag {lag}" for lag in lags)]
    return [Section("Equal tuning budget", (text, Table.of(header, rows)))]


def _interval(cell: CellStats | None) -> str:
    stat = None if cell is None else cell.stats.get("auc")
    if stat is None or stat.estimate is None:
        return "-"
    low, high = stat.low, stat.high  # None (JSON's NaN) with fewer than 2 seeds
    bounds = f" [{100 * low:.1f}, {100 * high:.1f}]" if low is not None and high is not None else " [no interval]"
    return f"{100 * stat.estimate:.1f}{bounds} (n {stat.n})"
