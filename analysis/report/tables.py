"""The report's text from summary.json (analysis.cells.summary): the claims' verdicts first, then the
cell tables and the exploratory comparison tables of each endpoint (analysis.cells.summary.ENDPOINTS),
the generated conclusions, and the Markdown / LaTeX / CSV renderers of one set of sections."""
from __future__ import annotations

import csv
import io

from analysis.cells.summary import ENDPOINT_NAMES, ENDPOINTS, MISMATCH, SCORES, seeds_text, summary_cells
from analysis.claims.robustness import checks_text
from analysis.claims.summary_file import Summary
from analysis.claims.verdict import Verdict
from analysis.claims.verdicts import replication_text
from analysis.report.numbers import (
    comparison_text,
    fmt,
    holm_note,
    interval_text,
    methods_text,
    n_text,
    verdict_interval_text,
)
from analysis.report.render import Bullets, Section, latex, markdown
from analysis.statistics.cell_stats import CellStats
from analysis.statistics.decision import size_to_delta
from analysis.statistics.intervals import ALPHA, smallest_p

CLAIM_FIELDS = ("statement", "kind", "metric", "expect", "smallest_effect", "estimate", "low", "high",
                "confidence", "method", "n", "look", "test", "p", "verdict", "why", "replication", "replication_low",
                "replication_high", "seeds_needed")


def claim_text(claim: Verdict) -> str:
    """"+3.1 [-1.2, +7.4] points (98.75%, paired-t, n 5)": the claim's estimate and its interval at
    the claim's level, with the method and n."""
    if not claim.tested:
        return "–"
    return f"{verdict_interval_text(claim)} ({claim.confidence:.2%}, {claim.measured.method}, n {claim.measured.n})"


def size_text(claim: Verdict) -> str:
    """" (-0.46 [-0.72, -0.19] x delta, inside +-delta)": how far the outcome's interval lies from 0 and delta."""
    size = claim.tested and size_to_delta(claim.measured.estimate, claim.low, claim.high, claim.claim.smallest_effect)
    return f" ({size})" if size else ""


def family_text(summary: Summary) -> str:
    """How the claims are read: the family, its level, the schedule."""
    claims = summary.claims
    tested = sum(c.tested for c in claims)
    seeding, declared = summary.seeding, summary.seeding_declared
    looks = (f"seed schedule {seeding['looks']} ({seeding['boundary']} spending)" if seeding
             else "a fixed design (every seed)")
    if declared and (seeding or {}).get("looks") != declared["looks"]:
        looks += f", the declared schedule {declared['looks']} cut to this grid's {len(summary.seeds)} seeds"
    return (f"confirmatory, declared in the config: each of the {tested} claims tested is read from its interval at "
            f"{ALPHA:g}/{len(claims)} (Bonferroni over the {len(claims)} declared), {looks}; "
            f"docs/statistics.md, \"Verdicts\"")


def claims_section(summary: Summary) -> Section | None:
    claims = summary.claims
    if not claims:
        return None
    rows = [[c.claim.name, c.statement, claim_text(c), f"**{c.verdict}**{size_text(c)}: {c.why}",
             replication_text(c, with_range=True), checks_text(c)] for c in claims]
    title = f"Claims ({family_text(summary)}; every other table is exploratory)"
    return Section.table(title, ["claim", "statement", "estimate [interval] (level, method, n)", "outcome",
                                 "chance a rerun repeats this outcome (80% range)",
                                 "skew of the per-seed contrasts; AdaStop (exploratory: does not govern the outcome)"], rows)


def realized_lag_text(cell: CellStats) -> str:
    """e.g. "1..8 (mean 4.5)"; "–" for a cell without training rows."""
    lags = cell.realized_lag
    if lags is None or lags.min is None:
        return "–"
    return f"{lags.min}..{lags.max} (mean {lags.mean:.2f})"


