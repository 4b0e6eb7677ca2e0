"""How the report writes its numbers: an estimate with its interval (a score in points, a rate as it is), a
comparison with its p and Holm p, the interval methods' names; one place, so table.md, the comparison of two grids
and the MLflow texts print a number alike."""
from __future__ import annotations

from analysis.claims.verdict import Verdict
from analysis.statistics.cell_stats import Stat
from analysis.statistics.intervals import BOOTSTRAP_MIN_SEEDS

METHOD_NAMES = {"student-t": "Student t", "paired-t": "paired by seed (Student t of per-seed differences)",
                "welch-satterthwaite": "Welch-Satterthwaite (seeds differ between cells)",
                "BCa": "BCa bootstrap", "percentile": "percentile bootstrap", "newcombe": "Newcombe",
                "degenerate": "equal seeds: a point",
                "none": f"no interval below {BOOTSTRAP_MIN_SEEDS} seeds per arm", "n<2": "one seed: none",
                "empty": "no value"}


def fmt(value, scale: float, digits: int, sign: bool = False) -> str:
    return "–" if value is None else f"{value * scale:{'+' if sign else ''}.{digits}f}"


def interval_text(stat: Stat, values: list | None, scale: float, digits: int, sign: bool = False) -> str:
    """"mean [low, high] (per-seed values)"; no brackets when there is no interval."""
    text = bounds_text(stat.estimate, stat.low, stat.high, scale, digits, sign)
    if values is not None:
        text += " (" + ", ".join(fmt(v, scale, digits) for v in values) + ")"
    return text


def bounds_text(estimate, low, high, scale: float, digits: int, sign: bool) -> str:
    text = fmt(estimate, scale, digits, sign)
    if low is not None:
        text += f" [{fmt(low, scale, digits, sign)}, {fmt(high, scale, digits, sign)}]"
    return text


def verdict_interval_text(claim: Verdict, unit: bool = True) -> str:
    """"+3.1 [-1.2, +7.4] points": a claim's estimate and interval, a rate as it is, a score in points."""
    scale, points, digits = claim.shown_as
    return bounds_text(claim.measured.estimate, claim.low, claim.high, scale, digits, True) + (points if unit else "")


def p_text(value) -> str:
    return "–" if value is None else "<0.001" if value < 0.001 else f"{value:.3f}"


def n_text(stat: Stat) -> str:
    return f"n {stat.n}" if stat.n is not None else f"n {stat.n_x} vs {stat.n_y}"


def comparison_text(stat: Stat, scale: float, digits: int, sign: bool = True) -> str:
    """"+d [low, high] (n 3), p 0.012 (Holm 0.048)"; parts without a value are left out."""
    text = f"{interval_text(stat, None, scale, digits, sign)} ({n_text(stat)})"
    if stat.tested:
        text += f", p {p_text(stat.p)} (Holm {p_text(stat.p_holm)})"
    return text


def methods_text(stats: list[Stat]) -> str:
    """The interval methods used in one table, in METHOD_NAMES order."""
    used = {s.method for s in stats}
    return "; ".join(name for method, name in METHOD_NAMES.items() if method in used)


def holm_note(stats: list[Stat]) -> str:
    return f"exploratory, Holm-adjusted over the {sum(s.p_holm is not None for s in stats)} tests of this table"
