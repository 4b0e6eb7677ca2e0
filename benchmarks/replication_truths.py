"""The truths and first runs the replication benches share (benchmarks/bench_replication.py,
benchmarks/bench_replication_cause.py): the declared design of a config, the field's contrasts as truths,
the design read on simulated seeds by the benches' own code (numpy seeds, scipy's t, the outcome table
written out again, not analysis.statistics.decision), and the per-bin calibration table of printed against
true probabilities."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from scipy import stats

from analysis.statistics.boundaries import look_levels
from analysis.statistics.intervals import ALPHA
from grid.config import load
from grid.settings import Config
from harness.io import write_json_atomic, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
FIELD = ROOT / "benchmarks" / "data" / "field_contrasts.csv"
FIELD_EXPECTS = {"cost": ("less", "equivalent"), "difference": ("greater",)}
BINS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.97, 1.0001)
TARGET, MIN_RUNS, FIELD_SEED = 0.03, 30, 47  # FIELD_SEED: the field's first runs, the same in both benches
DIRECTIONAL = ("exceeds", "below effect", "negligible", "opposite")
FINAL = {"greater": DIRECTIONAL, "less": DIRECTIONAL, "equivalent": ("negligible", "exceeds")}


class Design:
    """The declared design of a config: looks, boundary, each claim's level and smallest effect (points)."""

    def __init__(self, path: Path):
        config = Config.build(load(path))
        if config.seeding is None:
            self.looks, self.boundary = (len(config.seeds),), None
        else:
            self.looks, self.boundary = tuple(config.seeding.looks), config.seeding.boundary
        deltas = {claim.smallest_effect for claim in config.claims if claim.scale == "points"}
        if len(deltas) != 1:
            raise SystemExit(f"{path}: claims on a score with one smallest_effect needed, found {sorted(deltas)}")
        self.delta = 100 * deltas.pop()
        self.level = ALPHA / len(config.claims)
        self.levels = look_levels(self.looks, self.level, self.boundary) if self.boundary else (self.level,)
        self.name = " -> ".join(map(str, self.looks)) + f" {self.boundary or '(fixed)'}, {ALPHA:g} / {len(config.claims)}"


