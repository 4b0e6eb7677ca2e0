"""Two grids side by side: does grid B reproduce grid A within their noise?

    python -m analysis.report.compare A B [--json]

A and B are two grids' folders (<results_dir>/<grid>) or their summary.json files (analysis.cells.summary).
For every cell (recipe x lag) both grids have, and for each endpoint (analysis.cells.summary.ENDPOINTS)
and the collapse rate: B minus A with its 95% interval and two-sided test. The grids are
independent samples (other machines, kernels or seeds), so a score's difference is
Welch-Satterthwaite on the two cells' seeds (analysis.statistics.contrasts; never paired, even where the seed
numbers match) and a collapse rate's is Newcombe's interval with Fisher's exact test
(analysis.statistics.intervals). Holm runs over every test of the comparison (one family). Each claim both grids
declare (same name and statement) shows both verdicts. Cells and claims in one grid only are
listed, not compared. Exit status: 0 the grids agree (AGREEMENT), 1 they do not, 2 bad input.

A grid's own report shows another grid's claims beside its own (config side_by_side: e.g. the grid
run under lag_mode interval beside the one run under constant lag): ``beside`` and
``beside_sections``, called by analysis.report.write, with that grid as A and this one as B.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from analysis.cells.summary import ENDPOINT_NAMES, ENDPOINTS, cell_minus, summary_cells, under_recipe_names
from analysis.claims.summary_file import Summary, json_safe, read_summary
from analysis.claims.verdict import Verdict
from analysis.report.numbers import comparison_text, interval_text, verdict_interval_text
from analysis.report.render import Bullets, Section, Table
from analysis.statistics.cell_stats import CellStats, Stat
from analysis.statistics.cell_table import CellTable
from analysis.statistics.intervals import ALPHA, collapse_difference, holm
from grid.folder import SUMMARY, GridDir
from grid.settings import Config
from harness.cli import run_stage

METRICS = (*ENDPOINTS, "collapse")
METRIC_NAMES = {**ENDPOINT_NAMES, "collapse": "collapse rate"}
# a cell means the same thing in two grids only under the same budget, test task, step and collapse rule
SAME_SETTINGS = ("steps", "test_task", "fixed_step", "collapse_fraction")
REQUIRED = ("grid", "engine", "seeds", "cells", "claims", *SAME_SETTINGS)
AGREEMENT = (f"the grids agree within their noise when no cell comparison (B minus A) has Holm p < {ALPHA:g} "
             f"(Holm over every comparison with a test; one without spread in either grid, every seed "
             f"equal, differs when its means differ) and every claim both grids declare has the same "
             f"verdict. Agreement means no evidence of a difference, not a test of equivalence: at few seeds "
             f"only large shifts are detected")


@dataclass(frozen=True)
class CellDifference:
    """B's cell minus A's on one metric, its Holm p within the comparison, and whether it differs (AGREEMENT;
    None: no test)."""
    recipe: str
    lag: int
    metric: str
    difference: Stat
    differs: bool | None = None


@dataclass(frozen=True)
class ClaimPair:
    """A claim both grids declare with the same statement, and its verdict in each."""
    name: str
    statement: str
    a: Verdict
    b: Verdict
    same_verdict: bool


@dataclass(frozen=True)
class Comparison:
    """Grid B against grid A (the --json output, field for field): ``agree`` per AGREEMENT, the ``tests`` Holm ran
    over, each shared cell's differences and each shared claim's verdicts, what one grid has alone (cells as
    [recipe, lag], claims by name, keyed "a" and "b") and the claims of one name but other statements."""
    agree: bool
    tests: int
    agreement: str
    cells: list[CellDifference]
    claims: list[ClaimPair]
    cells_only_in: dict[str, list]
    claims_only_in: dict[str, list]
    claims_defined_differently: list[str]


@dataclass(frozen=True)
class Beside(Comparison):
    """A comparison shown in this grid's report (config side_by_side: summary.json's ``side_by_side``): the other
    grid (A), its label and file, and the claims whose verdict differs."""
    grid: str = ""
    label: str = ""
    file: str = ""
    verdict_differs: list[str] = field(default_factory=list)


def load_summary(path: str | Path) -> tuple[Path, Summary]:
    """A grid's summary.json, from its folder or the file; a missing or foreign file fails naming it."""
    path = Path(path)
    file = GridDir(path).summary_path if path.is_dir() else path
    return file, read_summary(file, REQUIRED)


