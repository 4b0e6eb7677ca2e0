"""The figures docs/statistics.md quotes are the commands' own (issue 63, item 6): the design search's table
and the replication bench's calibration, as the commands wrote them into docs/figures/ (`--write`; each file
names its command). A figure typed into the docs, or a file rewritten without the docs, fails here: rerun the
command, then paste its table or sentence."""
from __future__ import annotations

import json

from benchmarks import bench_replication_cause
from benchmarks.bench_replication import summary
from tests.support.paths import ROOT

FIGURES = ROOT / "docs" / "figures"


def _flat(text: str) -> str:
    return " ".join(text.split())  # the docs wrap their prose; the figures are compared word for word


def _statistics() -> str:
    return _flat((ROOT / "docs" / "statistics.md").read_text())


def test_the_design_search_table_in_the_docs_is_the_commands_output():
    written = json.loads((FIGURES / "design_search.json").read_text())
    assert written["command"][0] == "python -m analysis.claims.design_search" and "--write" in written["command"]
    assert _flat(written["table"]) in _statistics()
    assert _flat(written["margin"]) in _flat(written["table"])


def test_the_calibration_sentence_in_the_docs_is_the_benchs_output():
    figures = json.loads((FIGURES / "replication.json").read_text())
    assert {"field", "field, field prior", "wide", "collapse"} <= set(figures)
    assert _flat(summary(figures)) in _statistics()
    assert (FIGURES / "replication.md").read_text().startswith("# The replication probability on the declared design")


def test_the_calibration_miss_cause_in_the_docs_is_the_benchs_output():
    """Issue 63: the decomposition of the field's miss (spread known, effect known, both, a prior on the spread)."""
    figures = json.loads((FIGURES / "replication_cause.json").read_text())
    assert set(bench_replication_cause.VARIANTS) <= set(figures) and figures["runs_per_truth"] >= 30
    assert _flat(bench_replication_cause.summary(figures)) in _statistics()
    figures["spread known"]["largest"] = round(figures["spread known"]["largest"] + 0.01, 3)
    assert _flat(bench_replication_cause.summary(figures)) not in _statistics()


def test_a_figure_changed_by_hand_is_seen(tmp_path):
    figures = json.loads((FIGURES / "replication.json").read_text())
    figures["wide"]["largest"] = round(figures["wide"]["largest"] + 0.01, 3)
    assert _flat(summary(figures)) not in _statistics()


def _rows(text: str, heading: str) -> list[list[str]]:
    """The body rows (past the header and its rule) of the first table from the line that starts with `heading`."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split("|")])
    return table[2:]


def test_the_readmes_claim_table_is_the_demos():
    """README's demo claims are docs/figures/demo_table.md's, which is `make demo`'s results/demo/table.md as
    written (copied by `cp results/demo/table.md docs/figures/demo_table.md`): estimate and interval, outcome
    and the chance a rerun repeats it, claim by claim in the declared order."""
    demo = _rows((FIGURES / "demo_table.md").read_text(), "## Claims")
    readme = _rows((ROOT / "README.md").read_text(), "| claim (smallest effect")
    assert len(readme) == len(demo) == 4
    for shown, written in zip(readme, demo):
        estimate, outcome, repeats = shown[1], shown[2], shown[3]
        assert written[2].startswith(estimate + " points"), (estimate, written[2])
        assert written[3].startswith(f"**{outcome.split(',')[0]}**"), (outcome, written[3])
        assert written[4].split()[0] == repeats, (repeats, written[4])