def field_truths(path: Path = FIELD) -> tuple[list[tuple[str, str, float, float]], dict]:
    """(label, expect, mean, per-seed sd) of each field contrast and claim kind (module docstring), and per
    claim kind the field's spread of effects as a normal prior (mean, sd; points), empirical Bayes by moments:
    the variance of the estimates less their mean squared standard error, floored at 1 point squared (two
    kinds' estimates could otherwise give a negative or zero width). The csv's 10-seed rows of grpo's and
    sat_gspo's costs share seeds 0-4 with their 5-seed rows: kept as the field printed both, they weigh those two
    truths twice in the field's bins."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    truths, kinds = [], {}
    for row in csv.DictReader(lines):
        n, low, high = int(row["n"]), float(row["low"]), float(row["high"])
        sd = (high - low) / 2 / stats.t.isf(0.025, n - 1) * math.sqrt(n)
        truths += [(row["contrast"], expect, float(row["estimate"]), sd) for expect in FIELD_EXPECTS[row["kind"]]]
        kinds.setdefault(row["kind"], []).append((float(row["estimate"]), sd ** 2 / n))
    priors = {}
    for kind, rows in kinds.items():
        estimates, variances = np.array(rows).T
        width = math.sqrt(max(np.var(estimates, ddof=1) - variances.mean(), 1.0))
        priors.update({expect: (float(estimates.mean()), width) for expect in FIELD_EXPECTS[kind]})
    return truths, priors


def classify(low, high, delta: float, expect: str) -> np.ndarray:
    """The outcome table of docs/statistics.md, written out again (not analysis.statistics.decision)."""
    out = np.full(np.shape(low), "undecided", dtype=object)
    if expect == "less":  # the mirror of greater
        low, high = -high, -low
    if expect != "equivalent":
        rows = [("negligible", (low > -delta) & (high < delta)), ("opposite", high < 0), ("claimed sign", low > 0),
                ("below effect", (low > 0) & (high < delta)), ("exceeds", low >= delta)]
    else:
        rows = [("nonzero", (low > 0) | (high < 0)), ("exceeds", (low >= delta) | (high <= -delta)),
                ("negligible", (low > -delta) & (high < delta))]
    for name, where in rows:  # later rows win
        out[where] = name
    return out


def read_design(seeds: np.ndarray, expect: str, design: Design):
    """(outcome, mean, sd, n at the look it stopped) of each row of per-seed contrasts."""
    runs, result = len(seeds), np.full(len(seeds), "", dtype=object)
    mean, sd, n_at = np.zeros(runs), np.zeros(runs), np.zeros(runs, dtype=int)
    for k, (n, level) in enumerate(zip(design.looks, design.levels)):
        m, s = seeds[:, :n].mean(axis=1), seeds[:, :n].std(axis=1, ddof=1)
        half = stats.t.isf(level / 2, n - 1) * s / math.sqrt(n)
        names = classify(m - half, m + half, design.delta, expect)
        stop = (result == "") & (np.isin(names, FINAL[expect]) | (k == len(design.looks) - 1))
        result[stop], mean[stop], sd[stop], n_at[stop] = names[stop], m[stop], s[stop], n
    return result, mean, sd, n_at


def shares(names: np.ndarray) -> dict:
    values, counts = np.unique(names, return_counts=True)
    return dict(zip(values, counts / len(names)))


def first_runs(truths, design: Design, runs: int, truth_reruns: int, seed: int):
    """Per truth: (label, expect, mean, sd, its outcome shares, :func:`read_design` of its first runs)."""
    rng = np.random.default_rng(seed)
    for label, expect, mean, sd in truths:
        truth_share = shares(read_design(rng.normal(mean, sd, (truth_reruns, design.looks[-1])), expect, design)[0])
        yield label, expect, mean, sd, truth_share, read_design(rng.normal(mean, sd, (runs, design.looks[-1])), expect, design)


def calibration(rows) -> tuple[list[str], list[dict]]:
    """The per-bin table of (printed, true, range low, range high) rows, and its figures."""
    data = np.array(rows)
    lines = ["| printed | runs | mean printed | mean true | printed - true | Monte Carlo error (1 se) | "
             f"within {TARGET} | true in the 80% range |", "|---" * 8 + "|"]
    figures = []
    for low, high in zip(BINS, BINS[1:]):
        inside = (data[:, 0] >= low) & (data[:, 0] < high)
        cells = [f"{low:.2f}-{min(high, 1):.2f}", str(int(inside.sum()))]
        if inside.sum() < 2:
            lines.append("| " + " | ".join(cells + ["–"] * 6) + " |")
            continue
        part = data[inside]
        diff = part[:, 0].mean() - part[:, 1].mean()
        error = float(np.std(part[:, 0] - part[:, 1], ddof=1) / math.sqrt(len(part)))
        covered = float(np.mean((part[:, 2] <= part[:, 1]) & (part[:, 1] <= part[:, 3])))
        counted = len(part) >= MIN_RUNS
        met = ("yes" if abs(diff) <= TARGET else "**no**") if counted else f"(< {MIN_RUNS} runs)"
        cells += [f"{part[:, 0].mean():.3f}", f"{part[:, 1].mean():.3f}", f"{diff:+.3f}", f"{error:.3f}", met,
                  f"{covered:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
        figures.append({"bin": cells[0], "runs": len(part), "printed": round(float(part[:, 0].mean()), 3),
                        "true": round(float(part[:, 1].mean()), 3), "difference": round(float(diff), 3),
                        "error": round(error, 3), "counted": counted, "covered": round(covered, 2)})
    covered = float(np.mean((data[:, 2] <= data[:, 1]) & (data[:, 1] <= data[:, 3])))
    lines.append(f"| all | {len(data)} | {data[:, 0].mean():.3f} | {data[:, 1].mean():.3f} | "
                 f"{data[:, 0].mean() - data[:, 1].mean():+.3f} | "
                 f"{np.std(data[:, 0] - data[:, 1], ddof=1) / math.sqrt(len(data)):.3f} | | {covered:.2f} |")
    return lines, figures


def verdict(bins: list[dict]) -> dict:
    """The bins of :func:`calibration` and their verdict: how many count (>= MIN_RUNS runs), whether every
    one is within TARGET, the largest |printed - true| and the largest Monte Carlo error among them."""
    counted = [b for b in bins if b["counted"]]
    return {"bins": bins, "counted_bins": len(counted), "met": all(abs(b["difference"]) <= TARGET for b in counted),
            "largest": max((abs(b["difference"]) for b in counted), default=None),
            "largest_error": max((b["error"] for b in counted), default=None)}


def write_figures(folder: Path | None, name: str, lines: list[str], figures: dict) -> None:
    """FOLDER/NAME.md (the lines printed) and FOLDER/NAME.json (the figures); nothing without a folder."""
    if folder:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / f"{name}.md", "\n".join(lines) + "\n")
        write_json_atomic(folder / f"{name}.json", figures)