def difference(metric: str, a: CellStats, b: CellStats, tables: tuple[CellTable, CellTable]) -> Stat:
    """B's cell minus A's: Welch-Satterthwaite for a score (the cells' seeds, ``tables``: A's and B's), Newcombe +
    Fisher for the collapse rate (the cells' k of n: a published summary.json need not list its runs' flags)."""
    if metric == "collapse":
        found = collapse_difference(b.collapse.k, b.collapse.n, a.collapse.k, a.collapse.n)
    else:
        found = cell_minus(tables[1], b.cell, tables[0], a.cell, metric, apart=True)
    return Stat.from_row(json_safe(found.as_dict()))


def differs(stat: Stat) -> bool | None:
    """Whether a comparison shows a difference (AGREEMENT); None where it has no test (under 2 seeds)."""
    if stat.method == "degenerate":
        return stat.estimate != 0
    return None if stat.p_holm is None else stat.p_holm < ALPHA


def compare(a: Summary, b: Summary) -> Comparison:
    """The comparison of two summaries; ``agree`` per AGREEMENT."""
    cells_a, cells_b = summary_cells(a), summary_cells(b)
    shared = [cell for cell in cells_a if cell in cells_b]
    if not shared:
        raise ValueError("the grids share no cell (recipe x lag): nothing to compare")
    tables = CellTable.of_cells(a.cells), CellTable.of_cells(b.cells)
    found = [(recipe, lag, metric, difference(metric, cells_a[recipe, lag], cells_b[recipe, lag], tables))
             for recipe, lag in shared for metric in METRICS]
    adjusted = [stat.adjusted(p) for (*_, stat), p in zip(found, holm([stat.p for *_, stat in found]))]
    rows = [CellDifference(recipe, lag, metric, stat, differs(stat))
            for (recipe, lag, metric, _), stat in zip(found, adjusted)]
    claims_a, claims_b = ({c.claim.name: c for c in s.claims} for s in (a, b))
    both = [name for name in claims_a if name in claims_b]
    alike = [name for name in both if claims_a[name].statement == claims_b[name].statement]
    claims = [ClaimPair(name, claims_a[name].statement, claims_a[name], claims_b[name],
                        claims_a[name].verdict == claims_b[name].verdict) for name in alike]
    return Comparison(agree=not any(row.differs for row in rows) and all(c.same_verdict for c in claims),
                      tests=sum(row.difference.p_holm is not None for row in rows), agreement=AGREEMENT,
                      cells=rows, claims=claims,
                      cells_only_in={"a": [list(c) for c in cells_a if c not in cells_b],
                                     "b": [list(c) for c in cells_b if c not in cells_a]},
                      claims_only_in={"a": [n for n in claims_a if n not in claims_b],
                                      "b": [n for n in claims_b if n not in claims_a]},
                      claims_defined_differently=[name for name in both if name not in alike])


def _cell_text(metric: str, cell: CellStats) -> str:
    if metric == "collapse":
        return f"{cell.collapse.k}/{cell.collapse.n}"
    return f"{interval_text(cell.stats[metric], None, 100, 1)} (n {cell.stats[metric].n})"


def _claim_text(claim: Verdict) -> str:
    if claim.measured is None:  # not tested in this grid: a verdict without an interval
        return f"**{claim.verdict}**"
    return f"**{claim.verdict}**: {verdict_interval_text(claim, unit=False)} ({claim.measured.method})"