def cell_sections(summary: Summary) -> list[Section]:
    """The cell tables and the exploratory comparisons: rows = recipes, one column per lag for each
    column group (the value, then the published value)."""
    cells = summary_cells(summary)
    baseline, reference_lag = summary.baseline, summary.reference_lag
    others = [r for r in summary.recipes if r != baseline]
    later = [lag for lag in summary.lags if lag != reference_lag]
    out = []

    def table(title, columns, recipes=summary.recipes, lags=summary.lags):
        """columns: (header prefix, text of a cell), each one column per lag."""
        header = ["recipe"] + [f"{prefix}lag {lag}" for prefix, _ in columns for lag in lags]
        rows = [[recipe] + [text(cells[recipe, lag]) for _, text in columns for lag in lags]
                for recipe in recipes]
        out.append(Section.table(title, header, rows))

    def shown(get, recipes=summary.recipes, lags=summary.lags):
        return [get(cells[recipe, lag]) for recipe in recipes for lag in lags]

    def paper_value(key, scale=1.0, digits=2):
        return lambda c: ("–" if c.reference is None or c.reference[key] is None
                          else f"{c.reference[key] * scale:.{digits}f}")

    fixed = summary.fixed_step if summary.fixed_step is not None else "last evaluated"
    for metric, title in SCORES.items():
        if metric == "selected" and summary.selection_task is None:
            continue
        if metric == "fixed":
            title += f" (step {fixed})"
        columns = [("", lambda c, m=metric: interval_text(c.stats[m], c.per_seed[m], 100, 1))]
        if metric != "auc":  # the paper's number is a best observed score: no counterpart for an area
            columns.append(("paper best ", paper_value("aime24")))
        table(f"{title}, % (mean [95% CI: {methods_text(shown(lambda c, m=metric: c.stats[m]))}] (per seed))",
              columns)
    table("Collapsed runs k/n [95% Wilson CI] (per seed: 1 = collapsed)",
          [("", lambda c: (f"{c.collapse.k}/{c.collapse.n} [{fmt(c.collapse.low, 1, 2)}, "
                           f"{fmt(c.collapse.high, 1, 2)}] "
                           f"({', '.join(str(int(v)) for v in c.per_seed['collapsed'])})")),
           ("paper collapsed ", lambda c: "–" if c.reference is None else
            ("yes" if c.reference["collapsed"] else "no"))])
    for endpoint in ENDPOINTS:
        name = ENDPOINT_NAMES[endpoint]
        if baseline is not None and others:
            stats = shown(lambda c, e=endpoint: c.vs_baseline[e], others)
            table(f"Difference to {baseline} at the same lag, {name}, points (mean difference "
                  f"[95% CI: {methods_text(stats)}] (n), t test p, {holm_note(stats)})",
                  [("", lambda c, e=endpoint: comparison_text(c.vs_baseline[e], 100, 1))], recipes=others)
            stats = shown(lambda c, e=endpoint: c.improvement[e], others)
            table(f"P(improvement) over {baseline} at the same lag, {name} ([95% CI: {methods_text(stats)}] (n), "
                  f"two-sided Mann-Whitney p, {holm_note(stats)})",
                  [("", lambda c, e=endpoint: comparison_text(c.improvement[e], 1, 2, sign=False))],
                  recipes=others)
        if later:
            stats = shown(lambda c, e=endpoint: c.staleness_cost[e], lags=later)
            table(f"Staleness cost: {name} at this lag minus lag {reference_lag}, points (mean difference "
                  f"[95% CI: {methods_text(stats)}] (n), t test p, {holm_note(stats)})",
                  [("", lambda c, e=endpoint: comparison_text(c.staleness_cost[e], 100, 1))], lags=later)
    if later:
        stats = shown(lambda c: c.collapse_vs_reference_lag, lags=later)
        table(f"Collapse rate at this lag minus lag {reference_lag} ([95% CI: Newcombe], Fisher exact p, "
              f"{holm_note(stats)})", [("", lambda c: comparison_text(c.collapse_vs_reference_lag, 1, 2))],
              lags=later)
    if baseline is not None and others:
        stats = shown(lambda c: c.collapse_vs_baseline, others)
        table(f"Collapse rate minus {baseline}'s at the same lag ([95% CI: Newcombe], Fisher exact p, "
              f"{holm_note(stats)})", [("", lambda c: comparison_text(c.collapse_vs_baseline, 1, 2))],
              recipes=others)
    table(f"Realized lag ({summary.lag_mode} mode): lowest..highest over every trained step "
          "of every seed (mean)", [("", realized_lag_text)])
    for metric, title in MISMATCH.items():
        columns = [("", lambda c, m=metric: interval_text(c.stats[m], c.per_seed[m], 1, 4))]
        if metric == "dbar":
            columns.append(("paper ", paper_value("dbar", 1, 4)))
        table(f"{title} (mean [95% CI: {methods_text(shown(lambda c, m=metric: c.stats[m]))}] (per seed))",
              columns)
    return out


