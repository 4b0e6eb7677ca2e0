"""The figures docs/statistics.md quotes are the commands' own (issue 63, item 6): the design search's table
and the replication bench's calibration, as the commands wrote them into docs/figures/ (`--write`; each file
names its command). A figure typed into the docs, or a file rewritten without the docs, fails here: rerun the
command, then paste its table or sentence."""
from __future__ import annotations

import json

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


def test_a_figure_changed_by_hand_is_seen(tmp_path):
    figures = json.loads((FIGURES / "replication.json").read_text())
    figures["wide"]["largest"] = round(figures["wide"]["largest"] + 0.01, 3)
    assert _flat(summary(figures)) not in _statistics()