def _verdict_line(result: Comparison) -> str:
    shifted = [f"{r.recipe} lag {r.lag} {METRIC_NAMES[r.metric]}" for r in result.cells if r.differs]
    flipped = [f"{c.name} ({c.a.verdict} in A, {c.b.verdict} in B)" for c in result.claims if not c.same_verdict]
    if result.agree:
        return (f"**The grids agree within their noise**: none of the {result.tests} cell comparisons "
                f"differs after Holm, and the {len(result.claims)} claims both declare have the same verdicts.")
    reasons = ([f"cells that differ after Holm over {result.tests}: " + "; ".join(shifted)] if shifted else []) + \
        (["claims with another verdict: " + "; ".join(flipped)] if flipped else [])
    return "**The grids do not agree within their noise**: " + ". ".join(reasons) + "."


def render_markdown(result: Comparison, a: Summary, b: Summary, files: tuple[Path, Path]) -> str:
    """The comparison as Markdown: the verdict line, the cells, the claims, what was not compared."""
    cells_a, cells_b = summary_cells(a), summary_cells(b)
    lines = ["# Comparing two grids: B minus A", ""]
    for label, summary, file in (("A", a, files[0]), ("B", b, files[1])):
        lines.append(f"- {label}: `{file}` (grid {summary.grid}, engine {summary.engine}, "
                     f"seeds {summary.seeds})")
    lines += ["", _verdict_line(result), "", f"Agreement: {result.agreement}.", "",
              "## Cells", "", "Scores in points, collapse as a rate; B minus A with its 95% interval "
              "(Welch-Satterthwaite for scores, Newcombe for collapse), p (Fisher's exact test for collapse) "
              f"and Holm p over the {result.tests} comparisons with a test.", "",
              "| recipe | lag | metric | A | B | B minus A | differs |", "|---|---|---|---|---|---|---|"]
    for row in result.cells:
        key, metric = (row.recipe, row.lag), row.metric
        scale, digits = (1, 2) if metric == "collapse" else (100, 1)
        verdict = {True: "**yes**", False: "no", None: "no test"}[row.differs]
        lines.append(f"| {key[0]} | {key[1]} | {METRIC_NAMES[metric]} | {_cell_text(metric, cells_a[key])} | "
                     f"{_cell_text(metric, cells_b[key])} | {comparison_text(row.difference, scale, digits)} | "
                     f"{verdict} |")
    if result.claims:
        lines += ["", "## Claims", "", "| claim | A | B | same verdict |", "|---|---|---|---|"]
        lines += [f"| {c.name}: {c.statement} | {_claim_text(c.a)} | {_claim_text(c.b)} | "
                  f"{'yes' if c.same_verdict else '**no**'} |" for c in result.claims]
    missing = _not_compared(result)
    if missing:
        lines += ["", "## Not compared", "", *(f"- {line}" for line in missing)]
    return "\n".join(lines) + "\n"


def _not_compared(result: Comparison) -> list[str]:
    """The cells and claims in one grid only, and the claims of one name but other statements."""
    missing = [f"cells only in {g.upper()}: " + ", ".join(f"{r} lag {lag}" for r, lag in cells)
               for g, cells in result.cells_only_in.items() if cells]
    missing += [f"claims only in {g.upper()}: " + ", ".join(names) for g, names in result.claims_only_in.items()
                if names]
    if result.claims_defined_differently:
        missing.append("claims of one name but other statements: " + ", ".join(result.claims_defined_differently))
    return missing


def load_beside(config: Config) -> tuple[dict, Path, Summary] | None:
    """The grid config side_by_side names (Config.beside_folder): its section (label filled in),
    summary.json file and summary; None without the key. Read before this grid's runs, so that a missing
    file fails at once, naming the key and the file."""
    grid = config.beside_folder
    if grid is None:
        return None
    section = asdict(config.side_by_side)
    try:
        return section, *load_summary(grid.summary_path)
    except FileNotFoundError:
        raise ValueError(f"config key 'side_by_side.grid': {grid.summary_path} does not exist: run grid "
                         f"{section['grid']!r} first (its aggregate writes it)") from None