def claim_conclusions(summary: Summary) -> list[str]:
    """The claims' verdicts as sentences: what the grid was run to answer."""
    claims = summary.claims
    if not claims:
        return ["No claims declared (config key `claims`): nothing here is confirmatory; every comparison "
                "below is exploratory, a lead for a claim to declare and test on a new grid."]
    lines = [f"Claims ({family_text(summary)}): {verdict_counts(claims)}."]
    lines += [f"{c.claim.name} ({c.statement}): {c.verdict}{size_text(c)}, {claim_text(c)}; {c.why}; "
              f"chance a rerun repeats this outcome {replication_text(c)}." for c in claims]
    return lines


def verdict_counts(claims: list[Verdict]) -> str:
    """"2 exceeds, 1 undecided": the claims' outcomes counted, in their first order."""
    verdicts = [c.verdict for c in claims]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))


def conclusions(summary: Summary) -> list[str]:
    """The claims' verdicts, then what each endpoint's exploratory comparisons do and do not show,
    as sentences generated from the numbers (the report's last section and summary.json's
    ``conclusions``)."""
    cells, baseline, reference_lag = summary.cells, summary.baseline, summary.reference_lag
    lines = claim_conclusions(summary)
    lines.append("Exploratory (not claims): intervals are 95%; p-values are two-sided and Holm-adjusted within "
                 f"each table, read at {ALPHA:g}. A difference whose interval contains 0 is not evidence of a "
                 "difference in either direction: ranking recipes by point estimates inside their intervals "
                 "is not a result.")

    def sort(what, stats, null, text, smallest=None):
        """Sort one table's comparisons into evidence / suggestive / not distinguishable / untested."""
        tested = [(c, s) for c, s in stats if s.tested]
        groups = {"evidence": [], "suggestive": [], "inside": []}
        for c, s in tested:
            excludes = s.low is not None and not s.low <= null <= s.high
            kind = "evidence" if s.p_holm < ALPHA else "suggestive" if excludes else "inside"
            groups[kind].append(f"{c.recipe} at lag {c.lag}: {text(s)}")
        if smallest is not None and tested:
            best = min((s for _, s in tested), key=smallest)
            if smallest(best) >= ALPHA:
                lines.append(f"{what.capitalize()}: with {best.n_x} vs {best.n_y} seeds even complete "
                             f"separation gives p = {smallest(best):.3f} >= {ALPHA:g}, so no comparison in "
                             "this table can be significant: its values are descriptive.")
        titles = {"evidence": f"Evidence of a {what} (exploratory, Holm p < {ALPHA:g})",
                  "suggestive": f"Suggestive only, {what} (the 95% interval excludes {null:g}, the Holm p "
                                f"does not reach {ALPHA:g})",
                  "inside": f"No evidence either way, {what} (not significant after Holm)"}
        for kind, items in groups.items():
            if items:
                lines.append(f"{titles[kind]}: " + "; ".join(items) + ".")
        if len(tested) < len(stats):
            lines.append(f"No test for {len(stats) - len(tested)} of the {len(stats)} comparisons of the "
                         f"{what} (fewer than 2 seeds, or no spread).")

    def points(stat):
        return f"{interval_text(stat, None, 100, 1, sign=True)} points ({n_text(stat)})"

    def separation(s):
        return smallest_p(s.test, s.n_x, s.n_y)

    for endpoint in ENDPOINTS:
        name = ENDPOINT_NAMES[endpoint]
        if baseline is not None:
            sort(f"difference to {baseline} in the {name}",
                 [(c, c.vs_baseline[endpoint]) for c in cells if c.vs_baseline is not None], 0.0, points)
            sort(f"P(improvement) over {baseline} in the {name}",
                 [(c, c.improvement[endpoint]) for c in cells if c.recipe != baseline], 0.5,
                 lambda s: interval_text(s, None, 1, 2), separation)
        sort(f"staleness cost (lag L minus lag {reference_lag}) in the {name}",
             [(c, c.staleness_cost[endpoint]) for c in cells if c.staleness_cost is not None], 0.0, points)
    for get, what in ((lambda c: c.collapse_vs_reference_lag, f"collapse-rate change from lag {reference_lag}"),
                      (lambda c: c.collapse_vs_baseline, f"collapse-rate difference to {baseline}")):
        sort(what, [(c, get(c)) for c in cells if get(c) is not None], 0.0,
             lambda s: interval_text(s, None, 1, 2, sign=True), separation)
    return lines


def conclusions_section(summary: Summary) -> Section:
    return Section("What can and cannot be concluded", (Bullets(tuple(summary.conclusions)),))


def seed_order_text(summary: Summary) -> str:
    """The order of the per-seed values; where cells hold fewer seeds than the grid declares (a seed
    schedule that stopped them early) each lists only the seeds it ran."""
    order = f"in seed order {summary.seeds}"
    if all(len(cell.seeds) == len(summary.seeds) for cell in summary.cells):
        return order
    return order + "; a cell lists only the seeds its looks ran (counts in the heading)"


def made_by_text(summary: Summary) -> str:
    """What the numbers depend on besides the recipes: the engine, its preset and arithmetic version, the seeds."""
    known = ", ".join(f"{name} {value}" for value, name in ((summary.engine_preset, "preset"),
                      (summary.arithmetic_version, "arithmetic version")) if value is not None)
    seeding = summary.seeding
    schedule = (f"seed schedule {seeding['looks']} ({seeding['boundary']} spending)" if seeding
                else "every seed at once (a fixed design)")
    return f"{summary.engine} engine" + (f" ({known})" if known else "") + f", {seeds_text(summary)}, {schedule}"


def render_markdown(summary: Summary, report: list[Section]) -> str:
    """table.md: its heading (what made the numbers: made_by_text), then the report's sections (write.py)."""
    selection = (f"selection task `{summary.selection_task}`" if summary.selection_task is not None
                 else "no selection task (no selected-checkpoint score)")
    heading = [f"# {summary.grid}: {made_by_text(summary)}, {summary.steps} steps",
               "", f"Test task `{summary.test_task}`; {selection}; "
               f"collapse = diverged, or below {summary.collapse_fraction} x peak after the peak "
               f"through the last evaluation, over at least {1 if summary.collapse_confirm is None else summary.collapse_confirm} evaluations. Per-seed values in parentheses, "
               f"{seed_order_text(summary)}. Paper columns: Table 1 of the SAT paper (AIME24, %, one seed).", ""]
    return "\n".join(heading + markdown(report))


def render_latex(summary: Summary, report: list[Section]) -> str:
    heading = f"% {summary.grid}: generated by analysis.aggregate; per-seed values in parentheses"
    return "\n".join([heading, *latex(report)])


def render_csv(summary: Summary) -> str:
    """First one row per claim (``claim`` = its name; claim_* = its verdict and numbers), then one
    row per recipe; per lag: mean/low/high/method/per-seed of every metric, collapse k/n, the
    comparisons of each endpoint (difference to the baseline, staleness cost, P(improvement):
    estimate/low/high/method/n/p/p_holm), the collapse-rate comparisons (estimate/low/high/p/p_holm),
    and the published values. Scores as fractions (avg@k), paper in %."""
    cells = summary_cells(summary)
    header, rows = ["recipe", "claim"], []
    for claim in summary.claims:
        row = claim.row()
        rows.append({"recipe": claim.claim.recipe, "claim": claim.claim.name,
                     **{f"claim_{field}": row.get(field) for field in CLAIM_FIELDS}})
    for recipe in summary.recipes:
        row = {"recipe": recipe}
        for lag in summary.lags:
            c = cells[recipe, lag]
            for metric, stat in c.stats.items():
                row.update({f"{metric}_lag{lag}_{part}": getattr(stat, part)
                            for part in ("estimate", "low", "high", "method")})
                row[f"{metric}_lag{lag}_per_seed"] = ";".join("" if v is None else repr(v) for v in c.per_seed[metric])
            row.update({f"collapse_lag{lag}_{part}": getattr(c.collapse, part) for part in ("k", "n", "low", "high")})
            for stats, name in ((c.vs_baseline, "diff_baseline"), (c.staleness_cost, "staleness"),
                                (c.improvement, "p_improve")):
                for endpoint in ENDPOINTS if stats is not None else ():
                    row.update({f"{name}_{endpoint}_lag{lag}_{part}": getattr(stats[endpoint], part) for part in
                                ("estimate", "low", "high", "method", "n", "p", "p_holm")})
            for stat, name in ((c.collapse_vs_baseline, "collapse_diff_baseline"),
                               (c.collapse_vs_reference_lag, f"collapse_diff_lag{summary.reference_lag}")):
                if stat is not None:
                    row.update({f"{name}_lag{lag}_{part}": getattr(stat, part) for part in
                                ("estimate", "low", "high", "p", "p_holm")})
            ref = c.reference or {}
            row.update({f"paper_{key}_lag{lag}": ref.get(key) for key in ("aime24", "collapsed", "dbar")})
        rows.append(row)
    for row in rows:
        header += [k for k in row if k not in header]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()