def beside(summary: Summary, other: tuple[dict, Path, Summary]) -> Beside:
    """This grid's summary against the other grid's (load_beside), that grid as A and this one as B:
    the comparison (``compare``), with the grid, its label and file, and the claims whose verdict differs;
    a tuned grid's picked variants under their recipes' names."""
    section, file, there = other
    here = under_recipe_names(summary)  # a tuned grid against the same grid untuned: recipe by recipe
    try:
        check_same_settings(there, here, (file, "this grid"))
        result = compare(there, here)
    except ValueError as error:
        raise ValueError(f"config key 'side_by_side' (grid {section['grid']!r}): {error}") from None
    return Beside(**{field.name: getattr(result, field.name) for field in fields(result)},
                  grid=section["grid"], label=section["label"], file=str(file),
                  verdict_differs=[c.name for c in result.claims if not c.same_verdict])


def beside_sections(summary: Summary) -> list[Section]:
    """summary.json's side_by_side: per claim both grids declare, both verdicts with their estimates and
    whether they differ; the claims whose verdict differs; the cells' agreement line."""
    side = summary.side_by_side
    if side is None:
        return []
    label, claims = side.label, {c.name: c for c in side.claims}
    intro = (f"A is grid {side.grid} ({label}, `{side.file}`), B is this grid. Each claim both grids declare "
             "with the same statement: its verdict and estimate [interval] in each; every cell, B minus A: "
             f"`python -m analysis.report.compare` on the two grid folders.")
    table = Table.of(["claim", "this grid", label, "verdicts"],
                     [[f"{c.name}: {c.statement}", _claim_text(c.b), _claim_text(c.a),
                       "same" if c.same_verdict else "**differs**"] for c in side.claims])
    differ = [f"{name} ({claims[name].b.verdict} here, {claims[name].a.verdict} there)"
              for name in side.verdict_differs]
    blocks = [intro, table,
              f"The verdict differs between this grid and {label} for {len(differ)} of the {len(claims)} "
              f"claims: {'; '.join(differ)}." if differ else
              f"No claim's verdict differs between this grid and {label} ({len(claims)} claims both declare).",
              _verdict_line(side)]
    missing = _not_compared(side)
    if missing:
        blocks += ["Not compared:", Bullets(tuple(missing))]
    return [Section(f"Beside {label} (grid {side.grid})", tuple(blocks))]


def check_same_settings(a: Summary, b: Summary, names: tuple) -> None:
    """Refuse two grids whose cells measure different things (SAME_SETTINGS), naming the key and both grids."""
    for key in SAME_SETTINGS:
        if getattr(a, key) != getattr(b, key):
            raise ValueError(f"{SUMMARY} key {key!r} is {getattr(a, key)!r} in {names[0]} but {getattr(b, key)!r} in {names[1]}: "
                             f"the grids' cells measure different things")


def run(path_a: str, path_b: str, as_json: bool) -> Comparison:
    """Load, check that the grids measure the same things, compare, print; returns the comparison."""
    (file_a, a), (file_b, b) = load_summary(path_a), load_summary(path_b)
    check_same_settings(a, b, (file_a, file_b))
    result = compare(a, b)
    print(json.dumps({"a": str(file_a), "b": str(file_b), **json_safe(result)}, indent=1) if as_json
          else render_markdown(result, a, b, (file_a, file_b)), end="\n" if as_json else "")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.report.compare", description=__doc__.split("\n")[0])
    parser.add_argument("a", help=f"grid A: its folder <results_dir>/<grid> or its {SUMMARY} (e.g. published)")
    parser.add_argument("b", help=f"grid B: its folder or {SUMMARY} (e.g. your reproduction)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON, not Markdown")
    args = parser.parse_args(argv)
    results: list[Comparison] = []  # the one comparison, once run

    def work() -> Comparison:
        results.append(run(args.a, args.b, args.json))
        return results[0]

    status = run_stage("analysis.report.compare", work, lambda result, seconds: (
        f"{'agree' if result.agree else 'do not agree'} ({result.tests} tests, "
        f"{len(result.claims)} claims) in {seconds:.2f} s"))
    return status or (0 if results[0].agree else 1)


if __name__ == "__main__":
    sys.exit(main())
